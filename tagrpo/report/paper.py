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

from tagrpo.metrics.compare import SeedRuns, score_with_interval
from tagrpo.report.markdown import markdown_table

NUMBERS = Path(__file__).with_name("data") / "paper_numbers.yaml"
ABLATION = ("grpo", "ta_grpo_star", "ta_grpo_unanchored", "ta_grpo")
MATCHED = ("grpo", "grpo_ds", "grpo_x4", "grpo_x4_ds", "ta_grpo")
COLOURS = {
    "base": "#7f7f7f",
    "grpo": "#1f77b4",
    "grpo_ds": "#aec7e8",
    "grpo_x4": "#2ca02c",
    "grpo_x4_ds": "#98df8a",
    "ta_grpo_star": "#ff7f0e",
    "ta_grpo_unanchored": "#9467bd",
    "ta_grpo": "#d62728",
    "avspo": "#8c564b",
}


@cache
def paper_numbers() -> dict[str, Any]:
    return yaml.safe_load(NUMBERS.read_text())


def paper_model(hub_id: str | None) -> str | None:
    """The paper's name of the run's base model (None: not one of the paper's four)."""
    return paper_numbers()["models"].get(hub_id or "")


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def scores(
    runs: Mapping[str, SeedRuns], columns: Mapping[str, Sequence[str]], n_resamples: int
) -> pd.DataFrame:
    """Long form: method, column (a benchmark or a group), k, value and interval (percent)."""
    rows = []
    for method, method_runs in runs.items():
        for column, members in columns.items():
            for estimate in score_with_interval(method_runs, members, n_resamples):
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
    frame: pd.DataFrame, columns: Sequence[str], k: int, paper: str | None
) -> tuple[str, pd.DataFrame]:
    """Table 1 at ``k`` (markdown with intervals, and the plain CSV frame); with the paper's
    row and our minus the paper's for the methods it reports, when ``paper`` names a model."""
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
    return markdown_table(["method", *columns], rows), wide.reset_index()


def curves_figure(frame: pd.DataFrame, benchmarks: Sequence[str], path: Path) -> None:
    """Figure 5: pass@k against k per benchmark, one colour per method, intervals shaded."""
    plt = _plt()
    columns = min(3, len(benchmarks))
    rows = -(-len(benchmarks) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(4.2 * columns, 3.3 * rows), squeeze=False)
    for axis, benchmark in zip(axes.flat, benchmarks, strict=False):
        part = frame[frame["column"] == benchmark]
        for method, line in part.groupby("method", sort=False):
            colour = COLOURS.get(method)
            axis.plot(line["k"], line["value"], marker="o", ms=3, color=colour, label=method)
            axis.fill_between(line["k"], line["low"], line["high"], color=colour, alpha=0.15)
        axis.set_xscale("log", base=2)
        axis.set_title(benchmark)
        axis.set_xlabel("k")
        axis.set_ylabel("pass@k (%)")
        axis.grid(alpha=0.3)
    for axis in list(axes.flat)[len(benchmarks) :]:
        axis.axis("off")
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=min(5, len(labels)), fontsize=8)
    figure.tight_layout(rect=(0, 0.08, 1, 1))
    _save(figure, path)


def bars_figure(
    frame: pd.DataFrame,
    methods: Sequence[str],
    columns: Sequence[str],
    k: int,
    title: str,
    path: Path,
) -> None:
    """Figures 6 and 8: pass@k bars per column (benchmark or average), one colour per method,
    95% intervals as error bars."""
    plt = _plt()
    at_k = frame[(frame["k"] == k) & frame["method"].isin(methods)]
    present = [m for m in methods if m in set(at_k["method"])]
    figure, axis = plt.subplots(figsize=(max(6.0, 1.3 * len(columns) * len(present) / 3), 3.8))
    width = 0.8 / max(1, len(present))
    for index, method in enumerate(present):
        part = at_k[at_k["method"] == method].set_index("column").reindex(columns)
        positions = [i + (index - (len(present) - 1) / 2) * width for i in range(len(columns))]
        axis.bar(
            positions,
            part["value"],
            width,
            yerr=[part["value"] - part["low"], part["high"] - part["value"]],
            capsize=2,
            color=COLOURS.get(method),
            label=method,
        )
    axis.set_xticks(range(len(columns)), columns, rotation=15)
    axis.set_ylabel(f"pass@{k} (%)")
    axis.set_title(title)
    axis.grid(axis="y", alpha=0.3)
    axis.legend(fontsize=8, ncol=2)
    figure.tight_layout()
    _save(figure, path)


def scaling_frame(
    runs_1x: Mapping[str, SeedRuns],
    scaled: Mapping[tuple[str, float], SeedRuns],
    benchmarks: Sequence[str],
    k: int,
    n_resamples: int,
) -> pd.DataFrame:
    """Figure 7's data: average pass@k over all benchmarks per (method, data multiple)."""
    rows = []
    points = {(m, 1.0): r for m, r in runs_1x.items()} | dict(scaled)
    for (method, multiple), method_runs in points.items():
        estimate = next(
            e for e in score_with_interval(method_runs, benchmarks, n_resamples) if e.k == k
        )
        rows.append(
            {
                "method": method,
                "data_multiple": multiple,
                "value": 100 * estimate.value,
                "low": 100 * estimate.low,
                "high": 100 * estimate.high,
            }
        )
    return pd.DataFrame(rows).sort_values(["method", "data_multiple"], kind="stable")


def scaling_figure(frame: pd.DataFrame, baselines: Sequence[str], k: int, path: Path) -> None:
    """Figure 7: the baselines' average pass@k against the training-set multiple, TA-GRPO at
    1x as a horizontal band."""
    plt = _plt()
    figure, axis = plt.subplots(figsize=(5.5, 3.8))
    for method in baselines:
        part = frame[frame["method"] == method]
        colour = COLOURS.get(method)
        axis.errorbar(
            part["data_multiple"],
            part["value"],
            yerr=[part["value"] - part["low"], part["high"] - part["value"]],
            marker="o",
            capsize=3,
            color=colour,
            label=method,
        )
    ta = frame[(frame["method"] == "ta_grpo") & (frame["data_multiple"] == 1.0)]
    if not ta.empty:
        row = ta.iloc[0]
        axis.axhline(row["value"], color=COLOURS["ta_grpo"], label="ta_grpo (1x data)")
        axis.axhspan(row["low"], row["high"], color=COLOURS["ta_grpo"], alpha=0.12)
    axis.set_xlabel("training set (x the 1x set)")
    axis.set_ylabel(f"average pass@{k} (%)")
    axis.set_title("Data scaling (paper Figure 7)")
    axis.grid(alpha=0.3)
    axis.legend(fontsize=8)
    figure.tight_layout()
    _save(figure, path)


def _save(figure: Any, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    _plt().close(figure)


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
