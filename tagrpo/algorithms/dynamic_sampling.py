"""Dynamic sampling (DAPO, Yu et al.): drop groups whose rewards are all equal, refill the batch.

The loop is generic over what a "group" is: the trainer's ``draw(k)`` takes the next ``k``
questions from the data stream, samples and grades their responses and returns one record per
question; ``rewards_of(record)`` gives the rewards of the group the method normalises over (G
responses for ``grpo_ds``, (N+1)G for ``grpo_x4_ds``). Records with equal rewards are dropped
and *replaced*: each refill round draws exactly as many new questions as the batch still
misses, until it is full or ``max_rounds`` rounds ran.

Differences from the two public implementations, on purpose (the kept batch is the same kind
of sample; only how much is drawn per round differs): the DAPO recipe draws whole generation
batches and truncates the surplus; verl V1 re-requests twice the evicted count and discards the
surplus. Replacing exactly the missing count never discards an informative group, so the
extra rollouts it reports are exactly the responses of dropped groups.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Generic, TypeVar

import numpy as np

T = TypeVar("T")


def is_informative(rewards: Sequence[float] | np.ndarray, tol: float = 0.0) -> bool:
    """True when the rewards are not all equal (max - min > tol): a non-zero GRPO gradient."""
    values = np.asarray(rewards, dtype=np.float64)
    return bool(values.size > 1 and np.ptp(values) > tol)


@dataclass
class DynamicSamplingResult(Generic[T]):
    kept: list[T]  # at most batch_size informative records, in draw order
    rounds: int  # generation rounds run (1 = no refill needed)
    drawn: int  # questions drawn in total
    dropped_all_correct: int  # dropped groups whose rewards were all at their maximum 1
    dropped_all_wrong: int  # dropped groups whose rewards were all 0
    dropped_other: int  # dropped groups with equal non-binary rewards (or a single response)
    responses_generated: int  # over all rounds
    responses_kept: int
    filled: bool  # whether the batch reached batch_size
    dropped: list[T] = field(default_factory=list)

    @property
    def extra_rollouts(self) -> int:
        """Responses generated beyond those of the kept groups (the cost of refilling)."""
        return self.responses_generated - self.responses_kept


def dynamic_sampling(
    draw: Callable[[int], Sequence[T]],
    rewards_of: Callable[[T], Sequence[float] | np.ndarray],
    batch_size: int,
    max_rounds: int = 8,
) -> DynamicSamplingResult[T]:
    """Fill a batch of ``batch_size`` informative groups (see the module docstring).

    If the batch is still short after ``max_rounds`` rounds, the partial batch is returned
    with ``filled=False`` (the DAPO recipe raises instead; a tiny policy can legitimately run
    out of mixed groups, and the trainer logs it).
    """
    if batch_size < 1 or max_rounds < 1:
        raise ValueError("batch_size and max_rounds must be >= 1")
    kept: list[T] = []
    dropped: list[T] = []
    counts = {"correct": 0, "wrong": 0, "other": 0}
    rounds = drawn = generated = kept_responses = 0
    while len(kept) < batch_size and rounds < max_rounds:
        records = list(draw(batch_size - len(kept)))
        rounds += 1
        if not records:
            break
        drawn += len(records)
        for record in records:
            rewards = np.asarray(rewards_of(record), dtype=np.float64)
            generated += rewards.size
            if is_informative(rewards):
                kept.append(record)
                kept_responses += rewards.size
                continue
            dropped.append(record)
            if rewards.size > 1 and np.all(rewards == 1.0):
                counts["correct"] += 1
            elif rewards.size > 1 and np.all(rewards == 0.0):
                counts["wrong"] += 1
            else:
                counts["other"] += 1
    return DynamicSamplingResult(
        kept=kept,
        rounds=rounds,
        drawn=drawn,
        dropped_all_correct=counts["correct"],
        dropped_all_wrong=counts["wrong"],
        dropped_other=counts["other"],
        responses_generated=generated,
        responses_kept=kept_responses,
        filled=len(kept) >= batch_size,
        dropped=dropped,
    )
