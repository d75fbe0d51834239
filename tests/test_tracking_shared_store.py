"""Several checkouts and pipelines on one MLflow store: a fresh SQLite store created by two
stages at once, each checkout's artifacts in its own folder, a failing store ending a stage with
one line, and the same tracking code against a real ``mlflow server`` on loopback."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prefect_server import free_port
from scratch_project import write_empty_project

from tagrpo.config.params import config_with
from tagrpo.pipeline.runtime import running_stage
from tagrpo.plumbing.layout import Outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import PARENT_RUN_ENV

SOURCE = project_root()
# A toy stage, as a stage module runs it; waits at a barrier so that two copies open the
# store at the same moment.
STAGE = """
import sys, time
from pathlib import Path
import mlflow
from tagrpo.config.params import config_with
from tagrpo.plumbing.layout import Outputs
from tagrpo.pipeline.runtime import running_stage

barrier, me, other = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
(barrier / me).touch()
while not (barrier / other).exists():
    time.sleep(0.001)
outputs = Outputs({"table": Path("out/table.csv")}, Path("metrics/toy.json"))
config = config_with({"common.tracking.experiment": "shared"})
with running_stage("toy", outputs, config) as ctx:
    ctx.path("table").write_text("a\\n")
    ctx.set_metrics({"bench/pass@1": 0.25, "bench/pass@2": 0.5})
    mlflow.log_text(me, "note.txt")
print("RUN", ctx.run.info.run_id)
"""


def _project(folder: Path) -> Path:
    """An empty project (a complete params.yaml, no stage) with the MLflow experiment "shared"."""
    return write_empty_project(folder, "shared")


def _outputs() -> Outputs:
    return Outputs({"table": Path("out/table.csv")}, Path("metrics/toy.json"))


def _local(uri: str) -> Path:
    return Path(uri.removeprefix("file://"))


def _toy_stage(value: float = 0.5) -> str:
    with running_stage(
        "toy", _outputs(), config_with({"common.tracking.experiment": "shared"})
    ) as ctx:
        import mlflow

        ctx.path("table").write_text("a\n")
        ctx.set_metrics({"bench/pass@1": value})
        mlflow.log_text("x", "note.txt")
    return ctx.run.info.run_id


def test_each_checkout_keeps_its_artifacts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None
) -> None:
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    first, second = _project(tmp_path / "first"), _project(tmp_path / "second")
    monkeypatch.chdir(first)
    first_run = _toy_stage()
    monkeypatch.chdir(second)
    second_run = _toy_stage()
    monkeypatch.chdir(first)
    again = _toy_stage()  # the first checkout still logs to the experiment it created

    client = MlflowClient(uri)
    runs = {run_id: client.get_run(run_id) for run_id in (first_run, second_run, again)}
    for run_id, root in ((first_run, first), (second_run, second), (again, first)):
        artifacts = _local(runs[run_id].info.artifact_uri)
        assert artifacts.is_relative_to(root / "mlruns"), artifacts  # not in the other checkout
        assert (artifacts / "note.txt").read_text() == "x"
    from tagrpo.plumbing.tracking import checkout_id, checkout_label

    for run_id, root in ((first_run, first), (second_run, second), (again, first)):
        assert runs[run_id].data.tags["tagrpo.checkout"] == checkout_id(root)
    names = {run_id: client.get_experiment(r.info.experiment_id).name for run_id, r in runs.items()}
    assert names == {
        first_run: "shared",
        again: "shared",
        second_run: f"shared @ {checkout_label(second)}",
    }
    assert checkout_label(second).startswith("second-")


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_stages_create_a_fresh_sqlite_store_at_once(
    tmp_path: Path, clean_tracking_env: None
) -> None:
    """Both succeed (MLflow alone: one dies in its migrations), each with its own artifacts."""
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'fresh.db'}"
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    env = {**os.environ, "MLFLOW_TRACKING_URI": uri, "PYTHONPATH": str(SOURCE)}
    env.pop(PARENT_RUN_ENV, None)
    projects = {name: _project(tmp_path / name) for name in ("one", "two")}
    stages = {
        name: subprocess.Popen(
            [sys.executable, "-c", STAGE, str(barrier), name, "two" if name == "one" else "one"],
            cwd=root,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name, root in projects.items()
    }
    results = {name: stage.communicate(timeout=600) for name, stage in stages.items()}
    for name, stage in stages.items():
        assert stage.returncode == 0, results[name][1][-3000:]
    client = MlflowClient(uri)
    for name, root in projects.items():
        run_id = results[name][0].split("RUN ")[1].split()[0]
        run = client.get_run(run_id)
        assert run.info.status == "FINISHED"
        artifacts = _local(run.info.artifact_uri)
        assert artifacts.is_relative_to(root / "mlruns")
        assert (artifacts / "note.txt").read_text() == name
        assert json.loads((root / "metrics/toy.json").read_text())["bench/pass@2"] == 0.5


def test_a_store_that_cannot_open_ends_the_stage_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None
) -> None:
    import mlflow.store.db.utils

    # MLflow's own retries of a store that does not open take 100 s; one try is enough here.
    monkeypatch.setattr(mlflow.store.db.utils, "MAX_RETRY_COUNT", 1)
    project = _project(tmp_path / "p")
    monkeypatch.chdir(project)
    (tmp_path / "a-folder.db").mkdir()  # not a database file
    uri = f"sqlite:///{tmp_path / 'a-folder.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    with pytest.raises(SystemExit) as failed:
        _toy_stage()
    message = str(failed.value.code)
    assert message.startswith(
        f"stage toy failed: MLflow tracking failed opening the store ({uri}): "
    ), message
    assert "\n" not in message and "OperationalError" in message
    assert not (project / "out/table.csv").exists()


def test_a_store_failing_mid_run_ends_the_stage_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None
) -> None:
    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    project = _project(tmp_path / "p")
    monkeypatch.chdir(project)
    uri = f"sqlite:///{tmp_path / 'store.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)

    def locked(*args: object, **kwargs: object) -> None:
        raise MlflowException("(sqlite3.OperationalError) database is locked\n[SQL: INSERT ...]")

    started: list[str] = []
    with (
        pytest.raises(SystemExit) as failed,
        running_stage(
            "toy", _outputs(), config_with({"common.tracking.experiment": "shared"})
        ) as ctx,
    ):
        started.append(ctx.run.info.run_id)
        ctx.path("table").write_text("a\n")
        monkeypatch.setattr(MlflowClient, "log_batch", locked)
        ctx.log({"loss": 1.0}, step=1)
    monkeypatch.undo()
    assert str(failed.value.code) == (
        f"stage toy failed: MLflow tracking failed logging metrics ({uri}): "
        "MlflowException: (sqlite3.OperationalError) database is locked"
    )
    assert MlflowClient(uri).get_run(started[0]).info.status == "FAILED"
    assert not (project / "out/table.csv").exists()  # nothing committed


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_tracking_against_a_real_mlflow_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, clean_tracking_env: None, capsys
) -> None:
    """`mlflow server` on a free loopback port, as docs/user-guide.md runs it for concurrent
    pipelines: a stage run, its pass@k curve, artifacts in the checkout, `tagrpo compare`."""
    from mlflow.tracking import MlflowClient

    from tagrpo.pipeline.cli import main
    from tagrpo.plumbing.tracking_assets import log_passk_intervals

    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_dir = tmp_path / "server"
    server_dir.mkdir()
    server = subprocess.Popen(
        [
            *(sys.executable, "-m", "mlflow", "server"),
            *("--backend-store-uri", f"sqlite:///{server_dir / 'mlflow.db'}"),
            *("--host", "127.0.0.1", "--port", str(port), "--workers", "1"),
        ],
        cwd=server_dir,
        stdout=subprocess.DEVNULL,
        stderr=open(server_dir / "server.log", "w"),  # noqa: SIM115  (closed with the server)
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300  # 17 s idle; a loaded 2-core machine is far slower
        while True:
            assert server.poll() is None, (server_dir / "server.log").read_text()[-3000:]
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=5) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "mlflow server did not answer within 300 s"
            time.sleep(1)

        project = _project(tmp_path / "checkout")
        monkeypatch.chdir(project)
        monkeypatch.setenv("MLFLOW_TRACKING_URI", url)
        import pandas as pd

        tags = {"policy": "grpo-s0", "method": "grpo", "seed": "0", "data_multiple": "1"}
        config = config_with({"common.tracking.experiment": "shared"})
        with running_stage("evaluate", _outputs(), config, key="grpo-s0", tags=tags) as ctx:
            import mlflow

            ctx.path("table").write_text("a\n")
            ctx.set_metrics({"bench/pass@1": 0.25, "bench/pass@2": 0.5})
            log_passk_intervals(
                pd.DataFrame({"name": ["bench"] * 2, "k": [1, 2], "ci_low": [0.2, 0.4]}).assign(
                    ci_high=[0.3, 0.6]
                )
            )
            mlflow.log_text("x", "note.txt")
        client = MlflowClient(url)
        run = client.get_run(ctx.run.info.run_id)
        assert run.info.status == "FINISHED"
        history = client.get_metric_history(run.info.run_id, "pass_at_k/bench")
        assert sorted((m.step, m.value) for m in history) == [(1, 0.25), (2, 0.5)]
        artifacts = _local(run.info.artifact_uri)
        assert artifacts.is_relative_to(project / "mlruns")
        assert (artifacts / "note.txt").read_text() == "x"

        assert main(["compare", "--tracking-uri", url, "--experiment", "shared"]) == 0
        out = capsys.readouterr().out
        row = next(line for line in out.splitlines() if line.startswith("bench") and " 2 " in line)
        assert row.split(maxsplit=2)[2] == "50.0 [40.0, 60.0]*"
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()


def test_scratch_and_dvc_exp_copies_belong_to_their_checkout(tmp_path: Path) -> None:
    """A Prefect scratch copy or a `dvc exp` copy logs as the checkout that made it: its runs
    go to that checkout's experiment and artifacts, not to a new experiment per copy."""
    from tagrpo.plumbing.paths import checkout_root

    checkout = _project(tmp_path / "repo")
    scratch = _project(checkout / ".tagrpo" / "runs" / "20261125-120000-brave-fox")
    experiment = _project(checkout / ".dvc" / "tmp" / "exps" / "tmpabc")
    (scratch / "stages").mkdir()
    assert checkout_root(scratch / "stages") == checkout
    assert checkout_root(experiment) == checkout
    assert checkout_root(checkout) == checkout


def test_a_store_left_half_migrated_by_a_full_disk_says_what_to_do(tmp_path: Path) -> None:
    """A migration interrupted by a full disk leaves alembic's temporary table, and every
    later stage failed with "table _alembic_tmp_experiments already exists" and no hint; a
    disk filling mid-use gave SQLAlchemy's autoflush preamble as the cause (issue 33.7)."""
    import sqlite3

    from mlflow.tracking import MlflowClient

    from tagrpo.plumbing.tracking import TrackingError, store_failure, tracking_errors

    database = tmp_path / "mlflow.db"
    with sqlite3.connect(database) as connection:
        connection.execute("CREATE TABLE _alembic_tmp_experiments (id INTEGER)")
    uri = f"sqlite:///{database}"
    with pytest.raises(TrackingError) as failed, tracking_errors("opening the store", uri):
        MlflowClient(uri).search_experiments()
    message = str(failed.value)
    assert message.startswith(f"MLflow tracking failed opening the store ({uri}): ")
    assert "_alembic_tmp_experiments already exists" in message
    assert message.endswith(
        "; an MLflow schema migration of this store was interrupted (a full disk?) and left its "
        "temporary table: drop it (sqlite3 <store> 'DROP TABLE _alembic_tmp_<name>') and rerun, "
        "or move the store aside to start a new one"
    )
    assert "\n" not in message
    autoflush = RuntimeError(
        "(raised as a result of Query-invoked autoflush; consider using a session.no_autoflush "
        "block if this flush is occurring prematurely)\n"
        "(sqlite3.OperationalError) database or disk is full\n[SQL: INSERT INTO metrics ...]"
    )
    assert store_failure(autoflush) == (
        "RuntimeError: (sqlite3.OperationalError) database or disk is full; free space on the "
        "store's disk and rerun (the stage committed no output)"
    )
