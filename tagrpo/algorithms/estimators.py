"""The registry of advantage estimators, shared by the local backend and verl.

An estimator turns one step's rewards and the method's normalisation groups into one advantage
per response, plus diagnostics. It is registered once, by name, with its settings model (read
from ``train.estimators.<name>`` in params.yaml) and, if it keeps state across steps (AVSPO's
adaptive threshold), a state factory. Both backends look it up here: the local trainer calls it
directly; ``tagrpo.verl_ext.estimators`` registers every entry with verl's ``register_adv_est``
in one loop (``grpo`` excepted: verl's own estimator is the same formula), and verl's trainer
passes the settings (``algorithm.tagrpo.<name>``) and the state it keeps across steps.
Diagnostics are reported under ``<name>/`` (``avspo/acr``), whatever keys they have.

Adding an estimator: a module with a function decorated by :func:`register_estimator` (and its
settings model), imported at the bottom of this file; a method that names it in
:mod:`tagrpo.algorithms.methods`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tagrpo.algorithms.advantages import grpo_advantages

if TYPE_CHECKING:
    from tagrpo.config.model import ConfigModel


@dataclass(frozen=True)
class EstimatorOutput:
    advantages: np.ndarray  # one per response
    diagnostics: dict[str, float] = field(default_factory=dict)  # reported as <name>/<key>


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


@register_estimator("grpo", description="group-relative: (R - mean_g) / (std_g + epsilon)")
def grpo_estimator(
    rewards: np.ndarray,
    group_ids: np.ndarray,
    num_groups: int,
    epsilon: float,
    settings: Any,
    state: Any,
) -> EstimatorOutput:
    return EstimatorOutput(grpo_advantages(rewards, group_ids, num_groups, epsilon=epsilon))


@register_estimator(
    "grpo_flipped",
    description="negative control: minus the grpo advantages (pushes away from correct answers)",
)
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


# Estimators defined in their own modules register on import.
from tagrpo.algorithms import avspo as _avspo  # noqa: E402, F401
