"""The study's internal pilot, reported (``python -m tagrpo.report.study --pilot``;
``preregistration/study-v3.md``, "An internal pilot, declared as one"): from the pilot's
committed draw records, each draw's acceptance rows (the base's deciding; V1 and V4 shown, not
deciding), the pilot's own contrasts at the primary endpoint paired by draw (labelled: not part
of the main estimate), the per-problem outcomes and the anchoring diagnostic of every TA-type
run. Written as ``reports/study/pilot.md``; the size rule reads the same records.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tagrpo.metrics.compare import SeedRuns
from tagrpo.metrics.draws import draw_paired_difference
from tagrpo.plumbing.markdown import markdown_table

PILOT_LABEL = "pilot (internal): not part of the estimate"
# The pilot's contrasts: (first, second), each paired by draw.
CONTRASTS = (
    ("ta_grpo", "grpo"),
    ("ta_grpo_unanchored", "grpo"),
    ("ta_grpo", "ta_grpo_unanchored"),
)
ANCHORING = (
    ("anchoring/log_ratio_mean_mean", "log-ratio mean"),
    ("anchoring/log_ratio_p1_mean", "p1"),
    ("anchoring/log_ratio_p99_mean", "p99"),
    ("anchoring/ess_fraction_mean", "ESS/n"),
)


def _interval(estimate: Any) -> str:
    return f"{100 * estimate.value:+.2f} [{100 * estimate.low:+.2f}, {100 * estimate.high:+.2f}]"


def contrast_rows(
    runs: Mapping[str, Sequence[SeedRuns]], groups: Mapping[str, Sequence[str]], ks: Sequence[int]
) -> list[list[str]]:
    """Every registered pilot contrast on every group at each of ``ks``, paired by draw (one
    draw: within it, conditional on that draw)."""
    rows = []
    for first, second in CONTRASTS:
        if first not in runs or second not in runs:
            continue
        for group, members in groups.items():
            estimates = {e.k: e for e in draw_paired_difference(runs[first], runs[second], members)}
            for k in ks:
                estimate = estimates[k]
                rows.append(
                    [
                        f"{first} - {second}",
                        group,
                        f"pass@{k}",
                        _interval(estimate),
                        f"{estimate.df:.1f}",
                    ]
                )
    return rows


def zero_correct_share(runs: SeedRuns, members: Sequence[str]) -> float:
    """The share of ``members``' problems a policy never solved (pass@1 = 0 on every seed:
    0 of n samples correct), the mean over its seeds."""
    index = runs.ks.index(1)
    keep = np.isin(runs.problems.get_level_values(0), list(members))
    return float((runs.values[:, keep, index] == 0.0).mean())


def pilot_markdown(records: Sequence[Path], registration: Mapping[str, Any], command: str) -> str:
    """The pilot's report from the records present (a draw not finished yet is named)."""
    from tagrpo.config.params import load_config
    from tagrpo.plumbing.layout import policy_name
    from tagrpo.report.claims import load_policy_runs
    from tagrpo.report.draw_checkouts import recomputed_rows

    finished = [r for r in records if (r / "DRAW.json").exists()]
    waiting = [str(r) for r in records if r not in finished]
    endpoint = registration["primary_endpoint"]
    group, k = str(endpoint["group"]), int(endpoint["k"])
    groups = dict(registration["groups"])
    seeds = registration["pilot"]["runs"]
    lines = [
        "# The study's pilot (internal)",
        "",
        f"Made by `{command}` from the pilot's records under `preregistration/study-v3.yaml`. "
        f"**{PILOT_LABEL}**: the pilot sizes the main study (its size rule); its draws are not "
        "part of the main estimate.",
        "",
        f"Draws recorded: {len(finished)} of {len(records)}"
        + (f" (still running or not started: {', '.join(waiting)})" if waiting else "")
        + ".",
    ]
    if not finished:
        return "\n".join(lines)
    configs = {r: load_config(r / "params.yaml") for r in finished}
    ks = next(iter(configs.values())).evaluate.ks
    runs = {
        method: [
            load_policy_runs(r, [policy_name(method, s) for s in method_seeds], ks)
            for r in finished
        ]
        for method, method_seeds in seeds.items()
    }
    lines += [
        "",
        "## Acceptance rows per draw",
        "",
        "The base's rows decide (edges, competition, regime, V2, V3); V1 and V4 are shown, "
        "not deciding (2 GRPO seeds, no negative control in the pilot).",
        "",
    ]
    for record in finished:
        rows = recomputed_rows(record)
        draw = json.loads((record / "DRAW.json").read_text())
        lines += [
            f"### {record.name} (SFT seed {configs[record].base_model.warmstart.seed}; "
            f"{draw['device']})",
            "",
            markdown_table(list(rows.columns), rows.astype(str).values.tolist()),
            "",
        ]
    lines += [
        f"## The pilot's contrasts ({PILOT_LABEL})",
        "",
        f"Paired by draw over {len(finished)} draw(s), points (95% interval; effective df). "
        f"The primary endpoint is pass@{k} on `{group}`.",
        "",
        markdown_table(
            ["contrast", "group", "measure", "estimate", "df"],
            contrast_rows(runs, groups, sorted({1, k})),
        ),
        "",
        f"## Problems never solved (pass@1 = 0 of {configs[finished[0]].evaluate.n} samples)",
        "",
        markdown_table(
            ["method", *groups],
            [
                [
                    m,
                    *(
                        f"{100 * np.mean([zero_correct_share(r, members) for r in runs[m]]):.1f}%"
                        for members in groups.values()
                    ),
                ]
                for m in runs
            ],
        ),
        "",
        "## The anchoring diagnostic (step means over training)",
        "",
    ]
    rows = []
    for record in finished:
        for method in ("ta_grpo", "ta_grpo_unanchored"):
            for seed in seeds.get(method, []):
                policy = policy_name(method, seed)
                summary = json.loads((record / f"metrics/train/{policy}.json").read_text())
                rows.append(
                    [
                        record.name,
                        policy,
                        *(
                            f"{summary[key]:.3f}" if key in summary else "not recorded"
                            for key, _ in ANCHORING
                        ),
                    ]
                )
    lines.append(markdown_table(["draw", "policy", *(name for _, name in ANCHORING)], rows))
    return "\n".join(lines)
