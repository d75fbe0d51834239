"""One step's advantages and diagnostics for a method: the core every backend calls.

Given the rewards of a step's responses and their coordinates (question, prompt variant), it
builds the method's normalisation groups, calls the method's registered estimator
(:mod:`tagrpo.algorithms.estimators`) and computes the training-group diagnostics. Pure numpy;
the benchmark ``benchmarks/advantages_speed.py`` times exactly this function.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tagrpo.algorithms.advantages import EPSILON
from tagrpo.algorithms.estimators import get_estimator
from tagrpo.algorithms.grouping import group_ids
from tagrpo.algorithms.methods import MethodSpec
from tagrpo.algorithms.zero_gradient import training_group_diagnostics


@dataclass(frozen=True)
class StepAdvantages:
    advantages: np.ndarray  # one per response
    group_ids: np.ndarray  # the method's normalisation group of each response
    num_groups: int
    # ``train/...`` (the method's groups) and ``<estimator>/...`` (whatever it reports)
    diagnostics: dict[str, float]


def advantages_and_diagnostics(
    spec: MethodSpec,
    rewards: np.ndarray,
    question: np.ndarray,
    variant: np.ndarray,
    estimator_settings: Any = None,
    estimator_state: Any = None,
    epsilon: float = EPSILON,
) -> StepAdvantages:
    """Advantages of every response under ``spec`` and the step's training diagnostics.

    ``estimator_settings`` is the estimator's settings model (``train.estimators.<name>``; its
    defaults when None); ``estimator_state`` what it keeps across steps (updated in place).
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    ids, num_groups = group_ids(question, variant, spec.grouping)
    estimator = get_estimator(spec.estimator)
    if estimator_settings is None and estimator.config_model is not None:
        estimator_settings = estimator.config_model()
    output = estimator.compute(
        rewards, ids, num_groups, epsilon, estimator_settings, estimator_state
    )
    diagnostics = training_group_diagnostics(rewards, ids, output.advantages, num_groups)
    diagnostics.update({f"{estimator.name}/{k}": v for k, v in output.diagnostics.items()})
    return StepAdvantages(output.advantages, ids, num_groups, diagnostics)
