"""The diagnostics stage's report section and figure (the paper's Figures 3 and 4, with the
size-matched controls of :mod:`tagrpo.evaluation.vanishing_diversity`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.markdown import percent

if TYPE_CHECKING:
    from tagrpo.config.evaluation import DiagnosticsSettings
    from tagrpo.evaluation.diagnostics_stage import Diagnostics

# One colour per group size; rephrased sets solid, the q0 controls of the same size dashed.
STYLES = {
    "original": ("#4C72B0", "-"),
    "neighbour_each": ("#4C72B0", ":"),
    "neighbours": ("#DD8452", "-"),
    "original_NG": ("#DD8452", "--"),
    "joint": ("#55A868", "-"),
    "original_N1G": ("#55A868", "--"),
}
NAMES = {
    "original": "q0, G",
    "neighbour_each": "one neighbour, G",
    "neighbours": "N neighbours, NxG",
    "original_NG": "q0, NxG",
    "joint": "joint, (N+1)xG",
    "original_N1G": "q0, (N+1)xG",
}


def _label(grouping: str, size: int) -> str:
    return f"{NAMES[grouping]} = {size}"


def rates_table(zero_gradient: pd.DataFrame) -> str:
    """Identical-reward rates (%) per (policy, checkpoint), one column per grouping and size."""
    sizes = zero_gradient.drop_duplicates("grouping").set_index("grouping")["group_size"]
    groupings = [g for g in STYLES if g in sizes.index]
    header = ["policy", "checkpoint", "success q0 (%)"] + [
        f"{_label(g, int(sizes[g]))} (%)" for g in groupings
    ]
    rows = []
    for (policy, label), frame in zero_gradient.groupby(["policy", "label"], sort=False):
        by = frame.set_index("grouping")
        rows.append(
            [policy, label, percent(by.loc["original", "success"])]
            + [percent(by.loc[g, "zero_gradient_rate"]) for g in groupings]
        )
    return markdown_table(header, rows)


def comparisons_table(comparisons: pd.DataFrame, checkpoints: list[str] | None = None) -> str:
    """Paired differences per (policy, checkpoint) with 95% intervals and sign-test p."""
    header = [
        "policy",
        "checkpoint",
        "measure",
        "first - second",
        "difference [95% CI]",
        "sign test p",
        "questions",
    ]
    rows = []
    for row in comparisons.itertuples():
        if checkpoints is not None and row.label not in checkpoints:
            continue
        scale = 100.0 if row.measure == "identical_rewards" else 1.0
        unit = " pts" if row.measure == "identical_rewards" else ""
        rows.append(
            [
                row.policy,
                row.label,
                "identical rewards"
                if row.measure == "identical_rewards"
                else "within-variant distance",
                f"{NAMES[row.first]} - {NAMES[row.second]}",
                f"{scale * row.difference:+.3f}{unit} [{scale * row.ci_low:+.3f}, "
                f"{scale * row.ci_high:+.3f}]",
                f"{row.sign_test_p:.3g}",
                int(row.questions),
            ]
        )
    return markdown_table(header, rows)


def diagnostics_figure(zero_gradient: pd.DataFrame, distances: pd.DataFrame, path: Path) -> None:
    """Per policy: (a) identical-reward rates by checkpoint for every grouping (controls of
    the same size dashed, same colour); (b) per-question within-variant response distances,
    q0 vs the neighbours' mean, by checkpoint (box plots)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policies = list(dict.fromkeys(zero_gradient["policy"]))
    figure, axes = plt.subplots(len(policies), 2, figsize=(12, 4.6 * len(policies)), squeeze=False)
    for row, policy in enumerate(policies):
        frame = zero_gradient[zero_gradient["policy"] == policy]
        labels = list(dict.fromkeys(frame["label"]))
        rates, boxes = axes[row]
        for grouping, (colour, style) in STYLES.items():
            part = frame[frame["grouping"] == grouping].set_index("label").reindex(labels)
            if part["zero_gradient_rate"].isna().all():
                continue
            size = int(part["group_size"].dropna().iloc[0])
            rates.plot(
                range(len(labels)),
                100 * part["zero_gradient_rate"],
                style,
                color=colour,
                marker="o",
                label=_label(grouping, size),
            )
        rates.set_xticks(range(len(labels)), labels)
        rates.set_ylabel("questions with identical rewards (%)")
        rates.set_title(f"{policy}: gradient vanishing by group (size in legend)")
        rates.grid(alpha=0.3)
        # Legends under the panels: inside, they covered lines and whiskers.
        rates.legend(fontsize=7, ncol=3, loc="upper center", bbox_to_anchor=(0.5, -0.1))

        spread = distances[distances["policy"] == policy].dropna(subset=["mean_distance"])
        width = 0.38
        sets = {
            "q0 (G responses)": spread[spread["variant"] == 0],
            "neighbours (mean of N variants' G)": spread[spread["variant"] > 0]
            .groupby(["label", "question_id"], as_index=False)["mean_distance"]
            .mean(),
        }
        for (name, part), offset, colour in zip(
            sets.items(), (-width / 2, width / 2), ("#4C72B0", "#DD8452"), strict=True
        ):
            data = [
                part.loc[part["label"] == label, "mean_distance"].to_numpy() for label in labels
            ]
            plot = boxes.boxplot(
                data,
                positions=[i + offset for i in range(len(labels))],
                widths=width * 0.9,
                patch_artist=True,
                showfliers=False,
            )
            for patch in plot["boxes"]:
                patch.set_facecolor(colour)
                patch.set_alpha(0.7)
            boxes.plot([], [], color=colour, lw=6, label=name)
        boxes.set_xticks(range(len(labels)), labels)
        boxes.set_ylabel("mean pairwise cosine distance")
        boxes.set_title(f"{policy}: diversity within one prompt's responses")
        boxes.grid(axis="y", alpha=0.3)
        boxes.legend(fontsize=7, ncol=2, loc="upper center", bbox_to_anchor=(0.5, -0.1))
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)


def diagnostics_section(
    zero_gradient: pd.DataFrame,
    comparisons: pd.DataFrame,
    figure_link: str,
    questions: int,
    group_size: int,
    n_neighbours: int,
    embedding_model: str,
) -> str:
    """Markdown section: what was measured, the rates, the paired comparisons, the figure."""
    return "\n".join(
        [
            "## Diagnostics: gradient vanishing and response diversity (paper Figures 3-4)",
            "",
            f"Each checkpoint answers the first {questions} training questions: (N+1) x G = "
            f"{(n_neighbours + 1) * group_size} responses to the original q0 and G = {group_size}"
            f" to each of its N = {n_neighbours} accepted neighbours. A group whose rewards are "
            "all equal gives GRPO no gradient. Larger groups are less often all-equal whatever "
            "the prompts, so each rephrased set is compared with responses to q0 of the same "
            "size (column headers give the sizes). Diversity is the mean pairwise cosine "
            f"distance between `{embedding_model}` embeddings of one prompt's G responses, "
            "the restated problem removed; neighbours' values are averaged over the N prompts "
            "and compared with q0's on the same question.",
            "",
            rates_table(zero_gradient),
            "",
            "Paired differences over questions (bootstrap 95% intervals; exact sign test):",
            "",
            comparisons_table(comparisons),
            "",
            f"![diagnostics]({figure_link})",
        ]
    )


def figure_link() -> str:
    """The figure's path as seen from the report (the section is included into report.md)."""

    from tagrpo.plumbing.layout import diagnostics_outputs, report_outputs

    report_dir = report_outputs()["report"].parent
    return Path(os.path.relpath(diagnostics_outputs()["figure"], report_dir)).as_posix()


def write_figure_and_section(
    measured: Diagnostics, figure: Path, section: Path, settings: DiagnosticsSettings
) -> None:
    """The stage's figure and its report section, from what it measured."""
    diagnostics_figure(measured.zero_gradient, measured.distances, figure)
    section.write_text(
        diagnostics_section(
            measured.zero_gradient,
            measured.comparisons,
            figure_link(),
            questions=measured.questions,
            group_size=settings.group_size,
            n_neighbours=settings.n_neighbours,
            embedding_model=settings.embedding.model,
        )
        + "\n"
    )
