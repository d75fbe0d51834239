"""The CPU support's hold on verl internals: fails loudly on any verl other than 0.9.1.

The CPU platform, engine and ``hf`` rollout engine use a private registry
(``verl.workers.rollout.base._ROLLOUT_REGISTRY``), two module-level names
(``initialize_global_process_group_ray`` where verl imports it by name, ``CPUOffloadPolicy`` in
the FSDP engine module) and the platform ABC. Each is checked here in a fresh process loaded
the way a CPU run loads it (``VERL_USE_EXTERNAL_MODULES``, platform first); a GPU run's process
loads none of it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import verl

from tagrpo.verl_ext.device import CPU_MODULES, external_modules


def run_fresh(code: str, **env: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object as its last line."""
    result = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_verl_is_the_pinned_version() -> None:
    assert verl.__version__ == "0.9.1", (
        f"verl {verl.__version__}: the CPU platform, FSDP engine registration and hf rollout "
        "engine (tagrpo/verl_ext/cpu_*.py, hf_rollout.py) rely on 0.9.1 internals; re-check "
        "each against the new version (tagrpo/verl_ext/README.md) before changing the pin"
    )


CPU_PROCESS = """
    import json, os
    import torch
    from torch.distributed.fsdp import CPUOffloadPolicy as FSDP2OffloadPolicy
    import verl  # imports VERL_USE_EXTERNAL_MODULES, as in every verl process
    from verl.plugin.platform import get_platform
    from verl.utils.device import get_device_name, get_torch_device
    from verl.workers.engine.base import EngineRegistry
    from verl.workers.engine.fsdp import transformer_impl
    from verl.workers.rollout.base import get_rollout_class
    from verl.workers.rollout.replica import get_rollout_replica_class
    import verl.workers.engine_workers as engine_workers
    import verl.checkpoint_engine.base as checkpoint_base
    import verl.utils.distributed as distributed
    from tagrpo.verl_ext.cpu_engines import unpinned_offload_policy

    initialisers = [m.initialize_global_process_group_ray
                    for m in (distributed, engine_workers, checkpoint_base)]
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", RANK="0", WORLD_SIZE="1")
    engine_workers.initialize_global_process_group_ray(timeout_second=None)
    with unpinned_offload_policy():
        pinned_inside = transformer_impl.CPUOffloadPolicy(pin_memory=True).pin_memory
    device = get_torch_device()
    print(json.dumps({
        "platform": type(get_platform()).__name__,
        "device": get_device_name(),
        "resource": get_platform().ray_resource_name(),
        "engine": EngineRegistry.get_engine_cls("language_model", "fsdp2").__name__,
        "gloo_wrapped": [getattr(f, "__tagrpo_gloo__", False) for f in initialisers],
        "backend": torch.distributed.get_backend(),
        "pinned_inside": pinned_inside,
        "policy_restored": transformer_impl.CPUOffloadPolicy is FSDP2OffloadPolicy,
        "adapter": get_rollout_class("hf").__name__,
        "replica": get_rollout_replica_class("hf").__name__,
        "memory": [device.memory_allocated(), device.mem_get_info()[1] > 0,
                   device.current_device()],
    }))
"""


def test_cpu_process_gets_platform_engine_gloo_and_hf_engine() -> None:
    got = run_fresh(
        CPU_PROCESS, VERL_PLATFORM="cpu", VERL_USE_EXTERNAL_MODULES=external_modules("cpu")
    )
    assert got == {
        "platform": "PlatformCPU",
        "device": "cpu",
        "resource": "GPU",
        "engine": "CPUFSDPEngineWithLMHead",
        "gloo_wrapped": [True, True, True],
        "backend": "gloo",
        "pinned_inside": False,
        "policy_restored": True,
        "adapter": "HFServerAdapter",
        "replica": "HFRolloutReplica",
        "memory": [0, True, "cpu"],
    }


def test_gpu_process_loads_none_of_the_cpu_support() -> None:
    got = run_fresh(
        """
        import json, sys
        import verl
        from verl.plugin.platform.platform_manager import PlatformRegistry
        from verl.workers.rollout.replica import RolloutReplicaRegistry
        print(json.dumps({
            "loaded": sorted(m for m in sys.modules if m.startswith("tagrpo.verl_ext.")),
            "platforms": sorted(PlatformRegistry.registered_names()),
            "engines": sorted(RolloutReplicaRegistry._registry),
        }))
        """,
        VERL_USE_EXTERNAL_MODULES=external_modules("cuda"),
    )
    assert not set(got["loaded"]) & set(CPU_MODULES)
    assert "tagrpo.verl_ext.plugin" in got["loaded"]
    assert "cpu" not in got["platforms"] and "hf" not in got["engines"]
