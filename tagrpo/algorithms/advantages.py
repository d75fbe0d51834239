"""Group-relative advantages: per-group (Eq. 1) and joint (Eq. 3) normalisation.

Epsilon convention (the same as verl's ``compute_grpo_outcome_advantage``, so the local and
the verl backends give identical numbers):

    A_i = (R_i - mean_g) / (std_g + EPSILON),   EPSILON = 1e-6 added to the std, not the variance

* ``std_g`` is the *sample* standard deviation (Bessel's correction, ``torch.std``'s default)
  over the group's responses;
* a group of one response gets mean 0 and std 1, i.e. A = R / (1 + EPSILON) (verl's convention;
  no method here produces such groups, G >= 2);
* a group whose rewards are all equal has ``R_i - mean_g == 0`` exactly for binary rewards, so
  A = 0: the "zero-gradient" groups of both papers;
* ``scale_by_std=False`` gives Dr. GRPO-style mean-centred advantages (not used by the paper).

Joint vs per-variant normalisation is only a different ``group_ids`` array
(:mod:`tagrpo.algorithms.grouping`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

EPSILON = 1e-6


@dataclass(frozen=True)
class EstimatorOutput:
    """What every advantage estimator returns (registry: :mod:`tagrpo.algorithms.estimators`)."""

    advantages: np.ndarray  # one per response
    diagnostics: dict[str, float] = field(default_factory=dict)  # reported as <name>/<key>


def group_moments(
    values: np.ndarray, group_ids: np.ndarray, num_groups: int | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-group ``(count, mean, sample std)``; std is 0 for groups of one value.

    Two passes (mean, then squared deviations) so that equal values give a std of exactly 0.
    """
    values = np.asarray(values, dtype=np.float64)
    group_ids = np.asarray(group_ids, dtype=np.int64)
    if values.shape != group_ids.shape or values.ndim != 1:
        raise ValueError("values and group_ids must be 1-D arrays of the same length")
    size = int(num_groups) if num_groups is not None else int(group_ids.max(initial=-1)) + 1
    count = np.bincount(group_ids, minlength=size).astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.bincount(group_ids, weights=values, minlength=size) / count
        deviation = values - mean[group_ids]
        squares = np.bincount(group_ids, weights=deviation * deviation, minlength=size)
        std = np.sqrt(squares / np.maximum(count - 1.0, 1.0))
    return count, mean, std


def normalize_with_stats(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    count: np.ndarray,
    epsilon: float = EPSILON,
    scale_by_std: bool = True,
) -> np.ndarray:
    """``(R - mean_g) / (std_g + epsilon)`` with given per-group statistics.

    Singleton groups (``count == 1``) use mean 0 and std 1 (verl's convention).
    """
    singleton = count == 1.0
    mean = np.where(singleton, 0.0, mean)
    std = np.where(singleton, 1.0, std)
    centred = np.asarray(rewards, dtype=np.float64) - mean[group_ids]
    if not scale_by_std:
        return centred
    return centred / (std[group_ids] + epsilon)


def grpo_advantages(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    num_groups: int | None = None,
    epsilon: float = EPSILON,
    scale_by_std: bool = True,
) -> np.ndarray:
    """Group-relative advantages of every response (Eq. 1 per group, Eq. 3 when joint)."""
    count, mean, std = group_moments(rewards, group_ids, num_groups)
    return normalize_with_stats(rewards, group_ids, mean, std, count, epsilon, scale_by_std)
