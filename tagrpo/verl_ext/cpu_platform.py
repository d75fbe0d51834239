"""A CPU platform for verl 0.9.1 (``VERL_PLATFORM=cpu``): genuine verl steps without a GPU.

Stock verl has no CPU platform: with no accelerator it falls back to "nvidia" and builds NCCL
process groups, which a CPU build of torch does not have. This module registers one through
verl's own :class:`PlatformRegistry` and is selected with ``VERL_PLATFORM=cpu``.

It must be imported before any verl trainer or worker module (some resolve the platform at
import time, e.g. ``verl/workers/engine/fsdp/transformer_impl.py`` reads ``get_device_name()``
at module level), in the driver and in every Ray worker: the launcher lists it FIRST in
``VERL_USE_EXTERNAL_MODULES`` (which ``import verl`` honours) and forwards that variable and
``VERL_PLATFORM`` to the Ray runtime environment. GPU runs never load it.

What the platform provides:

* device ``cpu``, the ``gloo`` collective backend, Ray resource ``GPU``: the launcher starts
  Ray with logical GPUs (``ray_init.num_gpus``), so verl's placement groups, which always
  reserve accelerators, can be satisfied on a CPU-only machine;
* a device module standing in for the ``torch.cuda`` calls verl makes (memory statistics,
  cache emptying, streams, RNG state): ``torch.cpu`` where it has the function, a no-op or a
  value from the host otherwise; any other attribute is an ``AttributeError`` naming it;
* :func:`patch_process_group_backend`: verl builds ``"cpu:gloo,<device>:<backend>"``, which for
  device ``cpu`` names ``cpu`` twice and torch refuses; the wrapper asks for plain ``gloo``.

Depends on verl internals (the platform ABC, the name of a module-level function and where it
is imported by name): ``tests/test_verl_cpu_platform.py`` fails loudly on a verl upgrade.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import torch
from verl.plugin.platform.platform_base import PlatformBase
from verl.plugin.platform.platform_manager import PlatformRegistry

PLATFORM_NAME = "cpu"
PLATFORM_ENV = "VERL_PLATFORM"
# Modules that import verl's process-group initialiser by name (verl 0.9.1).
PROCESS_GROUP_USERS = (
    "verl.utils.distributed",
    "verl.workers.engine_workers",
    "verl.checkpoint_engine.base",
)
PROCESS_GROUP_FUNCTION = "initialize_global_process_group_ray"


def host_memory() -> tuple[int, int]:
    """(available, total) bytes of host memory: what ``mem_get_info`` reports on a GPU."""
    page = os.sysconf("SC_PAGE_SIZE")
    return os.sysconf("SC_AVPHYS_PAGES") * page, os.sysconf("SC_PHYS_PAGES") * page


def _nothing(*args: Any, **kwargs: Any) -> None:
    return None


def _zero(*args: Any, **kwargs: Any) -> int:
    return 0


class CPUDevice:
    """The ``torch.<device>`` module verl calls through ``get_torch_device()``, for the CPU."""

    # Real CPU implementations.
    Stream = torch.cpu.Stream
    Event = torch.cpu.Event
    stream = staticmethod(torch.cpu.stream)
    current_stream = staticmethod(torch.cpu.current_stream)
    synchronize = staticmethod(torch.cpu.synchronize)
    get_rng_state = staticmethod(torch.get_rng_state)
    set_rng_state = staticmethod(torch.set_rng_state)
    manual_seed = staticmethod(torch.manual_seed)
    manual_seed_all = staticmethod(torch.manual_seed)

    # Nothing to do on the host: no cache, no IPC handles, no per-process memory cap.
    empty_cache = staticmethod(_nothing)
    ipc_collect = staticmethod(_nothing)
    set_device = staticmethod(_nothing)
    set_per_process_memory_fraction = staticmethod(_nothing)
    reset_peak_memory_stats = staticmethod(_nothing)
    reset_accumulated_memory_stats = staticmethod(_nothing)

    # Allocator statistics: torch has no caching allocator on the CPU to report.
    memory_allocated = staticmethod(_zero)
    memory_reserved = staticmethod(_zero)
    max_memory_allocated = staticmethod(_zero)
    max_memory_reserved = staticmethod(_zero)
    memory = SimpleNamespace(
        _set_allocator_settings=_nothing,
        memory_allocated=_zero,
        memory_reserved=_zero,
        max_memory_allocated=_zero,
        max_memory_reserved=_zero,
        reset_peak_memory_stats=_nothing,
    )

    @staticmethod
    def is_available() -> bool:
        return True

    @staticmethod
    def is_initialized() -> bool:
        return True

    @staticmethod
    def device_count() -> int:
        return 1

    @staticmethod
    def current_device() -> str:
        # verl moves tensors with `.to(get_device_id())`: "cpu" is right, an index would be CUDA.
        return "cpu"

    @staticmethod
    def mem_get_info(*args: Any) -> tuple[int, int]:
        return host_memory()

    @staticmethod
    def get_device_name(*args: Any) -> str:
        return "cpu"

    @staticmethod
    def get_device_properties(*args: Any) -> SimpleNamespace:
        return SimpleNamespace(name="cpu", total_memory=host_memory()[1])


@PlatformRegistry.register(platform=PLATFORM_NAME)
class PlatformCPU(PlatformBase):
    """verl's platform interface on the host CPU (gloo collectives, logical Ray GPUs)."""

    @property
    def device_name(self) -> str:
        return "cpu"

    @property
    def vendor_name(self) -> str:
        return "cpu"

    @property
    def device_module(self) -> Any:
        return CPUDevice

    def is_available(self) -> bool:
        return True

    def is_platform_available(self, use_smi_check: bool = False) -> bool:
        # Never auto-detected: a CPU run is asked for explicitly with VERL_PLATFORM=cpu.
        return os.environ.get(PLATFORM_ENV, "").strip().lower() == PLATFORM_NAME

    def current_device(self) -> str:
        return CPUDevice.current_device()

    def device_count(self) -> int:
        return 1

    def set_device(self, device_index: int) -> None:
        return None

    def synchronize(self, device_index: int | None = None) -> None:
        return None

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)

    def set_allocator_settings(self, settings: str) -> None:
        return None

    def empty_cache(self) -> None:
        return None

    def get_device_capability(self, device_index: int = 0) -> tuple[int | None, int | None]:
        return None, None

    def communication_backend_name(self) -> str:
        return "gloo"

    def visible_devices_envvar(self) -> str:
        # Ray sets it for actors holding a (logical) GPU; a CPU build of torch ignores it.
        return "CUDA_VISIBLE_DEVICES"

    @contextmanager
    def nvtx_range(self, msg: str):
        yield

    def profiler_start(self) -> None:
        return None

    def profiler_stop(self) -> None:
        return None

    def ray_resource_name(self) -> str:
        return "GPU"

    def ray_noset_envvars(self) -> list[str]:
        return []

    def is_ipc_supported(self) -> bool:
        return False

    def cudart(self) -> Any:
        return None


def gloo_process_group(initialize: Callable[..., Any]) -> Callable[..., Any]:
    """Wrap verl's process-group initialiser to ask for ``gloo`` when no backend is given."""
    if getattr(initialize, "__tagrpo_gloo__", False):
        return initialize

    @functools.wraps(initialize)
    def initialize_gloo(timeout_second: int | None = None, backend: str | None = None) -> Any:
        return initialize(timeout_second=timeout_second, backend=backend or "gloo")

    initialize_gloo.__tagrpo_gloo__ = True  # type: ignore[attr-defined]
    return initialize_gloo


def patch_process_group_backend() -> list[str]:
    """Install :func:`gloo_process_group` wherever verl holds the initialiser; returns where.

    ``verl.utils.distributed`` is always imported and patched; modules that imported the
    function by name before this ran are patched too, so the import order does not matter.
    """
    import verl.utils.distributed  # noqa: F401  (the defining module)

    patched = []
    for name in PROCESS_GROUP_USERS:
        module = sys.modules.get(name)
        if module is None:
            continue
        original = getattr(module, PROCESS_GROUP_FUNCTION, None)
        if original is None:
            raise RuntimeError(
                f"{name}.{PROCESS_GROUP_FUNCTION} is gone: this CPU support is written for "
                "verl==0.9.1"
            )
        setattr(module, PROCESS_GROUP_FUNCTION, gloo_process_group(original))
        patched.append(name)
    return patched


patch_process_group_backend()
