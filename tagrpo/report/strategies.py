"""Strategy entropy over training (issue 21, section 4): does RL narrow the mix of solution
paths, and does one method narrow it more than another?

Points: the base policy (fraction 0, from the base-model probe's G responses to each original
question) and every training checkpoint of every run (the rollout dump of that step: the G
responses to each q0 of its batch). Each response's path is read from its first equation
(:func:`tagrpo.miniworld.strategy.strategy_of`); a question's entropy counts the responses that
took a known path (:func:`tagrpo.metrics.testbed.strategy_entropy`). Every method is read from
the first G responses to q0, so (N+1)xGRPO's (N+1)G answers to q0 do not get a larger sample
(an entropy estimate rises with the sample it is read from).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from tagrpo.metrics.testbed import strategy_entropy
from tagrpo.miniworld.solver import parse_problem
from tagrpo.miniworld.strategy import strategy_of
from tagrpo.plumbing.layout import checkpoint_name, train_outputs

COLUMNS = ("method", "policy", "fraction", "questions", "entropy_bits")


def _labelled(responses: pd.DataFrame, texts: Mapping[str, str]) -> pd.DataFrame:
    labels = []
    for question_id, response in zip(responses["question_id"], responses["response"], strict=True):
        problem = parse_problem(texts[question_id])
        if problem is None:
            raise ValueError(f"{question_id}: not a mini-world problem, no solution paths to read")
        labels.append(strategy_of(problem, response))
    return responses.assign(strategy=labels)


def _point(method: str, policy: str, fraction: float, responses: pd.DataFrame) -> dict:
    table = strategy_entropy(responses)
    entropy = float(table["entropy_bits"].mean()) if table is not None and len(table) else np.nan
    return {
        "method": method,
        "policy": policy,
        "fraction": fraction,
        "questions": 0 if table is None else len(table),
        "entropy_bits": entropy,
    }


def strategy_over_training(
    root: Path,
    policies: Mapping[str, Sequence[str]],
    fractions: Sequence[float],
    group_size: int,
    probe: pd.DataFrame,
    train_texts: Mapping[str, str],
) -> pd.DataFrame:
    """One row per (policy, checkpoint) plus the base (``method`` "base", fraction 0): the mean
    over questions of the strategy entropy of the first ``group_size`` responses to each q0.

    ``policies``: method -> its trained policies; ``probe``: the base-model probe's samples;
    ``train_texts``: training question id -> its original text.
    """
    rows = []
    original = probe[probe["is_original"] & (probe["sample_index"] < group_size)]
    if not original.empty:
        rows.append(_point("base", "base", 0.0, _labelled(original, train_texts)))
    for method, members in policies.items():
        for policy in members:
            folder = root / train_outputs(policy)["rollouts"]
            # A short run writes fewer dumps than ``fractions`` (two fractions on one step
            # share it): read those written, and refuse a run that wrote none.
            written = {
                fraction: path
                for fraction in fractions
                if (path := folder / f"{checkpoint_name(fraction)}.parquet").exists()
            }
            if not written:
                raise FileNotFoundError(
                    f"{folder} has no checkpoint dump: run the train stage of {policy}"
                )
            for fraction, path in written.items():
                dump = pd.read_parquet(path, columns=["question_id", "variant", "sample_index",
                                                      "prompt_used", "response"])  # fmt: skip
                q0 = dump[(dump["variant"] == 0) & (dump["sample_index"] < group_size)]
                texts = {**train_texts, **_texts_from_prompts(q0)}
                rows.append(_point(method, policy, float(fraction), _labelled(q0, texts)))
    return pd.DataFrame(rows, columns=list(COLUMNS))


def _texts_from_prompts(responses: pd.DataFrame) -> dict[str, str]:
    # The rendered prompt holds the question's text, which the solver parses like any text.
    return dict(zip(responses["question_id"], responses["prompt_used"], strict=True))


def strategy_figure(frame: pd.DataFrame, path: Path) -> None:
    """Mean strategy entropy over the seeds of each method at each checkpoint, the base at 0,
    one line per method (each seed's points faint behind it)."""
    from tagrpo.report.palette import method_colour
    from tagrpo.report.style import not_run_figure, pyplot, save

    trained = frame[frame["method"] != "base"].dropna(subset=["entropy_bits"])
    if trained.empty:
        not_run_figure(path, "Strategy entropy", "No responses with a solution-path label.")
        return
    base = frame[frame["method"] == "base"]
    base_value = float(base["entropy_bits"].iloc[0]) if len(base) else None
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(6.4, 3.8))
    for method, part in trained.groupby("method", sort=False):
        colour = method_colour(method)
        axis.scatter(part["fraction"], part["entropy_bits"], color=colour, alpha=0.25, s=12)
        mean = part.groupby("fraction")["entropy_bits"].mean()
        xs, ys = list(mean.index), list(mean.to_numpy())
        if base_value is not None:
            xs, ys = [0.0, *xs], [base_value, *ys]
        axis.plot(xs, ys, color=colour, marker="o", label=method)
    if base_value is not None:
        axis.scatter([0.0], [base_value], color="black", zorder=5, label="base")
    axis.set_xlabel("fraction of training")
    axis.set_ylabel("strategy entropy (bits per question)")
    axis.set_ylim(0.0, 1.05)
    axis.set_title("Solution-path diversity on the training questions (q0)")
    axis.legend(fontsize=7, ncol=2)
    save(figure, path)
