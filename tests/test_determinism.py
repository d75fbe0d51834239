"""Same commit + params + seed -> identical outputs: stages run twice in a scratch project at
smoke scale, their weights and metrics compared byte for byte (timing fields aside)."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest
from scratch_project import run_checked, scratch_project

# Time limit: the smoke profile's upstream (dvc repro check_equivalence) and three stages run twice.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]

TIMING = ("seconds", "_s", "time/", "sft_seconds", "probe_seconds", "build_seconds")


def _digest(path: Path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _without_timing(value):
    if isinstance(value, dict):
        return {
            k: _without_timing(v) for k, v in value.items() if not any(mark in k for mark in TIMING)
        }
    return value


def _snapshot(root: Path, weights: list[str], metrics: str) -> tuple[dict[str, str], dict]:
    hashes = {name: _digest(root / name) for name in weights}
    return hashes, _without_timing(json.loads((root / metrics).read_text()))


@pytest.fixture(scope="module")
def upstream_checkout(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    target = tmp_path_factory.mktemp("determinism")
    env = scratch_project(target, "profiles/smoke.yaml")
    run_checked(["dvc", "repro", "check_equivalence"], target, env, timeout=35 * 60)
    return target, env


@pytest.mark.parametrize(
    ("command", "weights", "metrics"),
    [
        (["stages.base_model"], ["models/base/model.safetensors"], "metrics/base_model.json"),
        (
            ["stages.train", "--method", "ta_grpo", "--seed", "0"],
            ["models/ta_grpo-s0/model.safetensors", "rollouts/ta_grpo-s0"],
            "metrics/train/ta_grpo-s0.json",
        ),
        (
            ["stages.train", "--method", "grpo_ds", "--seed", "0"],
            ["models/grpo_ds-s0/model.safetensors"],
            "metrics/train/grpo_ds-s0.json",
        ),
    ],
    ids=["base_model", "train-ta_grpo", "train-grpo_ds"],
)
def test_a_stage_run_twice_gives_identical_outputs(
    upstream_checkout, command, weights, metrics
) -> None:
    root, env = upstream_checkout
    snapshots = []
    for _ in range(2):
        run_checked([sys.executable, "-m", *command], root, env)
        snapshots.append(_snapshot(root, weights, metrics))
    assert snapshots[0][0] == snapshots[1][0], "weights differ between two identical runs"
    assert snapshots[0][1] == snapshots[1][1], "metrics differ between two identical runs"
