"""The diagnostics stage's report section and figure (the paper's Figures 3 and 4)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from tagrpo.evaluation.diagnostics import distance_summary
from tagrpo.report.markdown import markdown_table, percent

SET_COLOURS = {"original": "#4C72B0", "neighbours": "#DD8452"}


def diagnostics_table(zero_gradient: pd.DataFrame, distances: pd.DataFrame) -> str:
    """One row per (policy, checkpoint): zero-gradient rates and response distances."""
    header = [
        "policy",
        "checkpoint",
        "success q0 / neighbours (%)",
        "identical rewards, G original (%)",
        "all-correct / all-wrong (%)",
        "identical rewards, NxG neighbours (%)",
        "identical rewards, joint (%)",
        "mean distance original / neighbours",
        "questions with neighbours more diverse (%)",
    ]
    rows = []
    for (policy, checkpoint), frame in zero_gradient.groupby(["policy", "label"], sort=False):
        by = {row.grouping: row for row in frame.itertuples()}
        spread = distances[(distances["policy"] == policy) & (distances["label"] == checkpoint)]
        summary = distance_summary(spread)
        original, neighbours, joint = by["original"], by.get("neighbours"), by.get("joint")
        neighbour_success = neighbours.success if neighbours else None
        rows.append(
            [
                policy,
                checkpoint,
                f"{percent(original.success)} / {percent(neighbour_success)}",
                percent(original.zero_gradient_rate),
                f"{percent(original.all_correct_rate)} / {percent(original.all_wrong_rate)}",
                percent(neighbours.zero_gradient_rate) if neighbours else "n/a",
                percent(joint.zero_gradient_rate) if joint else "n/a",
                f"{summary['original/distance_mean']:.3f} / "
                f"{summary['neighbours/distance_mean']:.3f}",
                percent(summary["neighbours_more_diverse_rate"]),
            ]
        )
    return markdown_table(header, rows)


def diagnostics_figure(zero_gradient: pd.DataFrame, distances: pd.DataFrame, path: Path) -> None:
    """Per policy: (a) identical-reward rates by checkpoint, G original vs N x G neighbours,
    split into all-correct (hatched) and all-wrong; (b) per-question mean response distances
    by checkpoint (box plots), original vs neighbours."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(zero_gradient["policy"]))
    figure, axes = plt.subplots(len(policies), 2, figsize=(11, 3.6 * len(policies)), squeeze=False)
    width = 0.38
    for row, policy in enumerate(policies):
        frame = zero_gradient[zero_gradient["policy"] == policy]
        labels = list(dict.fromkeys(frame["label"]))
        bars, boxes = axes[row]
        for offset, response_set in ((-width / 2, "original"), (width / 2, "neighbours")):
            part = frame[frame["grouping"] == response_set].set_index("label").reindex(labels)
            positions = [i + offset for i in range(len(labels))]
            colour = SET_COLOURS[response_set]
            bars.bar(
                positions,
                100 * part["all_wrong_rate"],
                width,
                color=colour,
                label=f"{response_set}: all wrong",
            )
            bars.bar(
                positions,
                100 * part["all_correct_rate"],
                width,
                color=colour,
                bottom=100 * part["all_wrong_rate"],
                hatch="//",
                alpha=0.6,
                label=f"{response_set}: all correct",
            )
        tallest = float((100 * frame["zero_gradient_rate"]).max()) if len(frame) else 0.0
        bars.set_ylim(0, max(5.0, 1.45 * tallest))  # room for the legend above the bars
        bars.set_xticks(range(len(labels)), labels)
        bars.set_ylabel("questions with identical rewards (%)")
        bars.set_title(f"{policy}: gradient vanishing (G vs NxG responses)")
        bars.grid(axis="y", alpha=0.3)
        bars.legend(fontsize=7, ncol=2, loc="upper left")

        spread = distances[distances["policy"] == policy].dropna(subset=["mean_distance"])
        for offset, response_set in ((-width / 2, "original"), (width / 2, "neighbours")):
            data = [
                spread.loc[
                    (spread["label"] == label) & (spread["response_set"] == response_set),
                    "mean_distance",
                ].to_numpy()
                for label in labels
            ]
            plot = boxes.boxplot(
                data,
                positions=[i + offset for i in range(len(labels))],
                widths=width * 0.9,
                patch_artist=True,
                showfliers=False,
            )
            for patch in plot["boxes"]:
                patch.set_facecolor(SET_COLOURS[response_set])
                patch.set_alpha(0.7)
            boxes.plot([], [], color=SET_COLOURS[response_set], lw=6, label=response_set)
        boxes.set_xticks(range(len(labels)), labels)
        boxes.set_ylabel("mean pairwise cosine distance")
        boxes.set_title(f"{policy}: response diversity per question")
        boxes.grid(axis="y", alpha=0.3)
        boxes.legend(fontsize=7)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def diagnostics_section(
    zero_gradient: pd.DataFrame,
    distances: pd.DataFrame,
    figure_link: str,
    questions: int,
    group_size: int,
    n_neighbours: int,
    embedding_model: str,
) -> str:
    """Markdown section: what was measured, the table, the figure."""
    return "\n".join(
        [
            "## Diagnostics: gradient vanishing and response diversity (paper Figures 3-4)",
            "",
            f"Each checkpoint answers the first {questions} training questions: G = {group_size}"
            f" responses to the original and G to each of its N = {n_neighbours} accepted "
            "neighbours. A question's G original responses with identical rewards give GRPO no "
            "gradient; the N x G neighbour responses and the joint (N+1) x G group are what "
            "TA-GRPO adds. Diversity is the mean pairwise cosine distance between "
            f"`{embedding_model}` embeddings of a question's responses.",
            "",
            diagnostics_table(zero_gradient, distances),
            "",
            f"![diagnostics]({figure_link})",
        ]
    )
