"""The report's view of the ratio under q0 (Eq. 4): how far a neighbour response's old-policy
log-probability under q0 is from the one under the rephrasing it was sampled from, per step
(:mod:`tagrpo.algorithms.anchoring`; both backends log ``anchoring/...`` every step).

A figure with one column per method that samples rephrasings (top: the per-token log-ratio's
mean with its p5-p95 and p1-p99 bands; bottom: the effective sample size of the implied
importance weights over n, step-wide and within (question, rephrasing) groups), a line per seed;
and a table row per policy. Methods without rephrasings have no such responses: the table
says so and the figure leaves them out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pandas as pd

from tagrpo.plumbing.markdown import markdown_table

LOG_RATIO = "anchoring/log_ratio_"
BANDS = (("p1", "p99", 0.12), ("p5", "p95", 0.25))  # (low, high, opacity)
HISTORY_COLUMNS = (
    "step",
    f"{LOG_RATIO}mean",
    *[f"{LOG_RATIO}{q}" for low, high, _ in BANDS for q in (low, high)],
    "anchoring/ess_fraction",
    "anchoring/ess_fraction_group_mean",
)


def load_anchoring_histories(root: Path, policies: list[str]) -> dict[str, pd.DataFrame]:
    """``{policy: per-step anchoring columns}`` for the policies whose method samples
    rephrasings (``plots/train/<policy>.csv``); an error naming a missing file or column."""
    from tagrpo.algorithms import get_method
    from tagrpo.plumbing.layout import train_outputs
    from tagrpo.report.plot_data import split_policy

    histories = {}
    for policy in policies:
        if not get_method(split_policy(policy)[0]).use_neighbours:
            continue
        path = root / train_outputs(policy)["history"]
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the train stage of {policy}")
        frame = pd.read_csv(path)
        missing = [c for c in HISTORY_COLUMNS if c not in frame.columns]
        if missing:
            raise KeyError(
                f"{path} has no {missing}: trained before the anchoring metrics existed; "
                f"rerun the train stage of {policy}"
            )
        histories[policy] = frame[list(HISTORY_COLUMNS)]
    return histories


NOT_MEASURED = "not measured (train.anchoring_diagnostic: false)"


def anchoring_figure(
    histories: Mapping[str, pd.DataFrame], path: Path, measured: bool = True
) -> None:
    """The figure of the module docstring (a "not run" figure when no policy samples
    rephrasings, or when ``train.anchoring_diagnostic`` switched the measurement off)."""
    from tagrpo.report.palette import method_colour, seed_style
    from tagrpo.report.plot_data import split_policy
    from tagrpo.report.style import fill_legend, not_run_figure, pyplot, save

    if not measured:
        not_run_figure(path, "The ratio under q0 (Eq. 4)", f"The shift was {NOT_MEASURED}.")
        return
    methods = list(dict.fromkeys(split_policy(p)[0] for p in histories))
    if not methods:
        not_run_figure(
            path,
            "The ratio under q0 (Eq. 4)",
            "No method of this profile samples rephrasings: no neighbour responses.",
        )
        return
    plt = pyplot()
    columns = len(methods)
    figure = plt.figure(figsize=(4.2 * columns + 2.6, 6.4))
    grid = figure.add_gridspec(2, columns + 1, width_ratios=[4.2] * columns + [2.6])
    entries = []
    top_axes = []
    for column, method in enumerate(methods):
        top = figure.add_subplot(grid[0, column])
        bottom = figure.add_subplot(grid[1, column], sharex=top)
        top_axes.append(top)
        colour = method_colour(method)
        longest = 0  # steps of this column's longest run
        for policy, frame in histories.items():
            name, seed, _ = split_policy(policy)
            if name != method:
                continue
            style = seed_style(seed)
            steps = frame["step"]
            longest = max(longest, len(steps))
            # A one-step run has one point: a line or a band alone draws nothing there.
            one_step = len(steps) == 1
            point = "s" if one_step else None
            for low, high, alpha in BANDS:
                if one_step:
                    top.vlines(
                        steps,
                        frame[f"{LOG_RATIO}{low}"],
                        frame[f"{LOG_RATIO}{high}"],
                        color=colour,
                        alpha=alpha + 0.2,
                        lw=6,
                    )
                    continue
                top.fill_between(
                    steps,
                    frame[f"{LOG_RATIO}{low}"],
                    frame[f"{LOG_RATIO}{high}"],
                    color=colour,
                    alpha=alpha,
                    lw=0,
                )
            (line,) = top.plot(
                steps, frame[f"{LOG_RATIO}mean"], color=colour, ls=style, marker=point
            )
            bottom.plot(
                steps, frame["anchoring/ess_fraction"], color=colour, ls=style, marker=point
            )
            bottom.plot(
                steps,
                frame["anchoring/ess_fraction_group_mean"],
                color=colour,
                ls=style,
                marker="o",
                markersize=3,
                alpha=0.6,
            )
            entries.append((line, policy))
        if longest == 1:  # else the axis spans +/-5% of the step in fractional ticks
            bottom.set_xticks(sorted({float(line.get_xdata()[0]) for line in top.get_lines()}))
        top.axhline(0.0, color="black", lw=0.6)
        top.set_title(method)
        top.set_ylabel("log pi_old(o|q0) - log pi_old(o|q^n)\nper token (nats)")
        bottom.set_ylim(0, 1.05)
        bottom.set_ylabel("ESS / n")
        bottom.set_xlabel("training step")
    legend_axis = figure.add_subplot(grid[:, columns])
    legend_axis.axis("off")
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    grey = "#777777"
    entries += [
        (Patch(color=grey, alpha=0.25 + 0.12), "p5-p95 of the tokens"),
        (Patch(color=grey, alpha=0.12), "p1-p99 of the tokens"),
        (Line2D([], [], color=grey), "ESS/n over the step's\nneighbour responses"),
        (
            Line2D([], [], color=grey, marker="o", markersize=3, alpha=0.6),
            "ESS/n within (question,\nrephrasing) groups, mean",
        ),
    ]
    fill_legend(legend_axis, entries)
    figure.suptitle("The ratio under q0: neighbour responses scored under q0 vs their own prompt")
    figure.tight_layout()
    save(figure, path)


def _number(summary: Mapping[str, float], key: str, policy: str, digits: int = 3) -> str:
    if key not in summary:
        raise KeyError(f"the training summary of {policy} has no {key}: rerun its train stage")
    return f"{summary[key]:.{digits}f}"


def anchoring_table(summaries: Mapping[str, Mapping[str, float]], measured: bool = True) -> str:
    """A row per policy: the step means of the log-ratio (mean, p1, p99) and of ESS/n."""
    from tagrpo.algorithms import get_method
    from tagrpo.report.plot_data import split_policy

    rows = []
    for policy, summary in summaries.items():
        if not get_method(split_policy(policy)[0]).use_neighbours:
            rows.append([policy, *["n/a (samples no rephrasings)"] + [""] * 4])
            continue
        if not measured:
            rows.append([policy, NOT_MEASURED, *[""] * 4])
            continue
        rows.append(
            [
                policy,
                _number(summary, "anchoring/log_ratio_mean_mean", policy),
                _number(summary, "anchoring/log_ratio_p1_mean", policy),
                _number(summary, "anchoring/log_ratio_p99_mean", policy),
                _number(summary, "anchoring/ess_fraction_mean", policy),
                _number(summary, "anchoring/ess_fraction_group_mean_mean", policy),
            ]
        )
    return markdown_table(
        [
            "policy",
            "log-ratio mean (nats/token)",
            "p1",
            "p99",
            "ESS/n, step",
            "ESS/n, groups",
        ],
        rows,
    )


def anchoring_section(
    summaries: Mapping[str, Mapping[str, float]], figure_link: str | None, measured: bool = True
) -> str:
    """Markdown: what is measured, the table, and the figure (when there is one)."""
    lines = [
        "### The ratio under q0 (Eq. 4)",
        "",
        "TA-GRPO scores a response sampled from a rephrasing q^n under q0. For every neighbour "
        "response the old policy (the one that sampled it) scores each token under both "
        "prompts; the table gives, averaged over the steps, the per-token log-ratio "
        "log pi_old(o|q0) - log pi_old(o|q^n) (its mean and the 1st/99th percentiles over the "
        "step's tokens) and Kish's effective sample size of the implied importance weights "
        "w = exp(sum of a response's log-ratios), (sum w)^2 / sum w^2 divided by the number of "
        "weights: over all the step's neighbour responses (*step*) and within each (question, "
        "rephrasing) group, averaged (*groups*). ESS/n = 1: q0 and q^n give the responses the "
        "same probabilities (Eq. 4's ratios are on-policy); near 1/n: a few responses carry "
        "all the weight. TA-GRPO* and unanchored TA-GRPO never use q0's probabilities for "
        "these responses; the same numbers for them say how off-policy Eq. 4 would have been.",
        "",
        anchoring_table(summaries, measured),
    ]
    if figure_link:
        lines += ["", f"![The ratio under q0]({figure_link})"]
    return "\n".join(lines)
