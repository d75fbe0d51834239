"""One MLflow parent run per dvc invocation: found from the stage's ancestors, shared by the
stages of one invocation, ended by the watcher when dvc exits (from the children's states).

A stand-in ``dvc`` executable runs stage processes through a shell as DVC does; the store is a
real SQLite one. (tests/test_pipeline_smoke.py checks the same with the real dvc.)
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tagrpo.pipeline.parent_run import dvc_ancestor, dvc_arguments
from tagrpo.plumbing.procfs import proc_stat, process_alive
from tagrpo.plumbing.tracking import PARENT_RUN_ENV

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

STAGE = textwrap.dedent(
    """
    import sys
    from tagrpo.config.params import config_with
    from tagrpo.pipeline.stage_run import stage_run
    config = config_with({"common.tracking.experiment": "parents", "common.profile": "smoke"})
    with stage_run(sys.argv[1], config) as run:
        print(run.info.run_id, flush=True)
        if sys.argv[2] == "fail":
            raise RuntimeError("stage failed")
    """
)


def test_dvc_arguments_recognise_the_ways_dvc_is_started() -> None:
    assert dvc_arguments(["/x/.venv/bin/dvc", "repro"]) == ("repro",)
    started = ["python3", "/x/bin/dvc", "exp", "run", "-S", "a=1"]
    assert dvc_arguments(started) == ("exp", "run", "-S", "a=1")
    assert dvc_arguments(["python", "-m", "dvc", "repro", "-f"]) == ("repro", "-f")
    assert dvc_arguments(["python", "-m", "stages.train", "--method", "grpo"]) is None
    assert dvc_arguments(["python", "-m", "x", "--a", "--b", "--c", "dvc"]) is None


def test_no_dvc_ancestor_outside_dvc_and_pid_reuse_is_detected() -> None:
    assert dvc_ancestor() is None  # pytest is not run by dvc
    ticks = proc_stat(os.getpid()).start_ticks
    assert process_alive(os.getpid(), ticks)
    assert not process_alive(os.getpid(), ticks + 1)  # same pid, another process


def _fake_dvc(tmp_path: Path, stages: list[tuple[str, str]], tracking: str) -> Path:
    """An executable named dvc that runs each stage through ``sh -c``, like DVC."""
    script = tmp_path / "bin" / "dvc"
    script.parent.mkdir()
    stage_file = tmp_path / "stage.py"
    stage_file.write_text(STAGE)
    commands = [f"{sys.executable} {stage_file} {name} {result}" for name, result in stages]
    script.write_text(
        f"#!{sys.executable}\n"
        "import subprocess, sys\n"
        f"for command in {commands!r}:\n"
        "    code = subprocess.run(['sh', '-c', command]).returncode\n"
        "    if code:\n"
        "        sys.exit(code)\n"
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def _wait_until_ended(client, run_id: str, timeout: float = 180.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status = client.get_run(run_id).info.status
        if status != "RUNNING":
            return status
        time.sleep(0.5)
    raise AssertionError(f"parent run {run_id} still RUNNING {timeout} s after dvc exited")


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    ("stages", "expected"),
    [([("data", "ok"), ("report", "ok")], "FINISHED"), ([("data", "fail")], "FAILED")],
)
def test_stages_of_one_dvc_invocation_share_a_parent_run(
    tmp_path: Path, stages: list[tuple[str, str]], expected: str
) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    env = {k: v for k, v in os.environ.items() if k != PARENT_RUN_ENV}
    env.update(MLFLOW_TRACKING_URI=uri, PYTHONPATH=str(Path.cwd()))
    dvc = _fake_dvc(tmp_path, stages, uri)
    # Run from tmp_path: the stand-in stages are in no dvc.lock, so the watcher cannot check
    # them against one (tagrpo.locked unknown) and ends the run from their states alone.
    process = subprocess.Popen(
        [str(dvc), "repro"],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    stdout, stderr = process.communicate()
    assert process.returncode == (0 if expected == "FINISHED" else 1), stderr[-3000:]
    child_ids = stdout.split()
    assert len(child_ids) == len(stages)

    client = MlflowClient(uri)
    parents = {client.get_run(run_id).data.tags["mlflow.parentRunId"] for run_id in child_ids}
    assert len(parents) == 1
    parent = client.get_run(parents.pop())
    tags = parent.data.tags
    assert tags["stage"] == "pipeline" and tags["tagrpo.origin"] == "dvc"
    assert tags["profile"] == "smoke" and tags["tagrpo.command"] == "dvc repro"
    assert tags["tagrpo.pid"] == str(process.pid)  # keyed by the dvc process
    assert tags["tagrpo.pipeline_key"].split(":")[1] == str(process.pid)
    assert _wait_until_ended(client, parent.info.run_id) == expected
    ended = client.get_run(parent.info.run_id)
    assert ended.data.metrics["stages_run"] == len(stages)
    exit_tag = ended.data.tags["tagrpo.dvc_exit"]
    assert exit_tag.startswith("nonzero" if expected == "FAILED" else "unknown"), exit_tag
    artifact = client.download_artifacts(parent.info.run_id, "params.json", str(tmp_path))
    logged = json.loads(Path(artifact).read_text())
    assert logged["common"]["profile"] == "smoke"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_an_orchestrator_parent_wins_over_dvc(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    experiment = client.create_experiment("parents")
    flow_run = client.create_run(experiment, tags={"stage": "pipeline"}).info.run_id
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, PARENT_RUN_ENV: flow_run}
    env["PYTHONPATH"] = str(Path.cwd())
    dvc = _fake_dvc(tmp_path, [("data", "ok")], uri)
    result = subprocess.run([str(dvc), "repro"], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    child = client.get_run(result.stdout.split()[0])
    assert child.data.tags["mlflow.parentRunId"] == flow_run
    assert len(client.search_runs([experiment])) == 2  # no dvc parent run was opened
