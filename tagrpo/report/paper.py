"""The paper's figures and tables from this run's outputs: Figure 5 (pass@k curves per
benchmark), Table 1 (pass@32 with the competition and out-of-distribution averages), Figure 6
(the matched budget), Figure 7 (data scaling) and Figure 8 (the ablation), each with the
intervals of :mod:`tagrpo.metrics.compare`; beside the paper's published numbers
(``data/paper_numbers.yaml``) when the run's base model is one of the paper's."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from tagrpo.metrics.compare import SeedRuns, chance_pass_at_k, score_with_interval
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.palette import method_colour
from tagrpo.report.style import (
    CHANCE_LABEL,
    CHANCE_SHADED_LABEL,
    chance_line,
    fill_legend,
    k_axis,
    not_run_figure,
    panels_with_legend,
    pyplot,
    save,
)

NUMBERS = Path(__file__).with_name("data") / "paper_numbers.yaml"
ABLATION = ("grpo", "ta_grpo_star", "ta_grpo_unanchored", "ta_grpo")
MATCHED = ("grpo", "grpo_ds", "grpo_x4", "grpo_x4_ds", "ta_grpo")
SCALING_NOT_RUN = (
    "Data scaling was not run in this profile: runs.data_scaling.multiples is empty\n"
    "(profiles/data-scaling.yaml runs it); the 1x scores are in the table above."
)


@cache
def paper_numbers() -> dict[str, Any]:
    return yaml.safe_load(NUMBERS.read_text())


def paper_model(hub_id: str | None) -> str | None:
    """The paper's name of the run's base model (None: not one of the paper's four)."""
    return paper_numbers()["models"].get(hub_id or "")


def scores(runs: Mapping[str, SeedRuns], columns: Mapping[str, Sequence[str]]) -> pd.DataFrame:
    """Long form: method, column (a benchmark or a group), k, value and interval (percent)."""
    rows = []
    for method, method_runs in runs.items():
        for column, members in columns.items():
            for estimate in score_with_interval(method_runs, members):
                rows.append(
                    {
                        "method": method,
                        "column": column,
                        "k": estimate.k,
                        "value": 100 * estimate.value,
                        "low": 100 * estimate.low,
                        "high": 100 * estimate.high,
                    }
                )
    return pd.DataFrame(rows)


def table1(
    frame: pd.DataFrame,
    columns: Sequence[str],
    k: int,
    paper: str | None,
    floors: Mapping[str, float | None],
) -> tuple[str, pd.DataFrame]:
    """Table 1 at ``k`` (markdown with intervals, and the plain CSV frame); with the paper's
    row and our minus the paper's for the methods it reports, when ``paper`` names a model;
    a last row with each column's chance pass@k (``floors``, percent; None: free-form)."""
    at_k = frame[frame["k"] == k]
    wide = at_k.pivot(index="method", columns="column", values="value")[list(columns)]
    cells = at_k.set_index(["method", "column"])
    rows = []
    published = paper_numbers()["table1"] if paper else None
    for method in wide.index:
        row = [method] + [
            f"{cells.loc[(method, c), 'value']:.1f} [{cells.loc[(method, c), 'low']:.1f}, "
            f"{cells.loc[(method, c), 'high']:.1f}]"
            for c in columns
        ]
        rows.append(row)
        reported = (published["rows"].get(paper) or {}).get(method) if published else None
        if reported is not None:
            by_name = dict(zip(published["benchmarks"], reported, strict=True))
            paper_row = [f"{method} (paper, {paper})"]
            diff_row = [f"{method}: ours - paper"]
            for c in columns:
                value = by_name.get(c)
                paper_row.append("" if value is None else f"{value:.2f}")
                ours = cells.loc[(method, c), "value"]
                diff_row.append("" if value is None else f"{ours - value:+.2f}")
            rows += [paper_row, diff_row]
    if any(floors.get(c) is not None for c in columns):
        rows.append(
            ["chance (uniform guess)"]
            + ["-" if floors.get(c) is None else f"{floors[c]:.1f}" for c in columns]
        )
    return markdown_table(["method", *columns], rows), wide.reset_index()


# Figure 5 shades the intervals of these two only: nine overlapping bands read as one blur;
# every method's interval is in Table 1 and reports/tables/paper_scores.csv.
SHADED = ("base", "ta_grpo")


def curves_figure(
    frame: pd.DataFrame, benchmarks: Sequence[str], path: Path, options: Mapping[str, int]
) -> None:
    """Figure 5: pass@k against k per benchmark, one colour per method (the mean over its
    seeds), the base policy's and TA-GRPO's 95% intervals shaded, and a multiple-choice
    benchmark's chance floor (``options``: its answers) dashed."""
    ks = sorted(int(k) for k in frame["k"].unique())
    figure, panels, legend_axis = panels_with_legend(len(benchmarks), columns=2)
    entries: dict[str, Any] = {}
    for axis, benchmark in zip(panels, benchmarks, strict=True):
        part = frame[frame["column"] == benchmark]
        for method, line in part.groupby("method", sort=False):
            line = line.sort_values("k")
            colour = method_colour(method)
            shaded = method in SHADED
            (handle,) = axis.plot(
                line["k"], line["value"], marker="o", ms=3, color=colour,
                lw=2.0 if shaded else 1.3, zorder=3 if shaded else 2,
            )  # fmt: skip
            entries.setdefault(method, handle)
            if shaded:
                axis.fill_between(line["k"], line["low"], line["high"], color=colour, alpha=0.12)
        title = benchmark
        if benchmark in options:
            floors = [100 * chance_pass_at_k(options[benchmark], k) for k in ks]
            entries[CHANCE_SHADED_LABEL] = chance_line(axis, ks, floors, shade=True)
            title = f"{benchmark} ({options[benchmark]} options)"
        k_axis(axis, ks)
        axis.set_title(title)
        axis.set_ylabel("pass@k (%)")
        axis.grid(alpha=0.3)
    fill_legend(legend_axis, [(h, label) for label, h in entries.items()], title="method")
    shaded_names = " and ".join(SHADED)
    figure.suptitle(
        f"pass@k per benchmark (mean over seeds; shaded: 95% intervals of {shaded_names})",
        fontsize=10,
    )
    figure.tight_layout()
    save(figure, path)


def bars_figure(
    frame: pd.DataFrame,
    methods: Sequence[str],
    columns: Sequence[str],
    k: int,
    title: str,
    path: Path,
    floors: Mapping[str, float] | None = None,
) -> None:
    """Figures 6 and 8: pass@k bars per column (benchmark or average), one colour per method,
    95% intervals as error bars, a column's chance floor (``floors``, percent) dashed across
    its bars; a figure saying so when none of ``methods`` was run in this profile."""
    at_k = frame[(frame["k"] == k) & frame["method"].isin(methods)]
    present = [m for m in methods if m in set(at_k["method"])]
    missing = [m for m in methods if m not in present]
    if not present:
        not_run_figure(path, title, f"Not run in this profile: {', '.join(methods)}.")
        return
    plt = pyplot()
    bars_width = max(6.0, 1.3 * len(columns) * len(present) / 3)
    figure, (axis, legend_axis) = plt.subplots(
        1, 2, figsize=(bars_width + 2.2, 3.8), gridspec_kw={"width_ratios": [bars_width, 2.2]}
    )
    legend_axis.axis("off")
    width = 0.8 / len(present)
    entries = []
    for index, method in enumerate(present):
        part = at_k[at_k["method"] == method].set_index("column").reindex(columns)
        positions = [i + (index - (len(present) - 1) / 2) * width for i in range(len(columns))]
        bars = axis.bar(
            positions,
            part["value"],
            width,
            yerr=[part["value"] - part["low"], part["high"] - part["value"]],
            capsize=2,
            color=method_colour(method),
        )
        entries.append((bars, method))
    chance = None
    for i, column in enumerate(columns):
        floor = (floors or {}).get(column)
        if floor is not None:
            chance = chance_line(axis, [i - 0.45, i + 0.45], [floor, floor])
    if chance is not None:
        entries.append((chance, CHANCE_LABEL))
    axis.set_xticks(range(len(columns)), columns, rotation=15)
    axis.set_ylabel(f"pass@{k} (%)")
    axis.set_title(
        title + (f"\n(not run in this profile: {', '.join(missing)})" if missing else "")
    )
    axis.grid(axis="y", alpha=0.3)
    fill_legend(legend_axis, entries, title="method")
    figure.tight_layout()
    save(figure, path)


def scaling_frame(
    runs_1x: Mapping[str, SeedRuns],
    scaled: Mapping[tuple[str, float], SeedRuns],
    benchmarks: Sequence[str],
    k: int,
) -> pd.DataFrame:
    """Figure 7's data: average pass@k over all benchmarks per (method, data multiple)."""
    rows = []
    points = {(m, 1.0): r for m, r in runs_1x.items()} | dict(scaled)
    for (method, multiple), method_runs in points.items():
        estimate = next(e for e in score_with_interval(method_runs, benchmarks) if e.k == k)
        rows.append(
            {
                "method": method,
                "data_multiple": multiple,
                "value": 100 * estimate.value,
                "low": 100 * estimate.low,
                "high": 100 * estimate.high,
            }
        )
    # Columns named: a run with no data-scaling method and no TA-GRPO has no row (was: a KeyError
    # from sort_values, the report stage failed).
    frame = pd.DataFrame(rows, columns=["method", "data_multiple", "value", "low", "high"])
    return frame.sort_values(["method", "data_multiple"], kind="stable")


def scaling_figure(
    frame: pd.DataFrame, baselines: Sequence[str], k: int, path: Path, floor: float | None = None
) -> None:
    """Figure 7: the baselines' average pass@k against the training-set multiple, TA-GRPO at
    1x as a horizontal band, the average's chance floor (``floor``, percent) dashed; a figure
    saying so when the profile ran no multiple but 1x (a single point is no scaling curve)."""
    title = "Data scaling (paper Figure 7)"
    if not (frame["data_multiple"] != 1.0).any():
        not_run_figure(path, title, SCALING_NOT_RUN)
        return
    plt = pyplot()
    figure, (axis, legend_axis) = plt.subplots(
        1, 2, figsize=(7.5, 3.8), gridspec_kw={"width_ratios": [5.3, 2.2]}
    )
    legend_axis.axis("off")
    entries = []
    for method in baselines:
        part = frame[frame["method"] == method]
        handle = axis.errorbar(
            part["data_multiple"],
            part["value"],
            yerr=[part["value"] - part["low"], part["high"] - part["value"]],
            marker="o",
            capsize=3,
            color=method_colour(method),
        )
        entries.append((handle, method))
    ta = frame[(frame["method"] == "ta_grpo") & (frame["data_multiple"] == 1.0)]
    if not ta.empty:
        row = ta.iloc[0]
        colour = method_colour("ta_grpo")
        entries.append((axis.axhline(row["value"], color=colour), "ta_grpo (1x data)"))
        axis.axhspan(row["low"], row["high"], color=colour, alpha=0.12)
    if floor is not None:
        multiples = [frame["data_multiple"].min(), frame["data_multiple"].max()]
        entries.append((chance_line(axis, multiples, [floor, floor]), CHANCE_LABEL))
    multiples = sorted(frame["data_multiple"].unique())
    axis.set_xticks(multiples, [f"{m:g}x" for m in multiples])
    axis.set_xlabel("training set (x the 1x set)")
    axis.set_ylabel(f"average pass@{k} (%)")
    axis.set_title(title)
    axis.grid(alpha=0.3)
    fill_legend(legend_axis, entries, title="method")
    figure.tight_layout()
    save(figure, path)


def quoted_numbers(paper: str | None) -> str:
    """The paper's quoted figures for its model (sections 5.2-5.5, Appendix C), as a table."""
    if not paper:
        return ""
    rows = [
        [item["section"], item["what"], item["value"]]
        for item in paper_numbers()["quoted"]
        if item["model"] == paper
    ]
    return markdown_table(["section", "the paper reports", "value"], rows)


def curves_grid_figure(
    frame: pd.DataFrame, benchmarks: Sequence[str], path: Path, options: Mapping[str, int]
) -> None:
    """pass@k curves with every method's 95% interval: one row per benchmark, one column per
    trained method, each panel that method (its colour) over the base policy (black), both
    shaded, so no band hides another; a multiple-choice benchmark's chance floor dashed."""
    methods = [m for m in pd.unique(frame["method"]) if m != "base"]
    if not methods:
        not_run_figure(path, "pass@k with intervals", "No trained method in this profile.")
        return
    ks = sorted(int(k) for k in frame["k"].unique())
    plt = pyplot()
    figure, axes = plt.subplots(
        len(benchmarks),
        len(methods),
        figsize=(1.9 * len(methods) + 0.6, 1.75 * len(benchmarks) + 0.6),
        sharex=True,
        sharey="row",
        squeeze=False,
    )
    for row, benchmark in enumerate(benchmarks):
        part = frame[frame["column"] == benchmark]
        base = part[part["method"] == "base"].sort_values("k")
        for column, method in enumerate(methods):
            axis = axes[row][column]
            line = part[part["method"] == method].sort_values("k")
            for curve, colour, alpha in (
                (base, method_colour("base"), 0.10),
                (line, method_colour(method), 0.25),
            ):
                axis.plot(curve["k"], curve["value"], color=colour, lw=1.2, marker="o", ms=2)
                axis.fill_between(
                    curve["k"], curve["low"], curve["high"], color=colour, alpha=alpha, lw=0
                )
            if benchmark in options:
                floors = [100 * chance_pass_at_k(options[benchmark], k) for k in ks]
                chance_line(axis, ks, floors)
            k_axis(axis, ks)
            axis.grid(alpha=0.3)
            axis.tick_params(labelsize=7)
            axis.set_xlabel("k" if row == len(benchmarks) - 1 else "", fontsize=8)
            if row == 0:
                axis.set_title(method, fontsize=8, color=method_colour(method))
            if column == 0:
                label = (
                    f"{benchmark}\n({options[benchmark]} options)"
                    if benchmark in options
                    else benchmark
                )
                axis.set_ylabel(f"{label}\npass@k (%)", fontsize=8)
    figure.suptitle(
        # Two lines: one line is cut at both ends when few methods make the figure narrow.
        "pass@k per benchmark (rows) and method (columns)\nthe method (colour) over the base "
        "policy (black), 95% intervals shaded; dashed: chance",
        fontsize=9,
    )
    figure.tight_layout()
    save(figure, path)
