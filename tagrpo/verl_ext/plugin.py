"""Registers the project's extensions in verl's registries (import for the side effect).

verl imports the modules named in ``VERL_USE_EXTERNAL_MODULES`` when ``verl`` itself is
imported, in the driver and in every Ray worker (the launcher also passes the variable through
``ray_kwargs.ray_init.runtime_env.env_vars``):

    VERL_USE_EXTERNAL_MODULES=tagrpo.verl_ext.plugin python -m verl.trainer.main_ppo ...

After this import: ``avspo`` is in ``core_algos.ADV_ESTIMATOR_REGISTRY``, ``tagrpo_agent`` in the
agent-loop registry and ``tagrpo_sync`` in the V1 trainer registry. The reward function is not
registered; verl loads it from ``reward.custom_reward_function.path``.
"""

from tagrpo.verl_ext import agent_loop, estimators, trainer

__all__ = ["agent_loop", "estimators", "trainer"]
