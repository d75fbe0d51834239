"""Reward-group statistics: how often a group of sampled responses gives no gradient.

A group whose rewards are all equal has zero standard deviation, hence zero GRPO advantages
and no policy-gradient signal (the paper's "gradient vanishing", section 3; the second
paper's "advantage collapse"). Split into all-correct and all-wrong, as both papers do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class GroupStats:
    groups: int
    mixed_rate: float  # share of groups with at least two distinct rewards
    all_correct_rate: float  # zero-gradient groups where every response is rewarded
    all_wrong_rate: float  # zero-gradient groups where no response is rewarded

    @property
    def zero_gradient_rate(self) -> float:
        return self.all_correct_rate + self.all_wrong_rate

    def as_dict(self, prefix: str = "") -> dict[str, float]:
        return {
            f"{prefix}groups": float(self.groups),
            f"{prefix}mixed_rate": self.mixed_rate,
            f"{prefix}zero_gradient_rate": self.zero_gradient_rate,
            f"{prefix}all_correct_rate": self.all_correct_rate,
            f"{prefix}all_wrong_rate": self.all_wrong_rate,
        }


def group_stats(rewards: Sequence[Sequence[float]] | np.ndarray) -> GroupStats:
    """Statistics over groups; each row holds one group's binary (0/1) rewards.

    Rows may differ in length (pass a list of lists). A group counts as all-correct when every
    reward equals the maximum reward 1, all-wrong when every reward is 0; groups with equal
    non-binary rewards count as zero-gradient in neither split but not as mixed either.
    """
    groups = [np.asarray(row, dtype=float) for row in rewards]
    if not groups:
        raise ValueError("no groups")
    if any(row.size == 0 for row in groups):
        raise ValueError("empty group")
    mixed = sum(bool(np.ptp(row) > 0) for row in groups)
    all_correct = sum(bool(np.all(row == 1.0)) for row in groups)
    all_wrong = sum(bool(np.all(row == 0.0)) for row in groups)
    total = len(groups)
    return GroupStats(total, mixed / total, all_correct / total, all_wrong / total)
