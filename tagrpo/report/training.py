"""Report section for the training runs: one row per policy (``metrics/train/<policy>.json``)."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from tagrpo.algorithms import get_method
from tagrpo.plumbing.markdown import markdown_table
from tagrpo.report.markdown import percent


def load_training_summaries(root: Path, policies: list[str]) -> dict[str, dict[str, float]]:
    """``{policy: summary}`` of the given policies (``metrics/train/<policy>.json``)."""
    from tagrpo.plumbing.layout import train_outputs

    summaries = {}
    for policy in policies:
        path = root / train_outputs(policy).metrics
        if not path.exists():
            raise FileNotFoundError(f"{path} is missing: run the train stage of {policy}")
        summaries[policy] = json.loads(path.read_text())
    return summaries


def group_sizes(method: str, group: int, neighbours: int) -> tuple[int, int, int]:
    """Responses per group of a method: (to q0, all of a question's, its training groups)."""

    spec = get_method(method)
    to_q0 = spec.responses_per_variant(group, neighbours)
    joint = spec.responses_per_question(group, neighbours)
    training = {"per_original": to_q0, "per_variant": group, "joint": joint}[spec.grouping]
    return to_q0, joint, training


def method_label(method: str, estimators: Mapping[str, object] | None = None) -> str:
    """A method as the report names it; AVSPO says which trigger ran (``avspo (always)``)."""

    spec = get_method(method)
    settings = (estimators or {}).get(spec.estimator)
    trigger = getattr(settings, "trigger", None)
    return f"{method} ({trigger})" if trigger else method


def optimiser_updates(summary: Mapping[str, float], policy: str) -> int:
    """The optimiser updates a run took (both backends' summaries carry it)."""
    if "optimiser_updates" not in summary:
        raise KeyError(
            f"the training summary of {policy} has no optimiser_updates: trained before the "
            "count existed; rerun its train stage"
        )
    return int(summary["optimiser_updates"])


def updates_of(updates: Mapping[str, str], method: str) -> str:
    """A method's optimiser updates from :func:`updates_by_method` (an error when it has none)."""
    if method not in updates:
        raise KeyError(f"no training summary of {method}: its optimiser updates are unknown")
    return updates[method]


def updates_by_method(summaries: Mapping[str, Mapping[str, float]]) -> dict[str, str]:
    """``{method: updates}`` over its seeds' runs (``"a-b"`` when the seeds differ, e.g. a DS
    step that found nothing to learn from); data-scaling policies are not among them."""
    from tagrpo.report.plot_data import split_policy

    counts: dict[str, list[int]] = {}
    for policy, summary in summaries.items():
        method, _, multiple = split_policy(policy)
        if multiple == 1.0:
            counts.setdefault(method, []).append(optimiser_updates(summary, policy))
    return {
        method: str(min(values)) if min(values) == max(values) else f"{min(values)}-{max(values)}"
        for method, values in counts.items()
    }


def training_section(
    summaries: Mapping[str, Mapping[str, float]],
    group: int = 8,
    neighbours: int = 3,
    estimators: Mapping[str, object] | None = None,
    anchoring_figure: str | None = None,
    anchoring_measured: bool = True,
) -> str:
    """Markdown: what each run cost, how the zero-gradient rate and success moved, and the
    ratio under q0 (:mod:`tagrpo.report.anchoring`; ``anchoring_figure``: its link;
    ``anchoring_measured``: ``train.anchoring_diagnostic``)."""
    from tagrpo.report.anchoring import anchoring_section

    if not summaries:
        return "## Training\n\nNo training runs in this pipeline run."
    header = [
        "policy",
        "steps",
        "optimiser updates",
        "responses",
        "seconds",
        "reward q0 first→last quarter (%)",
        "probe success before→after (%)",
        "group sizes q0 / joint / training",
        "zero-grad original (%)",
        "zero-grad joint (%)",
        "zero-grad training groups (%)",
        "effective zero-grad (%)",
        "DS extra rollouts",
    ]
    rows = []
    for policy, s in summaries.items():
        method = policy.rsplit("-s", 1)[0].split("_data")[0]
        sizes = "/".join(str(n) for n in group_sizes(method, group, neighbours))
        probe = (
            f"{percent(s.get('probe/before/success'))} → {percent(s.get('probe/after/success'))}"
            if "probe/after/success" in s
            else "n/a"
        )
        rows.append(
            [
                policy.replace(method, method_label(method, estimators), 1),
                int(s.get("steps", 0)),
                optimiser_updates(s, policy),
                int(s.get("responses_generated", 0)),
                f"{s.get('seconds', float('nan')):.0f}",
                f"{percent(s.get('reward_first_quarter'))} → "
                f"{percent(s.get('reward_last_quarter'))}",
                probe,
                sizes,
                percent(s.get("original/zero_gradient_rate_mean")),
                percent(s.get("joint/zero_gradient_rate_mean")),
                percent(s.get("train/zero_gradient_rate_mean")),
                percent(s.get("train/effective_zero_gradient_rate_mean")),
                int(s["ds/extra_rollouts_total"]) if "ds/extra_rollouts_total" in s else "",
            ]
        )
    return "\n".join(
        [
            "## Training",
            "",
            "Per-step figures are means over the run's steps. *Zero-grad* is the share of groups "
            "whose rewards are all equal (the paper's Figure 3; ACR in the AVSPO paper): over "
            "the responses to q0 (*original*), over all of a question's responses (*joint*, the "
            "TA-GRPO group) and over the groups the method normalises over (*training groups*; "
            "for DS methods after dropping, so 0). *Effective* counts training groups whose "
            "advantages are all zero (lower than the raw rate only for AVSPO). Group sizes differ "
            f"by method (G = {group}, N = {neighbours}); a larger group is less often all-equal "
            "whatever its prompts, so compare rates at equal sizes. The probe samples "
            "G responses to every training question's original phrasing before and after "
            "training with the same seed. *Optimiser updates*: the AdamW steps the run took "
            "(steps x mini-batches; with `train.batch_unit: rows` a TA method takes N+1 times "
            "those of (N+1)xGRPO at equal responses unless `train.rows_matched_updates`).",
            "",
            markdown_table(header, rows),
            "",
            anchoring_section(summaries, anchoring_figure, anchoring_measured),
        ]
    )


def reward_figure(
    histories: Mapping[str, Sequence[Sequence[float]]], path: Path, reference: str = "grpo"
) -> None:
    """Training reward on q0 per step, one panel per method: the mean over its seeds, shaded
    by the 95% t-interval of that mean over seeds (none with one seed), and ``reference``'s
    mean dashed grey in every other panel for comparison."""
    import numpy as np
    from matplotlib.ticker import MaxNLocator
    from scipy.stats import t as student

    from tagrpo.report.palette import method_colour
    from tagrpo.report.style import not_run_figure, pyplot, save

    if not histories:
        not_run_figure(path, "Training reward", "No training runs in this profile.")
        return

    def mean_and_band(runs: Sequence[Sequence[float]]) -> tuple[Any, Any, Any]:
        steps = min(len(run) for run in runs)
        values = np.array([list(run)[:steps] for run in runs], dtype=np.float64)
        mean = values.mean(axis=0)
        if len(runs) < 2:
            return mean, None, None
        half = student.ppf(0.975, len(runs) - 1) * values.std(axis=0, ddof=1) / np.sqrt(len(runs))
        # A reward lies in [0, 1]: so does the band drawn.
        return mean, np.clip(mean - half, 0.0, 1.0), np.clip(mean + half, 0.0, 1.0)

    plt = pyplot()
    methods = list(histories)
    columns = min(3, len(methods))
    rows = -(-len(methods) // columns)
    figure, axes = plt.subplots(
        rows, columns, figsize=(3.6 * columns, 2.6 * rows), sharex=True, sharey=True, squeeze=False
    )
    reference_mean = mean_and_band(histories[reference])[0] if reference in histories else None
    for index, method in enumerate(methods):
        axis = axes[index // columns][index % columns]
        mean, low, high = mean_and_band(histories[method])
        steps = np.arange(1, mean.size + 1)
        colour = method_colour(method)
        if reference_mean is not None and method != reference:
            axis.plot(
                np.arange(1, reference_mean.size + 1), 100 * reference_mean, color="#777777",
                lw=1.0, ls="--", label=f"{reference} (mean)",
            )  # fmt: skip
        # A one-step run has a single point, which a line alone does not draw.
        marker = "o" if mean.size == 1 else None
        axis.plot(steps, 100 * mean, color=colour, lw=1.6, marker=marker, label="mean over seeds")
        if low is not None:
            axis.fill_between(steps, 100 * low, 100 * high, color=colour, alpha=0.2, lw=0)
        seeds = len(histories[method])
        axis.set_title(f"{method} ({seeds} seed{'s' if seeds > 1 else ''})", fontsize=9)
        axis.grid(alpha=0.3)
        axis.tick_params(labelsize=7)
        if index % columns == 0:
            axis.set_ylabel("reward on q0 (%)", fontsize=8)
        axis.xaxis.set_major_locator(MaxNLocator(integer=True))
        if mean.size == 1:
            # Else the axis spans +/-5% of step 1 in fractional ticks.
            axis.set_xlim(0.5, 1.5)
            axis.set_xticks([1])
        if index + columns >= len(methods):  # nothing below it: label its steps
            axis.xaxis.set_tick_params(labelbottom=True)
            axis.set_xlabel("training step", fontsize=8)
    for index in range(len(methods), rows * columns):
        axes[index // columns][index % columns].axis("off")
    figure.suptitle(
        "Training reward per step: mean over seeds, shaded 95% interval over seeds; "
        f"dashed grey: {reference}'s mean",
        fontsize=9,
    )
    figure.tight_layout()
    save(figure, path)
