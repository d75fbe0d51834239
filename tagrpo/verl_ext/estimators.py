"""AVSPO as an advantage estimator in verl's registry (``algorithm.adv_estimator=avspo``).

A thin adapter: the math is :func:`tagrpo.algorithms.avspo_advantages`, the same function the
local backend calls. verl passes the trajectories' group index (``uid``) and the algorithm
config; AVSPO's settings come from ``algorithm.tagrpo.avspo`` (defaults of
:class:`tagrpo.algorithms.AVSPOConfig` when absent, e.g. with verl's stock trainer).

The ``tagrpo_sync`` trainer calls the same registered function with two extra keywords: the
adaptive threshold ``tau`` it carries across steps, and a ``diagnostics`` dict to receive
AVSPO's per-step figures (ACR before augmentation, whether it fired, virtual samples).
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import numpy as np
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from tagrpo.algorithms import AVSPOConfig, avspo_advantages
from tagrpo.verl_ext import AVSPO_ESTIMATOR
from tagrpo.verl_ext.settings import CONFIG_SECTION, section


def avspo_config_from(config: Any) -> AVSPOConfig:
    """``algorithm.tagrpo.avspo`` as an :class:`AVSPOConfig` (unknown keys ignored)."""
    values = dict(section(section(config, CONFIG_SECTION), "avspo"))
    names = set(AVSPOConfig.model_fields)
    return AVSPOConfig(**{k: v for k, v in values.items() if k in names})


def group_index(index: Any) -> tuple[np.ndarray, int]:
    """Dense integer group ids for verl's ``uid`` array (strings or integers)."""
    keys = np.asarray(list(index), dtype=object)
    _, inverse = np.unique(keys.astype(str), return_inverse=True)
    return inverse.astype(np.int64).reshape(-1), int(inverse.max(initial=-1)) + 1


@register_adv_est(AVSPO_ESTIMATOR)
def compute_avspo_outcome_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: Any = None,
    config: Any = None,
    norm_adv_by_std_in_grpo: bool | None = None,
    tau: float | None = None,
    diagnostics: MutableMapping[str, float] | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """AVSPO advantages of outcome rewards, broadcast over each response's tokens.

    Returns ``(advantages, returns)``, both ``(batch, response_length)`` and equal, as verl's
    GRPO estimator does.
    """
    if index is None:
        raise ValueError("avspo needs the group index (verl's uid) of every response")
    scale = norm_adv_by_std_in_grpo
    if scale is None:
        scale = bool(config.get("norm_adv_by_std_in_grpo", True)) if config is not None else True
    if not scale:
        raise ValueError("avspo normalises by the group std: norm_adv_by_std_in_grpo must be True")
    rewards = token_level_rewards.sum(dim=-1).detach().cpu().double().numpy()
    ids, num_groups = group_index(index)
    if ids.size != rewards.size:
        raise ValueError(f"{ids.size} group ids for {rewards.size} responses")
    result = avspo_advantages(rewards, ids, num_groups, avspo_config_from(config), tau)
    if diagnostics is not None:
        diagnostics.update(
            {
                "avspo/acr": result.acr,
                "avspo/triggered": float(result.triggered),
                "avspo/augmented_groups": float((result.virtual_counts > 0).sum()),
                "avspo/virtual_samples": float(result.virtual_counts.sum()),
            }
        )
    scores = torch.as_tensor(result.advantages, dtype=token_level_rewards.dtype)
    scores = scores.to(token_level_rewards.device).unsqueeze(-1) * response_mask
    return scores, scores
