"""Training-signal diagnostics of a policy checkpoint: the paper's Figures 3 and 4.

For each training question we sample G responses to the original q0 and G to each of its N
accepted neighbours q1..qN (the rephrasings training used), grade them, and measure

* gradient vanishing (Figure 3): the share of questions whose G original responses all get
  the same reward, whose N x G neighbour responses do, and whose joint (N+1) x G group does
  (TA-GRPO's group, Eq. 3), each split into all-correct and all-wrong;
* diversity (Figure 4): per question, the mean pairwise cosine distance between sentence
  embeddings of the G original responses and of the N x G neighbour responses.

Run at the base policy and at the 25/50/75/100% checkpoints of training, this shows how both
failure modes of GRPO evolve and what the rephrasings recover. Slots that the equivalence
stage padded with the original text count as neighbours, as they are in training.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from tagrpo.data.training_set import TrainQuestion
from tagrpo.evaluation.phrasing import PhrasedQuestion
from tagrpo.metrics.diversity import EmbedFn, group_distances
from tagrpo.metrics.groups import group_stats

# The two response sets of the paper's figures, and the joint group TA-GRPO normalises over.
RESPONSE_SETS = ("original", "neighbours")
GROUPINGS = ("original", "neighbours", "joint")


def phrased_training_questions(questions: Sequence[TrainQuestion]) -> list[PhrasedQuestion]:
    """q0 as phrasing ``q0`` and neighbour n as ``q<n>``; every question needs neighbours."""
    phrased = []
    for question in questions:
        if not question.neighbours:
            raise ValueError(
                f"{question.id}: no neighbours; the diagnostics compare original and neighbour "
                "responses (train on data/rephrased/train.parquet)"
            )
        phrasings = {"q0": question.problem}
        phrasings.update({f"q{n}": text for n, text in enumerate(question.neighbours, 1)})
        phrased.append(
            PhrasedQuestion(
                question_id=question.id,
                answer=question.answer,
                answer_kind=question.answer_kind,
                phrasings=phrasings,
                original="q0",
                choices=question.choices,
            )
        )
    return phrased


def with_response_set(samples: pd.DataFrame) -> pd.DataFrame:
    """``samples`` plus a ``response_set`` column: ``original`` (q0) or ``neighbours``."""
    return samples.assign(
        response_set=np.where(samples["is_original"].to_numpy(bool), *RESPONSE_SETS)
    )


def zero_gradient_rows(samples: pd.DataFrame) -> list[dict[str, float | str]]:
    """One row per grouping (original, neighbours, joint): group statistics and success."""
    samples = with_response_set(samples)
    rows: list[dict[str, float | str]] = []
    for grouping in GROUPINGS:
        part = samples if grouping == "joint" else samples[samples["response_set"] == grouping]
        if part.empty:
            continue
        rewards = [group["reward"].tolist() for _, group in part.groupby("question_id")]
        rows.append(
            {
                "grouping": grouping,
                **group_stats(rewards).as_dict(),
                "success": float(part["reward"].mean()),
                "responses": float(len(part)),
            }
        )
    return rows


def distance_rows(samples: pd.DataFrame, embed: EmbedFn) -> pd.DataFrame:
    """Per (question, response set): responses and their mean pairwise cosine distance."""
    return group_distances(with_response_set(samples), embed, ["question_id", "response_set"])


def distance_summary(distances: pd.DataFrame) -> dict[str, float]:
    """Mean and median distance per set, and how often a question's neighbour responses are
    more spread out than its original responses (paired over questions with both)."""
    summary: dict[str, float] = {}
    for response_set in RESPONSE_SETS:
        values = distances.loc[distances["response_set"] == response_set, "mean_distance"]
        values = values.dropna()
        summary[f"{response_set}/distance_mean"] = float(values.mean()) if len(values) else np.nan
        summary[f"{response_set}/distance_median"] = (
            float(values.median()) if len(values) else np.nan
        )
    paired = distances.pivot(index="question_id", columns="response_set", values="mean_distance")
    paired = paired.dropna() if set(RESPONSE_SETS) <= set(paired.columns) else paired.iloc[0:0]
    summary["paired_questions"] = float(len(paired))
    summary["neighbours_more_diverse_rate"] = (
        float((paired["neighbours"] > paired["original"]).mean()) if len(paired) else np.nan
    )
    return summary
