"""Running one stage safely: one copy at a time, outputs moved into place only when complete.

:func:`running_stage` is what every stage ``main`` wraps its work in. In order, before any work:

1. the process dies with its parent (``dvc``/the flow): a killed orchestrator leaves no stage
   running behind it (Linux ``PR_SET_PDEATHSIG``; SIGTERM then ends the stage cleanly);
2. a lock per stage (and matrix item) under ``.tagrpo/locks``: a second copy refuses to start
   and names the process that holds it; then the inputs dvc.yaml gives the stage that other
   stages wrote are checked by content against dvc.lock (a damaged one is refused in one line
   naming it and the command that rebuilds it: :func:`tagrpo.plumbing.verify.check_inputs`);
3. every output location is checked writable; the old outputs stay in place (dvc.yaml marks
   them ``persist``, so DVC does not delete them either): a stage that refuses to start, fails
   or is killed leaves the outputs dvc.lock records;
4. the stage writes into a staging folder (``ctx.path(role)``, ``.tagrpo/staging/<stage>-<pid>``;
   those of dead processes are removed here) and, on success only, the outputs are committed
   (:mod:`tagrpo.pipeline.commit`): each new output is renamed (or, to another filesystem,
   copied) beside its destination, then the old metrics are set aside, each old output
   swapped for its new one, the new metrics put in place last, and only then the old copies
   removed. No half-written output ever carries its final name, no new output sits beside
   stale metrics, and a failure (or a kill: the next stage start reads the commit's journal)
   leaves the old outputs or the new ones, never neither, on any filesystem;
5. an MLflow run tagged with the stage, its DVC name, the dependency hash, host and pid; runs of
   the same stage left RUNNING by a killed process are marked KILLED first. It nests under the
   pipeline's parent run: the Prefect flow's (``TAGRPO_PARENT_RUN_ID``) or the one the first
   stage of a ``dvc repro``/``dvc exp run`` opens for that dvc process
   (:mod:`tagrpo.pipeline.parent_run`, via :func:`tagrpo.pipeline.stage_run.stage_run`). A
   failing tracking store ends the stage with a one-line cause (exit status 1), its outputs not
   committed.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagrpo.config.params import Params
from tagrpo.pipeline.commit import (
    commit_outputs,
    is_mount_point,
    mount_points,
    real_destination,
    recover_commits,
)
from tagrpo.pipeline.parent_run import dvc_arguments
from tagrpo.pipeline.stage_run import stage_run
from tagrpo.plumbing.device import describe_device
from tagrpo.plumbing.dvc_stages import outputs_outside_project
from tagrpo.plumbing.errors import (
    DiskFullError,
    OutputOutsideProjectError,
    UserMistake,
    disk_full,
    is_disk_full,
)
from tagrpo.plumbing.layout import Outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.procfs import pid_alive, proc_stat, process_alive, started_at
from tagrpo.plumbing.tracking import TrackingError, log_metrics
from tagrpo.plumbing.verify import check_inputs, stage_inputs

STATE_DIR = ".tagrpo"
_PR_SET_PDEATHSIG = 1


class StageBusyError(RuntimeError):
    """Another process is running the same stage."""


class LauncherGone(SystemExit):
    """The process that started the stage (dvc, the flow) is gone: the stage does not start
    (nothing to record: the launcher was stopped, and its parent run ends with it)."""


_SHELLS = frozenset({"sh", "dash", "bash", "zsh", "ksh", "fish"})


def die_with_parent() -> None:
    """Ask the kernel to SIGTERM this process when its parent dies; SIGTERM ends it cleanly.

    DVC runs a stage through ``$SHELL -c`` (``/bin/sh`` when unset). bash replaces itself with
    the command, dash does not, and a shell survives the ``kill -9`` of dvc: so when the parent
    is a shell, the stage also watches the nearest ancestor that is not one (dvc, the flow).
    No-op off Linux. If the parent is already gone (re-parented to init), exit at once; so
    also when dvc beyond the shells is: a stage slow to get here (imports) may find its shell
    already re-parented to init, and watching init would guard nothing.
    """
    signal.signal(signal.SIGTERM, _terminate)
    if not sys.platform.startswith("linux"):
        return
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL("libc.so.6", use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if parent == 1 or os.getppid() != parent:
        raise LauncherGone("the parent process is gone: not starting the stage")
    launcher = _launcher_beyond_shells(parent)
    if launcher is not None and launcher[0] == 1 and _dvc_exited():
        raise LauncherGone(
            "the process that started this stage is gone (its shell now belongs to init): "
            "not starting the stage"
        )
    if launcher is not None and launcher[0] not in (1, parent):
        threading.Thread(
            target=_watch, args=launcher, name="die-with-launcher", daemon=True
        ).start()


def _launcher_beyond_shells(pid: int) -> tuple[int, int] | None:
    """The nearest ancestor (from ``pid`` up) that is not a shell: ``(pid, start time)``;
    pid 1 when the shells lead to init (whatever launched them has exited)."""
    for _ in range(16):
        stat = proc_stat(pid)
        if stat is None or pid < 1:
            return None
        if pid == 1 or stat.name not in _SHELLS:
            return pid, stat.start_ticks
        pid = stat.parent
    return None


def _dvc_exited() -> bool:
    """dvc started this stage (it sets ``DVC_STAGE``) but init now stands where dvc stood."""
    if "DVC_STAGE" not in os.environ:
        return False  # started by hand: init may be its launcher (a service, a container)
    try:
        init = Path("/proc/1/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return dvc_arguments([part.decode(errors="replace") for part in init if part]) is None


def _watch(pid: int, started: int) -> None:
    # The start time guards against the pid being reused by an unrelated process.
    while process_alive(pid, started):
        time.sleep(0.5)
    # To the main thread: a process-directed signal may land on this thread, and then the main
    # thread's sleep or wait is not interrupted and the handler runs only when it returns.
    signal.pthread_kill(threading.main_thread().ident, signal.SIGTERM)


class StageTerminated(KeyboardInterrupt):
    """The stage was ended by a signal (SIGTERM: dvc or the flow stopping it, its launcher
    gone, a ``kill``)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"terminated by signal {signum}")
        self.signum = signum


def _terminate(signum: int, frame: Any) -> None:
    # Once: a repeated SIGTERM must not interrupt the clean-up (ending the MLflow run, removing
    # the staging folder) that this first one starts. SIGKILL still ends the process.
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise StageTerminated(signum)


class StageLock:
    """An exclusive, non-blocking ``flock`` on ``.tagrpo/locks/<name>.lock`` (freed on exit)."""

    def __init__(self, root: Path, name: str) -> None:
        self.path = root / STATE_DIR / "locks" / f"{name.replace('/', '_')}.lock"
        self.name = name
        self.handle: Any = None

    def __enter__(self) -> StageLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = open(self.path, "a+", encoding="utf-8")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.seek(0)
            holder = handle.read().strip() or "unknown"
            handle.close()
            raise StageBusyError(
                f"stage {self.name} is already running ({holder}); wait for it to finish or "
                f"stop that process: two copies would write the same outputs"
            ) from None
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.ctime()}")
        handle.flush()
        self.handle = handle
        return self

    def __exit__(self, *exc: Any) -> None:
        if self.handle is not None:
            fcntl.flock(self.handle, fcntl.LOCK_UN)
            self.handle.close()
            self.handle = None


# dvc commands that run stage commands (and write dvc.lock after each).
_RUNNING_COMMANDS = (("repro",), ("run",), ("exp", "run"))


def other_dvc_runs(root: Path) -> list[tuple[int, str]]:
    """Other ``dvc repro``/``dvc exp run`` processes working in ``root`` (cwd at or under it),
    not this process's ancestors: ``(pid, command line)``.

    DVC releases its repository lock while a stage's command runs and takes it back to write
    dvc.lock: a stage of a second ``dvc repro`` in the same checkout runs to its end and is
    then thrown away ("Unable to acquire lock"), its MLflow run FINISHED (issue 33.3).
    """
    from tagrpo.pipeline.parent_run import _cmdline, dvc_arguments

    if not sys.platform.startswith("linux"):
        return []
    ancestors = set()
    pid = os.getpid()
    for _ in range(64):
        stat = proc_stat(pid)
        if stat is None or pid <= 1:
            break
        ancestors.add(pid)
        pid = stat.parent
    found = []
    target = root.resolve()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) in ancestors:
            continue
        argv = _cmdline(int(entry.name))
        args = dvc_arguments(argv)
        if not args or not any(args[: len(c)] == c for c in _RUNNING_COMMANDS):
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd")).resolve()
        except OSError:
            continue
        if cwd == target or target in cwd.parents:
            found.append((int(entry.name), " ".join(argv)))
    return sorted(found)


def refuse_concurrent_dvc(root: Path, name: str) -> None:
    """:class:`StageBusyError` when another dvc run works in this checkout (before any work)."""
    others = other_dvc_runs(root)
    if others:
        pid, command = others[0]
        raise StageBusyError(
            f"{name}: another dvc process runs stages in this checkout (pid {pid}: {command}); "
            "DVC would throw this stage's result away when that one holds its lock (\"Unable "
            'to acquire lock"): wait for it to end, or run in another checkout'
        )


# Errors that are the user's to fix (params, files, a busy stage): one line, no traceback,
# unless asked (--traceback, or TAGRPO_TRACEBACK=1).
TRACEBACK_ENV = "TAGRPO_TRACEBACK"
TRACEBACK_FLAG = "--traceback"


def user_errors() -> tuple[type[BaseException], ...]:
    """The exception types a user's mistake raises, which print as one line."""
    from tagrpo.config.params import ConfigError
    from tagrpo.plumbing.verify import OutputCorruptedError

    return (
        UserMistake,
        ConfigError,
        StageBusyError,
        OutputCorruptedError,
        FileNotFoundError,
        PermissionError,
        TrackingError,
    )


def traceback_wanted(argv: list[str]) -> bool:
    return TRACEBACK_FLAG in argv or os.environ.get(TRACEBACK_ENV, "") not in ("", "0")


_TRACEBACK_HINT = f"({TRACEBACK_ENV}=1 or {TRACEBACK_FLAG} for the traceback)"


def run_main(main: Any, stage: str, argv: list[str] | None = None) -> None:
    """What ``python -m stages.<stage>`` runs: ``main(argv)``, and when it fails, whatever the
    reason and however early (an argument or params error, the stage's lock held, an input
    that differs from dvc.lock), the failure recorded in MLflow with its exit status
    (:func:`tagrpo.pipeline.stage_run.record_stage_failure`: the pipeline's parent run then
    ends FAILED naming the stage). This is every stage's one error boundary: a user's mistake
    (:func:`user_errors`: params, a missing key, an unreachable endpoint, a full disk...) and
    a stage ended by a signal print one line naming the stage and what to fix; ``--traceback``
    or ``TAGRPO_TRACEBACK=1`` shows the full trace instead."""
    from tagrpo.pipeline.stage_run import record_stage_failure

    argv = list(sys.argv[1:] if argv is None else argv)
    show_traceback = traceback_wanted(argv)
    argv = [arg for arg in argv if arg != TRACEBACK_FLAG]
    name = os.environ.get("DVC_STAGE") or stage
    try:
        main(argv)
    except LauncherGone:
        raise
    except SystemExit as error:
        code = error.code
        if code is None or code == 0:
            raise
        record_stage_failure(stage, code if isinstance(code, int) else 1, error)
        raise
    except KeyboardInterrupt as error:  # Ctrl-C, or SIGTERM (die_with_parent's handler)
        signum = _signal_number(error)
        record_stage_failure(stage, 128 + signum, error, status="KILLED")
        if show_traceback:
            traceback.print_exc()  # and the same exit status as without it
        else:
            print(
                f"stage {name} stopped by {signal.Signals(signum).name} (signal {signum}) "
                f"before it finished {_TRACEBACK_HINT}",
                file=sys.stderr,
            )
        raise SystemExit(128 + signum) from None
    except BaseException as error:
        mistake = as_user_error(error)
        record_stage_failure(stage, 1, mistake or error)
        if show_traceback or mistake is None:
            raise
        print(f"stage {name} failed: {user_message(mistake)} {_TRACEBACK_HINT}", file=sys.stderr)
        raise SystemExit(1) from None


def as_user_error(error: BaseException) -> BaseException | None:
    """``error`` as the user's mistake it is (a full disk made to name a path), or None when
    it is not one (a bug: its traceback is what helps)."""
    if is_disk_full(error) and not isinstance(error, DiskFullError):
        return disk_full(error, [project_root()])  # type: ignore[arg-type]
    return error if isinstance(error, user_errors()) else None


def _signal_number(error: KeyboardInterrupt) -> int:
    """The signal behind an interrupt: SIGTERM's handlers say which; a bare one is Ctrl-C."""
    if isinstance(error, StageTerminated):
        return error.signum
    found = re.search(r"signal (\d+)", str(error))
    number = int(found.group(1)) if found else signal.SIGINT
    return number if number in {s.value for s in signal.Signals} else signal.SIGINT


def user_message(error: BaseException) -> str:
    """A user error as printed: its type and whole message on one line (a params error lists
    every problem, joined), key-shaped parts redacted."""
    from tagrpo.plumbing.config_model import mask_key_shapes

    text = " ".join(line.strip() for line in str(error).splitlines() if line.strip())
    return mask_key_shapes(f"{type(error).__name__}: {text}")


def require_inputs(root: Path, paths: list[Path], stage: str) -> None:
    """Every input exists (checked before the stage deletes or loads anything)."""
    missing = [str(path) for path in paths if not (root / path).exists()]
    if missing:
        raise FileNotFoundError(
            f"stage {stage} needs {missing}: run the stages before it (dvc repro {stage})"
        )


def check_writable(root: Path, paths: list[Path]) -> None:
    """Every output's directory can be created and written (before anything is deleted):
    where the commit writes, symlinks followed (a scratch disk), inside a mount point."""
    problems = []
    mounts = mount_points()
    for relative in paths:
        target = real_destination(root / relative)
        parent = target if is_mount_point(target, mounts) else target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
            probe = parent / f".tagrpo-write-check-{os.getpid()}"
            probe.write_text("")
            probe.unlink()
        except OSError as error:
            problems.append(f"{relative}: {error}")
    if problems:
        raise PermissionError("cannot write the stage's outputs:\n  " + "\n  ".join(problems))


def refuse_outputs_outside(root: Path, dvc_name: str) -> None:
    """Under DVC (it sets DVC_STAGE for a stage's command), refuse before any work a stage
    whose cached outputs sit behind a symlink that leaves the project: DVC would refuse them
    only after the stage ran. Run by hand, such a layout is the user's to keep."""
    if not os.environ.get("DVC_STAGE"):
        return
    problems = outputs_outside_project(root, [dvc_name])
    if problems:
        raise OutputOutsideProjectError(
            f"stage {dvc_name} refused before it ran: " + "; ".join(problems)
        )


def remove_path(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _writer_gone(entry: Path) -> bool:
    """Whether the process named by ``entry``'s ``...-<pid>`` suffix (a staging folder, a
    commit journal) is gone; this process's own entries are not gone."""
    pid = entry.name.removesuffix(".json").rpartition("-")[2]
    if not pid.isdigit() or int(pid) == os.getpid():
        return False
    if pid_alive(int(pid)):
        # The pid may be reused: a process that started after the entry last changed is
        # not the one that wrote it (1 s of slack for the clocks' resolutions).
        started = started_at(int(pid))
        if started is None or started <= entry.stat().st_mtime + 1.0:
            return False
    return True


def remove_stale_staging(root: Path) -> list[str]:
    """Remove the staging folders (``.tagrpo/staging/<stage>-<pid>``) of processes that are
    gone: a stage killed with SIGKILL (or a machine that went down) leaves its half-written
    outputs there. Returns the folders removed."""
    folder = root / STATE_DIR / "staging"
    removed = []
    for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
        if _writer_gone(entry):
            remove_path(entry)
            removed.append(entry.name)
    if removed:
        print(f"[stage] removed the staging folders of stopped stages: {', '.join(removed)}")
    return removed


def _journal_owner_gone(journal: Path) -> bool:
    # At a stage's start no commit of this process is under way: its own journals count too.
    return journal.name.removesuffix(".json").rpartition("-")[2] == str(
        os.getpid()
    ) or _writer_gone(journal)


@dataclass
class StageContext:
    """What a running stage writes through: staged output paths and its metrics."""

    name: str
    config: Params
    root: Path
    outputs: Outputs
    staging: Path
    run: Any = None
    metrics: dict[str, Any] = field(default_factory=dict)
    # The logged model these metrics measure (an evaluate run's policy): its metrics are also
    # the model's, so MLflow's model page lists them beside the run that measured them.
    model_id: str | None = None

    def path(self, role: str) -> Path:
        """Where to write output ``role`` now (moved to its final place on success)."""
        staged = self.staging / self.outputs[role]
        staged.parent.mkdir(parents=True, exist_ok=True)
        return staged

    def final(self, role: str) -> Path:
        """The output's final location (for messages and relative links)."""
        return self.root / self.outputs[role]

    def log(self, metrics: Mapping[str, Any], step: int | None = None) -> None:
        log_metrics(metrics, step=step, model_id=self.model_id)

    def set_metrics(self, metrics: Mapping[str, Any]) -> None:
        """The stage's metrics file content (written last, on success)."""
        self.metrics = dict(metrics)


def _commit(context: StageContext) -> None:
    missing = [
        str(out) for out in context.outputs.outs.values() if not (context.staging / out).exists()
    ]
    if missing:
        raise RuntimeError(f"stage {context.name} did not write its outputs {missing}")
    finite = _json_safe(context.metrics)
    commit_outputs(
        context.root,
        context.name,
        {relative: context.staging / relative for relative in context.outputs.outs.values()},
        context.outputs.metrics,
        json.dumps(finite, indent=2, sort_keys=True) + "\n",
    )


def _json_safe(value: Any) -> Any:
    """NaN and infinities are not JSON: drop such entries (DVC reads these files)."""
    if isinstance(value, Mapping):
        return {k: _json_safe(v) for k, v in value.items() if not _non_finite(v)}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _non_finite(value: Any) -> bool:
    return isinstance(value, float) and (value != value or value in (float("inf"), float("-inf")))


def stage_run_name(stage: str, key: str | None) -> str:
    """The MLflow run name of a stage execution: the distinctive part first
    (``grpo_x4-s0 · evaluate``), since MLflow's run list cuts long names short and
    ``evaluate-grpo_...`` reads the same for every policy. The full identity is in the run's
    tags (``stage``, ``policy``, ``tagrpo.dvc_stage``)."""
    return f"{key} · {stage}" if key else stage


@contextlib.contextmanager
def running_stage(
    stage: str,
    outputs: Outputs,
    config: Params,
    *,
    key: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    log_sections: tuple[str, ...] = (),
    run_params: Mapping[str, Any] | None = None,
    metrics_prefix: str = "",
    dvc_name: str | None = None,
    checked_inputs: Collection[str] = (),
) -> Iterator[StageContext]:
    """Run a stage (see the module docstring); ``key`` names a matrix item (``grpo-s0``).

    First the inputs dvc.yaml gives it that other stages wrote are checked by content against
    dvc.lock (:func:`tagrpo.plumbing.verify.check_inputs`: a damaged one is refused in one
    line naming it and the command that rebuilds it), except ``checked_inputs``, which the
    stage checked itself before it read them.

    The metrics file's numbers are also logged to MLflow, under ``metrics_prefix`` (the train
    stage uses ``summary/``: its per-step metrics have the same names).
    """
    die_with_parent()
    root = project_root()
    name = f"{stage}@{key}" if key else stage
    with StageLock(root, name):
        refuse_concurrent_dvc(root, name)
        inputs = stage_inputs(root, dvc_name or name)
        check_inputs(root, [path for path in inputs if path not in set(checked_inputs)])
        check_writable(root, outputs.all())
        refuse_outputs_outside(root, dvc_name or name)
        recover_commits(root, _journal_owner_gone)  # before the staging they may come from
        remove_stale_staging(root)
        staging = root / STATE_DIR / "staging" / f"{name.replace('/', '_')}-{os.getpid()}"
        remove_path(staging)
        staging.mkdir(parents=True)
        context = StageContext(name, config, root, outputs, staging)
        device = describe_device()  # in the metrics file and the run's tags: results are a device's
        try:
            with stage_run(
                stage,
                config,
                key=key,
                run_name=run_name or stage_run_name(stage, key),
                tags={**(tags or {}), "device": device},
                log_sections=log_sections,
                run_params=run_params,
                dvc_name=dvc_name,
            ) as run:
                context.run = run
                started = time.perf_counter()
                yield context
                context.metrics.setdefault("seconds", time.perf_counter() - started)
                context.log({f"{metrics_prefix}{k}": v for k, v in context.metrics.items()})
                context.metrics["device"] = device
                _commit(context)
        except TrackingError as error:
            # One line, not MLflow's and SQLAlchemy's tracebacks: the cause names the store.
            raise SystemExit(f"stage {name} failed: {error}") from None
        except OSError as error:
            if not is_disk_full(error) or isinstance(error, DiskFullError):
                raise
            # A write's ENOSPC names no file: name where this stage writes, the fullest first.
            where = [staging, *(real_destination(root / path).parent for path in outputs.all())]
            raise disk_full(error, where) from error
        finally:
            remove_path(staging)
