"""Which device a verl run targets, and what that means for its modules and configuration.

``verl.device`` (params section ``verl``) is ``cuda`` (the paper's GPUs; rollouts by vLLM) or
``cpu`` (genuine verl steps on the host CPU; rollouts by the project's ``hf`` engine).
``verl.rollout_engine`` must match it: ``hf`` cannot serve a GPU run as verl expects (no
CUDA-IPC weights, no memory sleep, none of vLLM's throughput), and vLLM/SGLang cannot serve on
this CPU. Mismatches are refused with the profile to use, rather than started and left to fail
(or to train with the wrong engine); the typed params refuse them when the file is loaded
(:func:`tagrpo.config.engines.check_engine`).

For ``cpu`` the launcher loads three more modules in every verl process (the platform first:
verl resolves its platform at import time) and adds the configuration a CPU-only machine needs.
The user types none of it; :func:`cpu_overrides` derives it from the params. Pure Python: no
verl import.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tagrpo.config.engines import VerlSettings, check_engine
from tagrpo.verl_ext import PLUGIN_MODULE

# In import order: the platform must be registered before any verl trainer module is imported.
CPU_MODULES = (
    "tagrpo.verl_ext.cpu_platform",
    "tagrpo.verl_ext.cpu_engines",
    "tagrpo.verl_ext.hf_rollout",
)
# verl reserves CPUs for agent-loop, reward and TransferQueue actors; on a 2-core machine Ray
# would otherwise queue them forever (silently). Logical CPUs, not threads: torch threads are
# set separately (OMP_NUM_THREADS).
LOGICAL_CPUS = 32


def run_device(verl: VerlSettings) -> str:
    """``cuda`` or ``cpu`` for a run with these ``verl`` settings.

    :class:`~tagrpo.config.engines.VerlSettings` refused an engine that does not fit the device
    when the params were loaded; the check is repeated for an instance built with
    ``model_construct`` (which skips validation).
    """
    check_engine(verl.device, verl.rollout_engine)
    return verl.device


def external_modules(device: str) -> str:
    """``VERL_USE_EXTERNAL_MODULES`` for the device (platform module first on the CPU)."""
    modules = [*CPU_MODULES, PLUGIN_MODULE] if device == "cpu" else [PLUGIN_MODULE]
    return ",".join(modules)


def device_env(device: str, torch_threads: int) -> dict[str, str]:
    """Environment of the verl process and every Ray worker for the device."""
    env = {"VERL_USE_EXTERNAL_MODULES": external_modules(device)}
    if device == "cpu":
        threads = str(max(1, int(torch_threads)))
        env.update(
            {
                "VERL_PLATFORM": "cpu",
                # Ray would give each worker 1 thread (OMP_NUM_THREADS=num_cpus of the actor).
                "OMP_NUM_THREADS": threads,
                "TAGRPO_HF_ROLLOUT_THREADS": threads,
            }
        )
    return env


@dataclass(frozen=True)
class DeviceOverrides:
    """Overrides of keys in verl's config (``values``) and of keys it lacks (``added``, ``++``)."""

    values: dict[str, Any] = field(default_factory=dict)
    added: dict[str, Any] = field(default_factory=dict)


def cpu_overrides(verl: VerlSettings) -> DeviceOverrides:
    """The verl settings of a CPU-only run."""
    fp32 = {"param_dtype": "fp32", "reduce_dtype": "fp32", "buffer_dtype": "fp32"}
    values: dict[str, Any] = {
        "trainer.device": "cpu",
        "actor_rollout_ref.model.use_remove_padding": False,  # flash-attention varlen only
        "actor_rollout_ref.actor.strategy": "fsdp2",
        "actor_rollout_ref.ref.strategy": "fsdp2",
        # torch.compile of the entropy would compile C++ on every worker start.
        "actor_rollout_ref.actor.fsdp_config.use_torch_compile": False,
        "actor_rollout_ref.ref.fsdp_config.use_torch_compile": False,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": 1,
        "actor_rollout_ref.rollout.agent.num_workers": 1,
        "reward.num_workers": 1,
        "transfer_queue.backend.SimpleStorage.num_data_storage_units": 1,
        # verl's default of 8 dataloader processes, for a parquet of a few dozen rows.
        "data.dataloader_num_workers": 0,
        "ray_kwargs.ray_init.num_cpus": LOGICAL_CPUS,
    }
    added: dict[str, Any] = {
        # Logical GPUs: verl's placement groups reserve one per worker.
        "ray_kwargs.ray_init.num_gpus": verl.n_gpus_per_node * verl.nnodes,
        "actor_rollout_ref.model.override_config.attn_implementation": "sdpa",
        # fp32 end to end: bf16 matmuls on a CPU are slow and would blur the parity checks.
        "actor_rollout_ref.actor.fsdp_config.mixed_precision": fp32,
        "actor_rollout_ref.ref.fsdp_config.mixed_precision": fp32,
    }
    return DeviceOverrides(values, added)
