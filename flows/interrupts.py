"""Ctrl-C, SIGTERM and SIGHUP of ``python -m flows.pipeline run``: a prompt, honest end.

What used to happen (Prefect 3.8.8): the terminal's SIGINT reached every process of the flow's
process group, Prefect's temporary server included, so the flow could no longer record its end
(the flow run and its running task stayed "Running" for good) and then hung for minutes in
Prefect's exit-time event flush, retrying the dead server's websocket.

What happens now:

* the dvc processes the flow starts (:func:`start_child`) lead process groups of their own, so
  the terminal's signal reaches only the flow; the flow forwards one SIGINT to each of them
  (dvc stops its stage, which ends its MLflow run KILLED) and SIGKILLs any group still there
  :data:`CHILD_GRACE_S` seconds later;
* the temporary server (:class:`OwnedServer`) runs in a session of its own and is stopped by
  the entry point only after the flow run's end state and Prefect's queued events and logs
  have reached it (:func:`drain_prefect`, bounded);
* the flow run ends Crashed ("aborted by an interrupt/termination signal"), its stage task run
  Failed or Crashed, and the process exits ``128 + signal`` with a one-line message; whatever
  happens, it exits :data:`EXIT_DEADLINE_S` seconds after the first signal at the latest (a
  watchdog); a second Ctrl-C exits at once;
* the flow run is tagged with its owner (host, pid, process start time), so the next
  ``run`` marks runs left "Running" by an owner that is gone (SIGKILL, a power cut, a second
  Ctrl-C) Crashed, naming why (:func:`mark_orphans_crashed`).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from tagrpo.plumbing.procfs import proc_stat, process_alive

# A stopped dvc ends its stage (the stage ends its MLflow run KILLED) well within this; then
# the group is SIGKILLed so that nothing can hold the flow past its deadline.
CHILD_GRACE_S = 10.0
# The bound on how long the flow may take to exit after the first signal, whatever happens.
EXIT_DEADLINE_S = 30.0
# Prefect's queued events and logs get this long to reach the server before it is stopped.
DRAIN_TIMEOUT_S = 8.0
# The flow-run tag that names the process running it: tagrpo.owner:<host>:<pid>:<start ticks>.
OWNER_TAG = "tagrpo.owner"
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_children: set[subprocess.Popen[bytes]] = set()
_children_lock = threading.Lock()
_state: dict[str, Any] = {"signum": None, "server": None}


def interrupted() -> int | None:
    """The first signal that asked the flow to stop, or None."""
    return _state["signum"]


# A child in a process group of its own no longer gets the signals (SIGKILL included) that a
# terminal or `kill -- -PGID` sends to the flow's group: this shim leads the child's group,
# runs the command as its child and waits for it; when the flow dies (the kernel's parent-death
# signal, SIGUSR1; Linux) or the shim gets SIGTERM, it sends argv[1] to its whole group once
# (dvc ignores a SIGINT of its own while its stage runs: the stage must get it too).
_DIE_WITH_FLOW = """import ctypes, os, signal, sys
group_signal, flow, command = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:]
child = os.fork()
if child == 0:
    os.execvp(command[0], command)
stopping = []
def stop(signum, frame):
    if not stopping:
        stopping.append(signum)
        os.killpg(0, group_signal)
signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGUSR1, stop)
try:
    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGUSR1, 0, 0, 0)
except (OSError, AttributeError):
    pass
if os.getppid() != flow:
    stop(None, None)
code = os.waitstatus_to_exitcode(os.waitpid(child, 0)[1])
sys.exit(code if code >= 0 else 128 - code)
"""


def die_with_flow(command: list[str], signum: int) -> list[str]:
    """``command`` under the shim: its group gets ``signum`` when this process dies (Linux)."""
    if not sys.platform.startswith("linux"):
        return command
    shim = [sys.executable, "-S", "-c", _DIE_WITH_FLOW, str(int(signum)), str(os.getpid())]
    return [*shim, *command]


def start_child(command: list[str], cwd: Path, env: dict[str, str]) -> subprocess.Popen[bytes]:
    """``command`` in a process group of its own, output piped; stopped on an interrupt."""
    if interrupted() is not None:
        raise KeyboardInterrupt(f"not starting {command[0]}: the flow is stopping")
    process = subprocess.Popen(
        die_with_flow(command, signal.SIGINT),  # SIGINT: dvc stops its stage cleanly
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,  # a background group reading the terminal would be stopped
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        process_group=0,  # the terminal's Ctrl-C is the flow's to forward, once
    )
    with _children_lock:
        _children.add(process)
    return process


def forget_child(process: subprocess.Popen[bytes]) -> None:
    with _children_lock:
        _children.discard(process)


def _signal_children(signum: int) -> None:
    with _children_lock:
        children = [child for child in _children if child.poll() is None]
    for child in children:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(child.pid, signum)


def stop_children(grace_s: float = CHILD_GRACE_S) -> None:
    """SIGINT to every child's group now (as a terminal's Ctrl-C), SIGKILL after ``grace_s``."""
    _signal_children(signal.SIGINT)
    timer = threading.Timer(grace_s, _signal_children, args=(signal.SIGKILL,))
    timer.daemon = True
    timer.start()


def _begin(signum: int) -> None:
    """The first signal: say what happens, stop the children, arm the exit deadline."""
    _state["signum"] = signum
    name = signal.Signals(signum).name
    # Straight to stderr: in the flow body, print() would go through Prefect's logging.
    sys.stderr.write(
        f"tagrpo: {name} received: stopping the running DVC stage (SIGINT, SIGKILL after "
        f"{CHILD_GRACE_S:.0f} s) and recording the Prefect flow run as crashed; exiting within "
        f"{EXIT_DEADLINE_S:.0f} s (Ctrl-C again: exit now)\n"
    )
    sys.stderr.flush()
    stop_children()
    watchdog = threading.Timer(EXIT_DEADLINE_S, _exit_now, args=(signum, "deadline"))
    watchdog.daemon = True
    watchdog.start()


def _exit_now(signum: int, why: str) -> None:
    """The last resort: kill the children, stop the server, exit without Prefect's flush."""
    _signal_children(signal.SIGKILL)
    server = _state["server"]
    if server is not None:
        with contextlib.suppress(Exception):
            server.kill()
    sys.stderr.write(
        f"tagrpo: {why}: exiting now; the flow run may show as Running until the next "
        "`python -m flows.pipeline run` marks it Crashed\n"
    )
    sys.stderr.flush()
    os._exit(128 + signum)


def _on_signal(signum: int, frame: Any) -> None:
    """The entry point's handler (outside Prefect's engine, and SIGINT/SIGHUP within it)."""
    if interrupted() is None:
        _begin(signum)
        raise KeyboardInterrupt(f"interrupted by {signal.Signals(signum).name}")
    if signum == signal.SIGINT:
        _exit_now(signum, "second Ctrl-C")
    # A repeated SIGTERM/SIGHUP (Prefect re-sends the SIGTERM it turned into an exception to
    # the handler it replaced, i.e. this one) changes nothing: the deadline still holds.


def install_handlers() -> None:
    for signum in HANDLED:
        signal.signal(signum, _on_signal)


def chain_sigterm() -> None:
    """In the flow body: Prefect's engine replaces the SIGTERM handler for the run (it turns
    SIGTERM into a crash, or a cancellation when its runner asks). Put one in front of it that
    first stops the dvc children: a task blocked reading a live dvc would hold the run (and a
    deployment's cancellation) until the stage finished."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
    except ValueError:  # not the main thread: nothing can be installed
        return
    if getattr(previous, "_tagrpo_chained", False) or previous is _on_signal:
        return

    def handler(signum: int, frame: Any) -> None:
        if interrupted() is None:
            _begin(signum)
        if callable(previous):
            previous(signum, frame)
        else:
            raise KeyboardInterrupt(f"interrupted by {signal.Signals(signum).name}")

    handler._tagrpo_chained = True  # type: ignore[attr-defined]
    with contextlib.suppress(ValueError):
        signal.signal(signal.SIGTERM, handler)


def owner_tag() -> str:
    """This process as a flow-run tag: host, pid and the kernel's start time (a reused pid is
    never taken for it)."""
    stat = proc_stat(os.getpid())
    ticks = stat.start_ticks if stat is not None else 0
    return f"{OWNER_TAG}:{socket.gethostname()}:{os.getpid()}:{ticks}"


def owner_gone(tags: list[str]) -> str | None:
    """Why the run's owner is known to be gone (its process on this host no longer runs), or
    None: alive, another host's, or not a run of this entry point."""
    for tag in tags:
        parts = tag.split(":")
        if len(parts) != 4 or parts[0] != OWNER_TAG:
            continue
        host, pid, ticks = parts[1], int(parts[2]), int(parts[3])
        if host != socket.gethostname() or pid == os.getpid():
            return None
        if not process_alive(pid, ticks):
            return f"process {pid} on {host} that ran it is gone"
    return None


def mark_orphans_crashed(log: Callable[[str], None]) -> int:
    """Flow runs of this project left Running/Pending by an owner that is gone, and their
    unfinished task runs: set Crashed, naming why. Returns how many flow runs."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterState,
        FlowRunFilterStateType,
        FlowRunFilterTags,
        TaskRunFilter,
        TaskRunFilterFlowRunId,
    )
    from prefect.client.schemas.objects import StateType
    from prefect.states import Crashed

    unfinished = [StateType.RUNNING, StateType.PENDING, StateType.SCHEDULED, StateType.CANCELLING]
    marked = 0
    with get_client(sync_client=True) as client:
        runs = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(
                state=FlowRunFilterState(type=FlowRunFilterStateType(any_=unfinished)),
                tags=FlowRunFilterTags(is_null_=False),
            ),
            limit=200,
        )
        for run in runs:
            why = owner_gone(list(run.tags))
            if why is None:
                continue
            message = f"left {run.state_name} by an interrupted `flows.pipeline run`: the {why}"
            client.set_flow_run_state(run.id, Crashed(message=message), force=True)
            tasks = client.read_task_runs(
                task_run_filter=TaskRunFilter(flow_run_id=TaskRunFilterFlowRunId(any_=[run.id]))
            )
            for task in tasks:
                if task.state is not None and not task.state.is_final():
                    client.set_task_run_state(task.id, Crashed(message=message), force=True)
            log(f"flow run {run.name!r} ({run.id}) marked Crashed: {message}")
            marked += 1
    return marked


class OwnedServer:
    """Prefect's temporary server (the command its ``SubprocessASGIServer`` runs), but in a
    session of its own, so that the terminal's Ctrl-C leaves it to the entry point to stop."""

    def __init__(self, startup_timeout_s: float | None = None) -> None:
        from prefect.settings import PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS

        default = PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS.value()
        self.timeout_s = startup_timeout_s or float(default)
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/api"

    def start(self) -> None:
        import httpx
        from prefect.settings import get_current_settings

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = int(probe.getsockname()[1])
        print(f"tagrpo: starting a temporary Prefect server on {self.api_url}", file=sys.stderr)
        env = {
            **os.environ,
            "PREFECT_UI_ENABLED": "0",
            "PREFECT__SERVER_EPHEMERAL": "1",
            "PREFECT__SERVER_FINAL": "1",
            **get_current_settings().to_environment_variables(exclude_unset=True),
        }
        env.pop("PREFECT_API_URL", None)
        self.process = subprocess.Popen(
            die_with_flow(self.command(), signal.SIGTERM),
            env=env,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
        _state["server"] = self
        deadline = time.monotonic() + self.timeout_s
        while True:
            if self.process.poll() is not None:
                raise RuntimeError(f"the temporary Prefect server exited {self.process.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api_url}/health", timeout=5).status_code == 200:
                    return
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"no temporary Prefect server after {self.timeout_s:.0f} s")
            time.sleep(0.2)

    def command(self) -> list[str]:
        import prefect

        return [
            sys.executable,
            "-m",
            "uvicorn",
            "--app-dir",
            str(prefect.__module_path__.parent),
            "--factory",
            "prefect.server.api.server:create_app",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--log-level",
            "error",
            "--lifespan",
            "on",
        ]

    def stop(self, grace_s: float = 5.0) -> None:
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGTERM)
        try:
            self.process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            self.kill()
        self.process = None
        _state["server"] = None

    def kill(self) -> None:
        if self.process is not None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()


def drain_prefect(timeout_s: float = DRAIN_TIMEOUT_S) -> bool:
    """Send Prefect's queued events and logs now, while the server is up; False if they did not
    all go within ``timeout_s`` (each of the two queues)."""
    from prefect.events.worker import EventsWorker
    from prefect.logging.handlers import APILogWorker

    complete = True
    for worker in (APILogWorker, EventsWorker):
        result = worker.drain_all(timeout=timeout_s, at_exit=False)
        if isinstance(result, tuple):
            complete = complete and not result[1]
    return complete


@contextlib.contextmanager
def prefect_api() -> Iterator[None]:
    """The configured Prefect server, or a temporary one this process owns (started here and
    stopped on the way out); runs an earlier owner left Running are marked crashed first. On
    the way out Prefect's queued events and logs are sent while the server is still up (Prefect
    would otherwise retry a dead one at exit for minutes); if they do not all go, the process
    ends at once with 1 (or 128 + the signal that stopped it), saying so."""
    from prefect.settings import PREFECT_API_URL, temporary_settings

    server: OwnedServer | None = None
    try:
        with contextlib.ExitStack() as stack:
            if not PREFECT_API_URL.value():
                server = OwnedServer()
                server.start()
                stack.enter_context(temporary_settings(updates={PREFECT_API_URL: server.api_url}))
            try:
                mark_orphans_crashed(lambda line: print(f"tagrpo: {line}", file=sys.stderr))
            except Exception as error:  # a clean-up of old runs must not stop this one
                print(f"tagrpo: stale flow runs not checked: {error!r}", file=sys.stderr)
            yield
    finally:
        flushed = drain_prefect()
        if server is not None:
            server.stop()
        if not flushed:
            print("tagrpo: Prefect's events/logs did not all reach the server", file=sys.stderr)
            sys.stdout.flush()
            sys.stderr.flush()
            signum = interrupted()
            os._exit(1 if signum is None else 128 + signum)
