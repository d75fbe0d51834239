"""Phrasing sensitivity of a policy: the paper's section 5.2 diagnostics at the base model.

For each training question we sample G responses to the original phrasing and G to each of
its N neighbours (rephrasings), grade them, and report: success per phrasing, how often the G
original responses share one reward (zero gradient for GRPO), how often the N x G neighbour
responses do, and how often the joint (N+1) x G group does (zero gradient for TA-GRPO).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pandas as pd

from tagrpo.backends.base import GenerationBackend, SamplingParams
from tagrpo.data.prompts import chat_messages
from tagrpo.grading.types import GradeFn
from tagrpo.metrics.groups import group_stats

# One row per graded response of sample_phrasings (also the schema of saved probe samples).
SAMPLE_COLUMNS = (
    "question_id",
    "phrasing",
    "is_original",
    "sample_index",
    "answer",
    "answer_kind",
    "response",
    "reward",
    "pred",
)


@dataclass(frozen=True)
class PhrasedQuestion:
    """A question's phrasings by label; ``original`` names the label of q0."""

    question_id: str
    answer: str
    answer_kind: str
    phrasings: Mapping[str, str]
    original: str
    choices: Sequence[str] | None = None  # multiple choice: listed under every phrasing


def sample_phrasings(
    backend: GenerationBackend,
    questions: Sequence[PhrasedQuestion],
    sampling: SamplingParams,
    grade: GradeFn,
) -> pd.DataFrame:
    """One row per response: question, phrasing label, whether it is q0, reward."""
    conversations, keys = [], []
    for question in questions:
        for label, text in question.phrasings.items():
            choices = list(question.choices) if question.choices else None
            conversations.append(chat_messages(text, choices))
            keys.append((question, label))
    completions = backend.generate(conversations, sampling)
    rows = []
    for (question, label), samples in zip(keys, completions, strict=True):
        for sample_index, completion in enumerate(samples):
            rows.append(
                {
                    "question_id": question.question_id,
                    "phrasing": label,
                    "is_original": label == question.original,
                    "sample_index": sample_index,
                    "answer": question.answer,
                    "answer_kind": question.answer_kind,
                    "response": completion.text,
                }
            )
    frame = pd.DataFrame(rows)
    verdicts = grade(
        frame["response"].tolist(), frame["answer"].tolist(), frame["answer_kind"].tolist()
    )
    frame["reward"] = [1.0 if verdict[0] else 0.0 for verdict in verdicts]
    frame["pred"] = [verdict[1] for verdict in verdicts]
    return frame


def phrasing_summary(samples: pd.DataFrame) -> tuple[dict[str, float], pd.DataFrame]:
    """Flat signal figures and a per-phrasing success table."""
    by_phrasing = (
        samples.groupby("phrasing")["reward"]
        .agg(["mean", "size"])
        .rename(columns={"mean": "success", "size": "responses"})
    ).reset_index()
    originals, neighbours, joint = [], [], []
    for _, group in samples.groupby("question_id", sort=False):
        originals.append(group.loc[group["is_original"], "reward"].tolist())
        neighbour_rewards = group.loc[~group["is_original"], "reward"].tolist()
        if neighbour_rewards:
            neighbours.append(neighbour_rewards)
        joint.append(group["reward"].tolist())
    summary: dict[str, float] = {
        "questions": float(len(originals)),
        "success_original": float(samples.loc[samples["is_original"], "reward"].mean()),
        "success_all_phrasings": float(samples["reward"].mean()),
        "phrasing_spread": float(by_phrasing["success"].max() - by_phrasing["success"].min()),
    }
    summary.update(group_stats(originals).as_dict("original/"))
    if neighbours:
        summary.update(group_stats(neighbours).as_dict("neighbours/"))
    summary.update(group_stats(joint).as_dict("joint/"))
    for row in by_phrasing.itertuples():
        summary[f"success/{row.phrasing}"] = float(row.success)
    return summary, by_phrasing
