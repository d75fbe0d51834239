"""Which device made which run: the text every stage's metrics file records and the report
names (preregistration/world-v3.md; numerics differ across CPU kinds)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tagrpo.plumbing import device
from tagrpo.plumbing.layout import base_model_outputs, evaluate_outputs, train_outputs
from tagrpo.report.build import devices_line

pytestmark = pytest.mark.core

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse avx2 avx512f avx512_bf16 sha_ni

processor\t: 1
model name\t: AMD EPYC 9R14
flags\t\t: fpu sse avx2 avx512f avx512_bf16 sha_ni
"""


def test_the_cpu_is_named_with_its_cores_and_numeric_flags() -> None:
    assert device.cpu_description(CPUINFO, cores=2) == (
        "AMD EPYC 9R14 (2 cores; avx512_bf16, avx512f, avx2)"
    )
    plain = CPUINFO.replace(" avx2 avx512f avx512_bf16", "")
    assert device.cpu_description(plain, cores=1) == (
        "AMD EPYC 9R14 (1 core; none of amx_bf16/avx512_bf16/avx512f/avx2)"
    )


def test_gpus_are_counted_by_kind(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device.shutil, "which", lambda name: "/usr/bin/nvidia-smi")
    listed = "NVIDIA H200\nNVIDIA H200\nNVIDIA A100-SXM4-80GB\n"
    monkeypatch.setattr(
        device.subprocess,
        "run",
        lambda *a, **k: subprocess.CompletedProcess(a, 0, stdout=listed, stderr=""),
    )
    monkeypatch.setattr(device, "cpu_description", lambda: "CPU")
    assert device.describe_device() == "CPU; GPUs: 1 x NVIDIA A100-SXM4-80GB, 2 x NVIDIA H200"


def test_a_failing_nvidia_smi_lists_no_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(device.shutil, "which", lambda name: "/usr/bin/nvidia-smi")

    def fail(*args, **kwargs):
        raise subprocess.CalledProcessError(9, "nvidia-smi")

    monkeypatch.setattr(device.subprocess, "run", fail)
    assert device.gpu_names() == []


def _metrics(root: Path, path: str, **values: str) -> None:
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    (root / path).write_text(json.dumps({"seconds": 1.0, **values}))


def test_the_report_names_one_device_or_each(tmp_path: Path) -> None:
    trained = ["grpo-s0", "grpo-s1"]
    paths = [base_model_outputs().metrics, evaluate_outputs("base").metrics]
    paths += [train_outputs(p).metrics for p in trained]
    paths += [evaluate_outputs(p).metrics for p in trained]
    for path in paths:
        _metrics(tmp_path, path, device="CPU A")
    assert devices_line(tmp_path, trained) == (
        "Device: the base policy, every training and every evaluation on `CPU A`."
    )
    _metrics(tmp_path, train_outputs("grpo-s1").metrics, device="CPU B")
    _metrics(tmp_path, evaluate_outputs("grpo-s1").metrics)  # written before devices were
    assert devices_line(tmp_path, trained) == (
        "Devices (results differ across CPU kinds): `CPU A`: base_model, train grpo-s0, "
        "evaluate base, evaluate grpo-s0; `CPU B`: train grpo-s1; "
        "`not recorded`: evaluate grpo-s1."
    )
