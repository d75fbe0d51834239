"""Run verl in a sandbox of its own: its own session, its own temp dir, nothing left behind.

A verl run starts a local Ray cluster (GCS, raylet, dashboard agents, workers, the TransferQueue
and rollout actors). When the driver dies abnormally (an exception in a worker, Ctrl-C, a
killed DVC stage) those processes can outlive it, and Ray writes its session under the system
temp dir. Here:

* the run gets a private temp dir (:func:`private_temp_dir`), named in every process's
  environment as ``TAGRPO_VERL_RUN`` (:data:`RUN_MARKER`) and, on a private single-node
  cluster, given to Ray as its temp dir and to every process as ``TMPDIR``;
* verl runs in a new session (``start_new_session``), so a Ctrl-C in the terminal reaches only
  the launcher, which then stops the run;
* whatever the outcome (success, failure, Ctrl-C, SIGTERM), :func:`stop_run` terminates the
  session's process group and every process whose environment carries the run's temp dir (Ray
  re-parents some daemons; all inherit the marker), first with SIGTERM, then SIGKILL, and the
  temp dir is removed. Only processes of this run are signalled, never all Ray processes of the
  machine (other runs may share it). On a cluster started with ``ray start`` (multi-node) the
  cluster's own daemons do not carry the marker and are left running; the run's workers on this
  node do and are stopped (Ray stops those on other nodes when the driver goes).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

from tagrpo.plumbing.procfs import pid_alive

# Ray's Unix sockets live under <temp>/ray/session_<date>_<pid>/sockets/...: Linux allows 107
# bytes per socket path, so the run's temp dir must be short.
MAX_TEMP_DIR_LENGTH = 40
TEMP_PREFIX = "tagrpo-verl-"
# Names the run's private temp dir in the environment of every process of the run.
RUN_MARKER = "TAGRPO_VERL_RUN"


def private_temp_dir() -> Path:
    """A new temp dir for one run (under the system temp dir, or /tmp if that path is long)."""
    base = tempfile.gettempdir()
    if len(base) + len(TEMP_PREFIX) + 8 > MAX_TEMP_DIR_LENGTH:
        base = "/tmp"
    return Path(tempfile.mkdtemp(prefix=TEMP_PREFIX, dir=base))


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except OSError:  # the process ended, or is not ours to read
        return b""


def processes_marked(marker: str) -> list[int]:
    """Processes (other than this one) whose environment or command line contains ``marker``."""
    needle = marker.encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        if needle in _read(entry / "environ") or needle in _read(entry / "cmdline"):
            found.append(int(entry.name))
    return found


def _signal_run(process_group: int | None, marker: str, sig: int) -> list[int]:
    if process_group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process_group, sig)
    pids = processes_marked(marker)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)
    return pids


def stop_run(process_group: int | None, marker: str, grace_s: float = 10.0) -> list[int]:
    """Terminate the run's processes (SIGTERM, then SIGKILL after ``grace_s``); returns them."""
    signalled = set(_signal_run(process_group, marker, signal.SIGTERM))
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline:
        remaining = [pid for pid in processes_marked(marker) if pid_alive(pid)]
        if not remaining and (process_group is None or not _group_alive(process_group)):
            return sorted(signalled)
        time.sleep(0.2)
    signalled |= set(_signal_run(process_group, marker, signal.SIGKILL))
    return sorted(signalled)


def _group_alive(process_group: int) -> bool:
    try:
        os.killpg(process_group, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _terminate_on_sigterm() -> Iterator[None]:
    """Turn SIGTERM (a stopped DVC stage) into an exception, so that cleanup runs.

    Once, as :func:`tagrpo.pipeline.runtime.die_with_parent`'s handler: after the first SIGTERM
    further ones are ignored (the clean-up after this block must not be interrupted), and the
    previous handler is restored only if none came.
    """
    received = []

    def raise_interrupt(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        received.append(signum)
        raise KeyboardInterrupt(f"signal {signum}")

    try:
        previous = signal.signal(signal.SIGTERM, raise_interrupt)
    except ValueError:  # not the main thread: leave signals alone
        yield
        return
    try:
        yield
    finally:
        if not received:
            signal.signal(signal.SIGTERM, previous)


def run_isolated(
    argv: Sequence[str],
    env: Mapping[str, str],
    cwd: str | Path,
    check: bool = True,
) -> subprocess.CompletedProcess:
    """``subprocess.run`` for verl: a new session, always cleaned up (see the module docstring).

    ``env[RUN_MARKER]`` must be the run's private temp dir: it marks the run's processes.
    """
    marker = env.get(RUN_MARKER)
    if not marker or not Path(marker).name.startswith(TEMP_PREFIX):
        raise ValueError(f"run_isolated needs {RUN_MARKER} set to the run's private temp dir")
    process = subprocess.Popen(list(argv), env=dict(env), cwd=str(cwd), start_new_session=True)
    try:
        with _terminate_on_sigterm():
            returncode = process.wait()
    finally:
        if process.poll() is None:
            process.terminate()
        stop_run(process.pid, marker)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=5)
    if check and returncode != 0:
        raise subprocess.CalledProcessError(returncode, list(argv))
    return subprocess.CompletedProcess(list(argv), returncode)


def remove_temp_dir(path: Path) -> None:
    """Delete the run's temp dir (after :func:`stop_run`)."""
    shutil.rmtree(path, ignore_errors=True)
