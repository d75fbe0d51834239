"""A copy of this working tree as a fresh git repo, for DVC runs (and an empty project: a
complete params.yaml and no stage).

Copies the tracked and new (not ignored) files, applies a params profile (as the README says:
``tagrpo params apply``) and commits, so stage runs are tagged with a real commit. Either as a
user's fresh clone has it (``fresh_clone=True``: the committed dvc.lock and outputs kept; only
outputs lying untracked in this tree are deleted) or cold (every output dvc.yaml declares
deleted, so a committed metric or an output lying in the tree cannot satisfy a stage, and
dvc.lock with them).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from tagrpo.config.params import repo_params
from tagrpo.plumbing.dvc_stages import pipeline_outputs
from tagrpo.plumbing.paths import project_root

ROOT = project_root()
EMPTY_PROJECT_EXPERIMENT = "test-project"


def write_empty_project(folder: Path, experiment: str = EMPTY_PROJECT_EXPERIMENT) -> Path:
    """``folder`` with a complete params.yaml (the embedded defaults; MLflow experiment
    ``experiment``, its store in the folder) and a dvc.yaml without stages: a project root."""
    folder.mkdir(parents=True, exist_ok=True)
    params = repo_params().model_dump(mode="json")
    params["common"]["tracking"]["experiment"] = experiment
    (folder / "params.yaml").write_text(yaml.safe_dump(params))
    (folder / "dvc.yaml").write_text("stages: {}\n")
    return folder


# What one command may take before run_checked stops it: a bound, so that a hung `dvc repro` or
# stage fails its test instead of eating CI's budget. Generous (a busy 2-core machine can take
# several times longer than an idle one); the smoke DAG's cold `dvc repro` passes its own.
RUN_TIMEOUT_S = 20 * 60


def run_checked(
    cmd: list[str], cwd: Path, env: dict[str, str], timeout: float | None = RUN_TIMEOUT_S
) -> str:
    """Run ``cmd``; its output, or an AssertionError with the tail of both streams.

    The command leads a process group of its own: when it runs past ``timeout`` seconds (None:
    no limit), or the test is interrupted (pytest-timeout, Ctrl-C), the whole group (a `dvc
    repro` and the stage it runs) is killed, and a timeout says so with the output so far.
    """
    process = subprocess.Popen(
        cmd,
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        stdout, stderr = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(process)
        stdout, stderr = process.communicate()
        raise AssertionError(
            f"{' '.join(cmd)} timed out after {timeout:.0f} s (killed with its process group):\n"
            f"{stdout[-4000:]}\n{stderr[-4000:]}"
        ) from None
    except BaseException:
        _kill_group(process)
        process.wait()
        raise
    if process.returncode != 0:
        raise AssertionError(
            f"{' '.join(cmd)} failed ({process.returncode}):\n{stdout[-4000:]}\n{stderr[-4000:]}"
        )
    return stdout + stderr


def _kill_group(process: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, signal.SIGKILL)


def copy_checkout(target: Path, *pathspec: str) -> None:
    """Copy this working tree's tracked and new (not ignored) files, those under ``pathspec``
    only when given, into ``target``."""
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard", "-z", "--", *pathspec],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, target / name)


def tracked_files() -> set[str]:
    """The files git tracks in this checkout (what a fresh clone of it holds)."""
    listed = subprocess.run(
        ["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    return set(filter(None, listed.split("\0")))


def scratch_project(
    target: Path, profile: str | None = None, fresh_clone: bool = False
) -> dict[str, str]:
    """Build the scratch repo in ``target``; the environment to run dvc and stages in it.

    ``fresh_clone``: dvc.lock and the committed outputs stay as committed (a user's clone);
    else both are deleted (a cold start)."""
    copy_checkout(target)
    tracked = tracked_files() if fresh_clone else set()
    if not fresh_clone:
        (target / "dvc.lock").unlink(missing_ok=True)
    for out in pipeline_outputs(ROOT):
        if out in tracked or any(name.startswith(out.rstrip("/") + "/") for name in tracked):
            continue
        path = target / out
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    # The user's tracking, DVC and tagrpo settings stay out; where the npm packages of the plots
    # page live (TAGRPO_NODE_MODULES, tagrpo/pipeline/plots.py) is the machine's, not the project's.
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("MLFLOW_", "TAGRPO_", "DVC_", "VIRTUAL_ENV"))
        or key == "TAGRPO_NODE_MODULES"
    }
    # Stage commands call `python`: this interpreter's environment, as `make` arranges.
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["DVC_NO_ANALYTICS"] = "1"
    git = ["git", "-c", "user.name=scratch", "-c", "user.email=scratch@example.invalid"]
    run_checked([*git, "init", "-q"], target, env)
    if profile is not None:
        run_checked(
            [sys.executable, "-m", "tagrpo.pipeline.cli", "params", "apply", profile], target, env
        )
    run_checked([*git, "add", "-A"], target, env)
    run_checked([*git, "commit", "-q", "-m", "scratch"], target, env)
    return env


@dataclass(frozen=True)
class SmokeRun:
    """A scratch checkout reproduced with the smoke profile, and what `dvc repro` printed."""

    checkout: Path
    env: dict[str, str]
    log: str
