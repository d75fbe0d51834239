"""One step's advantages and diagnostics for a method: the core every backend calls.

Given the rewards of a step's responses and their coordinates (question, prompt variant), it
builds the method's normalisation groups, computes the advantages (plain group-relative or
AVSPO) and the zero-gradient diagnostics. Pure numpy; the benchmark
``benchmarks/advantages_speed.py`` times exactly this function.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tagrpo.algorithms.advantages import EPSILON, grpo_advantages
from tagrpo.algorithms.avspo import AVSPOConfig, AVSPOResult, avspo_advantages
from tagrpo.algorithms.diagnostics import step_diagnostics
from tagrpo.algorithms.grouping import group_ids
from tagrpo.algorithms.methods import MethodSpec


@dataclass(frozen=True)
class StepAdvantages:
    advantages: np.ndarray  # one per response
    group_ids: np.ndarray  # the method's normalisation group of each response
    num_groups: int
    diagnostics: dict[str, float]
    avspo: AVSPOResult | None = None


def advantages_and_diagnostics(
    spec: MethodSpec,
    rewards: np.ndarray,
    question: np.ndarray,
    variant: np.ndarray,
    avspo_config: AVSPOConfig | None = None,
    tau: float | None = None,
    epsilon: float = EPSILON,
) -> StepAdvantages:
    """Advantages of every response under ``spec`` and the step's diagnostics."""
    rewards = np.asarray(rewards, dtype=np.float64)
    ids, num_groups = group_ids(question, variant, spec.grouping)
    result = None
    if spec.avspo:
        result = avspo_advantages(rewards, ids, num_groups, avspo_config, tau)
        advantages = result.advantages
    else:
        advantages = grpo_advantages(rewards, ids, num_groups, epsilon=epsilon)
    diagnostics = step_diagnostics(rewards, question, variant, ids, advantages)
    if result is not None:
        diagnostics["avspo/acr"] = result.acr
        diagnostics["avspo/triggered"] = float(result.triggered)
        diagnostics["avspo/augmented_groups"] = float((result.virtual_counts > 0).sum())
        diagnostics["avspo/virtual_samples"] = float(result.virtual_counts.sum())
    return StepAdvantages(advantages, ids, num_groups, diagnostics, result)
