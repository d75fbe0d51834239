"""The algorithm core shared by every training backend: pure numpy/torch, no verl import.

methods           MethodSpec per method (what is sampled, grouping, anchor, DS, estimator)
estimators        the registry of advantage estimators (grpo, avspo), shared with verl
grouping          response layout and normalisation group ids
advantages        group-relative normalisation (Eq. 1 per group, Eq. 3 joint); epsilon rule
dynamic_sampling  DAPO-style drop-and-refill of all-equal groups
avspo             virtual rewards in collapsed groups' statistics (second paper)
zero_gradient     zero-gradient rates: original / neighbours / joint / training groups
loss              clipped policy loss (Eq. 2/4) with the low-variance KL loss
step              advantages and diagnostics of one step for a method
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagrpo.algorithms.advantages import (
        EPSILON,
        EstimatorOutput,
        group_moments,
        grpo_advantages,
    )
    from tagrpo.algorithms.avspo import (
        AdaptiveThreshold,
        AVSPOConfig,
        AVSPOResult,
        avspo_advantages,
        num_virtual_samples,
        virtual_rewards,
    )
    from tagrpo.algorithms.dynamic_sampling import DynamicSamplingResult, is_informative
    from tagrpo.algorithms.estimators import (
        ESTIMATORS,
        EstimatorSpec,
        get_estimator,
        register_estimator,
    )
    from tagrpo.algorithms.grouping import Layout, dense_ids, group_ids, rollout_layout
    from tagrpo.algorithms.loss import LossOutput, low_var_kl, policy_loss, token_log_probs
    from tagrpo.algorithms.methods import METHODS, MethodSpec, get_method
    from tagrpo.algorithms.step import StepAdvantages, advantages_and_diagnostics
    from tagrpo.algorithms.zero_gradient import (
        collapse_rates,
        step_diagnostics,
        training_group_diagnostics,
    )

# Exports resolve lazily: the method registry (read by every params check) must not load torch
# with the loss, nor numpy's estimators before they are needed. No export may share a
# submodule's name: once the submodule is imported, the package attribute is the module and
# `from tagrpo.algorithms import <name>` returns it instead of the function (so the function
# dynamic_sampling is imported from tagrpo.algorithms.dynamic_sampling).
_EXPORTS = {
    "EPSILON": "advantages",
    "group_moments": "advantages",
    "grpo_advantages": "advantages",
    "AdaptiveThreshold": "avspo",
    "AVSPOConfig": "avspo",
    "AVSPOResult": "avspo",
    "avspo_advantages": "avspo",
    "num_virtual_samples": "avspo",
    "virtual_rewards": "avspo",
    "collapse_rates": "zero_gradient",
    "step_diagnostics": "zero_gradient",
    "training_group_diagnostics": "zero_gradient",
    "DynamicSamplingResult": "dynamic_sampling",
    "is_informative": "dynamic_sampling",
    "ESTIMATORS": "estimators",
    "EstimatorOutput": "advantages",
    "EstimatorSpec": "estimators",
    "get_estimator": "estimators",
    "register_estimator": "estimators",
    "Layout": "grouping",
    "dense_ids": "grouping",
    "group_ids": "grouping",
    "rollout_layout": "grouping",
    "LossOutput": "loss",
    "low_var_kl": "loss",
    "policy_loss": "loss",
    "token_log_probs": "loss",
    "METHODS": "methods",
    "MethodSpec": "methods",
    "get_method": "methods",
    "StepAdvantages": "step",
    "advantages_and_diagnostics": "step",
}

__all__ = [
    "EPSILON",
    "ESTIMATORS",
    "METHODS",
    "AVSPOConfig",
    "AVSPOResult",
    "AdaptiveThreshold",
    "DynamicSamplingResult",
    "EstimatorOutput",
    "EstimatorSpec",
    "Layout",
    "LossOutput",
    "MethodSpec",
    "StepAdvantages",
    "advantages_and_diagnostics",
    "avspo_advantages",
    "collapse_rates",
    "dense_ids",
    "get_estimator",
    "get_method",
    "group_ids",
    "group_moments",
    "grpo_advantages",
    "is_informative",
    "low_var_kl",
    "num_virtual_samples",
    "policy_loss",
    "register_estimator",
    "rollout_layout",
    "step_diagnostics",
    "token_log_probs",
    "training_group_diagnostics",
    "virtual_rewards",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
