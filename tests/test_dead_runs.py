"""No MLflow run is left RUNNING by a process that is gone (issue 53, item 3).

Every run carries its owner (host, pid, the process's start time). The reaper ends a RUNNING run
whose owner on this host is gone KILLED, the reason in ``tagrpo.killed_reason``; it leaves a
live owner's run, another host's, and dvc's parent runs (ended from their stages' states by
their watcher or the orphan sweep, tests/test_deadlines.py). A process standing for the Prefect
flow opens the flow's parent run with the flow's own code and a stage run under it, and is
SIGKILLed: the next flow run, the next stage and ``tagrpo verify`` each end both KILLED.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from scratch_project import write_empty_project
from test_tracking_params import tracking_store  # noqa: F401  (a fixture: the store)

from tagrpo.pipeline.parent_run import DVC_EXIT_TAG, ORIGIN_TAG, PIPELINE_KEY_TAG, reap_dead_runs
from tagrpo.plumbing.procfs import proc_stat
from tagrpo.plumbing.tracking import (
    HOST_TAG,
    KILLED_REASON_TAG,
    PID_START_TAG,
    PID_TAG,
    dead_owner_runs,
    owner_gone,
    owner_tags,
)

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc"),
    pytest.mark.usefixtures("tracking_store"),  # a SQLite store per test, as MLFLOW_TRACKING_URI
]
EXPERIMENT = "dead-runs"


def _exited_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()  # reaped: nothing runs under this pid (until it is reused)
    return child.pid


def _ticks(pid: int) -> str:
    stat = proc_stat(pid)
    assert stat is not None
    return str(stat.start_ticks)


def test_owner_tags_name_this_process() -> None:
    assert owner_tags() == {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(os.getpid()),
        PID_START_TAG: _ticks(os.getpid()),
    }
    assert owner_gone(owner_tags()) is None


def test_the_reaper_ends_only_runs_whose_owner_is_gone() -> None:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    experiment = client.create_experiment(EXPERIMENT)
    host = socket.gethostname()
    dead = _exited_pid()
    parent = os.getppid()
    owners = {
        "dead": {HOST_TAG: host, PID_TAG: str(dead), PID_START_TAG: "12345"},
        # This pid, another start time: the process that had the pid before is gone.
        "reused pid": {HOST_TAG: host, PID_TAG: str(os.getpid()), PID_START_TAG: "1"},
        "dead, no start time": {HOST_TAG: host, PID_TAG: str(dead)},
        "alive": {HOST_TAG: host, PID_TAG: str(parent), PID_START_TAG: _ticks(parent)},
        "alive, no start time": {HOST_TAG: host, PID_TAG: str(parent)},
        "another host": {HOST_TAG: f"not-{host}", PID_TAG: str(dead), PID_START_TAG: "1"},
        "no pid": {HOST_TAG: host},
        "dvc's parent": {
            HOST_TAG: host,
            PID_TAG: str(dead),
            ORIGIN_TAG: "dvc",
            PIPELINE_KEY_TAG: f"{host}:{dead}:1",
        },
    }
    runs = {
        name: client.create_run(experiment, run_name=name, tags=tags).info.run_id
        for name, tags in owners.items()
    }
    ended = client.create_run(experiment, run_name="ended", tags=owners["dead"]).info.run_id
    client.set_terminated(ended, status="FINISHED")

    found = {run.info.run_name: why for run, why in dead_owner_runs(client)}
    assert found == {
        "dead": f"the process {dead} on {host} that ran it is gone",
        "reused pid": f"the process {os.getpid()} on {host} that ran it is gone",
        "dead, no start time": f"the process {dead} on {host} that ran it is gone",
    }

    lines = reap_dead_runs(client, "a test")
    assert lines[0] == "1 dvc pipeline run(s) whose dvc process is gone ended"
    assert len(lines) == 4, lines
    killed = {"dead", "reused pid", "dead, no start time"}
    for name, run_id in runs.items():
        run = client.get_run(run_id)
        if name in killed:
            assert run.info.status == "KILLED", name
            assert run.data.tags[KILLED_REASON_TAG] == f"{found[name]} (found by a test)"
        elif name == "dvc's parent":  # ended from its stages' states: it had none
            assert run.info.status == "FINISHED"
            assert run.data.tags[DVC_EXIT_TAG].startswith("unknown")
        else:
            assert run.info.status == "RUNNING", name
            assert KILLED_REASON_TAG not in run.data.tags, name
    assert client.get_run(ended).info.status == "FINISHED"
    assert dead_owner_runs(client) == []  # nothing left to end


# Stands for `python -m flows.pipeline run` killed mid-stage: the flow's parent run opened by
# the flow's own code, a stage run nested under it, both RUNNING when SIGKILL comes.
OWNER = textwrap.dedent(
    """
    import os, sys, time
    from flows.pipeline import _open_parent_run
    from tagrpo.config.params import load_config
    from tagrpo.pipeline.rerun import RerunRequest
    from tagrpo.pipeline.stage_run import stage_run
    from tagrpo.plumbing.tracking import PARENT_RUN_ENV

    config = load_config()
    resolved = config.model_dump(mode="json")
    client, parent = _open_parent_run(RerunRequest(), "workspace", resolved, {}, print)
    os.environ[PARENT_RUN_ENV] = parent
    with stage_run("data", config) as run:
        print("RUNS", parent, run.info.run_id, flush=True)
        time.sleep(600)
    """
)


def _killed_flow(project: Path, env: dict[str, str]) -> tuple[str, str, int]:
    """(parent run id, stage run id, pid) of a flow stand-in SIGKILLed mid-stage."""
    owner = subprocess.Popen(
        [sys.executable, "-c", OWNER], cwd=project, env=env, stdout=subprocess.PIPE, text=True
    )
    try:
        assert owner.stdout is not None
        line = ""
        while not line.startswith("RUNS"):
            line = owner.stdout.readline()
            assert line, "the flow stand-in exited before opening its runs"
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait()
    _, parent, stage = line.split()
    return parent, stage, owner.pid


@pytest.mark.slow
@pytest.mark.timeout(300)
@pytest.mark.parametrize("next_run", ["flow", "stage", "verify"])
def test_a_sigkilled_flows_runs_are_killed_by_the_next_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, next_run: str, capsys
) -> None:
    from mlflow.tracking import MlflowClient

    project = write_empty_project(tmp_path / "project", EXPERIMENT)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    parent, stage, pid = _killed_flow(project, env)
    client = MlflowClient(os.environ["MLFLOW_TRACKING_URI"])
    for run_id in (parent, stage):  # nothing of the killed process could end them
        run = client.get_run(run_id)
        assert run.info.status == "RUNNING"
        assert run.data.tags[PID_TAG] == str(pid) and run.data.tags[HOST_TAG]
        assert run.data.tags[PID_START_TAG].isdigit()
    assert client.get_run(parent).data.tags["tagrpo.origin"] == "prefect"
    assert client.get_run(stage).data.tags["mlflow.parentRunId"] == parent

    monkeypatch.chdir(project)
    if next_run == "flow":
        from flows.pipeline import _open_parent_run
        from tagrpo.config.params import load_config
        from tagrpo.pipeline.rerun import RerunRequest

        said: list[str] = []
        resolved = load_config().model_dump(mode="json")
        _, new_parent = _open_parent_run(RerunRequest(), "workspace", resolved, {}, said.append)
        output, found_by = "\n".join(said), "the next Prefect flow run"
        assert client.get_run(new_parent).info.status == "RUNNING"  # its own: alive
    elif next_run == "stage":
        from tagrpo.config.params import load_config
        from tagrpo.pipeline.stage_run import stage_run

        with stage_run("data", load_config()):
            pass
        output, found_by = capsys.readouterr().out, "stage data"
    else:
        from tagrpo.pipeline.cli import main

        assert main(["verify"]) == 2  # the empty project's dvc.lock lists no outputs
        output, found_by = capsys.readouterr().out, "tagrpo verify"

    host = socket.gethostname()
    why = f"the process {pid} on {host} that ran it is gone"
    for run_id in (parent, stage):
        run = client.get_run(run_id)
        assert run.info.status == "KILLED", (next_run, run_id)
        assert run.data.tags[KILLED_REASON_TAG] == f"{why} (found by {found_by})"
        assert f"({run_id}) KILLED: {why}" in output, output
