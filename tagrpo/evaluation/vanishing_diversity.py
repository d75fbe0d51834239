"""Training-signal diagnostics of a policy checkpoint: the paper's Figures 3 and 4, with the
controls that separate the effect of rephrasing from the effect of sample size.

Each training question is answered (N+1) x G times from the original q0 and G times from each
of its N neighbours q1..qN (the accepted rephrasings training used; slots the equivalence
stage padded count as neighbours, as they do in training). Then, per question:

Gradient vanishing (Figure 3): whether a group of responses has identical rewards (no GRPO
gradient), for groups of stated size:

==============  =======================================  ======  ===========================
grouping        responses                                 size    compared with
==============  =======================================  ======  ===========================
original        the first G to q0                         G       (GRPO's group)
neighbour_each  G to one neighbour (averaged over the N)  G       original: same size
neighbours      the N x G to the neighbours, pooled      NG      original_NG: same size
original_NG     the first N x G to q0                     NG      (size control)
joint           G to q0 + N x G to the neighbours        (N+1)G  original_N1G: same size
original_N1G    all (N+1) x G to q0                       (N+1)G  ((N+1)xGRPO's group)
==============  =======================================  ======  ===========================

The paper compares ``original`` (G) with ``neighbours`` (NG); a larger group is less often
all-equal whatever the prompts, so the size-matched comparisons are the ones that measure
what rephrasing adds.

Diversity (Figure 4): the mean pairwise cosine distance of the embeddings of one variant's G
responses (within a prompt, never pooled across prompts, which would add between-prompt
variation by construction): q0's vs each neighbour's (averaged), paired per question. Only the
solution is embedded: sentences restating the problem are removed (:func:`solution_text`),
so an embedder that reads a bounded number of word pieces (MiniLM: 256) sees the reasoning.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from tagrpo.backends.base import GenerationBackend, SamplingParams
from tagrpo.config.evaluation import diagnostics_sampling
from tagrpo.grading.types import GradeFn
from tagrpo.metrics.compare import Estimate, mean_difference_interval, sign_test_p
from tagrpo.metrics.diversity import EmbedFn, mean_pairwise_cosine_distance
from tagrpo.plumbing.progress import labelled
from tagrpo.splits.training_set import TrainQuestion

GROUPINGS = ("original", "neighbour_each", "neighbours", "original_NG", "joint", "original_N1G")
# (first, second): the comparisons reported, first - second, paired over questions.
COMPARISONS = (
    ("neighbours", "original"),  # the paper's Figure 3 (sizes NG vs G)
    ("neighbour_each", "original"),  # same size G
    ("neighbours", "original_NG"),  # same size NG
    ("joint", "original_N1G"),  # TA-GRPO's group vs the matched budget's, same size (N+1)G
    ("joint", "original"),  # TA-GRPO's group vs GRPO's (sizes (N+1)G vs G: size-confounded)
)
SAMPLE_COLUMNS = (
    "question_id",
    "phrasing",
    "variant",
    "is_original",
    "sample_index",
    "prompt",
    "answer",
    "answer_kind",
    "response",
    "reward",
    "pred",
)


def group_size(grouping: str, group: int, neighbours: int) -> int:
    """Responses in one group of ``grouping``."""
    sizes = {
        "original": group,
        "neighbour_each": group,
        "neighbours": neighbours * group,
        "original_NG": neighbours * group,
        "joint": (neighbours + 1) * group,
        "original_N1G": (neighbours + 1) * group,
    }
    return sizes[grouping]


def sample_training_questions(
    backend: GenerationBackend,
    questions: Sequence[TrainQuestion],
    group: int,
    neighbours: int,
    sampling: SamplingParams,
    grade: GradeFn,
) -> pd.DataFrame:
    """(N+1)G responses to each q0 and G to each neighbour (:func:`diagnostics_sampling`),
    graded; one row per response."""
    for question in questions:
        if len(question.neighbours) < neighbours:
            raise ValueError(
                f"{question.id}: {len(question.neighbours)} neighbours, N={neighbours} needed; "
                "the diagnostics compare original and neighbour responses"
            )
    frames = []
    plans = [
        (variant, count, sampling.seed + 7919 * variant)
        for variant, count in diagnostics_sampling(group, neighbours)
    ]
    for number, (variant, count, seed) in enumerate(plans, 1):
        conversations = [q.messages(variant) for q in questions]
        drawn = SamplingParams(
            n=count,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            max_new_tokens=sampling.max_new_tokens,
            seed=seed,
        )
        with labelled(f"phrasing q{variant} ({number} of {len(plans)})"):
            completions = backend.generate(conversations, drawn)
        rows = [
            {
                "question_id": question.id,
                "phrasing": f"q{variant}",
                "variant": variant,
                "is_original": variant == 0,
                "sample_index": index,
                "prompt": question.text(variant),
                "answer": question.answer,
                "answer_kind": question.answer_kind,
                "response": completion.text,
            }
            for question, samples in zip(questions, completions, strict=True)
            for index, completion in enumerate(samples)
        ]
        frames.append(pd.DataFrame(rows))
    frame = pd.concat(frames, ignore_index=True)
    verdicts = grade(
        frame["response"].tolist(), frame["answer"].tolist(), frame["answer_kind"].tolist()
    )
    frame["reward"] = [1.0 if verdict[0] else 0.0 for verdict in verdicts]
    frame["pred"] = [verdict[1] for verdict in verdicts]
    return frame[list(SAMPLE_COLUMNS)]


def _identical(rewards: np.ndarray) -> tuple[float, float, float]:
    """(identical, all correct, all wrong) of one group of binary rewards."""
    all_correct = float(np.all(rewards == 1.0))
    all_wrong = float(np.all(rewards == 0.0))
    return all_correct + all_wrong, all_correct, all_wrong


def question_groups(samples: pd.DataFrame, group: int, neighbours: int) -> pd.DataFrame:
    """Per (question, grouping): identical / all-correct / all-wrong (``neighbour_each``: the
    share of the question's N neighbour groups), and success."""
    rows = []
    for question_id, frame in samples.groupby("question_id", sort=False):
        original = frame[frame["variant"] == 0].sort_values("sample_index")["reward"].to_numpy()
        others = frame[frame["variant"] > 0]
        if original.size < (neighbours + 1) * group or others.empty:
            raise ValueError(f"{question_id}: not the (N+1)G + NxG layout of the diagnostics")
        each = [
            _identical(part["reward"].to_numpy())
            for _, part in others.groupby("variant", sort=True)
        ]
        pooled = others["reward"].to_numpy()
        groups = {
            "original": original[:group],
            "neighbours": pooled,
            "original_NG": original[: neighbours * group],
            "joint": np.concatenate([original[:group], pooled]),
            "original_N1G": original[: (neighbours + 1) * group],
        }
        for name, rewards in groups.items():
            identical, correct, wrong = _identical(rewards)
            rows.append((question_id, name, identical, correct, wrong, float(rewards.mean())))
        identical, correct, wrong = np.mean(each, axis=0)
        rows.append(
            (question_id, "neighbour_each", identical, correct, wrong, float(pooled.mean()))
        )
    return pd.DataFrame(
        rows,
        columns=["question_id", "grouping", "identical", "all_correct", "all_wrong", "success"],
    )


def zero_gradient_rows(groups: pd.DataFrame, group: int, neighbours: int) -> list[dict]:
    """One row per grouping: its group size and the shares of questions with identical rewards."""
    rows = []
    for grouping in GROUPINGS:
        part = groups[groups["grouping"] == grouping]
        rows.append(
            {
                "grouping": grouping,
                "group_size": group_size(grouping, group, neighbours),
                "questions": len(part),
                "zero_gradient_rate": float(part["identical"].mean()),
                "all_correct_rate": float(part["all_correct"].mean()),
                "all_wrong_rate": float(part["all_wrong"].mean()),
                "success": float(part["success"].mean()),
            }
        )
    return rows


@dataclass(frozen=True)
class Comparison:
    """``first - second`` over questions (a rate or a distance), with interval and sign test."""

    measure: str
    first: str
    second: str
    estimate: Estimate
    p_value: float
    questions: int

    def as_row(self) -> dict:
        return {
            "measure": self.measure,
            "first": self.first,
            "second": self.second,
            "difference": self.estimate.value,
            "ci_low": self.estimate.low,
            "ci_high": self.estimate.high,
            "sign_test_p": self.p_value,
            "questions": self.questions,
        }


def rate_comparisons(groups: pd.DataFrame, seed: int = 0) -> list[Comparison]:
    """The zero-gradient comparisons of :data:`COMPARISONS`, paired over questions."""
    wide = groups.pivot(index="question_id", columns="grouping", values="identical")
    comparisons = []
    for first, second in COMPARISONS:
        differences = (wide[first] - wide[second]).to_numpy()
        comparisons.append(
            Comparison(
                "identical_rewards",
                first,
                second,
                mean_difference_interval(differences, seed=seed),
                sign_test_p(differences),
                len(differences),
            )
        )
    return comparisons


_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_WORD = re.compile(r"[A-Za-z]+|\d+")


def solution_text(response: str, problem: str, overlap: float = 0.6) -> str:
    """``response`` without the sentences that restate ``problem`` (most of their words and
    numbers appear in it); the whole response if every sentence does."""
    problem_words = {w.lower() for w in _WORD.findall(problem)}
    kept = []
    for sentence in _SENTENCE.split(response.strip()):
        words = [w.lower() for w in _WORD.findall(sentence)]
        shared = sum(w in problem_words for w in words) / len(words) if words else 0.0
        if len(words) < 4 or shared < overlap:
            kept.append(sentence)
    return " ".join(kept) if kept else response


def variant_distances(samples: pd.DataFrame, embed: EmbedFn, group: int) -> pd.DataFrame:
    """Per (question, variant): mean pairwise cosine distance of its first G responses'
    solution embeddings (one batched embedding call)."""
    first = samples[samples["sample_index"] < group].reset_index(drop=True)
    texts = [solution_text(r, p) for r, p in zip(first["response"], first["prompt"], strict=True)]
    embeddings = np.asarray(embed(texts))
    if len(embeddings) != len(first):
        raise ValueError(f"embed returned {len(embeddings)} vectors for {len(first)} texts")
    rows = []
    for (question_id, variant), part in first.groupby(["question_id", "variant"], sort=False):
        rows.append(
            {
                "question_id": question_id,
                "variant": int(variant),
                "responses": len(part),
                "mean_distance": mean_pairwise_cosine_distance(embeddings[part.index]),
            }
        )
    return pd.DataFrame(rows)


def diversity_comparison(distances: pd.DataFrame, seed: int = 0) -> Comparison:
    """Each neighbour's within-variant distance (averaged) minus q0's, paired per question."""
    original = distances[distances["variant"] == 0].set_index("question_id")["mean_distance"]
    neighbour = distances[distances["variant"] > 0].groupby("question_id")["mean_distance"].mean()
    differences = (neighbour - original.reindex(neighbour.index)).dropna().to_numpy()
    return Comparison(
        "distance",
        "neighbour_each",
        "original",
        mean_difference_interval(differences, seed=seed),
        sign_test_p(differences),
        len(differences),
    )
