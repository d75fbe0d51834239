"""The paper flow of docs/paper-scale.md on a fresh clone: `tagrpo params apply
profiles/paper.yaml`, then `python -m stages.train --method ta_grpo --dry-run` prints the verl
command before any stage has run (it used to stop with a traceback: models/base holds neither
HF weights nor pointer.json), naming the model models/base will hold."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from scratch_project import scratch_project


def _dry_run(checkout: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "stages.train", "--method", "ta_grpo", "--dry-run"],
        cwd=checkout,
        env={**env, "PYTHONPATH": str(checkout)},
        capture_output=True,
        text=True,
    )


def _model_path(printed: str) -> str:
    words = shlex.split(printed.replace("\\\n", " "))
    (value,) = [w.split("=", 1)[1] for w in words if w.startswith("actor_rollout_ref.model.path=")]
    return value


@pytest.mark.parametrize(
    ("profile", "model"),
    [("paper", "Qwen/Qwen3-1.7B"), ("verl-cpu", "{checkout}/models/base")],
)
def test_dry_run_on_a_fresh_clone_prints_the_command(
    tmp_path: Path, profile: str, model: str
) -> None:
    env = scratch_project(tmp_path, f"profiles/{profile}.yaml")
    assert not (tmp_path / "models" / "base").exists()
    result = _dry_run(tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    expected = model.format(checkout=tmp_path.resolve())
    assert _model_path(result.stdout) == f"'{expected}'"  # quoted for Hydra
    assert result.stderr.strip().splitlines() == [
        "# models/base is not built yet (dvc repro base_model): the command names the model it "
        f"will hold, {expected}"
    ]
    assert not (tmp_path / "models" / "base").exists()  # a dry run writes nothing
