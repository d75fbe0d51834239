"""Rollouts: batched sampling of every (question, prompt variant) of a step, then grading.

Generation goes through the project's batched backend (never one sample at a time); its
completions carry the sampled token ids, because training must score exactly the tokens that
were sampled (decoding and re-encoding text can change them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from tagrpo.algorithms.methods import MethodSpec
from tagrpo.backends.base import Completion, GenerationBackend, SamplingParams
from tagrpo.grading.types import GradeFn
from tagrpo.splits.training_set import TrainQuestion


@dataclass
class QuestionRollout:
    """All responses sampled for one question in one step, variant-major."""

    question: TrainQuestion
    variants: tuple[int, ...]
    per_variant: int
    generation_prompts: list[str]  # chat-templated text each variant was sampled from
    completions: list[Completion]
    rewards: np.ndarray
    preds: list[str] = field(default_factory=list)
    kept: bool = False  # entered the update (dynamic sampling drops all-equal groups)
    advantages: np.ndarray | None = None  # one per response, set when kept

    @property
    def variant_of_response(self) -> np.ndarray:
        return np.repeat(np.asarray(self.variants), self.per_variant)

    def group_rewards(self, grouping: str) -> np.ndarray:
        """The rewards dynamic sampling judges: the question's q0 responses or all of them."""
        if grouping == "per_original":
            return self.rewards[self.variant_of_response == 0]
        return self.rewards


def sample_rollouts(
    backend: GenerationBackend,
    questions: Sequence[TrainQuestion],
    spec: MethodSpec,
    group_size: int,
    n_neighbours: int,
    sampling: SamplingParams,
    grade: GradeFn,
) -> list[QuestionRollout]:
    """Sample and grade the method's responses for ``questions`` in one batched call each."""
    if not questions:
        return []
    variants = spec.variants(n_neighbours)
    per_variant = spec.responses_per_variant(group_size, n_neighbours)
    conversations = [q.messages(v) for q in questions for v in variants]
    sampling = SamplingParams(
        n=per_variant,
        temperature=sampling.temperature,
        top_p=sampling.top_p,
        max_new_tokens=sampling.max_new_tokens,
        seed=sampling.seed,
    )
    generated = backend.generate(conversations, sampling)
    if any(not c.token_ids for samples in generated for c in samples):
        raise ValueError("the backend returned completions without token ids")
    texts = [c.text for samples in generated for c in samples]
    answers = [q.answer for q in questions for _ in range(len(variants) * per_variant)]
    kinds = [q.answer_kind for q in questions for _ in range(len(variants) * per_variant)]
    verdicts = grade(texts, answers, kinds)
    rollouts = []
    per_question = len(variants) * per_variant
    for index, question in enumerate(questions):
        samples = generated[index * len(variants) : (index + 1) * len(variants)]
        flat = [c for group in samples for c in group]
        marks = verdicts[index * per_question : (index + 1) * per_question]
        rollouts.append(
            QuestionRollout(
                question=question,
                variants=variants,
                per_variant=per_variant,
                generation_prompts=[backend.prompt_text(question.messages(v)) for v in variants],
                completions=flat,
                rewards=np.array([1.0 if mark[0] else 0.0 for mark in marks]),
                preds=[mark[1] for mark in marks],
            )
        )
    return rollouts
