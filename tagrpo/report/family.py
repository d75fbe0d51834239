"""World v3's claims family over base draws (``preregistration/world-v3.md``, "Endpoints and
analysis"; issue 42), generated from the runs' outputs.

The base draw (the SFT seed of the warm-started base) is a factor of the design: every method is
trained from each draw's base with the same RL seeds, and a contrast is **paired by draw**: per
draw, the mean over its seeds of one method minus the other's, on the problems every policy
answered; the estimate is the mean over draws, its variance the method-by-problem component plus
the draws' mean square over their number, each term with its own t quantile, added in
quadrature (:func:`tagrpo.metrics.draws.draw_paired_difference`, amendment 1). With one draw
(a single checkout's report) every row is the crossed seeds x problems model within it and is
marked conditional on that base draw.

The table, in the pre-registered order:

* outside the family, first: the **negative control** (GRPO minus ``grpo_flipped``, pass@1, all
  benchmarks: its interval must be above 0) and the **A/A null** (GRPO's seeds split in two
  within each draw, the first ``S // 2`` against the rest, at the primary endpoint: its
  interval must cover 0);
* the **fixed Holm family**, m = :data:`FAMILY_SIZE` = 11, every row counted whether run or not
  (a row not run or not measurable enters with p = 1 and reads "not supported"):

  1. Fig. 3, size-matched: the identical-reward rate of q0's (N+1)G-response group minus that
     of TA-GRPO's joint (N+1)G group, same policy;
  2. Fig. 3 as drawn: q0's G-group minus the joint (N+1)G group;
  3. TA-GRPO minus GRPO at the primary endpoint (``report.primary_k`` on
     ``report.primary_group``);
  4. the widening of that gain from pass@1 to the primary k on the primary group; beside it,
     outside the family, the same on ``-log(1 - pass@k)`` (delta method,
     :func:`tagrpo.metrics.draws.draw_log_miss_widening`);
  5.-9. TA-GRPO minus GRPO with DS, (N+1)xGRPO, (N+1)xGRPO + DS, TA-GRPO*, unanchored TA-GRPO at
     the primary measure (pass@primary_k) on every free-form benchmark;
  10. strategy entropy per training question, the mean over its N neighbours' G-response
      groups minus q0's G-group, same policy (the forward/backward path of each response,
      :func:`tagrpo.miniworld.strategy.strategy_of`; :func:`tagrpo.metrics.testbed.
      strategy_entropy`); beside it, outside the family, the embedding distance (the
      diagnostics' within-prompt mean pairwise cosine distance, neighbours minus q0);
  11. TA-GRPO on 1x data equivalent to GRPO on the largest data multiple (2.5x), TOST with the
      margin ``report.equivalence_margin`` at the primary measure, each arm with >= 2 seeds per
      draw.

Rows 1, 2 and 10 are read from the diagnostics stage's probe of TA-GRPO's policies
(``diagnostics.policies``) at their last checkpoint, per training question: each probed seed's
per-question value is a "seed" of that draw (the same crossed model, on the training questions
every probed policy of every draw measured; a question with no labelled response is left out).
Verdicts: ``supported`` when Holm's adjusted p < 0.05 and the estimate is on the claimed side,
``reversed`` on the other side, ``not distinguishable`` otherwise; the TOST row ``equivalent``
when its Holm-adjusted p < 0.05. **study-v3** (``FamilySettings.family``, m = 12) adds a twelfth
row, unanchored TA-GRPO minus GRPO at the primary endpoint, and reads a row that is neither
supported nor reversed "no effect of the paper's size" when its 95% interval lies inside
+/- ``no_effect_margin`` points, "undecided" otherwise (``preregistration/study-v3.md``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.metrics.compare import (
    Estimate,
    NotMeasurable,
    SeedRuns,
    equivalence_test,
    measurability,
)
from tagrpo.metrics.draws import (
    draw_log_miss_widening,
    draw_mean,
    draw_paired_difference,
    draw_split_seeds,
    draw_widening,
)
from tagrpo.report.claims import (
    ALPHA,
    BESIDE,
    CLAIM,
    CONTROL,
    EQUIVALENCE,
    NULL_CONTROL,
    TA,
    Claim,
    adjust,
    seeds_label,
)

# The pre-registered family of world v3, in its order (world-v3.yaml, study.holm_family).
FAMILY = (
    "fig3_size_matched",
    "fig3_as_drawn",
    "primary",
    "widening",
    "vs_grpo_ds",
    "vs_grpo_x4",
    "vs_grpo_x4_ds",
    "vs_ta_grpo_star",
    "vs_ta_grpo_unanchored",
    "strategy_entropy",
    "data_scaling_tost",
)
FAMILY_SIZE = len(FAMILY)
# study-v3's family (preregistration/study-v3.yaml, study.holm_family): world v3's rows and a
# twelfth, unanchored TA-GRPO (the authors' code) against GRPO at the primary endpoint.
STUDY_FAMILY = (*FAMILY, "unanchored_vs_grpo")
STUDY_FAMILY_SIZE = len(STUDY_FAMILY)
UNANCHORED = "ta_grpo_unanchored"
# The matched and ablation baselines of rows 5-9, in that order.
BASELINES = (
    ("grpo_ds", "GRPO with dynamic sampling", ""),
    ("grpo_x4", "the matched budget (N+1)xGRPO", " (Fig. 6)"),
    ("grpo_x4_ds", "the matched budget with DS, (N+1)xGRPO + DS", ""),
    ("ta_grpo_star", "TA-GRPO*", " (Fig. 8)"),
    ("ta_grpo_unanchored", "unanchored TA-GRPO", ""),
)
NEGATIVE_CONTROL = "grpo_flipped"
# The diagnostics' per-question measures (DrawInputs.diagnostics), each "positive = the claim".
IDENTICAL_SIZE_MATCHED = "identical_q0_N1G_minus_joint"
IDENTICAL_AS_DRAWN = "identical_q0_G_minus_joint"
STRATEGY_ENTROPY = "strategy_entropy_neighbours_minus_q0"
EMBEDDING_DISTANCE = "distance_neighbours_minus_q0"
QUESTIONS = "training questions"  # the diagnostics' one "benchmark"


@dataclass(frozen=True)
class DrawInputs:
    """What one base draw contributes: each method's per-problem pass@k over its seeds
    (``runs``), the base policy's, the data-scaling runs' (``scaled[(method, multiple)]``), the
    diagnostics' per-question measures (``diagnostics[name]``: one "seed" per probed TA-GRPO
    policy, NaN where a question was not measurable) and each method's optimiser updates."""

    runs: Mapping[str, SeedRuns]
    base: SeedRuns | None = None
    scaled: Mapping[tuple[str, float], SeedRuns] = field(default_factory=dict)
    diagnostics: Mapping[str, SeedRuns] = field(default_factory=dict)
    updates: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class FamilySettings:
    """The registered analysis as a run configures it: every benchmark, the primary endpoint's
    (group, benchmarks) and k, the multiple-choice benchmarks (in no pass@k row), the TOST
    margin and its seeds per arm per draw, and the section 5.5 arm (method, data multiple)."""

    benchmarks: tuple[str, ...]
    primary: tuple[str, tuple[str, ...]]
    k: int
    options: Mapping[str, int] = field(default_factory=dict)
    equivalence_margin: float = 0.02
    min_seeds_per_arm: int = 2
    scaled: tuple[str, float] | None = None
    # "v3" (world v3's 11 rows) or "study-v3" (its 12: the unanchored row added, and the
    # verdict "no effect of the paper's size" for rows whose 95% interval lies inside
    # +/- no_effect_margin, in points).
    family: str = "v3"
    no_effect_margin: float | None = None


def _seed_counts(sides: Sequence[Sequence[SeedRuns]]) -> str:
    """Seeds per draw of each side: ``3 vs 3`` (``2-3`` when the draws differ)."""
    cells = []
    for side in sides:
        counts = sorted({runs.values.shape[0] for runs in side})
        cells.append(str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}")
    return " vs ".join(cells)


def build_v3_claims(draws: Mapping[str, DrawInputs], settings: FamilySettings) -> list[Claim]:
    """The controls and the family of world v3 (see the module docstring), adjusted by Holm
    over the fixed family of :data:`FAMILY_SIZE`; ``draws``: label -> that draw's inputs (one
    draw: the within-draw model, every row conditional on that base draw)."""
    if not draws:
        raise ValueError("no base draw")
    labels = list(draws)
    inputs = list(draws.values())
    k = settings.k
    free_form = [name for name in settings.benchmarks if name not in settings.options]
    free_label = "free-form benchmarks" if settings.options else "all benchmarks"
    primary_label, primary_members = settings.primary

    def sides(method: str) -> list[SeedRuns] | None:
        present = [method in draw.runs for draw in inputs]
        if not any(present):
            return None
        if not all(present):
            missing = [label for label, there in zip(labels, present, strict=True) if not there]
            raise ValueError(f"{method} was not trained on draws {missing}: every draw runs it")
        return [draw.runs[method] for draw in inputs]

    def updates(method: str) -> str:
        values = list(dict.fromkeys(draw.updates.get(method, "not run") for draw in inputs))
        return values[0] if len(values) == 1 else ", ".join(values)

    def label(estimate: Estimate, counted: Sequence[Sequence[SeedRuns]], what: str = "") -> str:
        if len(labels) == 1:
            return f"{seeds_label(estimate)}{what}; conditional on the base draw ({labels[0]})"
        return (
            f"{len(labels)} draws x {_seed_counts(counted)} seeds{what} (paired by draw; t, "
            f"{estimate.df:.1f} effective df)"
        )

    def row(
        claim: str,
        measure: str,
        compute: Callable[[], tuple[Estimate, Sequence[Sequence[SeedRuns]], str]] | None,
        **kw: Any,
    ) -> Claim:
        """A row from ``compute`` (None: a method it needs was not run); a comparison the data
        cannot support reads "not measurable" with the reason."""
        if compute is None:
            return Claim(claim, measure, None, **kw)
        try:
            estimate, counted, what = compute()
        except NotMeasurable as reason:
            shown = Estimate(k, float("nan"), float("nan"), float("nan"))
            return Claim(claim, measure, shown, refusal=str(reason), **kw)
        made = Claim(claim, measure, estimate, seeds=label(estimate, counted, what), **kw)
        reason = measurability(estimate)
        return replace(made, refusal=reason) if reason else made

    def versus(method: str, other: str, members: Sequence[str], at_k: int) -> Callable | None:
        first, second = sides(method), sides(other)
        if first is None or second is None:
            return None

        def compute() -> tuple[Estimate, Sequence[Sequence[SeedRuns]], str]:
            estimates = draw_paired_difference(first, second, members)
            return next(e for e in estimates if e.k == at_k), (first, second), ""

        return compute

    grpo, ta = sides("grpo"), sides(TA)
    claims = [
        row(
            "Negative control: GRPO beats the known-bad method",
            f"pass@1, GRPO minus {NEGATIVE_CONTROL} (flipped advantages), all benchmarks; its "
            "interval must be above 0",
            versus("grpo", NEGATIVE_CONTROL, settings.benchmarks, 1),
            kind=CONTROL,
            updates=f"{updates('grpo')} / {updates(NEGATIVE_CONTROL)}",
        ),
        row(
            "A/A null: GRPO's seeds split in two within each draw",
            f"pass@{k}, GRPO's first half of seeds minus the rest, per draw, {primary_label}; "
            "its interval must cover 0",
            _aa(grpo, primary_members, k) if grpo is not None else None,
            kind=NULL_CONTROL,
            updates=updates("grpo"),
        ),
        *_diagnostic_rows(inputs, row, updates(TA)),
        row(
            f"TA-GRPO beats GRPO at pass@{k} (primary endpoint)",
            f"pass@{k}, TA-GRPO minus GRPO, {primary_label}",
            versus(TA, "grpo", primary_members, k),
            updates=f"{updates(TA)} / {updates('grpo')}",
        ),
        row(
            f"The gain over GRPO widens from pass@1 to pass@{k}",
            f"(TA - GRPO at pass@{k}) minus (TA - GRPO at pass@1), {primary_label}",
            _widening(ta, grpo, primary_members, k, draw_widening),
            updates=f"{updates(TA)} / {updates('grpo')}",
        ),
        row(
            f"The gain over GRPO widens from pass@1 to pass@{k}, on -log(1 - pass@k)",
            f"[L(TA) - L(GRPO) at pass@{k}] minus the same at pass@1, L(p) = -log(1 - p) of "
            f"the group scores, {primary_label} (delta-method interval)",
            _widening(ta, grpo, primary_members, k, draw_log_miss_widening),
            kind=BESIDE,
            unit="plain",
            updates=f"{updates(TA)} / {updates('grpo')}",
        ),
        *(
            row(
                f"TA-GRPO beats {name} at pass@{k}{figure}",
                f"pass@{k}, TA-GRPO minus {method}, {free_label}",
                versus(TA, method, free_form, k),
                updates=f"{updates(TA)} / {updates(method)}",
            )
            for method, name, figure in BASELINES
        ),
    ]
    claims += _diversity_rows(inputs, row, updates(TA))
    claims.append(_tost_row(inputs, settings, ta, free_form, free_label, row, updates))
    if settings.family == "study-v3":
        claims.append(
            row(
                f"Unanchored TA-GRPO (the authors' code) beats GRPO at pass@{k}",
                f"pass@{k}, {UNANCHORED} minus GRPO, {primary_label}",
                versus(UNANCHORED, "grpo", primary_members, k),
                updates=f"{updates(UNANCHORED)} / {updates('grpo')}",
            )
        )
    elif settings.family != "v3":
        raise ValueError(f"unknown claims family {settings.family!r} (v3, study-v3)")
    claims = adjust(_ordered(claims, settings.family))
    if settings.no_effect_margin is not None:
        margin = float(settings.no_effect_margin)
        claims = [
            replace(c, no_effect_margin=margin) if c.in_family and c.kind != EQUIVALENCE else c
            for c in claims
        ]
    return claims


def _aa(grpo: list[SeedRuns], members: Sequence[str], k: int) -> Callable:
    def compute() -> tuple[Estimate, Sequence[Sequence[SeedRuns]], str]:
        first, second = draw_split_seeds(grpo)
        estimate = next(e for e in draw_paired_difference(first, second, members) if e.k == k)
        return estimate, (first, second), ""

    return compute


def _widening(
    ta: list[SeedRuns] | None,
    grpo: list[SeedRuns] | None,
    members: Sequence[str],
    k: int,
    measure: Callable[..., Estimate],
) -> Callable | None:
    if ta is None or grpo is None:
        return None
    if 1 not in ta[0].ks or k not in ta[0].ks:
        raise ValueError(f"the widening needs pass@1 and pass@{k} (evaluate.ks)")

    def compute() -> tuple[Estimate, Sequence[Sequence[SeedRuns]], str]:
        return measure(ta, grpo, members, 1, k), (ta, grpo), ""

    return compute


def _aligned(draws: Sequence[SeedRuns]) -> list[SeedRuns]:
    """Each draw's per-(seed, question) values on the questions every seed of every draw
    measured (finite), in one order."""
    frames = [
        pd.DataFrame(runs.values[:, :, 0].T, index=runs.problems).dropna(how="any")
        for runs in draws
    ]
    common = frames[0].index
    for frame in frames[1:]:
        common = common.intersection(frame.index, sort=False)
    if len(common) == 0:
        raise NotMeasurable("no training question was measured on every probed policy and draw")
    common = common.sort_values()
    return [
        SeedRuns(frame.loc[common].to_numpy().T[:, :, None], common, runs.ks)
        for frame, runs in zip(frames, draws, strict=True)
    ]


def _diagnostic(inputs: Sequence[DrawInputs], name: str) -> Callable | None:
    """The mean over draws of a per-(probed policy, question) diagnostic (None: not probed)."""
    present = [name in draw.diagnostics for draw in inputs]
    if not any(present):
        return None
    if not all(present):
        raise ValueError(f"diagnostic {name} is missing in some draws: every draw probes alike")

    def compute() -> tuple[Estimate, Sequence[Sequence[SeedRuns]], str]:
        aligned = _aligned([draw.diagnostics[name] for draw in inputs])
        estimate = draw_mean(aligned, [QUESTIONS])[0]
        questions = len(aligned[0].problems)
        return estimate, (aligned,), f" (probed TA-GRPO policies, {questions} questions)"

    return compute


def _diagnostic_rows(inputs: Sequence[DrawInputs], row: Callable, updates: str) -> list[Claim]:
    return [
        row(
            "Fewer identical-reward groups than the size-matched q0 group (Fig. 3)",
            "identical-reward rate of q0's (N+1)G-response group minus TA-GRPO's joint (N+1)G "
            "group, same policy, per training question (size-matched)",
            _diagnostic(inputs, IDENTICAL_SIZE_MATCHED),
            updates=f"{updates} (one policy)",
        ),
        row(
            "Fewer identical-reward groups than GRPO's G-group (Fig. 3 as drawn)",
            "identical-reward rate of q0's G-group minus TA-GRPO's joint (N+1)G group, same "
            "policy: not size-matched (a larger group has fewer identical rewards by chance "
            "alone)",
            _diagnostic(inputs, IDENTICAL_AS_DRAWN),
            updates=f"{updates} (one policy)",
        ),
    ]


def _diversity_rows(inputs: Sequence[DrawInputs], row: Callable, updates: str) -> list[Claim]:
    return [
        row(
            "Responses to the neighbours are more diverse (Fig. 4)",
            "strategy entropy (bits) per training question, the mean over its neighbours' "
            "G-response groups minus q0's G-group, same policy (forward/backward paths)",
            _diagnostic(inputs, STRATEGY_ENTROPY),
            unit="plain",
            updates=f"{updates} (one policy)",
        ),
        row(
            "Responses to the neighbours are more diverse (Fig. 4), embedding distance",
            "within-prompt mean pairwise cosine distance of the responses' embeddings, "
            "neighbours minus q0, same policy",
            _diagnostic(inputs, EMBEDDING_DISTANCE),
            kind=BESIDE,
            unit="plain",
            updates=f"{updates} (one policy)",
        ),
    ]


def _tost_row(
    inputs: Sequence[DrawInputs],
    settings: FamilySettings,
    ta: list[SeedRuns] | None,
    free_form: Sequence[str],
    free_label: str,
    row: Callable,
    updates: Callable[[str], str],
) -> Claim:
    k, margin = settings.k, settings.equivalence_margin
    method, multiple = settings.scaled or ("grpo", 2.5)
    scaled_label = f"{multiple:g}x"
    present = [(method, multiple) in draw.scaled for draw in inputs]
    if any(present) and not all(present):
        raise ValueError(f"{method} on {scaled_label} data is missing in some draws")
    scaled = [draw.scaled[(method, multiple)] for draw in inputs] if all(present) else None
    compute = None
    equivalence: dict[str, Any] = {}
    if ta is not None and scaled is not None and settings.scaled is not None:

        def compute() -> tuple[Estimate, Sequence[Sequence[SeedRuns]], str]:
            fewest = min(runs.values.shape[0] for runs in (*ta, *scaled))
            if fewest < settings.min_seeds_per_arm:
                raise NotMeasurable(
                    f"an arm has {fewest} seed(s) in a draw: the equivalence test needs >= "
                    f"{settings.min_seeds_per_arm} seeds per arm per draw (pre-registered)"
                )
            estimate = next(e for e in draw_paired_difference(ta, scaled, free_form) if e.k == k)
            equivalence["test"] = equivalence_test(estimate, margin, ALPHA)
            return estimate, (ta, scaled), ""

    made = row(
        f"TA-GRPO on 1x data is equivalent to {method} on {scaled_label} (section 5.5)",
        f"pass@{k}, TA-GRPO (1x) minus {method} ({scaled_label}), {free_label}; equivalence "
        f"test (TOST), margin +/-{100 * margin:.1f} points",
        compute,
        kind=EQUIVALENCE,
        updates=f"{updates(TA)} / {method} {scaled_label}",
    )
    if "test" in equivalence and not made.refusal:
        made = replace(made, equivalence=equivalence["test"])
    return made


def _ordered(claims: list[Claim], family_name: str = "v3") -> list[Claim]:
    """The table's order: the controls, then the family in its registered order with each
    "beside" row after the family row it belongs to (the list is built in that order; this
    checks it): the TOST row last of world v3's rows, study-v3's unanchored row after it."""
    size = STUDY_FAMILY_SIZE if family_name == "study-v3" else FAMILY_SIZE
    family = [claim for claim in claims if claim.in_family]
    if len(family) != size:
        raise AssertionError(f"the {family_name} family has {len(family)} rows, registered {size}")
    kinds = [claim.kind for claim in claims]
    tail = [EQUIVALENCE, CLAIM] if family_name == "study-v3" else [EQUIVALENCE]
    if kinds[:2] != [CONTROL, NULL_CONTROL] or kinds[-len(tail) :] != tail:
        raise AssertionError(f"the {family_name} claims table is out of order: {kinds}")
    return claims


def family_settings(config: Any, primary: tuple[str, Sequence[str]]) -> FamilySettings:
    """The :class:`FamilySettings` of a run's params (``primary``: the primary group's name
    and benchmarks, :func:`tagrpo.report.inputs.primary_benchmarks`)."""
    scaling = config.runs.data_scaling
    scaled = None
    if "grpo" in scaling.methods and scaling.multiples:
        scaled = ("grpo", float(max(scaling.multiples)))
    return FamilySettings(
        benchmarks=tuple(sorted(config.benchmark_names())),
        primary=(primary[0], tuple(primary[1])),
        k=config.primary_k(),
        options=dict(config.multiple_choice_options()),
        equivalence_margin=config.report.equivalence_margin,
        scaled=scaled,
    )


def registered_family(path: Path | None) -> str:
    """Which claims family a run's pre-registration names: ``v3`` for world v3's layout
    (``version: 3``, m = 11), ``study-v3`` for the study's re-registration (``version: 4``,
    m = 12), ``v2`` for world v2's (``version: 1``, m = 10) or none; the
    registered family's length must match the code's (an error naming the file otherwise)."""
    import yaml

    from tagrpo.report.claims import FAMILY_SIZE as V2_FAMILY_SIZE

    if path is None:
        return "v2"
    document = yaml.safe_load(path.read_text(encoding="utf-8"))
    version = document.get("version") if isinstance(document, dict) else None
    sizes = {1: ("v2", V2_FAMILY_SIZE), 3: ("v3", FAMILY_SIZE), 4: ("study-v3", STUDY_FAMILY_SIZE)}
    if version not in sizes:
        raise ValueError(
            f"{path}: version {version!r} names no claims family (1: v2, 3: v3, 4: study-v3)"
        )
    name, size = sizes[version]
    registered = len(document["study"]["holm_family"])
    if registered != size:
        raise ValueError(f"{path}: its Holm family has {registered} rows, the {name} code {size}")
    return name


__all__ = [
    "FAMILY",
    "FAMILY_SIZE",
    "STUDY_FAMILY",
    "STUDY_FAMILY_SIZE",
    "DrawInputs",
    "FamilySettings",
    "build_v3_claims",
    "family_settings",
    "registered_family",
]
