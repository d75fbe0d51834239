"""A stage that refuses to start, with the real dvc and the real stage (issue 40.2, 40.3).

The evaluate stage of the base policy as dvc.yaml declares its outputs (``persist``), in a small
DVC project whose base_model stage writes a stand-in model. The stage refuses before it opens
its MLflow run: its model differs from dvc.lock (``OutputCorruptedError``), or another copy
holds its lock (``StageBusyError``: the second ``dvc repro -s -f`` of the drill). Each time the
outputs of the last run stay as they were (DVC deletes no output before the command; the
stage replaces them only when it succeeds), the error is one line, and the ``dvc repro`` is
recorded in MLflow as FAILED, its parent run naming the stage and its exit status.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from tagrpo.pipeline.runtime import StageLock
from tagrpo.plumbing.paths import project_root

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(900),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
]

ROOT = project_root()
EXPERIMENT = "refusals"
_WRITE_MODEL = (
    "import pathlib; m = pathlib.Path('models/base'); m.mkdir(parents=True); "
    "(m / 'model.safetensors').write_bytes(bytes(range(256)) * 64); "
    "(m / 'config.json').write_text('{}')"
)
PREVIOUS = {
    "evals/base/passk.csv": "benchmark,k,pass_at_k\nmini_chains,1,0.25\n",
    "evals/base/responses.parquet": "the previous run's responses\n",
    "metrics/eval/base.json": '{"mini_chains/pass@1": 0.25}\n',
}


@pytest.fixture
def project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    params = yaml.safe_load((ROOT / "params.yaml").read_text())
    params["common"]["tracking"]["experiment"] = EXPERIMENT
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    declared = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]["evaluate_base"]
    stages = {
        "base_model": {
            "cmd": f'{sys.executable} -c "{_WRITE_MODEL}"',
            "outs": [{"models/base": {"persist": True}}],
        },
        # The real command and outputs (persist, as dvc.yaml declares them); one dep.
        "evaluate_base": {
            "cmd": declared["cmd"],
            "deps": ["models/base"],
            "outs": declared["outs"],
            "metrics": declared["metrics"],
        },
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}, sort_keys=False))
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MLFLOW_", "TAGRPO_", "DVC_"))
    }
    env.update(
        PYTHONPATH=str(ROOT),
        PATH=f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}",
        DVC_NO_ANALYTICS="1",
    )
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"], ["dvc", "repro", "base_model"]):
        subprocess.run(command, cwd=tmp_path, env=env, check=True, capture_output=True)
    for relative, text in PREVIOUS.items():
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text(text)
    return tmp_path, env


def _repro(root: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["dvc", "repro", "-s", "-f", "evaluate_base"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def _parent_of_last_failure(root: Path, count: int) -> tuple[object, object]:
    """The ``count``-th failed stage run and its parent run, once the watcher ended it."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(EXPERIMENT).experiment_id
    stages = client.search_runs(
        [experiment], "tags.stage = 'evaluate'", order_by=["attributes.start_time ASC"]
    )
    assert len(stages) == count
    run = stages[-1]
    deadline = time.monotonic() + 240
    parent_id = run.data.tags["mlflow.parentRunId"]
    while client.get_run(parent_id).info.status == "RUNNING" and time.monotonic() < deadline:
        time.sleep(0.5)
    return run, client.get_run(parent_id)


def _outputs_kept(root: Path) -> None:
    for relative, text in PREVIOUS.items():
        assert (root / relative).read_text() == text, f"{relative} lost"


def test_a_refused_stage_keeps_its_outputs_and_its_repro_is_failed_in_mlflow(
    project: tuple[Path, dict[str, str]],
) -> None:
    root, env = project
    # 1. Its model changed in place since dvc.lock recorded it: refused by name.
    model = root / "models" / "base" / "model.safetensors"
    original = model.read_bytes()
    model.write_bytes(original[:-1] + b"\x00")
    result = _repro(root, env)
    assert result.returncode != 0
    assert "stage evaluate_base failed: OutputCorruptedError: models/base" in result.stderr
    assert "Traceback" not in result.stderr  # a user's matter: one line
    _outputs_kept(root)
    run, parent = _parent_of_last_failure(root, 1)
    assert run.info.status == "FAILED" and run.data.tags["tagrpo.dvc_stage"] == "evaluate_base"
    assert run.data.tags["tagrpo.exit_code"] == "1"
    assert run.data.tags["tagrpo.error"].startswith("OutputCorruptedError: models/base")
    assert parent.info.status == "FAILED"
    assert parent.data.tags["tagrpo.command"] == "dvc repro -s -f evaluate_base"
    assert parent.data.tags["tagrpo.failed_stage"] == "evaluate_base"
    assert parent.data.tags["tagrpo.exit_code"] == "1"
    assert parent.data.tags["tagrpo.dvc_exit"].startswith(
        "nonzero: stage(s) did not finish: evaluate_base (exit status 1: OutputCorruptedError"
    )

    # 2. Another copy of the stage holds its lock (a second `dvc repro -s -f` while the first
    # runs it): refused; DVC deleted nothing before the command.
    model.write_bytes(original)
    with StageLock(root, "evaluate@base"):
        result = _repro(root, env)
    assert result.returncode != 0
    assert "StageBusyError: stage evaluate@base is already running" in result.stderr
    _outputs_kept(root)
    run, parent = _parent_of_last_failure(root, 2)
    assert run.data.tags["tagrpo.error"].startswith("StageBusyError")
    assert parent.info.status == "FAILED"
    assert parent.data.tags["tagrpo.failed_stage"] == "evaluate_base"


def test_every_output_of_dvc_yaml_persists() -> None:
    """DVC deletes a stage's outputs before it runs the command unless they are persist: then
    a stage that refuses (its lock held by a concurrent run, its inputs changed, invalid
    params) would already have lost them, and the run it collided with its inputs."""
    for name, stage in yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"].items():
        for section in ("outs", "metrics", "plots"):
            for entry in stage.get(section, []):
                options = next(iter(entry.values())) if isinstance(entry, dict) else {}
                path = next(iter(entry)) if isinstance(entry, dict) else entry
                assert (options or {}).get("persist") is True, f"{name}: {path} not persist"
