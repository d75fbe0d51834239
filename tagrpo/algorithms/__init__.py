"""The algorithm core shared by every training backend: pure numpy/torch, no verl import.

methods           MethodSpec per method (what is sampled, grouping, anchor, DS, estimator)
estimators        the registry of advantage estimators (grpo, avspo), shared with verl
grouping          response layout and normalisation group ids
advantages        group-relative normalisation (Eq. 1 per group, Eq. 3 joint); epsilon rule
dynamic_sampling  DAPO-style drop-and-refill of all-equal groups
avspo             virtual rewards in collapsed groups' statistics (second paper)
diagnostics       zero-gradient rates: original / neighbours / joint / training groups
loss              clipped policy loss (Eq. 2/4) with the low-variance KL loss
step              advantages and diagnostics of one step for a method
"""

from tagrpo.algorithms.advantages import EPSILON, group_moments, grpo_advantages
from tagrpo.algorithms.avspo import (
    AdaptiveThreshold,
    AVSPOConfig,
    AVSPOResult,
    avspo_advantages,
    num_virtual_samples,
    virtual_rewards,
)
from tagrpo.algorithms.diagnostics import (
    collapse_rates,
    step_diagnostics,
    training_group_diagnostics,
)
from tagrpo.algorithms.dynamic_sampling import (
    DynamicSamplingResult,
    dynamic_sampling,
    is_informative,
)
from tagrpo.algorithms.estimators import (
    ESTIMATORS,
    EstimatorOutput,
    EstimatorSpec,
    get_estimator,
    register_estimator,
)
from tagrpo.algorithms.grouping import Layout, dense_ids, group_ids, rollout_layout
from tagrpo.algorithms.loss import LossOutput, low_var_kl, policy_loss, token_log_probs
from tagrpo.algorithms.methods import METHODS, MethodSpec, get_method
from tagrpo.algorithms.step import StepAdvantages, advantages_and_diagnostics

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
    "dynamic_sampling",
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
