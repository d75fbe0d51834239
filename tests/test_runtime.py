"""Stage runtime drills: one copy at a time, a stage dies with its parent, outputs appear only
complete and never beside stale metrics, unwritable outputs fail before anything is deleted,
and killed runs end KILLED in MLflow."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml
from scratch_project import EMPTY_PROJECT_EXPERIMENT

from tagrpo.config.params import Params, config_with
from tagrpo.pipeline.runtime import StageBusyError, StageLock, running_stage
from tagrpo.plumbing.device import describe_device
from tagrpo.plumbing.layout import Outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.procfs import proc_stat

SOURCE = project_root()


def _outputs() -> Outputs:
    return Outputs({"table": Path("out/table.csv"), "model": Path("models/p")}, Path("m/p.json"))


def _config() -> Params:
    return config_with({"common.tracking.experiment": EMPTY_PROJECT_EXPERIMENT})


def test_outputs_appear_only_when_the_stage_succeeds(empty_project: Path) -> None:
    (empty_project / "out").mkdir()
    (empty_project / "out/table.csv").write_text("stale\n")
    (empty_project / "m").mkdir()
    (empty_project / "m/p.json").write_text('{"stale": 1}')
    with (
        pytest.raises(RuntimeError, match="half way"),
        running_stage("toy", _outputs(), _config()) as ctx,
    ):
        ctx.path("table").write_text("new\n")
        # The old outputs stay while the stage works (dvc.yaml's outputs are persist: DVC
        # does not delete them either): a stage that fails keeps what dvc.lock records.
        assert (empty_project / "out/table.csv").read_text() == "stale\n"
        raise RuntimeError("half way")
    # A failed stage leaves no new output: the old ones, metrics included, as they were.
    assert (empty_project / "out/table.csv").read_text() == "stale\n"
    assert (empty_project / "m/p.json").read_text() == '{"stale": 1}'
    assert list((empty_project / ".tagrpo" / "staging").iterdir()) == []

    with running_stage("toy", _outputs(), _config()) as ctx:
        ctx.path("table").write_text("a,b\n")
        ctx.path("model").mkdir()
        (ctx.path("model") / "weights.bin").write_bytes(b"w")
        ctx.set_metrics({"rows": 1, "nan": float("nan")})
        assert (empty_project / "out/table.csv").read_text() == "stale\n"  # staged until the end
    assert (empty_project / "out/table.csv").read_text() == "a,b\n"
    assert (empty_project / "models/p/weights.bin").read_bytes() == b"w"
    written = json.loads((empty_project / "m/p.json").read_text())
    assert written["rows"] == 1
    assert "nan" not in written
    assert written["device"] == describe_device()  # which device made the run, in its metrics


def test_a_stage_that_forgets_an_output_fails(empty_project: Path) -> None:
    missing = r"did not write its outputs \['models/p'\]"
    with (
        pytest.raises(RuntimeError, match=missing),
        running_stage("toy", _outputs(), _config()) as ctx,
    ):
        ctx.path("table").write_text("x\n")
    assert not (empty_project / "out/table.csv").exists()


def test_unwritable_outputs_fail_before_anything_is_deleted(empty_project: Path) -> None:
    (empty_project / "out").mkdir()
    (empty_project / "out/table.csv").write_text("keep me\n")
    (empty_project / "models").write_text("a file where a folder is needed\n")
    ran = False
    with (
        pytest.raises(PermissionError, match="models/p"),
        running_stage("toy", _outputs(), _config()),
    ):
        ran = True
    assert not ran
    assert (empty_project / "out/table.csv").read_text() == "keep me\n"


def test_staging_folders_of_stopped_stages_are_removed_at_the_next_run(
    empty_project: Path,
) -> None:
    """A stage killed with SIGKILL leaves `.tagrpo/staging/<stage>-<pid>` (issue 40.5): the
    next stage run removes it; a running stage's folder stays, and so does one whose pid now
    belongs to another process only if that process started before the folder last changed
    (a reused pid started later)."""
    staging = empty_project / ".tagrpo" / "staging"
    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "120"])
    try:
        gone = staging / f"train@grpo-s0-{dead.pid}"
        running = staging / f"evaluate@grpo-s0-{live.pid}"
        reused = staging / f"evaluate@grpo-s1-{live.pid}"
        for folder in (gone, running, reused):
            (folder / "models").mkdir(parents=True)
        # The reused pid's process started after its folder last changed: not its writer.
        an_hour_ago = time.time() - 3600
        os.utime(reused, (an_hour_ago, an_hour_ago))
        with running_stage("toy", _outputs(), _config()) as ctx:
            ctx.path("table").write_text("x\n")
            ctx.path("model").mkdir()
            ctx.set_metrics({"n": 1})
        assert sorted(p.name for p in staging.iterdir()) == [running.name]
    finally:
        live.kill()
        live.wait()


def test_a_second_copy_of_a_stage_refuses_to_start(empty_project: Path) -> None:
    with StageLock(empty_project, "train@grpo-s0"):
        with (
            pytest.raises(
                StageBusyError, match=rf"train@grpo-s0 is already running \(pid {os.getpid()}"
            ),
            StageLock(empty_project, "train@grpo-s0"),
        ):
            pass
        with StageLock(empty_project, "train@grpo-s1"):  # another matrix item may run
            pass
    with StageLock(empty_project, "train@grpo-s0"):  # released
        pass


STAGE = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    from tagrpo.config.params import load_config
    from tagrpo.plumbing.layout import Outputs
    from tagrpo.pipeline.runtime import running_stage

    outputs = Outputs({"table": Path("out/table.csv")}, Path("m/p.json"))
    with running_stage("slow", outputs, load_config()) as ctx:
        ctx.path("table").write_text("partial\\n")
        print("started", flush=True)
        time.sleep(120)
    """
)


def _wait(predicate, timeout: float = 60.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.2)
    return False


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie (exited, not yet reaped by its dead parent's adopter) counts as gone.
    stat = proc_stat(pid)
    return not (stat is not None and stat.zombie)


@pytest.mark.slow
@pytest.mark.timeout(600)
@pytest.mark.parametrize("shell", ["/bin/sh", "/bin/bash"])
def test_killing_dvc_stops_the_stage_and_its_run_ends_killed(
    empty_project: Path, shell: str
) -> None:
    """The drill: `kill -9` of `dvc repro` must not leave its stage running (writing outputs,
    holding a RUNNING MLflow run), and a second copy of a running stage refuses to start.

    DVC runs the command through ``$SHELL -c``: bash execs the stage, dash (``/bin/sh``, used
    when SHELL is unset, as on many CI machines) stays between dvc and the stage."""
    import mlflow

    (empty_project / "stage.py").write_text(STAGE)
    (empty_project / "dvc.yaml").write_text(
        "stages:\n  slow:\n    cmd: python stage.py\n    outs: [out/table.csv]\n"
    )
    env = {
        **os.environ,
        "PYTHONPATH": str(SOURCE),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
        "DVC_NO_ANALYTICS": "1",
        "SHELL": shell,
    }
    for command in (["git", "init", "-q"], ["dvc", "init", "-q"]):
        subprocess.run(command, cwd=empty_project, env=env, check=True)
    dvc = subprocess.Popen(
        ["dvc", "repro"],
        cwd=empty_project,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    staging = empty_project / ".tagrpo" / "staging"
    # Inside the stage body: it has written its staged output (the MLflow run is open; on a
    # loaded machine opening it takes seconds, so no fixed sleep).
    assert _wait(lambda: staging.exists() and any(staging.glob("*/out/table.csv")), 180)
    stage_pid = int(next(staging.iterdir()).name.rsplit("-", 1)[1])
    second = subprocess.run(
        [sys.executable, "stage.py"], cwd=empty_project, env=env, capture_output=True, text=True
    )
    assert second.returncode != 0 and "stage slow is already running" in second.stderr
    dvc.send_signal(signal.SIGKILL)
    dvc.wait()
    assert _wait(lambda: not _alive(stage_pid)), "the stage outlived dvc"
    assert not (empty_project / "out" / "table.csv").exists()
    assert not (empty_project / "m" / "p.json").exists()
    client = mlflow.tracking.MlflowClient(f"sqlite:///{empty_project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name(EMPTY_PROJECT_EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id], "tags.stage != 'pipeline'")
    assert [run.info.status for run in runs] == ["KILLED"]
    # dvc's parent run (tagrpo.pipeline.parent_run) is ended KILLED by its watcher.
    (parent,) = client.search_runs([experiment.experiment_id], "tags.stage = 'pipeline'")
    assert runs[0].data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert _wait(lambda: client.get_run(parent.info.run_id).info.status == "KILLED")
    with StageLock(empty_project, "slow"):  # the lock died with the stage
        pass


def test_a_stage_refuses_while_another_dvc_repro_runs_in_its_checkout(
    empty_project: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """Two `dvc repro` in one checkout: DVC discards the second's stage at the end ("Unable
    to acquire lock") after all its work; the stage refuses before any (issue 33.3)."""
    bin_dir = tmp_path_factory.mktemp("bin")
    fake = bin_dir / "dvc"  # a process whose command line is `dvc repro ...`
    fake.write_text("#!/bin/sh\nsleep 60\n")
    fake.chmod(0o755)
    (empty_project / "out").mkdir()
    (empty_project / "out/table.csv").write_text("keep me\n")
    elsewhere = tmp_path_factory.mktemp("other-checkout")
    other = subprocess.Popen([str(fake), "repro", "-s", "evaluate@grpo-0"], cwd=elsewhere)
    same = None
    try:
        with running_stage("toy", _outputs(), _config()) as ctx:  # another checkout: runs
            ctx.path("table").write_text("x\n")
            ctx.path("model").mkdir()
            ctx.set_metrics({"n": 1})
        (empty_project / "out/table.csv").write_text("keep me\n")
        same = subprocess.Popen([str(fake), "repro", "-s", "evaluate@grpo-0"], cwd=empty_project)
        ran = False
        with (
            pytest.raises(
                StageBusyError,
                match=rf"toy: another dvc process runs stages in this checkout \(pid {same.pid}: "
                rf"/bin/sh {fake} repro -s evaluate@grpo-0\)",
            ),
            running_stage("toy", _outputs(), _config()),
        ):
            ran = True
        assert not ran
        assert (empty_project / "out/table.csv").read_text() == "keep me\n"
    finally:
        for process in (other, same):
            if process is not None:
                process.kill()
                process.wait()


def test_a_users_mistake_is_one_line_and_the_trace_is_there_when_asked(
    empty_project: Path,
) -> None:
    """Issue 40.5: a known mistake (here: evaluating a policy never trained) prints one line
    naming the stage and the error; TAGRPO_TRACEBACK=1 or --traceback gives the trace; a
    failure is still recorded (a FAILED run, tracking on)."""
    import mlflow

    env = {
        **os.environ,
        "PYTHONPATH": str(SOURCE),
        "MLFLOW_TRACKING_URI": f"sqlite:///{empty_project / 'mlflow.db'}",
    }
    command = [sys.executable, "-m", "stages.evaluate", "--policy", "base"]
    plain = subprocess.run(command, cwd=empty_project, env=env, capture_output=True, text=True)
    assert plain.returncode == 1
    last = plain.stderr.strip().splitlines()[-1]
    assert last.startswith("stage evaluate failed: FileNotFoundError: ")
    assert last.endswith(
        "models/base does not exist: train the policy first "
        "(TAGRPO_TRACEBACK=1 or --traceback for the traceback)"
    )
    assert "Traceback" not in plain.stderr
    client = mlflow.tracking.MlflowClient(env["MLFLOW_TRACKING_URI"])
    experiment = client.get_experiment_by_name(EMPTY_PROJECT_EXPERIMENT)
    runs = client.search_runs([experiment.experiment_id])
    assert [run.info.status for run in runs] == ["FAILED"]
    assert runs[0].data.tags["tagrpo.exit_code"] == "1"
    assert "train the policy first" in runs[0].data.tags["tagrpo.error"]
    # With tracking off (nothing to record), the trace when asked for.
    params = yaml.safe_load((empty_project / "params.yaml").read_text())
    params["common"]["tracking"]["enabled"] = False
    (empty_project / "params.yaml").write_text(yaml.safe_dump(params))
    for asked in ({"TAGRPO_TRACEBACK": "1"}, {}):
        extra = [] if asked else ["--traceback"]
        traced = subprocess.run(
            [*command, *extra],
            cwd=empty_project,
            env={**env, **asked},
            capture_output=True,
            text=True,
        )
        assert traced.returncode == 1 and "Traceback (most recent call last)" in traced.stderr


def test_the_tagrpo_command_prints_a_users_mistake_as_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import tagrpo.pipeline.cli as cli

    def busy(args: object) -> int:
        raise StageBusyError("stage report is already running (pid 1)")

    monkeypatch.setattr(cli, "_cmd_verify", busy)
    monkeypatch.delenv("TAGRPO_TRACEBACK", raising=False)
    assert cli.main(["verify"]) == 2
    assert capsys.readouterr().err.startswith(
        "tagrpo verify: StageBusyError: stage report is already running (pid 1)"
    )
    with pytest.raises(StageBusyError):
        cli.main(["verify", "--traceback"])
