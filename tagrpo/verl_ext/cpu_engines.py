"""verl's FSDP training engine for device ``cpu`` (imported after :mod:`cpu_platform`).

verl 0.9.1 registers its FSDP language-model engine for devices ``cuda`` and ``npu`` only
(``verl/workers/engine/fsdp/transformer_impl.py``, ``@EngineRegistry.register(...,
device=["cuda", "npu"])``), so the actor and reference workers find no engine on the CPU
platform. This module registers a subclass of the same engine for device ``cpu``; the one
thing it changes is the FSDP2 offload policy of forward-only engines (the reference policy):
verl asks for ``CPUOffloadPolicy(pin_memory=True)``, and pinning host memory needs an
accelerator ("Cannot access accelerator device when none is available"). On the CPU the
parameters already live in host memory, so the policy is built unpinned.

Depends on verl internals (the engine class, the registry key, and the module-level name
``CPUOffloadPolicy`` that the engine's ``_build_fsdp_module`` reads): the CPU tests fail loudly
on a verl upgrade.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any

from torch.distributed.fsdp import CPUOffloadPolicy
from verl.workers.engine.base import EngineRegistry
from verl.workers.engine.fsdp import transformer_impl
from verl.workers.engine.fsdp.transformer_impl import FSDPEngineWithLMHead

DEVICE = "cpu"


class UnpinnedCPUOffloadPolicy(CPUOffloadPolicy):
    """``CPUOffloadPolicy`` that never pins host memory, whatever the caller asks for."""

    def __init__(self, pin_memory: bool = False) -> None:
        super().__init__(pin_memory=False)


@contextmanager
def unpinned_offload_policy():
    """Within the block, verl's engine module builds unpinned offload policies."""
    original = transformer_impl.CPUOffloadPolicy
    if original is not CPUOffloadPolicy:
        raise RuntimeError(
            "verl's transformer_impl.CPUOffloadPolicy is not torch's class: this CPU engine is "
            "written for verl==0.9.1"
        )
    transformer_impl.CPUOffloadPolicy = UnpinnedCPUOffloadPolicy
    try:
        yield
    finally:
        transformer_impl.CPUOffloadPolicy = original


@EngineRegistry.register(model_type="language_model", backend=["fsdp", "fsdp2"], device=DEVICE)
class CPUFSDPEngineWithLMHead(FSDPEngineWithLMHead):
    """verl's FSDP/FSDP2 language-model engine, with unpinned offload for the CPU."""

    def _build_fsdp_module(self, module: Any) -> Any:
        with unpinned_offload_policy():
            return super()._build_fsdp_module(module)
