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


def row_decides(criterion: str, deciding: Sequence[str]) -> bool:
    """Whether an acceptance row is one of ``deciding`` (study-v3.yaml ``pilot.deciding_rows``):
    a name matches a row of that name, a row ``name: ...`` (one per benchmark) or the harder
    group's band ``harder: name``."""
    head = criterion.split(":")[0].split(" (")[0]
    tail = criterion.split(":", 1)[1].strip() if ":" in criterion else ""
    return head in deciding or (head == "harder" and tail in deciding)


def contrast_figure(
    runs: Mapping[str, Sequence[SeedRuns]],
    labels: Sequence[str],
    members: Sequence[str],
    k: int,
    margin: float,
    path: Path,
    title: str,
) -> None:
    """One panel per registered contrast at pass@``k`` on ``members``: each draw's difference
    (within the draw, conditional on it) and, with several draws, the pilot's paired by draw,
    with 95% intervals; 0 and the no-effect band (+/- ``margin``) drawn behind."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    from tagrpo.report.style import fill_legend, panels_with_legend, save

    contrasts = [(a, b) for a, b in CONTRASTS if a in runs and b in runs]
    figure, panels, legend_axis = panels_with_legend(
        len(contrasts), len(contrasts), (3.6, 3.2), legend_width=2.8
    )
    extent = [-100 * margin, 100 * margin]
    paired = "all draws, paired"
    for panel, (first, second) in zip(panels, contrasts, strict=True):
        rows = [
            (label, [a], [b]) for label, a, b in zip(labels, runs[first], runs[second], strict=True)
        ]
        if len(labels) > 1:
            rows.append((paired, list(runs[first]), list(runs[second])))
        for position, (label, a, b) in enumerate(rows):
            estimate = next(e for e in draw_paired_difference(a, b, members) if e.k == k)
            value, low, high = (100 * x for x in (estimate.value, estimate.low, estimate.high))
            extent += [low, high]
            colour, marker = ("#000000", "D") if label == paired else ("#555555", "o")
            panel.errorbar(
                value, position, xerr=[[value - low], [high - value]], fmt=marker,
                color=colour, capsize=3,
            )  # fmt: skip
        panel.axvspan(-100 * margin, 100 * margin, color="#dddddd", zorder=0, lw=0)
        panel.axvline(0.0, color="#888888", lw=1.0, zorder=1)
        panel.set_yticks(range(len(rows)), [label for label, _, _ in rows])
        panel.set_ylim(len(rows) - 0.5, -0.5)
        panel.set_title(f"{first} - {second}", fontsize=9)
        panel.set_xlabel(f"pass@{k} difference, points (95% CI)", fontsize=9)
    pad = 0.05 * (max(extent) - min(extent))
    for panel in panels:  # one scale, so the panels compare at a glance
        panel.set_xlim(min(extent) - pad, max(extent) + pad)
    entries = [
        (Line2D([], [], color="#555555", marker="o", ls=""), "one draw"),
        (Line2D([], [], color="#000000", marker="D", ls=""), paired),
        (Patch(color="#dddddd"), f"no effect of the\npaper's size\n(+/- {100 * margin:g} points)"),
    ]
    fill_legend(legend_axis, entries)
    figure.suptitle(title, fontsize=10)
    figure.tight_layout()
    save(figure, path)


def pilot_markdown(
    records: Sequence[Path],
    registration: Mapping[str, Any],
    command: str,
    figure: Path | None = None,
    parallel: Path | None = None,
) -> str:
    """The pilot's report from the records present (a draw not finished yet is named); with
    ``figure``, the primary endpoint's contrasts drawn there (and linked, relative to the
    report's folder, which the figure shares); with ``parallel`` (benchmarks/study_parallel.py's
    JSON), the measured speed-up of two draws side by side."""
    from tagrpo.plumbing.layout import policy_name
    from tagrpo.report.claims import load_policy_runs
    from tagrpo.report.draw_checkouts import (
        KEYS_OLDER_CODE_LACKED,
        checkout_config,
        recomputed_rows,
    )

    finished = [r for r in records if (r / "DRAW.json").exists()]
    waiting = [str(r) for r in records if r not in finished]
    deciding = [str(name) for name in registration["pilot"]["deciding_rows"]]
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
    if parallel is not None and parallel.is_file():
        measured = json.loads(parallel.read_text())
        lines += [
            "",
            f"Two draws side by side against one after the other "
            f"(`benchmarks/study_parallel.py`, `{parallel}`; {measured['steps_per_draw']} "
            f"{measured['method']} steps a draw): {measured['serial_s']} s one after the other, "
            f"{measured['side_by_side_s']} s side by side, **{measured['speedup']}x**, on "
            f"{measured['device']} at {measured['commit'][:12]}, {measured['measured']}, load "
            f"average {measured['load_average_before'][0]} before it (the pilot ran beside it). "
            "Reported, not in the size rule (amendment 1).",
        ]
    if not finished:
        return "\n".join(lines)
    loaded = {r: checkout_config(r) for r in finished}
    configs = {r: config for r, (config, _) in loaded.items()}
    filled = sorted({key for _, keys in loaded.values() for key in keys})
    if filled:
        lines += [
            "",
            "The records' code lacked keys this code's params have; read with "
            + "; ".join(
                f"`{key}` = {KEYS_OLDER_CODE_LACKED[key][0]!r} ({KEYS_OLDER_CODE_LACKED[key][1]})"
                if key in KEYS_OLDER_CODE_LACKED
                else f"`{key}` from this checkout's params.yaml (how runs execute or are read)"
                for key in filled
            )
            + ".",
        ]
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
        f"The rows of study-v3.yaml's `pilot.deciding_rows` ({', '.join(deciding)}: the base's) "
        "decide whether a draw is accepted; the others (V1, V4, V5 under world v3's bands: 2 "
        "GRPO seeds, no negative control, 2 seeds a method in the pilot) are shown, not "
        "deciding.",
        "",
    ]
    for record in finished:
        rows = recomputed_rows(record).astype(str)
        rows.insert(0, "decides", [
            "yes" if row_decides(criterion, deciding) else "no" for criterion in rows["criterion"]
        ])  # fmt: skip
        verdicts = rows.loc[rows["decides"] == "yes", "verdict"]
        accepted = bool(len(verdicts)) and bool((verdicts == "PASS").all())
        draw = json.loads((record / "DRAW.json").read_text())
        lines += [
            f"### {record.name} (SFT seed {configs[record].base_model.warmstart.seed}; "
            f"{draw['device']}): **{'accepted' if accepted else 'NOT accepted'}**",
            "",
            markdown_table(list(rows.columns), rows.values.tolist()),
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
    ]
    if figure is not None:
        contrast_figure(
            runs,
            [record.name for record in finished],
            groups[group],
            k,
            float(registration["study"]["no_effect_margin"]),
            figure,
            f"The pilot's primary endpoint (pass@{k}, {group}): {PILOT_LABEL}",
        )
        lines += [f"![The pilot's contrasts at pass@{k} on {group}]({figure.name})", ""]
    lines += [
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
