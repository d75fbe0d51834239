"""The report's "Testbed validity" table (issue 21, section 1): can this run's instrument
measure what the project exists to measure? Each criterion is computed from the stage outputs
and gets PASS or FAIL; a criterion that cannot be measured FAILs and says why.

======  ==================================================================================
V1      RL learns: GRPO minus base at pass@1 on the in-distribution group, the lower 95% bound
        >= +10 points; and the training reward rises (last minus first quarter of steps,
        over GRPO's seeds), interval excluding 0
V2      Assumption 5.3: at the base, a question's success differs between its phrasings by
        more than binomial noise (permutation test over questions, p < 0.05)
V3      The base needs both paths: its pass@k_large minus that of its best single solution
        path (from the ``strategy`` label the world writes), on the primary group, the lower
        95% bound >= +3 points (:func:`tagrpo.metrics.testbed.path_dependence`); the
        strategy entropy per question is reported beside it
V4      A known effect is seen: GRPO minus the negative control at pass@1 > 0, interval
        excluding 0, the control with >= 2 seeds (its between-seed variance)
V5      Resolution: the design's 95% half-width of TA-GRPO minus GRPO at pass@k_large on the
        primary group <= 2 points, with the seeds and problems that would reach it (from the
        crossed variance components); blind: the estimate itself is not shown here
edges   Per benchmark: the base's pass@k_large <= 90% and >= 5 points above chance (0 for a
        free-form answer); a multiple-choice benchmark at pass@1 against 1/options
harder  The group harder than training (``report.harder_group``): the base's pass@1 in
        [5, 30]% and pass@k_large in [40, 85]% (room to gain, not a floor; the pre-registered
        calibration band of world v2)
regime  The base's identical-reward rate of q0 G-groups (the phrasing probe, training
        questions) in [40, 80]%: enough all-equal groups for the zero-gradient problem the
        paper is about (77-87% there), enough mixed ones for GRPO to learn
======  ==================================================================================

The numbers above are world v2's bands; a run is judged by its pre-registration's
(``report.preregistration``, read by :func:`bands_from_preregistration`: world v3 asks V1 >= +5
points on every base draw, a competition band of pass@1 >= 2% and pass@32 in [25, 85]%, a regime
of [30, 85]%), fixed before any method comparison is read. A comparison
with zero variance (nothing varies: e.g. every pass@k is 0) is not measurable, never a PASS.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import (
    Components,
    Estimate,
    SeedRuns,
    chance_pass_at_k,
    difference_parts,
    half_width,
    measurability,
    paired_difference,
)
from tagrpo.metrics.testbed import (
    NO_STRATEGY,
    PhrasingDispersion,
    path_dependence,
    reward_rise,
    strategy_entropy,
)
from tagrpo.plumbing.markdown import markdown_table

ALPHA = 0.05  # V2 (and every interval: 95%)
SEED_PLAN = (3, 5, 10, 20, 40)  # V5's power table
MAX_PROBLEM_MULTIPLE = 64.0


@dataclass(frozen=True)
class Bands:
    """The thresholds a run is judged against. They come from the run's pre-registration
    (``report.preregistration``, :func:`bands_from_preregistration`), so the file the report
    hashes is the file that judged it; the defaults are world v2's (``world-v2.yaml``)."""

    min_rl_gain: float = 0.10  # V1: GRPO - base at pass@1, in-distribution, lower 95% bound
    min_path_gain: float = 0.03  # V3: base - best single path at pass@k_large, lower bound
    max_half_width: float = 0.02  # V5
    base_ceiling: float = 0.90  # edges: base pass@k at most
    chance_margin: float = 0.05  # edges: base pass@k at least this far above chance
    harder_pass_at_1: tuple[float, float] = (0.05, 0.30)  # harder group: the base's pass@1
    harder_pass_at_k: tuple[float, float] = (0.40, 0.85)  # harder group: base pass@k_large
    identical_band: tuple[float, float] = (0.40, 0.80)  # regime: identical q0 groups
    # V3's group (acceptance.V3.group); None: report.primary_group's. World v3 reads V3 on the
    # in-distribution group and its primary endpoint on the competition group.
    path_group: str | None = None
    source: str = "world v2's bands"


def bands_from_preregistration(path: Path) -> Bands:
    """The bands of a pre-registration file's ``acceptance`` section (world v2's or v3's
    layout); a missing or malformed key is an error naming it, never a default."""
    import yaml

    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    try:
        acceptance = document["acceptance"]
        competition = acceptance["competition"]
        edges = acceptance["edges_free_form"]
        if "min_pass_at_1" in competition:  # v3: a floor only
            harder_1 = (float(competition["min_pass_at_1"]), 1.0)
        else:
            harder_1 = tuple(float(v) for v in competition["pass_at_1"])
        bands = Bands(
            min_rl_gain=float(acceptance["V1"]["grpo_minus_base_pass_at_1_lower_bound"]),
            min_path_gain=float(
                acceptance["V3"]["base_minus_best_single_path_pass_at_k_lower_bound"]
            ),
            max_half_width=float(document["study"]["v5_max_half_width"]),
            base_ceiling=float(edges["max_pass_at_k"]),
            chance_margin=float(edges["min_pass_at_k"]),
            harder_pass_at_1=harder_1,  # type: ignore[arg-type]
            harder_pass_at_k=tuple(float(v) for v in competition["pass_at_k"]),  # type: ignore[arg-type]
            identical_band=tuple(float(v) for v in acceptance["regime_identical_q0_groups"]),  # type: ignore[arg-type]
            path_group=str(acceptance["V3"]["group"]),
            source=f"`{path.name}`",
        )
    except (KeyError, TypeError) as error:
        raise ValueError(f"{path}: no acceptance band {error} (world v2 or v3 layout)") from error
    for name in ("harder_pass_at_1", "harder_pass_at_k", "identical_band"):
        low, high = getattr(bands, name)
        if not 0.0 <= low <= high <= 1.0:
            raise ValueError(f"{path}: band {name} = [{low}, {high}] is not inside [0, 1]")
    return bands


DEFAULT_BANDS = Bands()


@dataclass(frozen=True)
class Criterion:
    name: str  # V1 ... V5, or "edges"
    requirement: str
    measured: str
    passed: bool

    @property
    def key(self) -> str:
        """Its metric name: ``V1_policy``, ``V5``, ``edges/mini_chains``."""
        return self.name.replace(" (", "_").replace(")", "").replace(": ", "/")

    def row(self) -> list[str]:
        return [self.name, self.requirement, self.measured, "PASS" if self.passed else "FAIL"]


def _points(estimate: Estimate, conditional: bool | None = None) -> str:
    text = (
        f"{100 * estimate.value:+.2f} [{100 * estimate.low:+.2f}, {100 * estimate.high:+.2f}] "
        f"points"
    )
    flag = estimate.conditional if conditional is None else conditional
    return text + (" (conditional on a 1-seed run)" if flag else "")


def rl_gain(
    grpo: SeedRuns | None,
    base: SeedRuns,
    group: str,
    members: Sequence[str],
    bands: Bands = DEFAULT_BANDS,
) -> Criterion:
    """V1 on the lower bound: RL must move the policy by at least the band's gain with 95%
    confidence, not merely on average."""
    requirement = (
        f"GRPO - base, pass@1, {group}: lower 95% bound >= +{100 * bands.min_rl_gain:.0f} points"
    )
    if grpo is None:
        return Criterion("V1 (policy)", requirement, "not run: runs lacks grpo", False)
    estimate = paired_difference(grpo, base, members)[0]
    reason = measurability(estimate)
    if reason is not None:
        return Criterion("V1 (policy)", requirement, f"not measurable: {reason}", False)
    passed = estimate.low >= bands.min_rl_gain
    # The base is the one model every method starts from, not a run to resample.
    conditional = estimate.seeds[0] == 1
    measured = f"{_points(estimate, conditional)} ({estimate.seeds[0]} GRPO seeds)"
    return Criterion("V1 (policy)", requirement, measured, passed)


def reward_trend(histories: Sequence[Sequence[float]]) -> Criterion:
    requirement = "GRPO training reward, last minus first quarter of steps: interval above 0"
    if not histories:
        return Criterion("V1 (reward)", requirement, "not run: runs lacks grpo", False)
    if len(histories) == 1 and len(histories[0]) < 8:
        measured = (
            f"not measurable: one GRPO run of {len(histories[0])} steps (a quarter needs 2 "
            "steps for a within-run variance; more seeds or steps)"
        )
        return Criterion("V1 (reward)", requirement, measured, False)
    estimate = reward_rise(histories)
    measured = f"{_points(estimate)} over {len(histories)} run(s)"
    return Criterion("V1 (reward)", requirement, measured, estimate.low > 0)


def phrasing_criterion(result: PhrasingDispersion | None) -> Criterion:
    requirement = (
        "base success differs between a question's phrasings beyond binomial noise: "
        f"permutation p < {ALPHA}"
    )
    if result is None:
        return Criterion("V2", requirement, "not measurable: no phrasing probe was run", False)
    measured = (
        f"X2 = {result.statistic:.1f} on {result.df} df over {result.questions} questions "
        f"({result.constant} all-equal left out; {result.phrasings} phrasings x "
        f"{result.samples} samples); dispersion X2/df = {result.dispersion:.2f}; "
        f"between-phrasing SD of success beyond noise {100 * result.excess_sd:.1f} points; "
        f"p = {result.permutation_p:.4f} ({result.permutations} permutations; chi-square "
        f"{result.p_value:.2g})"
    )
    return Criterion("V2", requirement, measured, result.permutation_p < ALPHA)


def strategy_criterion(
    responses: Mapping[str, pd.DataFrame],
    primary: tuple[str, Sequence[str]],
    k: int,
    n_resamples: int = 1000,
    seed: int = 0,
    bands: Bands = DEFAULT_BANDS,
) -> tuple[Criterion, pd.DataFrame]:
    """V3 from every evaluated policy's responses (``base`` first; the base's with
    ``correct``): the base needs both paths on the primary group (see the module docstring);
    the per-policy entropy summary beside it."""
    group, members = primary
    requirement = (
        f"the base needs both paths: base pass@{k} minus its best single path's, {group}: "
        f"lower 95% bound >= +{100 * bands.min_path_gain:.0f} points"
    )
    rows = []
    for policy, frame in responses.items():
        entropy = strategy_entropy(frame)
        if entropy is None:
            continue
        # A policy none of whose responses took a known path (e.g. the smoke profile's
        # untrained tiny model) has no entropy: NaN, and no question with two paths.
        labelled = "entropy_bits" in entropy.columns and len(entropy) > 0
        rows.append(
            {
                "policy": policy,
                "entropy_bits": float(entropy["entropy_bits"].mean()) if labelled else np.nan,
                "questions_with_two_or_more": (
                    float((entropy["strategies"] >= 2).mean()) if labelled else 0.0
                ),
                # Known paths only: "unknown" and "ambiguous" are not strategies.
                "strategies": int(
                    frame.loc[~frame["strategy"].isin(NO_STRATEGY), "strategy"].nunique()
                ),
            }
        )
    summary = pd.DataFrame(rows)
    if summary.empty or "base" not in set(summary["policy"]):
        measured = (
            "not measurable: the world has one solution template (its responses carry no "
            "`strategy` label, so diversity cannot collapse or grow)"
        )
        return Criterion("V3", requirement, measured, False), summary
    base = summary[summary["policy"] == "base"].iloc[0]
    entropy_text = (
        f"entropy {base['entropy_bits']:.2f} bits per question, "
        f"{100 * base['questions_with_two_or_more']:.0f}% of questions with >= 2 strategies, "
        f"{base['strategies']} strategies"
    )
    paths = path_dependence(responses["base"], members, k, n_resamples, seed)
    if paths is None or len(paths.paths) < 2:
        measured = (
            f"not measurable: the base's responses on {group} take "
            f"{0 if paths is None else len(paths.paths)} known path(s); {entropy_text}"
        )
        return Criterion("V3", requirement, measured, False), summary
    alone = ", ".join(f"{path} alone {100 * v:.1f}%" for path, v in paths.paths.items())
    filled = ", ".join(f"{n} without {path}" for path, n in paths.filled.items() if n)
    measured = (
        f"base {100 * paths.base:.1f}%, {alone}: {100 * paths.difference:+.2f} "
        f"[{100 * paths.low:+.2f}, {100 * paths.high:+.2f}] points over {paths.problems} "
        f"problems{f' ({filled}: their rate)' if filled else ''}; {entropy_text}"
    )
    return Criterion("V3", requirement, measured, paths.low >= bands.min_path_gain), summary


def control_criterion(
    grpo: SeedRuns | None,
    control: tuple[str, SeedRuns] | None,
    benchmarks: Sequence[str],
) -> Criterion:
    """V4: the known-bad method must lose, counting its own between-seed variance (so >= 2
    seeds: with one, a narrow interval holds for that run only, as V5 with one seed a side)."""
    requirement = (
        "GRPO - negative control, pass@1, all benchmarks: interval above 0, the control with "
        ">= 2 seeds"
    )
    if grpo is None or control is None:
        missing = "grpo" if grpo is None else "a negative-control method (e.g. grpo_flipped)"
        return Criterion("V4", requirement, f"not run: runs lacks {missing}", False)
    name, runs = control
    seeds = runs.values.shape[0]
    if seeds < 2:
        measured = (
            f"not measurable: {name} has {seeds} seed; its between-seed variance needs at least 2"
        )
        return Criterion("V4", requirement, measured, False)
    estimate = paired_difference(grpo, runs, benchmarks)[0]
    reason = measurability(estimate)
    if reason is not None:
        return Criterion("V4", requirement, f"not measurable: {reason}", False)
    return Criterion("V4", requirement, f"{name}: {_points(estimate)}", estimate.low > 0)


def resolution_criterion(
    ta: SeedRuns | None,
    grpo: SeedRuns | None,
    primary: tuple[str, Sequence[str]],
    k: int,
    bands: Bands = DEFAULT_BANDS,
) -> tuple[Criterion, str]:
    """V5 and its power calculation (markdown), blind: the design's half-width from the
    crossed variance components (:meth:`tagrpo.metrics.compare.Components.design_variance`),
    never the primary estimate, which a gate must not show before it is passed."""
    group, members = primary
    requirement = (
        f"TA-GRPO - GRPO, pass@{k}, {group}: the design's 95% half-width <= "
        f"{100 * bands.max_half_width:.0f} points (blind: no estimate shown)"
    )
    if ta is None or grpo is None:
        return Criterion("V5", requirement, "not run: runs lacks ta_grpo or grpo", False), ""
    _, parts = difference_parts(ta, grpo, members)
    components = parts.at(ta.ks.index(k))
    power = power_markdown(components, k, group, bands.max_half_width)
    seeds = components.seeds
    if min(seeds) < 2:
        # One run a side: the interval is conditional on that run (no between-seed variance),
        # so its width says nothing about the design's resolution, however narrow it is.
        measured = (
            f"not measurable: seeds {seeds[0]} vs {seeds[1]}; the between-seed variance "
            "needs at least 2 seeds per method"
        )
        return Criterion("V5", requirement, measured, False), power
    _, df = components.design_variance()
    width = half_width(components)
    measured = (
        f"+/-{100 * width:.2f} points (seeds {seeds[0]} vs {seeds[1]}, "
        f"{components.problems} problems, t with {df:.1f} df)"
    )
    return Criterion("V5", requirement, measured, width <= bands.max_half_width), power


def needed_problem_multiple(
    components: Components, seeds: int, target: float = DEFAULT_BANDS.max_half_width
) -> float | None:
    """The smallest multiple of the problems (<= MAX_PROBLEM_MULTIPLE) at which ``seeds`` seeds
    per method reach the target half-width; None when none does."""
    counts = [seeds] * len(components.seeds)

    def width(multiple: float) -> float:
        return half_width(components, counts, multiple)

    if width(MAX_PROBLEM_MULTIPLE) > target:
        return None
    if width(1.0) <= target:
        return 1.0
    low, high = 1.0, MAX_PROBLEM_MULTIPLE
    for _ in range(60):  # bisection: the half-width falls as the problems grow
        middle = (low + high) / 2
        low, high = (middle, high) if width(middle) > target else (low, middle)
    return high


def _squared_points(value: float) -> str:
    return "unknown (1 seed)" if not np.isfinite(value) else f"{1e4 * value:.3f}"


def power_markdown(
    components: Components, k: int, group: str, target: float = DEFAULT_BANDS.max_half_width
) -> str:
    """The half-width of TA-GRPO - GRPO for other numbers of seeds and problems, from this
    run's crossed variance components: the method-by-problem part and each method's
    interaction scale as 1 / problems, each method's seed part and interaction as 1 / seeds."""
    seeds, n_problems = components.seeds, components.problems
    lines = [
        f"**Power calculation (V5)**: crossed variance components of TA-GRPO - GRPO at "
        f"pass@{k} on {group} in this run ({n_problems} problems; TA-GRPO, GRPO with "
        + " vs ".join(str(s) for s in seeds)
        + " seeds), in points^2: method-by-problem "
        f"{_squared_points(components.problem)}; seed "
        + ", ".join(_squared_points(v) for v in components.seed)
        + "; seed x problem interaction of one seed's score "
        + ", ".join(_squared_points(v) for v in components.interaction)
        + ". Variance of the difference = method-by-problem / m + sum over methods of (seed + "
        "interaction / m) / seeds, with m the multiple of the problems (each counted once; "
        "negative components truncated at 0, so where a method's per-seed scores vary less "
        "than its interaction alone would make them, this design's half-width is wider than "
        "the measured interval, which uses their variance as it is).",
        "",
    ]
    lines += [
        "With few seeds, more problems shrink the problem and interaction terms but not the "
        "seed term, and the t quantile keeps the seeds' few degrees of freedom "
        "(Welch-Satterthwaite): seeds, not problems, then set the resolution.",
        "",
    ]
    if any(count < 2 for count in seeds) or not all(np.isfinite(components.seed)):
        lines.append(
            "Not computable: a method has one seed, so its between-seed variance is unknown "
            "(give both at least 2 seeds)."
        )
        return "\n".join(lines)
    multiples = (1.0, 2.0, 4.0, 8.0)
    rows = []
    for count in SEED_PLAN:
        counts = [count] * len(seeds)
        widths = [f"{100 * half_width(components, counts, m):.2f}" for m in multiples]
        needed = needed_problem_multiple(components, count, target)
        rows.append(
            [
                count,
                *widths,
                f"{int(np.ceil(needed * n_problems))} ({needed:.2f}x)"
                if needed is not None
                else f"not reachable (> {MAX_PROBLEM_MULTIPLE:g}x)",
            ]
        )
    lines.append(
        markdown_table(
            [
                "seeds per method",
                *[f"half-width, {int(m * n_problems)} problems" for m in multiples],
                f"problems for +/-{100 * target:.0f} points",
            ],
            rows,
        )
    )
    return "\n".join(lines)


def edge_criteria(
    base_passk: pd.DataFrame,
    benchmarks: Sequence[str],
    options: Mapping[str, int],
    k: int,
    bands: Bands = DEFAULT_BANDS,
) -> list[Criterion]:
    """Per benchmark: the base's score is at most the band's ceiling (90%) and at least its
    margin (5 points) above chance: a
    free-form benchmark at pass@k (chance 0), a multiple-choice one at pass@1 against
    1/options (at large k its pass@k measures guessing: 97% at pass@32 with 10 options)."""
    rows = base_passk[base_passk["kind"] == "benchmark"]
    by_name = {(r.name, int(r.k)): float(r.pass_at_k) for r in rows.itertuples()}
    criteria = []
    for name in benchmarks:
        at = 1 if name in options else k
        if (name, at) not in by_name:
            raise KeyError(f"{name}: the base policy has no pass@{at}")
        value = by_name[(name, at)]
        chance = chance_pass_at_k(options[name], at) if name in options else 0.0
        kind = f"{options[name]} options" if name in options else "free-form"
        passed = value <= bands.base_ceiling and value - chance >= bands.chance_margin
        criteria.append(
            Criterion(
                f"edges: {name}",
                f"base pass@{at} <= {100 * bands.base_ceiling:.0f}% and >= chance + "
                f"{100 * bands.chance_margin:.0f} points",
                f"{100 * value:.1f}% (chance {100 * chance:.1f}%, {kind}; "
                f"margin {100 * (value - chance):+.1f} points)",
                passed,
            )
        )
    return criteria


def harder_criterion(
    base_passk: pd.DataFrame, group: str | None, k: int, bands: Bands = DEFAULT_BANDS
) -> Criterion | None:
    """The harder group's base pass@1 and pass@k (group means over its benchmarks) inside the
    calibration band; None when the run names no harder group."""
    if group is None:
        return None
    rows = base_passk[(base_passk["kind"] == "group") & (base_passk["name"] == group)]
    by_k = {int(r.k): float(r.pass_at_k) for r in rows.itertuples()}
    if 1 not in by_k or k not in by_k:
        raise KeyError(f"group {group}: the base policy has no pass@1 and pass@{k}")
    low1, high1 = bands.harder_pass_at_1
    lowk, highk = bands.harder_pass_at_k
    passed = low1 <= by_k[1] <= high1 and lowk <= by_k[k] <= highk
    first = (
        f"base pass@1 >= {100 * low1:g}%"
        if high1 >= 1.0
        else f"base pass@1 in [{100 * low1:.0f}, {100 * high1:.0f}]%"
    )
    return Criterion(
        f"harder: {group}",
        f"{first} and pass@{k} in [{100 * lowk:.0f}, {100 * highk:.0f}]%",
        f"pass@1 {100 * by_k[1]:.1f}%, pass@{k} {100 * by_k[k]:.1f}%",
        passed,
    )


def regime_criterion(
    identical_rate: float | None, groups: int, bands: Bands = DEFAULT_BANDS
) -> Criterion:
    """The base's identical-reward rate of q0 G-groups inside the band (with a
    Wilson 95% interval over its ``groups`` for the reader; judged on the rate itself: it is a
    property of this base, not an effect to detect)."""
    low, high = bands.identical_band
    requirement = (
        f"base identical-reward rate of q0 G-groups in [{100 * low:.0f}, {100 * high:.0f}]%"
    )
    if identical_rate is None or groups < 1:
        return Criterion("regime", requirement, "not measurable: no phrasing probe", False)
    from scipy.stats import norm

    z = float(norm.ppf(0.975))
    centre = (identical_rate + z * z / (2 * groups)) / (1 + z * z / groups)
    spread = (
        z
        * np.sqrt(identical_rate * (1 - identical_rate) / groups + z * z / (4 * groups * groups))
        / (1 + z * z / groups)
    )
    measured = (
        f"{100 * identical_rate:.1f}% [{100 * (centre - spread):.1f}, "
        f"{100 * (centre + spread):.1f}] of {groups} groups"
    )
    return Criterion("regime", requirement, measured, low <= identical_rate <= high)


def validity_table(criteria: Sequence[Criterion]) -> str:
    return markdown_table(
        ["criterion", "requirement", "measured [95% CI]", "verdict"],
        [criterion.row() for criterion in criteria],
    )
