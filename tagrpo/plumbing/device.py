"""The machine a stage ran on, in words, so that a report can say which device made which run.

Numerics differ across CPU kinds (the same SFT on a CPU with and without ``avx512_bf16`` gives
other weights: docs/performance.md, "Determinism"), so a result is a result of a device too
(preregistration/world-v3.md). Every stage's metrics file records this text under ``device``.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

# The instruction sets that change which kernels torch runs on a CPU, most specific first.
NUMERIC_FLAGS = ("amx_bf16", "avx512_bf16", "avx512f", "avx2")


def cpu_description(cpuinfo: str | None = None, cores: int | None = None) -> str:
    """``AMD EPYC (2 cores; avx512_bf16, avx512f, avx2)``: the CPU's model name, the cores this
    process may use and which of :data:`NUMERIC_FLAGS` it has (``/proc/cpuinfo``; elsewhere
    the platform's processor name and no flags)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text(errors="replace") if path.is_file() else ""
    fields: dict[str, str] = {}
    for line in cpuinfo.splitlines():
        key, colon, value = line.partition(":")
        if colon and key.strip() not in fields:
            fields[key.strip()] = value.strip()
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    flags = set(fields.get("flags", "").split())
    present = [flag for flag in NUMERIC_FLAGS if flag in flags]
    if cores is None:
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    shown = ", ".join(present) or "none of " + "/".join(NUMERIC_FLAGS)
    return f"{name} ({cores} core{'' if cores == 1 else 's'}; {shown})"


def gpu_names() -> list[str]:
    """The GPUs ``nvidia-smi`` lists (none where it is absent or fails), without importing
    torch, which a light stage (data, report) does not load."""
    command = shutil.which("nvidia-smi")
    if command is None:
        return []
    try:
        listed = subprocess.run(
            [command, "--query-gpu=name", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=30, check=True,
        ).stdout  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in listed.splitlines() if line.strip()]


def describe_device() -> str:
    """The CPU, then the GPUs when there are any: ``... ; GPUs: 8 x NVIDIA H200``."""
    text = cpu_description()
    names = gpu_names()
    if names:
        kinds = sorted(set(names))
        text += "; GPUs: " + ", ".join(f"{names.count(kind)} x {kind}" for kind in kinds)
    return text
