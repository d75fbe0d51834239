"""AVSPO (Adaptive Virtual Sample Policy Optimization), the second paper's fix for collapse.

Virtual rewards are appended to a *collapsed* group (all rewards equal, std <= tolerance) and
enter only its normalisation statistics; only real responses get advantages and gradients.
The paper's formulas are partly lost in our copy and its public code (hexixiang/ACR) differs
from the text, so every formula below is a documented reconstruction (see
``tagrpo/algorithms/README.md``):

* collapse and ACR (Eq. 6): a group is collapsed when its reward std <= ``collapse_tol``; ACR is
  the share of collapsed groups in the batch;
* number of virtual samples (Eq. 8): ``K = clip(ceil(alpha * sqrt(G * ACR)), 1, G)``: one when
  ACR is small, about ``alpha * sqrt(G)`` when every group collapsed, never more than the G real
  responses;
* stratified values (Eq. 9), ``j = 1..K`` and anchor ``delta``: an all-wrong group
  (observed maximum 0) gets ``delta + (1 - delta) * j / K`` (positive anchors up to 1); a
  group with equal positive rewards ``c`` gets the mirror image ``c * (1 - delta) * (1 - j / K)``
  (down to 0). With K = 1 these are exactly the public code's single virtual reward (1.0 for
  all-wrong, 0.0 for all-correct);
* triggers: ``adaptive`` (the paper: augment when the batch ACR exceeds a threshold tau
  adapted by Eq. 10, :class:`AdaptiveThreshold`), ``always`` (augment every collapsed group:
  the per-group mechanism without the batch gate), ``batch`` (the public code: only when every
  reward of the whole batch is 0, or every one is 1, one virtual reward per group).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import model_validator

from tagrpo.algorithms.advantages import (
    EPSILON,
    EstimatorOutput,
    group_moments,
    normalize_with_stats,
)
from tagrpo.plumbing.config_model import ConfigModel, Field

AVSPO_TRIGGERS = ("adaptive", "always", "batch")


class AVSPOConfig(ConfigModel):
    """AVSPO settings (``train.estimators.avspo``).

    ``always``: virtual rewards in every collapsed group. The paper's ``adaptive`` trigger
    (batch ACR > tau, tau from 0.5) never fires in the mini world (its ACR is about 0.15).
    ``batch``: the public code's rule (only when every reward of the batch is equal).
    """

    trigger: Literal["adaptive", "always", "batch"] = Field(
        "always", description="adaptive (the paper) | always | batch (the public code)"
    )
    alpha: float = Field(0.5, gt=0, description="sensitivity of K to ACR (Eq. 8)")
    anchor_reward: float = Field(
        0.1, ge=0, lt=1, description="delta of the stratified virtual rewards (Eq. 9)"
    )
    tau_init: float = Field(0.5, ge=0, le=1, description="initial ACR threshold (Eq. 10)")
    tau_lr: float = Field(0.01, ge=0, description="threshold learning rate")
    tau_min: float = Field(0.1, ge=0, le=1, description="lowest threshold")
    tau_max: float = Field(0.9, ge=0, le=1, description="highest threshold")
    collapse_tol: float = Field(
        1e-6, ge=0, description="std at or below which a group counts as collapsed (Eq. 6)"
    )
    epsilon: float = Field(EPSILON, gt=0, description="std epsilon (the public code: 1e-4)")

    @model_validator(mode="after")
    def _tau_order(self) -> AVSPOConfig:
        if not self.tau_min <= self.tau_init <= self.tau_max:
            raise ValueError("need tau_min <= tau_init <= tau_max")
        return self


def num_virtual_samples(acr: float, group_size: int, alpha: float = 0.5) -> int:
    """Eq. 8 (reconstructed): ``clip(ceil(alpha * sqrt(G * ACR)), 1, G)``."""
    if group_size < 1:
        raise ValueError("group_size must be >= 1")
    wanted = math.ceil(alpha * math.sqrt(max(0.0, group_size * acr)) - 1e-12)
    return int(min(group_size, max(1, wanted)))


def virtual_rewards(observed_max: float, k: int, anchor_reward: float = 0.1) -> np.ndarray:
    """Eq. 9 (reconstructed): the K stratified virtual rewards of one collapsed group."""
    if k < 1:
        raise ValueError("k must be >= 1")
    j = np.arange(1, k + 1, dtype=np.float64)
    if observed_max <= 0.0:
        return anchor_reward + (1.0 - anchor_reward) * j / k
    return observed_max * (1.0 - anchor_reward) * (1.0 - j / k)


class AdaptiveThreshold:
    """Eq. 10 (reconstructed): the ACR threshold tau, updated once per training step.

    When the batch reward improved, tau moves toward the observed ACR
    (``tau += lr * (ACR - tau)``); when it did not, tau decreases by ``lr * ACR`` so that a
    stagnating run with high ACR triggers augmentation sooner. tau stays in its bounds.
    """

    def __init__(self, config: AVSPOConfig) -> None:
        self.config = config
        self.tau = config.tau_init
        self.previous_reward: float | None = None

    def update(self, acr: float, mean_reward: float) -> float:
        improved = self.previous_reward is not None and mean_reward > self.previous_reward
        if improved:
            self.tau += self.config.tau_lr * (acr - self.tau)
        else:
            self.tau -= self.config.tau_lr * acr
        self.tau = float(min(self.config.tau_max, max(self.config.tau_min, self.tau)))
        self.previous_reward = mean_reward
        return self.tau

    def state_dict(self) -> dict[str, float | None]:
        """What a resumed run needs to continue the same threshold (a verl checkpoint)."""
        return {"tau": self.tau, "previous_reward": self.previous_reward}

    def load_state_dict(self, state: dict[str, float | None]) -> None:
        tau, previous = state["tau"], state["previous_reward"]
        self.tau = float(tau) if tau is not None else self.config.tau_init
        self.previous_reward = None if previous is None else float(previous)


@dataclass(frozen=True)
class AVSPOResult:
    advantages: np.ndarray  # one per real response
    collapsed: np.ndarray  # bool per group: std <= collapse_tol before augmentation
    virtual_counts: np.ndarray  # int per group: virtual samples added (0 if not augmented)
    acr: float  # advantage collapse rate of the batch before augmentation
    triggered: bool  # whether augmentation happened this step


def avspo_advantages(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    num_groups: int | None = None,
    config: AVSPOConfig | None = None,
    tau: float | None = None,
) -> AVSPOResult:
    """Advantages of the real responses with virtual rewards in collapsed groups' statistics.

    ``tau`` is the current adaptive threshold (``config.tau_init`` if omitted); it is only read
    by the ``adaptive`` trigger. Non-collapsed groups get the plain GRPO advantages.
    """
    config = config if config is not None else AVSPOConfig()
    rewards = np.asarray(rewards, dtype=np.float64)
    group_ids = np.asarray(group_ids, dtype=np.int64)
    count, mean, std = group_moments(rewards, group_ids, num_groups)
    size = count.size
    collapsed = (std <= config.collapse_tol) & (count > 0)
    present = count > 0
    acr = float(collapsed.sum() / max(1, present.sum()))
    if config.trigger == "adaptive":
        triggered = acr > (config.tau_init if tau is None else tau)
        augment = collapsed if triggered else np.zeros(size, dtype=bool)
    elif config.trigger == "always":
        augment = collapsed
        triggered = bool(collapsed.any())
    else:  # batch: the public code's literal rule
        triggered = bool(rewards.size) and bool(np.all(rewards == 0.0) or np.all(rewards == 1.0))
        augment = present if triggered else np.zeros(size, dtype=bool)
    virtual_counts = np.zeros(size, dtype=np.int64)
    if augment.any():
        if config.trigger == "batch":
            virtual_counts[augment] = 1
        else:
            virtual_counts[augment] = [
                num_virtual_samples(acr, int(n), config.alpha) for n in count[augment]
            ]
        mean, std = _augmented_moments(
            rewards, group_ids, count, mean, std, augment, virtual_counts, config.anchor_reward
        )
    # The singleton rule (mean 0, std 1) must not undo an augmentation: count virtual samples.
    effective_count = count + virtual_counts
    advantages = normalize_with_stats(
        rewards, group_ids, mean, std, effective_count, config.epsilon
    )
    return AVSPOResult(advantages, collapsed, virtual_counts, acr, bool(triggered))


def _augmented_moments(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    count: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    augment: np.ndarray,
    virtual_counts: np.ndarray,
    anchor_reward: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Mean and sample std over real plus virtual rewards for the augmented groups.

    Vectorised over groups: the virtual rewards of all augmented groups form a masked
    ``[groups, K_max]`` array built with the same formula as :func:`virtual_rewards`.
    """
    size = count.size
    observed_max = np.full(size, -np.inf)
    np.maximum.at(observed_max, group_ids, rewards)
    index = np.flatnonzero(augment)
    k = virtual_counts[index].astype(np.float64)
    j = np.arange(1, int(k.max()) + 1, dtype=np.float64)[None, :]
    valid = j <= k[:, None]
    top = observed_max[index][:, None]
    values = np.where(
        top <= 0.0,
        anchor_reward + (1.0 - anchor_reward) * j / k[:, None],
        top * (1.0 - anchor_reward) * (1.0 - j / k[:, None]),
    )
    values = np.where(valid, values, 0.0)
    n = count[index]
    total = n + k
    new_mean = (n * mean[index] + values.sum(axis=1)) / total
    real_squares = (std[index] ** 2) * np.maximum(n - 1.0, 0.0) + n * (mean[index] - new_mean) ** 2
    virtual_squares = np.where(valid, (values - new_mean[:, None]) ** 2, 0.0).sum(axis=1)
    new_std = np.sqrt((real_squares + virtual_squares) / np.maximum(total - 1.0, 1.0))
    mean, std = mean.copy(), std.copy()
    mean[index], std[index] = new_mean, new_std
    return mean, std


def avspo_estimator(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    num_groups: int,
    epsilon: float,
    settings: AVSPOConfig,
    state: AdaptiveThreshold | None,
) -> EstimatorOutput:
    """:func:`avspo_advantages` with the threshold read from and updated in ``state``.

    Registered as estimator ``avspo`` in :mod:`tagrpo.algorithms.estimators`.

    ``epsilon`` is the method-wide one; AVSPO uses its own (``settings.epsilon``), as the paper.
    """
    tau = state.tau if state is not None else settings.tau_init
    result = avspo_advantages(rewards, group_ids, num_groups, settings, tau)
    diagnostics = {
        "acr": result.acr,
        "triggered": float(result.triggered),
        "augmented_groups": float((result.virtual_counts > 0).sum()),
        "virtual_samples": float(result.virtual_counts.sum()),
        "tau": float(tau),
    }
    if state is not None:
        state.update(result.acr, float(np.mean(rewards)) if len(rewards) else 0.0)
    return EstimatorOutput(result.advantages, diagnostics)
