"""The registry of advantage estimators, shared by the local backend and verl.

An estimator turns one step's rewards and the method's normalisation groups into one advantage
per response, plus diagnostics. It is registered once, by name, with its settings model (read
from ``train.estimators.<name>`` in params.yaml) and, if it keeps state across steps (AVSPO's
adaptive threshold), a state factory. Both backends look it up here: the local trainer calls it
directly; ``tagrpo.verl_ext.estimators`` registers every entry with verl's ``register_adv_est``
in one loop (``grpo`` excepted: verl's own estimator is the same formula), and verl's trainer
passes the settings (``algorithm.tagrpo.<name>``) and the state it keeps across steps.
Diagnostics are reported under ``<name>/`` (``avspo/acr``), whatever keys they have.

Adding an estimator: a module with its function (returning
:class:`~tagrpo.algorithms.advantages.EstimatorOutput`) and settings model, imported here and
registered in the list at the bottom of this file, beside the registry (as verl registers its
estimators with ``register_adv_est`` next to its registry); a method that names it in
:mod:`tagrpo.algorithms.methods`. No estimator registers itself on import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from tagrpo.algorithms.advantages import EstimatorOutput, grpo_advantages
from tagrpo.algorithms.avspo import AdaptiveThreshold, AVSPOConfig, avspo_estimator

if TYPE_CHECKING:
    from tagrpo.plumbing.config_model import ConfigModel


# (rewards, group ids, number of groups, epsilon, settings, state) -> EstimatorOutput
ComputeFn = Callable[[np.ndarray, np.ndarray, int, float, Any, Any], EstimatorOutput]


@dataclass(frozen=True)
class EstimatorSpec:
    name: str
    compute: ComputeFn
    config_model: type[ConfigModel] | None = None
    make_state: Callable[[Any], Any] | None = None  # settings -> state kept across steps
    description: str = ""

    def new_state(self, settings: Any) -> Any:
        return self.make_state(settings) if self.make_state is not None else None


ESTIMATORS: dict[str, EstimatorSpec] = {}


def register_estimator(
    name: str,
    config_model: type[ConfigModel] | None = None,
    make_state: Callable[[Any], Any] | None = None,
    description: str = "",
) -> Callable[[ComputeFn], ComputeFn]:
    """Decorator: register ``fn`` as estimator ``name`` (a second registration is an error)."""

    def decorator(fn: ComputeFn) -> ComputeFn:
        if name in ESTIMATORS and ESTIMATORS[name].compute is not fn:
            raise ValueError(f"advantage estimator {name!r} is already registered")
        ESTIMATORS[name] = EstimatorSpec(name, fn, config_model, make_state, description)
        return fn

    return decorator


def get_estimator(name: str) -> EstimatorSpec:
    try:
        return ESTIMATORS[name]
    except KeyError:
        raise ValueError(
            f"unknown advantage estimator {name!r}; known: {sorted(ESTIMATORS)}"
        ) from None


def grpo_estimator(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    num_groups: int,
    epsilon: float,
    settings: Any,
    state: Any,
) -> EstimatorOutput:
    return EstimatorOutput(grpo_advantages(rewards, group_ids, num_groups, epsilon=epsilon))


def grpo_flipped_estimator(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    num_groups: int,
    epsilon: float,
    settings: Any,
    state: Any,
) -> EstimatorOutput:
    # A known-bad method: with the sign flipped every update lowers the probability of the
    # correct responses of a mixed group, so a working instrument must report it below GRPO.
    advantages = grpo_advantages(rewards, group_ids, num_groups, epsilon=epsilon)
    return EstimatorOutput(-advantages)


# Every estimator, registered here in this order (verl_ext registers them with verl in it).
register_estimator("grpo", description="group-relative: (R - mean_g) / (std_g + epsilon)")(
    grpo_estimator
)
register_estimator(
    "avspo",
    config_model=AVSPOConfig,
    make_state=AdaptiveThreshold,
    description="AVSPO: virtual rewards in collapsed groups' statistics (second paper)",
)(avspo_estimator)
register_estimator(
    "grpo_flipped",
    description="negative control: minus the grpo advantages (pushes away from correct answers)",
)(grpo_flipped_estimator)

__all__ = [
    "ESTIMATORS",
    "EstimatorOutput",
    "EstimatorSpec",
    "get_estimator",
    "grpo_estimator",
    "grpo_flipped_estimator",
    "register_estimator",
]
