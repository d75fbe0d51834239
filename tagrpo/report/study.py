"""The decisive study of world v3 over base draws (issue 42, ``preregistration/world-v3.md``):
every claim row paired by draw, the A/A null, V1-V5 on every draw and V5 over the draws,
written as the committed study report folder; with ``--power``, Part B's size calculation.

**How a study run is organised: one built checkout per base draw.** Each is a checkout of the
project at one commit with ``profiles/study.yaml`` applied and ``base_model.warmstart.seed`` set
to the draw, built by ``dvc repro`` (one DVC cache shared by all, so the stages that do not
depend on the base draw, the data stage among them, run once)::

    git worktree add ../study-d0 main && cd ../study-d0
    dvc cache dir --local /path/to/shared/cache
    tagrpo params apply profiles/study.yaml
    tagrpo params set base_model.warmstart.seed=0
    dvc repro                                   # then the same for each registered draw

    python -m tagrpo.report.study --run draw0=../study-d0 --run draw1=../study-d1 ... \\
        --out reports/profiles/study

Why not ``dvc exp run --queue -S base_model.warmstart.seed=D`` alone: a queued experiment
runs in a temporary copy and keeps its results as a git ref plus the DVC cache, and ``dvc exp
apply`` puts one experiment at a time into the workspace; this analysis reads every draw's
evaluations, training histories and diagnostics at once. Queued experiments do serve to run
the draws side by side (``dvc queue start -j N``); each then becomes a checkout with ``dvc exp
branch <exp> study-dD``, ``git worktree add ../study-dD study-dD`` and ``dvc checkout`` there
(the cache shared): the same built checkouts, each with its ``dvc.lock`` and params committed
on its branch.

The command refuses checkouts that are not one experiment: their params must be equal but for
``base_model.warmstart.seed`` and the keys that say where a run executes
(:data:`tagrpo.report.study_checkouts.EXECUTION_KEYS`: devices, batch sizes, tracking, timeouts),
and no two may be the same draw. It then checks the runs against the pre-registration's study
section (Part B's draws and seeds per draw, the methods with those seeds on every draw, the
data-scaling runs, the primary endpoint, the TOST margin, the confirmatory world seed) and its
provenance (the pre-registration committed and unchanged in each checkout, each draw's
``dvc.lock``); a mismatch is an error naming it, or with ``--exploratory`` a listed deviation under
a report headed "EXPLORATORY: not the pre-registered study".

Part B (``--power``), from the confirmatory draws' GRPO-only checkouts (base, GRPO with its
seeds, the negative control): the cheapest design (D >= 2 draws, S >= 2 seeds per draw) whose
projected 95% half-width of the primary endpoint is at most ``study.v5_max_half_width``, under
the registered assumptions (:func:`tagrpo.report.study_power.power_table`); D = 5, S = 5 when
none reaches it.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tagrpo.metrics.compare import estimate_half_width
from tagrpo.metrics.draws import draw_paired_difference, draw_score_with_interval
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.claims import Claim, claims_table, underpowered
from tagrpo.report.family import (
    DrawInputs,
    FamilySettings,
    build_v3_claims,
    family_settings,
)
from tagrpo.report.family_inputs import load_draw_inputs
from tagrpo.report.study_checkouts import Study, parse_runs, read_study, registration_deviations
from tagrpo.report.study_main import method_runs
from tagrpo.report.study_power import power_markdown

# --------------------------------------------------------------------------- the analysis

# study-v3 judges every draw on V1-V4 and the base's bands, with world v3's; its V5 is over the
# draws (5 points), so world v3's per-draw V5 (2 points) is not one of a draw's rows there.
NOT_PER_DRAW = {"study-v3": ("V5",)}


@dataclass(frozen=True)
class StudyResult:
    """What the study computed: the claims over draws, each draw's own claims, the validity
    rows per draw, V5 over draws, and the long-form tables."""

    claims: list[Claim]
    per_draw: dict[str, list[Claim]]
    validity: dict[str, pd.DataFrame]
    v5: dict[str, Any]
    scores: pd.DataFrame
    differences: pd.DataFrame
    inputs: dict[str, DrawInputs] = field(default_factory=dict)
    # study-v3: the draws that pass every row they are judged on, and the claims over them
    # alone where some draw does not (reported beside the claims over all draws).
    passing: list[str] = field(default_factory=list)
    claims_passing: list[Claim] | None = None
    v5_passing: dict[str, Any] | None = None


def v5_over_draws(claims: Sequence[Claim], draws: int, target: float) -> dict[str, Any]:
    """V5 over the draws: the primary endpoint's 95% half-width from the draw-level analysis
    (blind: the half-width, not the estimate) against ``target``; one draw cannot measure it."""
    primary = next(c for c in claims if c.claim.endswith("(primary endpoint)"))
    requirement = (
        f"TA-GRPO - GRPO at the primary endpoint, over the draws: 95% half-width <= "
        f"{100 * target:.0f} points (blind: no estimate shown)"
    )
    if draws < 2:
        measured, passed, width = (
            "not measurable: one base draw (no draw-level variance)",
            False,
            None,
        )
    elif primary.estimate is None:
        measured, passed, width = "not run: TA-GRPO or GRPO missing", False, None
    elif primary.refusal:
        measured, passed, width = f"not measurable: {primary.refusal}", False, None
    else:
        width = estimate_half_width(primary.estimate)
        measured = (
            f"+/-{100 * width:.2f} points ({draws} draws, t with {primary.estimate.df:.1f} "
            "effective df)"
        )
        passed = width <= target
    return {
        "criterion": "V5 (over draws)",
        "requirement": requirement,
        "measured": measured,
        "verdict": "PASS" if passed else "FAIL",
        "half_width": width,
    }


def score_tables(
    inputs: Mapping[str, DrawInputs],
    groups: Mapping[str, Sequence[str]],
    ks: Sequence[int],
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Every method's score over the draws per group and k, and TA-GRPO minus every other
    method (long form; the draw as the replicated unit; exploratory: unadjusted)."""
    methods = method_runs(inputs)
    scores, differences = [], []
    for method, sides in methods.items():
        for group, members in groups.items():
            for estimate in draw_score_with_interval(sides, members):
                if estimate.k in ks:
                    scores.append(_long(estimate, method=method, group=group))
            if method == "ta_grpo" or "ta_grpo" not in methods:
                continue
            for estimate in draw_paired_difference(methods["ta_grpo"], sides, members):
                if estimate.k in ks:
                    differences.append(_long(estimate, baseline=method, group=group))
    return pd.DataFrame(scores), pd.DataFrame(differences)


def _long(estimate: Any, **keys: Any) -> dict[str, Any]:
    return {
        **keys,
        "k": estimate.k,
        "value": estimate.value,
        "ci_low": estimate.low,
        "ci_high": estimate.high,
        "se": estimate.se,
        "df": estimate.df,
        "p_value": estimate.p_value,
        "replicates": " vs ".join(str(n) for n in estimate.seeds),
    }


def analyse(study: Study) -> StudyResult:
    """Every claim row over the draws (:func:`tagrpo.report.family.build_v3_claims`), each
    draw alone, V1-V5 recomputed on every draw with its pre-registration's bands, V5 over the
    draws, and the scores and differences tables."""
    from tagrpo.report.draw_checkouts import recomputed_rows
    from tagrpo.report.inputs import primary_benchmarks, run_bands

    first_label = next(iter(study.configs))
    first = study.configs[first_label]
    root0 = study.checkouts[first_label]
    settings: FamilySettings = replace(
        family_settings(first, primary_benchmarks(first)),
        family=study.family,
        no_effect_margin=study.no_effect_margin,
    )
    inputs = {
        label: load_draw_inputs(study.configs[label], root)
        for label, root in study.checkouts.items()
    }
    claims = build_v3_claims(inputs, settings)
    per_draw = {label: build_v3_claims({label: draw}, settings) for label, draw in inputs.items()}
    dropped = NOT_PER_DRAW.get(study.family, ())
    validity = {}
    for label, root in study.checkouts.items():
        rows = recomputed_rows(root)
        validity[label] = rows[~rows["criterion"].isin(dropped)].reset_index(drop=True)
    target = (
        study.v5_target if study.v5_target is not None else run_bands(first, root0).max_half_width
    )
    v5 = v5_over_draws(claims, len(inputs), target)
    if v5["verdict"] != "PASS":
        claims = underpowered(claims)
    passing = [label for label, rows in validity.items() if (rows["verdict"] == "PASS").all()]
    claims_passing, v5_passing = None, None
    if study.family == "study-v3" and passing and len(passing) < len(inputs):
        kept = {label: inputs[label] for label in passing}
        claims_passing = build_v3_claims(kept, settings)
        v5_passing = v5_over_draws(claims_passing, len(kept), target)
        if v5_passing["verdict"] != "PASS":
            claims_passing = underpowered(claims_passing)
    benchmarks = sorted(first.benchmark_names())
    groups = {**first.evaluate.groups, "all benchmarks": benchmarks}
    scores, differences = score_tables(inputs, groups, sorted({1, settings.k}))
    return StudyResult(
        claims, per_draw, validity, v5, scores, differences, inputs, passing, claims_passing,
        v5_passing,
    )  # fmt: skip


# --------------------------------------------------------------------------- the report


def claims_frame(claims: Sequence[Claim]) -> pd.DataFrame:
    """The claims table as numbers (one row per claim, in the table's order)."""
    rows = []
    for claim in claims:
        estimate = claim.estimate
        shown = estimate is not None and not claim.refusal
        rows.append(
            {
                "claim": claim.claim,
                "kind": claim.kind,
                "in_family": claim.in_family,
                "measure": claim.measure,
                "estimate": estimate.value if shown else np.nan,
                "ci_low": (claim.equivalence or estimate).low if shown else np.nan,
                "ci_high": (claim.equivalence or estimate).high if shown else np.nan,
                "interval": "90% (TOST)" if claim.equivalence is not None else "95%",
                "se": estimate.se if shown else np.nan,
                "df": estimate.df if shown else np.nan,
                "p_value": claim.p_value,
                "holm_p": claim.holm_p,
                "seeds": claim.seeds,
                "verdict": claim.verdict,
                "unit": claim.unit,
            }
        )
    return pd.DataFrame(rows)


def _cell(claim: Claim) -> str:
    if claim.estimate is None:
        return "not run"
    if claim.refusal:
        return "not measurable"
    scale = 100.0 if claim.unit == "points" else 1.0
    e = claim.estimate
    return f"{scale * e.value:+.2f} [{scale * e.low:+.2f}, {scale * e.high:+.2f}]"


def per_draw_table(per_draw: Mapping[str, Sequence[Claim]]) -> tuple[str, pd.DataFrame]:
    """Each row's estimate within each draw alone (its crossed seeds x problems model,
    conditional on that draw; 95%, unadjusted): markdown and long form."""
    labels = list(per_draw)
    names = [claim.claim for claim in per_draw[labels[0]]]
    rows, long = [], []
    for index, name in enumerate(names):
        cells = []
        for label in labels:
            claim = per_draw[label][index]
            cells.append(_cell(claim))
            shown = claim.estimate is not None and not claim.refusal
            long.append(
                {
                    "claim": name,
                    "draw": label,
                    "estimate": claim.estimate.value if shown else np.nan,
                    "ci_low": claim.estimate.low if shown else np.nan,
                    "ci_high": claim.estimate.high if shown else np.nan,
                    "unit": claim.unit,
                    "cell": cells[-1],
                }
            )
        rows.append([name, *cells])
    return markdown_table(["claim", *labels], rows), pd.DataFrame(long)


def _validity_markdown(
    validity: Mapping[str, pd.DataFrame], v5: Mapping[str, Any], judged: str = "V1-V5"
) -> tuple[str, pd.DataFrame]:
    from tagrpo.report.draws import draws_markdown

    passed = [label for label, frame in validity.items() if (frame["verdict"] == "PASS").all()]
    long = pd.concat(
        [frame.assign(draw=label) for label, frame in validity.items()]
        + [pd.DataFrame([{k: v5[k] for k in ("criterion", "requirement", "measured", "verdict")}])
           .assign(draw="over draws")],
        ignore_index=True,
    )  # fmt: skip
    text = "\n".join(
        [
            draws_markdown(validity),
            "",
            markdown_table(
                ["criterion", "requirement", "measured", "verdict"],
                [[v5["criterion"], v5["requirement"], v5["measured"], v5["verdict"]]],
            ),
            "",
            f"**{judged} and every band pass on {len(passed)} of {len(validity)} draws; V5 over "
            f"the draws: {v5['verdict']}.**",
        ]
    )
    return text, long[["draw", "criterion", "requirement", "measured", "verdict"]]


def _percent_table(frame: pd.DataFrame, key: str, ks: Sequence[int]) -> str:
    if frame.empty:
        return "TA-GRPO was not run: no differences."
    rows = []
    for (name, group), part in frame.groupby([key, "group"], sort=False):
        by_k = part.set_index("k")
        cells = [
            f"{100 * by_k.loc[k, 'value']:.1f} [{100 * by_k.loc[k, 'ci_low']:.1f}, "
            f"{100 * by_k.loc[k, 'ci_high']:.1f}]"
            for k in ks
        ]
        rows.append([name, group, part["replicates"].iloc[0], *cells])
    return markdown_table([key, "group", "draws", *(f"pass@{k}" for k in ks)], rows)


def design_table(study: Study) -> str:
    """Per draw: its SFT seed, checkout commit, dvc.lock hash and where it ran."""
    rows = []
    for label, config in study.configs.items():
        state = study.provenances.get(label)
        head = state.head[:12] if state and state.head else "not a git checkout"
        dirty = "" if not state or state.dirty is None else (" (modified)" if state.dirty else "")
        lock = state.lock_sha256[:12] if state and state.lock_sha256 else "missing"
        device = (
            f"train {config.train.backend}/{config.local.device}, evaluate "
            f"{config.evaluate.backend}/{config.hf.device}, diagnostics "
            f"{config.diagnostics.backend}"
        )
        row = [label, config.base_model.warmstart.seed, head + dirty, lock, device]
        record = study.checkouts[label] / "DRAW.json"  # a committed record names its machine
        rows.append(row + ([json.loads(record.read_text())["device"]] if record.is_file() else []))
    columns = ["draw", "SFT seed", "checkout commit", "dvc.lock SHA-256", "devices (params)"]
    if all(len(row) > len(columns) for row in rows):
        columns.append("ran on (DRAW.json)")
    else:
        rows = [row[: len(columns)] for row in rows]
    return markdown_table(columns, rows)


def _filled_reading(key: str) -> str:
    from tagrpo.report.draw_checkouts import KEYS_OLDER_CODE_LACKED

    if key in KEYS_OLDER_CODE_LACKED:
        value, why = KEYS_OLDER_CODE_LACKED[key]
        return f"`{key}` = {value!r} ({why})"
    return f"`{key}` from this checkout's params.yaml (how runs execute or are read)"


def _passing_lines(study: Study, result: StudyResult) -> list[str]:
    """study-v3's rule: the estimates over the draws that pass every row, beside those over all
    draws (where some draw fails)."""
    if study.family != "study-v3":
        return []
    total = len(result.validity)
    if len(result.passing) == total:
        return [
            f"Every draw passes every row it is judged on: the claims above are over all {total}.",
            "",
        ]
    if not result.passing:
        return [
            "No draw passes every row it is judged on: the claims above are over all draws.",
            "",
        ]
    assert result.claims_passing is not None and result.v5_passing is not None
    return [
        f"### Over the {len(result.passing)} draw(s) that pass every row "
        f"({', '.join(result.passing)})",
        "",
        f"The registered rule: a draw that fails a row is reported as failed, and the estimates "
        f"are reported over the draws that pass every row beside those over all {total} above. "
        f"V5 over these draws: {result.v5_passing['measured']}, {result.v5_passing['verdict']}.",
        "",
        claims_table(result.claims_passing),
        "",
    ]


def study_markdown(
    study: Study,
    result: StudyResult,
    command: str,
    deviations: Sequence[str],
    extra: str = "",
) -> tuple[str, str, dict[str, pd.DataFrame]]:
    """The study report (markdown), the claims table alone, and the CSV tables by name;
    ``extra`` (markdown sections) goes before the provenance."""
    from tagrpo.report.inputs import preregistration_line, registration_line

    first_label = next(iter(study.configs))
    first = study.configs[first_label]
    root0 = study.checkouts[first_label]
    draws = len(study.configs)
    k = first.primary_k()
    group = first.report.primary_group or "every free-form benchmark"
    seeds = {m: len(first.runs.seeds_of(m)) for m in first.runs.all_methods()}
    registered = study.registration["study"]
    family_rows = sum(claim.in_family for claim in result.claims)
    size = study.registration.get("size") or {}
    registered_draws = (
        (registered.get("base_draws"), registered.get("seeds_per_draw"))
        if study.family == "v3"
        else (size.get("draws"), size.get("seeds_per_draw"))
    )
    judged = "V1-V4" if study.family == "study-v3" else "V1-V5"
    validity_text, validity_long = _validity_markdown(result.validity, result.v5, judged)
    per_draw_text, per_draw_long = per_draw_table(result.per_draw)
    claims = claims_table(result.claims)
    ks = sorted({1, k})
    title = (
        "# The decisive study of world v3: the paper's claims over base draws"
        if study.family == "v3"
        else "# The study (study-v3): the paper's claims over the main study's base draws"
    )
    header = [title, ""]
    if deviations:
        header += [
            "**EXPLORATORY: not the pre-registered study.** It departs from the "
            "pre-registration in:",
            "",
            *(f"- {line}" for line in deviations),
            "",
        ]
    conditional = (
        " With one draw every row is the crossed seeds x problems model within it, "
        "conditional on that base draw."
        if draws == 1
        else ""
    )
    text = "\n".join(
        [
            *header,
            f"Made by `{command}` (tagrpo.report.study) from {draws} built checkout(s), one per "
            "base draw; every number below is computed from their stage outputs.",
            "",
            preregistration_line(first, root0)
            if study.family == "v3"
            else registration_line(Path("."), study.registration_path),
            "",
            "## Design",
            "",
            f"World seed {first.data.synthetic.seed}; base draws (SFT seeds) "
            + ", ".join(str(c.base_model.warmstart.seed) for c in study.configs.values())
            + " (registered: "
            + f"{registered_draws[0]}, seeds per draw {registered_draws[1]}"
            + "). Seeds per draw: "
            + ", ".join(f"{m} {n}" for m, n in seeds.items())
            + "; data-scaling runs: "
            + (
                ", ".join(
                    f"{m} at {mult:g}x"
                    for m in first.runs.data_scaling.methods
                    for mult in first.runs.data_scaling.multiples
                )
                or "none"
            )
            + f" ({len(first.runs.data_scaling.seeds)} seeds per draw). Primary endpoint: "
            f"TA-GRPO minus GRPO at pass@{k} on `{group}`.",
            "",
            design_table(study),
            "",
            *(
                [
                    "The records' code lacked keys this code's params have; read with "
                    + "; ".join(_filled_reading(key) for key in study.filled)
                    + ".",
                    "",
                ]
                if study.filled
                else []
            ),
            f"## Testbed validity on every draw ({judged}, the bands) and V5 over the draws",
            "",
            validity_text,
            "",
            "## The paper's claims over the base draws",
            "",
            "Contrasts are paired by draw: per draw, the mean over its seeds of one method "
            "minus the other's, on the problems every policy answered; the estimate is the "
            "mean over the draws, its variance the method-by-problem component plus the "
            "draws' mean square over their number, each with its own t quantile (problems - "
            "benchmarks and draws - 1 degrees of freedom), the half-widths added in quadrature "
            "(pre-registration amendment 1); p-values and the TOST use the effective degrees "
            "of freedom of that width. The negative control and the A/A null (GRPO's seeds "
            "split in two within each draw) come first, outside the family; the family of "
            f"{family_rows} rows follows in the registered order, adjusted by Holm (a row not "
            "run or not measurable counts with p = 1 and reads not supported). Rows marked "
            "*outside the family* are reported beside their family row, unadjusted."
            + conditional
            + (
                ' V5 over the draws fails: every family row is labelled "underpowered: not '
                'evidence".'
                if result.v5["verdict"] != "PASS"
                else ""
            ),
            "",
            claims,
            "",
            *_passing_lines(study, result),
            "## Each draw alone",
            "",
            "Each row within one draw (the crossed seeds x problems model of that draw: "
            "conditional on it; 95%, unadjusted): how the draws agree. Percentage points, "
            "bits for the strategy entropy, cosine distance for the embeddings, "
            "-log(1 - pass@k) units for its widening.",
            "",
            per_draw_text,
            "",
            "## Scores and differences over the draws (exploratory, unadjusted)",
            "",
            "pass@k (percent) of every method, the mean over draws of each draw's seed mean, "
            "with its 95% interval over draws (the draw as the replicated unit):",
            "",
            _percent_table(result.scores, "method", ks),
            "",
            "TA-GRPO minus each method, paired by draw (percentage points):",
            "",
            _percent_table(result.differences, "baseline", ks),
            "",
            *([extra, ""] if extra else []),
            "## Provenance",
            "",
            "Each draw's `params.yaml` and `dvc.lock` are copied under `draws/<draw>/` beside "
            "this report; `tables/` holds every table above as CSV.",
        ]
    )
    tables = {
        "claims": claims_frame(result.claims),
        "validity_by_draw": validity_long,
        "per_draw": per_draw_long,
        "scores": result.scores,
        "differences": result.differences,
    }
    if result.claims_passing is not None:
        tables["claims_passing_draws"] = claims_frame(result.claims_passing)
    return text, claims, tables


def write_study(
    study: Study,
    result: StudyResult,
    out: Path,
    command: str,
    deviations: Sequence[str],
    extra: str = "",
) -> Path:
    """Write the study folder: ``report.md``, ``claims.md``, ``tables/*.csv`` and each draw's
    ``params.yaml`` and ``dvc.lock`` under ``draws/<label>/``; returns the report's path."""
    text, claims, tables = study_markdown(study, result, command, deviations, extra)
    out.mkdir(parents=True, exist_ok=True)
    (out / "tables").mkdir(exist_ok=True)
    for name, frame in tables.items():
        frame.to_csv(out / "tables" / f"{name}.csv", index=False)
    for label, root in study.checkouts.items():
        folder = out / "draws" / label
        folder.mkdir(parents=True, exist_ok=True)
        for name in ("params.yaml", "dvc.lock"):
            if (root / name).is_file():
                shutil.copyfile(root / name, folder / name)
    (out / "claims.md").write_text(claims + "\n", encoding="utf-8")
    report = out / "report.md"
    report.write_text(text + "\n", encoding="utf-8")
    return report


# --------------------------------------------------------------------------- command


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--run", action="append", default=[], metavar="LABEL=PATH",
        help="a base draw's label and its built checkout (repeat per draw)",
    )  # fmt: skip
    parser.add_argument(
        "--power", action="store_true",
        help="Part B: the study's size from the confirmatory draws' GRPO-only checkouts",
    )  # fmt: skip
    parser.add_argument(
        "--exploratory", action="store_true",
        help="analyse checkouts that depart from the pre-registration (Part B unfilled, other "
        "draws or seeds): the report is headed EXPLORATORY and lists every deviation",
    )  # fmt: skip
    parser.add_argument(
        "--out", type=Path, default=None,
        help="the study folder (default reports/profiles/study); with --power a markdown file "
        "(default: print)",
    )  # fmt: skip
    parser.add_argument(
        "--size", action="store_true",
        help="study-v3's size rule: the main study's D and S from the pilot's committed records "
        "(reports/study/pilot/draw*/; default out reports/study/size.md)",
    )  # fmt: skip
    parser.add_argument(
        "--write-size", action="store_true",
        help="with --size: write the chosen `size` into preregistration/study-v3.yaml (once; "
        "commit it with reports/study/pilot.md and size.md before any main draw)",
    )  # fmt: skip
    parser.add_argument(
        "--pilot", action="store_true",
        help="the study's internal pilot from its committed records (reports/study/pilot/draw*/; "
        "default out reports/study/pilot.md)",
    )  # fmt: skip
    parser.add_argument(
        "--main", action="store_true",
        help="the study (study-v3): every family row over the main study's committed draw "
        "records (reports/study/main/draw*/; default out reports/study/main-report)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.main:
        try:
            report, verdict = main_report(args.out or MAIN_REPORT, args.exploratory)
        except ReportRefused as refusal:
            raise SystemExit(str(refusal)) from None
        print(f"{report}: V5 over the draws {verdict}")
        return
    if args.pilot:
        _pilot(args.out or Path("reports/study/pilot.md"))
        return
    if args.size:
        _size(args.out or Path("reports/study/size.md"), args.write_size)
        return
    try:
        checkouts = parse_runs(args.run)
    except (ValueError, FileNotFoundError) as error:
        parser.error(str(error))
    labels = " ".join(f"--run {label}=..." for label in checkouts)
    if args.power:
        text, _ = power_markdown(checkouts, f"python -m tagrpo.report.study --power {labels}")
        if args.out:
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(text + "\n", encoding="utf-8")
        else:
            print(text)
        return
    study = read_study(checkouts)
    deviations = registration_deviations(study.registration, study.configs, study.provenances)
    if deviations and not args.exploratory:
        raise SystemExit(
            "the runs are not the pre-registered study (--exploratory to analyse them anyway, "
            "under a report that says so):\n- " + "\n- ".join(deviations)
        )
    command = "python -m tagrpo.report.study " + ("--exploratory " if deviations else "") + labels
    result = analyse(study)
    report = write_study(
        study, result, args.out or Path("reports/profiles/study"), command, deviations
    )
    print(f"{report}: V5 over the draws {result.v5['verdict']}")


class ReportRefused(Exception):
    """The main study's records cannot be reported as the registered study (not sized, not
    finished, or departing from the registration without ``exploratory``)."""


MAIN_REPORT = Path("reports/study/main-report")


def main_report(out: Path = MAIN_REPORT, exploratory: bool = False) -> tuple[Path, str]:
    """study-v3's analysis of the main study's records (run from the project root), under
    study-v3.yaml (its size fixes the draws); a departure from the registration is refused, or
    with ``exploratory`` a listed deviation under a report that says so. Returns the report's
    path and V5's verdict over the draws."""
    import yaml

    from tagrpo.report.study_checkouts import read_records, study_v3_deviations
    from tagrpo.report.study_main import main_sections

    path = Path("preregistration/study-v3.yaml")
    registration = yaml.safe_load(path.read_text())
    size = registration.get("size")
    if not size:
        raise ReportRefused(f"{path} has no size yet: the main study has not been sized (--size)")
    seeds = registration["main"]["base_draws_in_order"][: int(size["draws"])]
    records = {f"draw{s}": Path("reports/study/main") / f"draw{s}" for s in seeds}
    missing = [str(r) for r in records.values() if not (r / "DRAW.json").exists()]
    if missing and not exploratory:
        raise ReportRefused(f"the main study is not finished: no record in {', '.join(missing)}")
    present = {label: r for label, r in records.items() if (r / "DRAW.json").exists()}
    if not present:
        raise ReportRefused("no main-study draw is recorded yet (make study)")
    study = read_records(present, path)
    deviations = study_v3_deviations(registration, study.configs)
    deviations += [f"{m}: not recorded (the analysis is interim)" for m in missing]
    if deviations and not exploratory:
        raise ReportRefused(
            "the records are not the registered study:\n- " + "\n- ".join(deviations)
        )
    command = "python -m tagrpo.report.study --main" + (" --exploratory" if deviations else "")
    result = analyse(study)
    first = next(iter(study.configs.values()))
    out.mkdir(parents=True, exist_ok=True)
    extra = main_sections(
        present,
        result.inputs,
        {m: first.runs.seeds_of(m) for m in first.runs.all_methods()},
        registration,
        result.v5["half_width"],
        pilot_records=_pilot_records()[1],
        figure=out / "contrasts.png",
    )
    report = write_study(study, result, out, command, deviations, extra)
    return report, str(result.v5["verdict"])


def _pilot_records() -> tuple[dict[str, Any], list[Path]]:
    import yaml

    registration = yaml.safe_load(Path("preregistration/study-v3.yaml").read_text())
    records = [
        Path("reports/study/pilot") / f"draw{seed}" for seed in registration["pilot"]["base_draws"]
    ]
    return registration, records


def _pilot(out: Path) -> None:
    """The pilot's report from the records committed so far."""
    from tagrpo.report.study_pilot import pilot_markdown

    registration, records = _pilot_records()
    out.parent.mkdir(parents=True, exist_ok=True)
    text = pilot_markdown(
        records,
        registration,
        "python -m tagrpo.report.study --pilot",
        figure=out.with_name(out.stem + "-contrasts.png"),
        parallel=Path("reports/study/parallel.json"),
    )
    out.write_text(text + "\n", encoding="utf-8")
    print(f"{out}: {sum((r / 'DRAW.json').exists() for r in records)} of {len(records)} draws")


def _size(out: Path, write: bool = False) -> None:
    """study-v3's size rule on the pilot's records; the ``size`` section it chooses, printed
    (with ``write``, written into the registration)."""
    import yaml

    from tagrpo.report.study_size import registration_with_size, size_markdown

    registration, records = _pilot_records()
    missing = [str(r) for r in records if not (r / "DRAW.json").exists()]
    if missing:
        raise SystemExit(
            f"the pilot is not finished: no record in {', '.join(missing)} (make study)"
        )
    text, chosen = size_markdown(
        records, registration, Path("."), "python -m tagrpo.report.study --size"
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n", encoding="utf-8")
    print(text)
    size = {**chosen, "table": str(out)}
    if write:
        path = Path("preregistration/study-v3.yaml")
        path.write_text(registration_with_size(path.read_text(encoding="utf-8"), size))
        print(f"\n{path}: `size` written; commit it with {out} before any main draw")
        return
    print("\nstudy-v3.yaml's `size`, to commit before any main draw (or --write-size):")
    print(yaml.safe_dump({"size": size}, sort_keys=False))


if __name__ == "__main__":
    main()
