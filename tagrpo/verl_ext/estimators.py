"""Every registered tagrpo advantage estimator in verl's registry, in one loop.

``tagrpo.algorithms.estimators`` holds the estimators (name -> function, settings model, state
factory); the local backend calls them directly. Here each one (but ``grpo``: verl's stock
estimator is the same formula) is wrapped once as a verl advantage estimator of the same name
(``algorithm.adv_estimator=avspo``), so a new estimator reaches verl without a line here.

verl passes the trajectories' group index (``uid``) and the algorithm config; the estimator's
settings come from ``algorithm.tagrpo.<name>`` (``train.estimators.<name>``, written by the
launcher; a run without them is refused). The ``tagrpo_sync`` trainer passes two more
keywords: ``state``, which it keeps across steps (AVSPO's adaptive threshold), and a
``diagnostics`` dict that receives the estimator's figures as ``<name>/<key>``.
"""

from __future__ import annotations

from collections.abc import Callable, MutableMapping
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from tagrpo.algorithms.advantages import EPSILON
from tagrpo.algorithms.estimators import ESTIMATORS, EstimatorSpec
from tagrpo.verl_ext.settings import CONFIG_SECTION, section

# tagrpo estimators that verl already has under the same name and formula.
VERL_BUILTIN = frozenset({"grpo"})


def estimator_settings(spec: EstimatorSpec, config: Any) -> Any:
    """``algorithm.tagrpo.<name>`` as the estimator's settings model; None for an estimator
    without settings."""
    if spec.config_model is None:
        return None
    settings = section(config, CONFIG_SECTION)
    if not section(settings, spec.name):
        raise ValueError(
            f"algorithm.{CONFIG_SECTION}.{spec.name} is not set: build the command with "
            "tagrpo.verl_ext.overrides (python -m stages.train --method M --dry-run)"
        )
    return spec.config_model.model_validate(dict(section(settings, spec.name)))


def group_index(index: Any) -> tuple[np.ndarray, int]:
    """Dense integer group ids for verl's ``uid`` array (strings or integers)."""
    keys = np.asarray(list(index), dtype=object)
    _, inverse = np.unique(keys.astype(str), return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), int(inverse.max(initial=-1)) + 1


def verl_estimator(spec: EstimatorSpec) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``spec`` with verl's advantage-estimator signature; outcome rewards, advantages
    broadcast over each response's tokens; returns ``(advantages, returns)``, equal, as verl's
    GRPO estimator does."""

    def compute(
        token_level_rewards: torch.Tensor,
        response_mask: torch.Tensor,
        index: Any = None,
        config: Any = None,
        norm_adv_by_std_in_grpo: bool | None = None,
        state: Any = None,
        diagnostics: MutableMapping[str, float] | None = None,
        **kwargs: Any,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        if index is None:
            raise ValueError(f"{spec.name} needs the group index (verl's uid) of every response")
        scale = norm_adv_by_std_in_grpo
        if scale is None:
            scale = bool(config.get("norm_adv_by_std_in_grpo", True)) if config else True
        if not scale:
            raise ValueError(
                f"{spec.name} normalises by the group std: norm_adv_by_std_in_grpo must be True"
            )
        rewards = token_level_rewards.sum(dim=-1).detach().cpu().double().numpy()
        ids, num_groups = group_index(index)
        if ids.size != rewards.size:
            raise ValueError(f"{ids.size} group ids for {rewards.size} responses")
        settings = estimator_settings(spec, config)
        # verl's own grpo estimator hard-codes 1e-6; the launcher refuses another train.epsilon.
        output = spec.compute(rewards, ids, num_groups, EPSILON, settings, state)
        if diagnostics is not None:
            diagnostics.update(
                {f"{spec.name}/{k}": float(v) for k, v in output.diagnostics.items()}
            )
        scores = torch.as_tensor(output.advantages, dtype=token_level_rewards.dtype)
        scores = scores.to(token_level_rewards.device).unsqueeze(-1) * response_mask
        return scores, scores

    compute.__name__ = compute.__qualname__ = f"compute_{spec.name}_outcome_advantage"
    return compute


def register_all() -> dict[str, Callable[..., tuple[torch.Tensor, torch.Tensor]]]:
    """Register every tagrpo estimator verl lacks; returns them by name."""
    registered = {}
    for name, spec in ESTIMATORS.items():
        if name not in VERL_BUILTIN:
            registered[name] = register_adv_est(name)(verl_estimator(spec))
    return registered


VERL_ESTIMATORS = register_all()
