"""The report's paper sections (the paper's tables and figures at this run's scale) and
the chance section of multiple-choice benchmarks.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

import pandas as pd

from tagrpo.config.params import Params
from tagrpo.metrics.compare import chance_pass_at_k
from tagrpo.plumbing.layout import BASE_POLICY, policy_name, report_outputs
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report import paper
from tagrpo.report.chance import (
    CHANCE_CEILING,
    MIN_MARGIN,
    chance_floor,
    multiple_choice_options,
    uninformative_from,
)
from tagrpo.report.claims import load_policy_runs, load_seed_runs
from tagrpo.report.training import load_training_summaries, updates_by_method, updates_of


def paper_sections(config: Params, root: Path, out: dict[str, Path]) -> str:
    """The paper's Table 1 and Figures 5-8 (:mod:`tagrpo.report.paper`), beside its numbers
    when the base model is one of the paper's."""
    from tagrpo.plumbing.layout import BASE_POLICY

    ks = config.evaluate.ks
    k = ks[-1]
    runs = {"base": load_policy_runs(root, [BASE_POLICY], ks)}
    methods = config.runs.all_methods()
    runs.update(load_seed_runs(root, {m: config.runs.seeds_of(m) for m in methods}, ks))
    benchmarks = sorted(config.benchmark_names())
    groups = dict(config.evaluate.groups)
    columns = {b: [b] for b in benchmarks} | groups | {"average": benchmarks}
    options = multiple_choice_options(config)
    frame = paper.scores(runs, columns)
    frame["chance"] = [
        100 * f if (f := chance_floor(c, int(k), options, columns)) is not None else float("nan")
        for c, k in zip(frame["column"], frame["k"], strict=True)
    ]
    frame.to_csv(out["paper_scores"], index=False)
    floors_at_k = {c: paper_floor(c, k, options, columns) for c in columns}
    hub_id = config.base_model.hub.hub_id if config.base_model.kind == "hub" else None
    model = paper.paper_model(hub_id)
    ordered = [b for members in groups.values() for b in members]
    ordered += [b for b in benchmarks if b not in ordered]
    table_columns = []
    for name, members in groups.items():
        table_columns += [*members, name]
    table_columns += [b for b in benchmarks if b not in table_columns]
    table, wide = paper.table1(frame, table_columns, k, model, floors_at_k)
    wide.to_csv(out["table1"], index=False)
    figures = out["figures"]
    figures.mkdir(parents=True, exist_ok=True)
    paper.curves_figure(
        frame[frame["column"].isin(ordered)], ordered, figures / "figure5_passk.png", options
    )
    paper.curves_grid_figure(
        frame[frame["column"].isin(ordered)], ordered, figures / "passk_intervals.png", options
    )
    averages = [*groups, "average"]
    paper.bars_figure(
        frame, paper.MATCHED, [*ordered, *averages], k, "Matched budget (paper Figure 6)",
        figures / "figure6_matched_budget.png", floors_at_k,
    )  # fmt: skip
    paper.bars_figure(
        frame, paper.ABLATION, averages, k, "Ablation (paper Figure 8)",
        figures / "figure8_ablation.png", floors_at_k,
    )  # fmt: skip
    scaling = config.runs.data_scaling
    scaled = {
        (method, multiple): load_policy_runs(
            root, [policy_name(method, s, multiple) for s in scaling.seeds], ks
        )
        for method in scaling.methods
        for multiple in scaling.multiples
    }
    scaling_frame = paper.scaling_frame(
        {m: r for m, r in runs.items() if m in (*scaling.methods, "ta_grpo")},
        scaled,
        benchmarks,
        k,
    )
    scaling_frame.to_csv(out["data_scaling"], index=False)
    if scaling.multiples:  # the report shows Figure 7 only then (no one-point "curve")
        paper.scaling_figure(
            scaling_frame, scaling.methods, k, figures / "figure7_data_scaling.png",
            floors_at_k["average"],
        )  # fmt: skip
    link = out_link(out)
    updates = updates_by_method(load_training_summaries(root, config.runs.policies()))
    updates_line = "Optimiser updates per method: " + ", ".join(
        f"{method} {updates_of(updates, method)}" for method in methods
    )
    beside = (
        f"The run's base model is {model}: the paper's Table 1 rows follow ours, with the "
        "difference."
        if model
        else "The base model is not one of the paper's four, so no published row sits beside ours."
    )
    lines = [
        f"## The paper's figures and tables (pass@{k} unless stated; percent, 95% intervals)",
        "",
        f"Table 1: pass@{k} per benchmark and the group averages. {beside}",
        "",
        table,
        "",
        updates_line + ".",
        "",
        "Figure 5: pass@k curves per benchmark, every method (the mean over its seeds; shaded: "
        "the 95% intervals of the base policy and TA-GRPO, every method's in Table 1 and "
        "`reports/tables/paper_scores.csv`; dashed: the chance floor of a multiple-choice "
        "benchmark).",
        "",
        f"![Figure 5]({link}/figure5_passk.png)",
        "",
        "Figure 6: the matched response budget ((N+1)xGRPO, with and without DS). "
        + updates_line
        + ".",
        "",
        f"![Figure 6]({link}/figure6_matched_budget.png)",
        "",
        (
            f"Figure 7: data scaling: {', '.join(scaling.methods)} on 1x to "
            f"{max(scaling.multiples):g}x training questions against TA-GRPO on 1x "
            "(average over all benchmarks)."
            if scaling.multiples
            else "Figure 7: data scaling: **not run in this profile** "
            "(`runs.data_scaling.multiples` is empty; `profiles/data-scaling.yaml` runs "
            "them): the 1x scores only, no figure."
        ),
        "",
        markdown_table(
            ["method", "data", f"average pass@{k} [95% CI]"],
            [
                [r.method, f"{r.data_multiple:g}x", f"{r.value:.1f} [{r.low:.1f}, {r.high:.1f}]"]
                for r in scaling_frame.itertuples()
            ]
            + (
                [["chance (uniform guess)", "", f"{floors_at_k['average']:.1f}"]]
                if floors_at_k["average"] is not None
                else []
            ),
        ),
        *(["", f"![Figure 7]({link}/figure7_data_scaling.png)"] if scaling.multiples else []),
        "",
        "Figure 8: the ablation: GRPO, TA-GRPO* (rephrasings, per-rephrasing groups and "
        "ratios), unanchored TA-GRPO (joint groups, own-prompt ratios), TA-GRPO. "
        + updates_line
        + ".",
        "",
        f"![Figure 8]({link}/figure8_ablation.png)",
    ]
    quoted = paper.quoted_numbers(model)
    if quoted:
        lines += ["", f"The paper's other figures for {model}:", "", quoted]
    return "\n".join(lines)


def paper_floor(
    column: str, k: int, options: Mapping[str, int], columns: Mapping[str, Sequence[str]]
) -> float | None:
    """A column's chance pass@k in percent (None: free-form)."""
    floor = chance_floor(column, k, options, columns)
    return None if floor is None else 100 * floor


def chance_section(
    passk: pd.DataFrame, options: Mapping[str, int], groups: Mapping[str, Sequence[str]]
) -> str:
    """The chance floors of the multiple-choice benchmarks beside the base policy, and the k
    from which each stops being informative (:func:`tagrpo.report.chance.uninformative_from`)."""
    lines = ["## Chance floors of the multiple-choice benchmarks", ""]
    if not options:
        lines.append("Every benchmark of this profile is free-form: guessing scores nothing.")
        return "\n".join(lines)
    ks = sorted(int(k) for k in passk["k"].unique())
    base = passk[passk["policy"] == BASE_POLICY]
    rows, verdicts = [], []
    for name, count in options.items():
        by_k = {int(r.k): float(r.pass_at_k) for r in base[base["name"] == name].itertuples()}
        if not by_k:
            raise KeyError(f"{name}: the base policy has no pass@k for this benchmark")
        chance = [chance_pass_at_k(count, k) for k in ks]
        rows.append([f"{name}: chance ({count} options)", *[f"{100 * c:.1f}" for c in chance]])
        rows.append([f"{name}: base policy", *[f"{100 * by_k[k]:.1f}" for k in ks]])
        margins = [by_k[k] - c for k, c in zip(ks, chance, strict=True)]
        rows.append([f"{name}: base minus chance", *[f"{100 * m:+.1f}" for m in margins]])
        k, why = uninformative_from(count, ks, by_k)
        verdict = (
            f"informative up to pass@{ks[-1]} ({why})"
            if k is None
            else f"stops being informative at pass@{k}: {why}"
        )
        verdicts.append(f"- **{name}** ({count} options): {verdict}.")
    holding = [g for g, members in groups.items() if any(m in options for m in members)]
    lines += [
        "pass@k of a uniform guesser among a question's options is "
        "1 - (1 - 1/options)^k; every pass@k table of this report shows it beside the "
        "multiple-choice rows (a *chance* row or column), and the figures draw it dashed. A "
        "group average holding a multiple-choice benchmark has the mean of its benchmarks' "
        "floors (a free-form answer "
        f"counts 0){': ' + ', '.join(holding) if holding else ''}.",
        "",
        markdown_table(["percent", *[f"pass@{k}" for k in ks]], rows),
        "",
        f"A multiple-choice benchmark stops being informative at the smallest k where guessing "
        f"reaches {100 * CHANCE_CEILING:.0f}% pass@k, or where the base policy is less than "
        f"{100 * MIN_MARGIN:.0f} points above guessing (its score then measures the guess, not "
        "the model):",
        "",
        *verdicts,
    ]
    return "\n".join(lines)


def out_link(out: dict[str, Path]) -> str:
    """The figures folder as linked from the report."""

    layout = report_outputs()
    return Path(os.path.relpath(layout["figures"], layout["report"].parent)).as_posix()
