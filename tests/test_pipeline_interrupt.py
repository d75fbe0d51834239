"""Ctrl-C and SIGTERM of `python -m flows.pipeline run` on Prefect's temporary server, in the
small DVC project of test_plan.py with a stage that sleeps (issue 33, items 4 and 13):

* the signal goes to the flow's process group, as a terminal's Ctrl-C does; the flow exits
  within flows.interrupts.EXIT_DEADLINE_S of it (measured from the signal), with 128 + signal;
  its flow run is recorded Crashed and no task run is left Running, the MLflow parent run is
  KILLED, and no process of the run (dvc, the stage, the server) is left behind. Before the
  fix the temporary server died with the group and the flow hung in Prefect's exit-time event
  flush for more than 3 minutes, its runs "Running" for good;
* a flow SIGKILLed mid-stage leaves its run Running and its MLflow parent run RUNNING; the
  next run marks the first Crashed and the second KILLED, each naming the gone process.
"""

from __future__ import annotations

import os
import signal
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_plan import small_project

from flows.interrupts import EXIT_DEADLINE_S
from tagrpo.plumbing.paths import project_root

ROOT = project_root()
SLOW_DVC_YAML = """\
stages:
  data:
    cmd: echo data > data.txt
    outs:
      - data.txt
  slow:
    cmd: echo started-slow && sleep 600 && cp data.txt slow.txt
    deps:
      - data.txt
    outs:
      - slow.txt
"""
FINAL = {"COMPLETED", "FAILED", "CRASHED", "CANCELLED"}


def _project(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    project = tmp_path / "project"
    project.mkdir()
    env = {
        **small_project(project, SLOW_DVC_YAML),
        "PYTHONPATH": str(ROOT),
        "PREFECT_HOME": str(tmp_path / "prefect"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS": "180",
        "DO_NOT_TRACK": "true",
    }
    env.pop("PREFECT_API_URL", None)  # the temporary server, as `python -m flows.pipeline run`
    for key in [k for k in env if k.startswith(("MLFLOW_", "TAGRPO_"))]:
        env.pop(key)  # the project's own MLflow store, whatever an earlier test left set
    return project, env


def _start(project: Path, env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """The flow, leading a process group as a shell's foreground job does."""
    command = [sys.executable, "-m", "flows.pipeline", "run", "--mode", "workspace"]
    with log.open("wb") as stream:
        return subprocess.Popen(
            command,
            cwd=project,
            env=env,
            stdout=stream,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _wait_for(flow: subprocess.Popen[bytes], log: Path, text: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while text not in log.read_text(errors="replace"):
        if flow.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no {text!r}:\n{log.read_text(errors='replace')[-4000:]}")
        time.sleep(0.5)


def _kill_group(flow: subprocess.Popen[bytes]) -> None:
    if flow.poll() is None:
        os.killpg(flow.pid, signal.SIGKILL)
        flow.wait()


def _prefect_runs(tmp_path: Path) -> tuple[list[tuple[str, ...]], list[tuple[str, ...]]]:
    """(flow runs, task runs) as (id, name, state type, state message), oldest first."""
    with sqlite3.connect(tmp_path / "prefect" / "prefect.db") as db:
        query = (
            "select r.id, r.name, r.state_type, s.message from {table} r "
            "left join {table}_state s on s.id = r.state_id order by r.created"
        )
        flows = db.execute(query.format(table="flow_run")).fetchall()
        tasks = db.execute(query.format(table="task_run")).fetchall()
    return flows, tasks


def _left_behind(project: Path) -> list[str]:
    """Processes whose working directory is in the project (dvc, its stage, the server)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = os.readlink(entry / "cwd")
            command = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if cwd == str(project) or cwd.startswith(f"{project}/"):
            found.append(f"{entry.name}: {command}")
    return found


def _no_process_left(project: Path, timeout: float = 15) -> None:
    deadline = time.monotonic() + timeout
    while (left := _left_behind(project)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not left, left


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_mid_stage_ends_the_flow_promptly_and_recorded(
    tmp_path: Path, signum: signal.Signals
) -> None:
    project, env = _project(tmp_path)
    log = tmp_path / "flow.log"
    flow = _start(project, env, log)
    try:
        _wait_for(flow, log, "started-slow")
        time.sleep(1)
        sent = time.monotonic()
        os.killpg(flow.pid, signum)
        try:
            code = flow.wait(timeout=EXIT_DEADLINE_S)
        except subprocess.TimeoutExpired:
            raise AssertionError(
                f"still running {EXIT_DEADLINE_S:.0f} s after {signum.name}:\n"
                + log.read_text(errors="replace")[-4000:]
            ) from None
        took = time.monotonic() - sent
    finally:
        _kill_group(flow)
    output = log.read_text(errors="replace")
    assert code == 128 + signum, output[-4000:]
    assert f"the flow was stopped by {signum.name}" in output
    print(f"{signum.name}: exited {code} after {took:.1f} s")

    (flow_run,), tasks = _prefect_runs(tmp_path)
    assert flow_run[2] == "CRASHED", flow_run
    states = {name: state for _, name, state, _ in tasks}
    # The stage task fails when its dvc stops; Crashed if the engine's cancellation came first.
    assert states["data"] == "COMPLETED" and states["slow"] in {"FAILED", "CRASHED"}, tasks
    with sqlite3.connect(tmp_path / "prefect" / "prefect.db") as db:
        runs = db.execute("select run_count from task_run where name = 'slow'").fetchall()
    assert runs == [(1,)]  # an interrupted stage is not retried (retries=1 otherwise)
    with sqlite3.connect(project / "mlflow.db") as db:
        parents = db.execute("select status from runs where name like 'pipeline %'").fetchall()
    assert parents == [("KILLED",)]
    assert not (project / "slow.txt").exists()
    _no_process_left(project)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_next_run_marks_a_killed_flows_runs_crashed(tmp_path: Path) -> None:
    project, env = _project(tmp_path)
    log = tmp_path / "killed.log"
    flow = _start(project, env, log)
    try:
        _wait_for(flow, log, "started-slow")
    finally:
        _kill_group(flow)  # SIGKILL: nothing of the flow can record anything
    _no_process_left(project)  # the server and dvc die with the flow (parent-death signal)
    (killed,), tasks = _prefect_runs(tmp_path)
    assert killed[2] == "RUNNING"
    assert ("slow", "RUNNING") in {(name, state) for _, name, state, _ in tasks}
    ((parent, status, pid),) = _mlflow_parents(project)
    assert status == "RUNNING" and pid == str(flow.pid)  # owned by the flow's process

    log = tmp_path / "next.log"
    flow = _start(project, env, log)
    try:
        _wait_for(flow, log, "started-slow")
        os.killpg(flow.pid, signal.SIGINT)
        flow.wait(timeout=EXIT_DEADLINE_S)
    finally:
        _kill_group(flow)
    output = log.read_text(errors="replace")
    assert f"flow run '{killed[1]}' ({killed[0]}) marked Crashed" in output, output[-4000:]
    flows, tasks = _prefect_runs(tmp_path)
    first = next(run for run in flows if run[0] == killed[0])
    assert first[2] == "CRASHED"
    assert "that ran it is gone" in first[3], first
    assert all(state in FINAL for _, _, state, _ in flows + tasks), (flows, tasks)
    # The killed flow's MLflow parent run too (issue 53): KILLED, saying why; the next run's
    # own parent ended KILLED by its SIGINT.
    parents = {run_id: status for run_id, status, _ in _mlflow_parents(project)}
    assert parents == {parent: "KILLED", next(r for r in parents if r != parent): "KILLED"}
    with sqlite3.connect(project / "mlflow.db") as db:
        (reason,) = db.execute(
            "select value from tags where run_uuid = ? and key = 'tagrpo.killed_reason'", (parent,)
        ).fetchone()
    host = socket.gethostname()
    assert reason == (
        f"the process {pid} on {host} that ran it is gone (found by the next Prefect flow run)"
    )
    assert f"MLflow: run 'pipeline {killed[1]}' ({parent}) KILLED" in output, output[-4000:]


def _mlflow_parents(project: Path) -> list[tuple[str, str, str]]:
    """The flow's MLflow parent runs as (run id, status, owner pid), oldest first."""
    with sqlite3.connect(project / "mlflow.db") as db:
        return db.execute(
            "select r.run_uuid, r.status, t.value from runs r left join tags t on "
            "t.run_uuid = r.run_uuid and t.key = 'tagrpo.pid' where r.name like 'pipeline %' "
            "order by r.start_time"
        ).fetchall()
