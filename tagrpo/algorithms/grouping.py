"""Where each response sits (question, prompt variant, sample) and its normalisation group.

Responses of a step are laid out question-major, then variant, then sample: the layout the
trainers build and the one :func:`rollout_layout` returns. Group ids are dense integers
``0..K-1`` numbered in order of first appearance, so per-group statistics are ``bincount``s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tagrpo.algorithms.methods import GROUPINGS, Grouping


@dataclass(frozen=True)
class Layout:
    """Per-response coordinates: question index, prompt variant (0 = q0), sample index."""

    question: np.ndarray
    variant: np.ndarray
    sample: np.ndarray

    def __len__(self) -> int:
        return int(self.question.size)


def rollout_layout(
    num_questions: int, variants: tuple[int, ...] | list[int], responses_per_variant: int
) -> Layout:
    """The canonical layout: for each question, for each variant, ``responses_per_variant``."""
    if num_questions < 0 or responses_per_variant < 1 or not variants:
        raise ValueError("need num_questions >= 0, responses_per_variant >= 1, some variants")
    per_question = len(variants) * responses_per_variant
    question = np.repeat(np.arange(num_questions), per_question)
    variant = np.tile(np.repeat(np.asarray(variants), responses_per_variant), num_questions)
    sample = np.tile(np.arange(responses_per_variant), num_questions * len(variants))
    return Layout(question, variant, sample)


def dense_ids(keys: np.ndarray) -> tuple[np.ndarray, int]:
    """Dense ids numbered by first appearance (not by sorted key)."""
    if keys.size == 0:
        return keys.astype(np.int64), 0
    # Fast path: keys already run 0, 0, ..., 1, 1, ... (the canonical layout).
    steps = np.diff(keys)
    if keys[0] == 0 and np.all((steps == 0) | (steps == 1)):
        return keys.astype(np.int64), int(keys[-1]) + 1
    _, first, inverse = np.unique(keys, return_index=True, return_inverse=True)
    rank = np.empty_like(first)
    rank[np.argsort(first, kind="stable")] = np.arange(first.size)
    return rank[inverse].astype(np.int64), int(first.size)


def group_ids(
    question: np.ndarray, variant: np.ndarray, grouping: Grouping
) -> tuple[np.ndarray, int]:
    """Normalisation group of every response and the number of groups.

    ``joint``: one group per question over all its variants (TA-GRPO, Eq. 3);
    ``per_variant``: one group per (question, variant) (TA-GRPO*, Eq. 1 per rephrasing);
    ``per_original``: one group per question, all responses to q0 (GRPO and baselines).
    """
    question = np.asarray(question, dtype=np.int64)
    variant = np.asarray(variant, dtype=np.int64)
    if question.shape != variant.shape:
        raise ValueError("question and variant must have the same shape")
    if grouping not in GROUPINGS:
        raise ValueError(f"grouping must be one of {GROUPINGS}, got {grouping!r}")
    if grouping == "per_original":
        if np.any(variant != 0):
            raise ValueError("per_original grouping expects only responses to q0 (variant 0)")
        return dense_ids(question)
    if grouping == "joint":
        return dense_ids(question)
    width = int(variant.max()) + 1 if variant.size else 1
    return dense_ids(question * width + variant)
