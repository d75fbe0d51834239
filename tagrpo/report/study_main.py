"""What study-v3's analysis reports beside the main study's estimates
(``preregistration/study-v3.md``, "Analysis"): the measured variance components of the primary
endpoint against the pilot's (which sized the study), the per-problem outcomes (problems never
solved, per method), the anchoring diagnostic of every TA-type run, the primary endpoint's
contrasts drawn per draw, the A/A coverage of the registered design, and where the pilot's
own contrasts are (labelled). ``tagrpo.report.study`` puts these sections into the main
study's report.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagrpo.metrics.compare import SeedRuns
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.family import DrawInputs
from tagrpo.report.study_aa import SIMULATIONS, coverage_rows
from tagrpo.report.study_pilot import ANCHORING, PILOT_LABEL, contrast_figure, zero_correct_share
from tagrpo.report.study_size import SizeInputs, projected_half_width, size_inputs

# The TA-type methods: each run's anchoring diagnostic is reported (study-v3's mechanism rows).
TA_TYPE = ("ta_grpo", "ta_grpo_unanchored", "ta_grpo_star")


def _points2(value: float) -> str:
    return f"{1e4 * value:.3f}"


def variance_rows(pilot: SizeInputs | None, main: SizeInputs | None) -> list[list[str]]:
    """The size rule's components (points squared), the pilot's beside the main study's."""
    names = (
        ("problem", "V_prob: the problem component of the estimate"),
        ("s2_ta", "s2_ta: TA-GRPO's seed variance within a draw"),
        ("s2_grpo", "s2_grpo: GRPO's seed variance within a draw"),
        ("s2_md", "s2_md: method-by-draw variance (truncated at 0)"),
        ("between", "the per-draw contrast's variance over draws, as measured"),
    )
    rows = []
    for key, label in names:
        rows.append(
            [
                label,
                *(
                    _points2(getattr(side, key)) if side else "not measured"
                    for side in (pilot, main)
                ),
            ]
        )
    rows.append(
        [
            "draws x seeds per draw",
            *(f"{side.draws} x {side.seeds}" if side else "-" for side in (pilot, main)),
        ]
    )
    return rows


def method_runs(inputs: Mapping[str, DrawInputs]) -> dict[str, list[SeedRuns]]:
    """Every policy kind the draws evaluated (base, methods, data-scaling runs ``<method>_data
    <multiple>x``), draw by draw (also the study's score tables)."""
    draws = list(inputs.values())
    found: dict[str, list[SeedRuns]] = {}
    if all(d.base is not None for d in draws):
        found["base"] = [d.base for d in draws]  # type: ignore[misc]
    for method in draws[0].runs:
        found[method] = [d.runs[method] for d in draws]
    for method, multiple in draws[0].scaled:
        found[f"{method}_data{multiple:g}x"] = [d.scaled[(method, multiple)] for d in draws]
    return found


def never_solved_table(
    inputs: Mapping[str, DrawInputs], groups: Mapping[str, Sequence[str]]
) -> str:
    """Per method and group: the share of problems with 0 of n samples correct, each draw's
    mean over its seeds, then the mean over draws (the draws' range beside it)."""
    rows = []
    for method, runs in method_runs(inputs).items():
        cells = []
        for members in groups.values():
            shares = [100 * zero_correct_share(r, members) for r in runs]
            spread = f" ({min(shares):.1f}-{max(shares):.1f})" if len(shares) > 1 else ""
            cells.append(f"{np.mean(shares):.1f}%{spread}")
        rows.append([method, *cells])
    return markdown_table(["method", *groups], rows)


def anchoring_rows(
    records: Mapping[str, Path], seeds: Mapping[str, Sequence[int]]
) -> list[list[str]]:
    """Each TA-type run's anchoring diagnostic (its training summary's step means); a run whose
    summary lacks a key says so."""
    from tagrpo.plumbing.layout import policy_name

    rows = []
    for label, record in records.items():
        for method in TA_TYPE:
            for seed in seeds.get(method, ()):
                policy = policy_name(method, seed)
                path = record / f"metrics/train/{policy}.json"
                summary = json.loads(path.read_text()) if path.is_file() else {}
                rows.append(
                    [
                        label,
                        policy,
                        *(
                            f"{summary[key]:.3f}" if key in summary else "not recorded"
                            for key, _ in ANCHORING
                        ),
                    ]
                )
    return rows


def main_sections(
    records: Mapping[str, Path],
    inputs: Mapping[str, DrawInputs],
    seeds: Mapping[str, Sequence[int]],
    registration: Mapping[str, Any],
    measured_half_width: float | None,
    pilot_records: Sequence[Path] = (),
    figure: Path | None = None,
) -> str:
    """The sections, in markdown; with ``figure``, the primary endpoint's contrasts drawn there
    and each draw's anchoring histories beside it (``anchoring-<draw>.png``), linked by their
    names (the figures sit beside the report)."""
    from tagrpo.plumbing.layout import policy_name
    from tagrpo.report.claims import load_policy_runs

    endpoint = registration["primary_endpoint"]
    group, k = str(endpoint["group"]), int(endpoint["k"])
    groups = {str(name): list(members) for name, members in registration["groups"].items()}
    members = groups[group]
    draws = list(inputs.values())
    both = all("ta_grpo" in d.runs and "grpo" in d.runs for d in draws)
    main = (
        size_inputs([d.runs["ta_grpo"] for d in draws], [d.runs["grpo"] for d in draws], members, k)
        if both and len(draws) >= 2
        else None
    )
    pilot = None
    finished = [r for r in pilot_records if (r / "DRAW.json").exists()]
    if len(finished) >= 2:
        pilot_seeds = registration["pilot"]["runs"]
        ks = sorted({1, k})
        pilot_runs = {
            m: [
                load_policy_runs(r, [policy_name(m, s) for s in pilot_seeds[m]], ks)
                for r in finished
            ]
            for m in ("ta_grpo", "grpo")
        }
        pilot = size_inputs(pilot_runs["ta_grpo"], pilot_runs["grpo"], members, k)
    size = registration.get("size") or {}
    lines = [
        f"## Variance components of the primary endpoint (pass@{k}, {group})",
        "",
        "The size rule's components (`tagrpo.report.study_size`, points squared): the pilot's "
        f"({PILOT_LABEL}), from which the main study was sized, beside the main study's own.",
        "",
        markdown_table(["component", "pilot", "main study"], variance_rows(pilot, main)),
        "",
    ]
    if pilot is not None and size:
        design = (int(size["draws"]), int(size["seeds_per_draw"]))
        projected = projected_half_width(pilot, *design)
        measured = (
            f"+/-{100 * measured_half_width:.2f} points"
            if measured_half_width is not None
            else "not measured"
        )
        lines += [
            f"The registered design ({design[0]} draws x {design[1]} seeds) was projected from "
            f"the pilot at +/-{100 * projected:.2f} points of 95% half-width; the main study "
            f"measured {measured} (V5 over the draws).",
            "",
        ]
    lines += [
        "## Problems never solved (0 of n samples correct)",
        "",
        "Per method and group: the share of problems no sample of a seed solved, each draw's "
        "mean over its seeds, then the mean over draws (the draws' range in brackets).",
        "",
        never_solved_table(inputs, groups),
        "",
        "## The anchoring diagnostic of every TA-type run (step means over training)",
        "",
        "Per neighbour-response token, log pi_old(o_t | q0) - log pi_old(o_t | q^n) "
        "(`tagrpo.algorithms.anchoring`): its mean and 1st and 99th percentiles, and Kish's "
        "effective sample size of the responses' implied weights over their number (1: "
        "uniform). Eq. 4 putting the gradient on tokens improbable under q0 shows as a "
        "negative mean, a long lower tail and a low ESS/n.",
        "",
        markdown_table(
            ["draw", "policy", *(name for _, name in ANCHORING)], anchoring_rows(records, seeds)
        ),
        "",
    ]
    if figure is not None:
        from tagrpo.report.anchoring import anchoring_figure, load_anchoring_histories

        policies = [policy_name(m, s) for m in TA_TYPE for s in seeds.get(m, ())]
        for label, record in records.items():
            path = figure.with_name(f"anchoring-{label}.png")
            anchoring_figure(load_anchoring_histories(record, policies), path)
            lines += [f"![{label}: the log-ratio under q0 over training]({path.name})", ""]
    if figure is not None and both:
        runs = {
            m: [d.runs[m] for d in draws]
            for m in ("ta_grpo", "grpo", "ta_grpo_unanchored")
            if all(m in d.runs for d in draws)
        }
        contrast_figure(
            runs,
            list(inputs),
            members,
            k,
            float(registration["study"]["no_effect_margin"]),
            figure,
            f"The main study's primary endpoint (pass@{k}, {group}), unadjusted 95% intervals",
        )
        lines += [f"![The main study's contrasts at pass@{k} on {group}]({figure.name})", ""]
    low, high = (100 * float(x) for x in registration["study"]["analysis"]["aa_coverage_band"])
    lines += [
        "## A/A coverage of the registered design",
        "",
        "Simulated studies whose two arms have one distribution (`tagrpo.report.study_aa`, "
        f"{SIMULATIONS} each, pass@{k} on a benchmark of the registered size): the share whose "
        f"95% interval covers 0 must lie in [{low:g}, {high:g}]% (too narrow and too wide both "
        "fail).",
        "",
        markdown_table(
            ["case", "draws", "seeds per draw", "coverage", "verdict"],
            [
                [r["case"], r["draws"], r["seeds"], f"{100 * r['coverage']:.1f}%", r["verdict"]]
                for r in coverage_rows(registration)
            ],
        ),
        "",
        f"The pilot's own contrasts ({PILOT_LABEL}) are in `reports/study/pilot.md`.",
    ]
    return "\n".join(lines)
