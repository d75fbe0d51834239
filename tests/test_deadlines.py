"""Every time limit of the project guards its own moment, and still fires when that thing hangs.

Issue 19: a deadline measured from the wrong moment (the grading pool's start-up deadline counted
the caller's sampling) fails only when the caller is slow. So each limit here is tested twice,
with the limit patched small: a slow caller (a real short sleep, a lock held, a request queued)
must not spend it, and the guarded thing really hanging must still trip it. The grading pool's
own deadlines are tested in tests/test_grading_pool.py.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from openai_fake_server import FakeOpenAIServer, Fault

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.vllm_backend import VLLMServerBackend, server_client
from tagrpo.config.engines import VLLMEngineSettings
from tagrpo.config.params import embedded
from tagrpo.pipeline import parent_run
from tagrpo.plumbing.procfs import proc_stat
from tagrpo.rephrase import cache as cache_module
from tagrpo.rephrase.cache import ReplyCache
from tagrpo.rephrase.openai_backend import ChatRequest, ChatRunner, EndpointConfig
from tagrpo.verl_ext.process import TEMP_PREFIX, stop_run


def _requests(count: int) -> list[ChatRequest]:
    return [
        ChatRequest(f"k{i}", [{"role": "user", "content": f"Q-{i}: find x."}], seed=i)
        for i in range(count)
    ]


def _endpoint(server: FakeOpenAIServer, **overrides: object) -> EndpointConfig:
    settings = {
        "model": "fake-model",
        "base_url": server.base_url,
        "api_key_env": None,
        "concurrency": 4,
        "timeout_s": 0.5,
        "max_attempts": 1,  # one attempt: a timeout shows as a failed request, not a retry
        "backoff_base_s": 0.0,
        **overrides,
    }
    return embedded(EndpointConfig, **settings)


def _hold_write_lock(
    path: Path, seconds: float, after: Callable[[], bool] = lambda: True
) -> threading.Thread:
    """Another connection (another process, in real life) holds SQLite's write lock until
    ``seconds`` after ``after()`` becomes true."""
    taken = threading.Event()

    def hold() -> None:
        other = sqlite3.connect(path)
        other.execute("BEGIN IMMEDIATE")
        taken.set()
        while not after():
            time.sleep(0.01)
        time.sleep(seconds)
        other.rollback()
        other.close()

    thread = threading.Thread(target=hold, daemon=True)
    thread.start()
    assert taken.wait(10)
    return thread


# -- ChatRunner (rephrasing and the answer-consistency solver): per-attempt limit -------------


def test_request_limit_excludes_a_cache_write_waiting_for_the_sqlite_lock(tmp_path: Path) -> None:
    """The first reply (0.1 s) is written to the cache, which waits for a lock another process
    holds until 1 s later; the other three replies arrive 0.3 s after being sent and must not
    time out meanwhile (the 0.5 s limit guards the request, not the cache's lock wait)."""
    with FakeOpenAIServer(latency_s=0.1) as server, ReplyCache(tmp_path / "c.db") as cache:
        for later in (1, 2, 3):
            server.add_fault(Fault("delay", match=f"Q-{later}:", delay_s=0.2))
        holder = _hold_write_lock(tmp_path / "c.db", 1.0, after=lambda: server.completed >= 1)
        runner = ChatRunner(_endpoint(server), cache=cache)
        results = runner.run(_requests(4))
        holder.join()
        assert [r.ok for r in results] == [True] * 4, [r.error for r in results]
        assert dict(runner.stats.attempt_errors) == {}
        assert runner.stats.http_requests == 4
        assert cache.count() == 4  # every reply stored before run() returned


def test_request_limit_excludes_time_queued_behind_the_concurrency_limit() -> None:
    """One request at a time, 0.2 s each: the last of four waits 0.6 s for its turn, longer
    than the 0.5 s limit, and still succeeds at its first attempt."""
    with FakeOpenAIServer(latency_s=0.2) as server:
        runner = ChatRunner(_endpoint(server, concurrency=1))
        started = time.monotonic()
        results = runner.run(_requests(4))
        elapsed = time.monotonic() - started
    assert [(r.ok, r.attempts) for r in results] == [(True, 1)] * 4
    assert dict(runner.stats.attempt_errors) == {}
    assert elapsed >= 0.8  # they really were queued


def test_request_limit_excludes_the_backoff_before_a_retry() -> None:
    """A 429 asks the client to wait 0.7 s; the retry is then sent and answered in time."""
    with FakeOpenAIServer(latency_s=0.05) as server:
        server.add_fault(Fault("status", match="Q-0:", status=429, retry_after=0.7))
        runner = ChatRunner(_endpoint(server, max_attempts=2))
        (result,) = runner.run(_requests(1))
    assert (result.ok, result.attempts) == (True, 2)
    assert dict(runner.stats.attempt_errors) == {"rate_limited": 1}


def test_request_limit_fires_when_the_endpoint_hangs() -> None:
    with FakeOpenAIServer() as server:
        server.add_fault(Fault("delay", match="Q-1:", delay_s=1.5))
        runner = ChatRunner(_endpoint(server, timeout_s=0.4))
        results = runner.run(_requests(2))
        (hung,) = server.requests_matching("Q-1:")
        assert hung.finished_at is None  # the run gave up before the server answered
    assert [r.ok for r in results] == [True, False]
    assert results[1].error_kind == "timeout"
    assert results[1].error == "timeout: no reply within 0.4 s"


# -- ReplyCache: SQLite's lock wait ---------------------------------------------------------


def test_cache_write_waits_for_a_lock_held_briefly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A slow caller (the cache opened 0.6 s before the write, longer than the limit) does not
    spend the lock timeout: it is measured from the write that waits."""
    monkeypatch.setattr(cache_module, "LOCK_TIMEOUT_S", 0.5)
    with ReplyCache(tmp_path / "c.db") as cache:
        time.sleep(0.6)
        holder = _hold_write_lock(tmp_path / "c.db", 0.2)
        cache.put("a", "chat", {"texts": ["x"]})
        holder.join()
        assert cache.get("a") == {"texts": ["x"]}


def test_cache_write_fails_when_the_lock_is_never_released(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cache_module, "LOCK_TIMEOUT_S", 0.3)
    with ReplyCache(tmp_path / "c.db") as cache:
        holder = _hold_write_lock(tmp_path / "c.db", 1.5)
        started = time.monotonic()
        with pytest.raises(sqlite3.OperationalError, match="database is locked"):
            cache.put("a", "chat", {"texts": ["x"]})
        assert 0.25 <= time.monotonic() - started < 1.4
        holder.join()


# -- the DVC parent run: grace for stages still ending their runs ----------------------------


@dataclass
class _Run:
    """The few fields of an MLflow run that tagrpo.pipeline.parent_run reads."""

    run_id: str
    tags: dict[str, str]
    status: str = "RUNNING"
    experiment_id: str = "0"
    start_time: int = 0

    @property
    def info(self) -> _Run:
        return self

    @property
    def data(self) -> SimpleNamespace:
        return SimpleNamespace(tags=self.tags, metrics={})


class _Tracking:
    """An in-memory MLflow client with the calls and the two queries parent_run makes (a
    real store costs seconds to open here; tests/test_parent_run.py uses one)."""

    def __init__(self, *runs: _Run) -> None:
        self.runs = {run.run_id: run for run in runs}
        self.terminated: list[tuple[str, str, float]] = []

    def get_run(self, run_id: str) -> _Run:
        return self.runs[run_id]

    def search_runs(self, experiments: list[str], filter_string: str) -> list[_Run]:
        if filter_string.startswith("tags.mlflow.parentRunId = "):
            parent = filter_string.split("'")[1]
            return [r for r in self.runs.values() if r.tags.get("mlflow.parentRunId") == parent]
        assert "attributes.status = 'RUNNING'" in filter_string, filter_string
        return [
            r
            for r in self.runs.values()
            if r.status == "RUNNING" and r.tags.get(parent_run.ORIGIN_TAG) == "dvc"
        ]

    def set_terminated(self, run_id: str, status: str) -> None:
        self.runs[run_id].status = status
        self.terminated.append((run_id, status, time.monotonic()))

    def set_tag(self, run_id: str, key: str, value: str) -> None:
        self.runs[run_id].tags[key] = value

    def log_metric(self, run_id: str, key: str, value: float) -> None:
        pass

    def log_artifact(self, run_id: str, path: str) -> None:
        pass


def _start_ticks(pid: int) -> int:
    stat = proc_stat(pid)
    assert stat is not None
    return stat.start_ticks


@pytest.fixture
def live_stage() -> subprocess.Popen:
    """A process standing for a stage that is still running (its run RUNNING)."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield process
    process.kill()
    process.wait()


def _pipeline(dvc_key: str, stage_pid: int, watcher: str | None = None) -> _Tracking:
    host = socket.gethostname()
    parent_tags = {
        parent_run.ORIGIN_TAG: "dvc",
        "tagrpo.host": host,
        parent_run.PIPELINE_KEY_TAG: f"{host}:{dvc_key}",
    }
    if watcher is not None:
        parent_tags[parent_run.WATCHER_TAG] = watcher
    child_tags = {"mlflow.parentRunId": "parent", "tagrpo.host": host, "tagrpo.pid": str(stage_pid)}
    return _Tracking(_Run("parent", parent_tags), _Run("stage", child_tags))


def test_orphan_sweep_does_not_wait_for_another_invocations_stages(
    live_stage: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dvc and its watcher are gone; a stage of that invocation still runs. The sweep (in a
    new stage, holding the pipeline lock) ends the orphan KILLED at once: the grace was dvc's
    exit + grace, long past, not 'now + grace'."""
    monkeypatch.setattr(parent_run, "_CHILD_GRACE_SECONDS", 3.0)
    monkeypatch.setattr(parent_run, "_POLL_SECONDS", 0.05)
    gone = f"{os.getpid()}:1"  # this pid with another start time: a process that has exited
    tracking = _pipeline(gone, live_stage.pid, watcher=gone)
    started = time.monotonic()
    assert parent_run.finish_orphaned_runs(tracking, "0") == 1
    assert time.monotonic() - started < 1.5
    assert tracking.runs["parent"].status == "KILLED"  # a stage outlived dvc
    assert tracking.runs["stage"].status == "RUNNING"  # its process lives: not ours to end


def test_orphan_sweep_leaves_a_run_to_its_live_watcher(live_stage: subprocess.Popen) -> None:
    watcher = f"{os.getpid()}:{_start_ticks(os.getpid())}"
    tracking = _pipeline(f"{os.getpid()}:1", live_stage.pid, watcher=watcher)
    assert parent_run.finish_orphaned_runs(tracking, "0") == 0
    assert tracking.runs["parent"].status == "RUNNING"


def _dvc_for(seconds: float) -> tuple[subprocess.Popen, threading.Thread]:
    """A stand-in dvc that runs ``seconds``; reaped at once (a zombie still has a /proc)."""
    process = subprocess.Popen([sys.executable, "-c", f"import time; time.sleep({seconds})"])

    def reap() -> None:
        process.wait()
        _exit_times[process.pid] = time.monotonic()

    reaper = threading.Thread(target=reap, daemon=True)
    reaper.start()
    return process, reaper


_exit_times: dict[int, float] = {}


def test_watcher_grace_starts_at_dvc_exit_not_at_the_watchers_start(
    live_stage: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """dvc runs 2 s (longer than the 1.5 s grace); its last stage ends its run 0.4 s after
    dvc exits: within the grace, so the parent run ends FINISHED."""
    monkeypatch.setattr(parent_run, "_CHILD_GRACE_SECONDS", 1.5)
    monkeypatch.setattr(parent_run, "_POLL_SECONDS", 0.05)
    dvc, reaper = _dvc_for(2.0)
    tracking = _pipeline(f"{dvc.pid}:{_start_ticks(dvc.pid)}", live_stage.pid)

    def stage_ends_after_dvc() -> None:
        reaper.join()
        time.sleep(0.4)
        tracking.runs["stage"].status = "FINISHED"

    ender = threading.Thread(target=stage_ends_after_dvc, daemon=True)
    ender.start()
    assert parent_run.watch("parent", dvc.pid, _start_ticks(dvc.pid), client=tracking) == (
        "FINISHED"
    )
    ender.join()


class _SlowFirstRead(_Tracking):
    """A tracking store whose first read after dvc's exit takes ``seconds`` (a busy server)."""

    def __init__(self, seconds: float, *runs: _Run) -> None:
        super().__init__(*runs)
        self.seconds = seconds

    def get_run(self, run_id: str) -> _Run:
        if self.seconds:
            time.sleep(self.seconds)
            self.seconds = 0.0
        return super().get_run(run_id)


def test_watcher_grace_is_not_extended_by_a_slow_tracking_store(
    live_stage: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The grace (2 s) runs from dvc's exit: a store read taking 2.5 s after the exit uses it
    all up, and the run ends right after that read (old code: 2 s more, from the read)."""
    monkeypatch.setattr(parent_run, "_CHILD_GRACE_SECONDS", 2.0)
    monkeypatch.setattr(parent_run, "_POLL_SECONDS", 0.05)
    dvc, reaper = _dvc_for(0.2)
    ticks = _start_ticks(dvc.pid)
    plain = _pipeline(f"{dvc.pid}:{ticks}", live_stage.pid)
    tracking = _SlowFirstRead(2.5, *plain.runs.values())
    assert parent_run.watch("parent", dvc.pid, ticks, client=tracking) == "KILLED"
    reaper.join()
    exited = _exit_times[dvc.pid]
    ((_, _, ended),) = tracking.terminated
    assert 2.5 <= ended - exited < 3.5


def test_watcher_grace_fires_when_a_stage_never_ends_its_run(
    live_stage: subprocess.Popen, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(parent_run, "_CHILD_GRACE_SECONDS", 0.5)
    monkeypatch.setattr(parent_run, "_POLL_SECONDS", 0.05)
    dvc, reaper = _dvc_for(0.3)
    tracking = _pipeline(f"{dvc.pid}:{_start_ticks(dvc.pid)}", live_stage.pid)
    assert parent_run.watch("parent", dvc.pid, _start_ticks(dvc.pid), client=tracking) == ("KILLED")
    reaper.join()
    (ended,) = tracking.terminated
    assert ended[:2] == ("parent", "KILLED")


# -- the stage's watch on its launcher (tagrpo.pipeline.runtime.die_with_parent) --------------

_WATCHED_STAGE = """
import sys, time
time.sleep(float(sys.argv[1]))  # a stage slow to start (imports, a loaded machine)
from tagrpo.pipeline.runtime import die_with_parent
try:
    die_with_parent()
    print("watching", flush=True)
    time.sleep(30)
    print("outlived its launcher", flush=True)
except KeyboardInterrupt as stop:
    print(f"stopped: {stop}", flush=True)
    sys.exit(3)
"""


def _launch_through_a_shell(tmp_path: Path, stage_delay_s: float, wait_for_watch: bool):
    """A launcher (dvc) runs the stage through ``sh -c`` that stays in between, then exits: at
    once, or once the stage watches it; returns the stage's output file and exit-code file."""
    stage = tmp_path / "stage.py"
    stage.write_text(_WATCHED_STAGE)
    out, code = tmp_path / "out.txt", tmp_path / "code.txt"
    shell = f"{sys.executable} {stage} {stage_delay_s} > {out} 2>&1; echo $? > {code}"
    launcher = (
        "import pathlib, subprocess, sys, time; "
        "subprocess.Popen(['/bin/sh', '-c', sys.argv[1]]); "
        f"watched = pathlib.Path({str(out)!r}); deadline = time.monotonic() + 30\n"
        f"while {wait_for_watch} and time.monotonic() < deadline and not (\n"
        "    watched.exists() and 'watching' in watched.read_text()):\n"
        "    time.sleep(0.05)"
    )
    env = {**os.environ, "PYTHONPATH": str(Path.cwd()), "DVC_STAGE": "slow"}
    subprocess.run([sys.executable, "-c", launcher, shell], env=env, check=True)
    return out, code


def _wait_for(path: Path, timeout: float = 8.0) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return path.read_text().strip()
        time.sleep(0.05)
    raise AssertionError(f"{path.name} not written within {timeout} s")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_stage_slow_to_start_refuses_to_run_when_its_launcher_already_exited(
    tmp_path: Path,
) -> None:
    """The launcher exits at once; the stage reaches die_with_parent 1 s later, its shell now
    a child of init. It must not start (old code found no launcher to watch and ran on)."""
    out, code = _launch_through_a_shell(tmp_path, stage_delay_s=1.0, wait_for_watch=False)
    assert _wait_for(code) == "1"
    assert "the process that started this stage is gone" in out.read_text()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_a_running_stage_stops_when_its_launcher_exits(tmp_path: Path) -> None:
    out, code = _launch_through_a_shell(tmp_path, stage_delay_s=0.0, wait_for_watch=True)
    assert _wait_for(code) == "3"
    assert out.read_text().splitlines() == ["watching", "stopped: terminated by signal 15"]


# -- verl's clean-up (tagrpo.verl_ext.process.stop_run): SIGTERM, grace, SIGKILL -------------

_TERM_THEN_EXIT = """
import signal, sys, time
def leave(signum, frame):
    time.sleep(float(sys.argv[1]))  # its own clean-up
    sys.exit(0)
for stop in (signal.SIGTERM, signal.SIGINT):  # the shim leading dvc's group sends SIGINT
    signal.signal(stop, leave if float(sys.argv[1]) >= 0 else signal.SIG_IGN)
print("ready", flush=True)
time.sleep(60)
"""


def _run_process(tmp_path: Path, cleanup_s: float) -> subprocess.Popen:
    """A verl-like process in its own session, marked by the run's TMPDIR; ``cleanup_s`` after
    SIGTERM it exits 0 (negative: it ignores SIGTERM)."""
    marker = tmp_path / f"{TEMP_PREFIX}test"
    marker.mkdir()
    process = subprocess.Popen(
        [sys.executable, "-c", _TERM_THEN_EXIT, str(cleanup_s)],
        env={**os.environ, "TMPDIR": str(marker)},
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    assert process.stdout.readline() == "ready\n"
    return process


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_verl_stop_grace_counts_from_the_sigterm_not_from_the_run(tmp_path: Path) -> None:
    """The run lasted 1 s (longer than the 0.8 s grace) before being stopped; the process needs
    0.3 s after SIGTERM to exit: it exits on its own, no SIGKILL."""
    process = _run_process(tmp_path, cleanup_s=0.3)
    time.sleep(1.0)
    stop_run(process.pid, str(tmp_path / f"{TEMP_PREFIX}test"), grace_s=0.8)
    assert process.wait(timeout=5) == 0


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_verl_stop_grace_fires_when_a_process_ignores_sigterm(tmp_path: Path) -> None:
    process = _run_process(tmp_path, cleanup_s=-1)
    started = time.monotonic()
    signalled = stop_run(process.pid, str(tmp_path / f"{TEMP_PREFIX}test"), grace_s=0.5)
    assert process.wait(timeout=5) == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - started < 3.0
    assert signalled == [process.pid]


# -- the Prefect flow's dvc task (flows.pipeline.stream_command): cancelled -> SIGTERM, grace -


class _CancelAfter:
    """A task logger; the task is cancelled (KeyboardInterrupt) at the first line after
    ``seconds`` (a task that has been running a while, longer than the grace)."""

    def __init__(self, seconds: float) -> None:
        self.at = time.monotonic() + seconds
        self.lines: list[str] = []

    def info(self, line: str) -> None:
        self.lines.append(line)
        if time.monotonic() >= self.at:
            raise KeyboardInterrupt("task cancelled")


_DVC_STANDIN = """
import signal, sys, time
def leave(signum, frame):
    time.sleep(float(sys.argv[1]))
    sys.exit(0)
for stop in (signal.SIGTERM, signal.SIGINT):  # the shim leading dvc's group sends SIGINT
    signal.signal(stop, leave if float(sys.argv[1]) >= 0 else signal.SIG_IGN)
while True:
    print("Running stage", flush=True)
    time.sleep(0.05)
"""


@pytest.fixture(scope="module")
def flow_module():
    """flows.pipeline (importing Prefect takes seconds: once, as set-up)."""
    import flows.pipeline

    return flows.pipeline


def _cancelled_stream(
    pipeline, monkeypatch: pytest.MonkeyPatch, grace_s: float, cleanup_s: float
) -> subprocess.Popen:
    monkeypatch.setattr(pipeline, "_STOP_GRACE_S", grace_s)
    started: list[subprocess.Popen] = []
    real_popen = subprocess.Popen

    def recording_popen(*args, **kwargs):
        started.append(real_popen(*args, **kwargs))
        return started[-1]

    monkeypatch.setattr(pipeline.subprocess, "Popen", recording_popen)
    command = [sys.executable, "-c", _DVC_STANDIN, str(cleanup_s)]
    with pytest.raises(KeyboardInterrupt, match="task cancelled"):
        pipeline.stream_command(command, Path.cwd(), dict(os.environ), _CancelAfter(1.0))
    (process,) = started
    return process


def test_flow_stop_grace_counts_from_the_sigterm(
    flow_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The task streamed for 1 s (longer than the 0.8 s grace) before it was cancelled; dvc
    takes 0.3 s to stop its stage after SIGTERM and exits on its own."""
    process = _cancelled_stream(flow_module, monkeypatch, grace_s=0.8, cleanup_s=0.3)
    assert process.returncode == 0


def test_flow_stop_grace_kills_a_dvc_that_ignores_sigterm(
    flow_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Old code: ``wait(timeout)`` raised TimeoutExpired (hiding the cancellation) and left dvc
    running."""
    process = _cancelled_stream(flow_module, monkeypatch, grace_s=0.5, cleanup_s=-1)
    assert process.returncode == -signal.SIGKILL


# -- vllm serve (tagrpo.backends.vllm_backend, server mode): per-request timeout ------------


class _SlowCompletions(BaseHTTPRequestHandler):
    """``POST /v1/completions``: answers after ``delays[seed]`` seconds (default ``latency``)."""

    latency: ClassVar[float] = 0.0
    delays: ClassVar[dict[int, float]] = {}
    seeds: ClassVar[list[int]] = []

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seeds.append(body["seed"])
        time.sleep(self.delays.get(body["seed"], self.latency))
        choices = [{"index": 0, "text": "x", "token_ids": [5], "finish_reason": "stop"}]
        payload = json.dumps(
            {"id": "c", "object": "text_completion", "created": 0, "model": "m", "choices": choices}
        ).encode()
        with contextlib.suppress(OSError):  # the client may have given up (timed out)
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


class _CharTokenizer:
    """What VLLMServerBackend asks of a tokenizer: a chat template and encoding."""

    def apply_chat_template(self, messages, add_generation_prompt, tokenize, **kwargs) -> str:
        return "".join(m["content"] for m in messages)

    def __call__(self, text: str, add_special_tokens: bool) -> dict[str, list[int]]:
        return {"input_ids": [ord(c) % 100 for c in text]}


@pytest.fixture
def completions_server() -> str:
    _SlowCompletions.latency, _SlowCompletions.delays, _SlowCompletions.seeds = 0.0, {}, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _SlowCompletions)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()


def _vllm_server_backend(base_url: str, timeout_s: float, concurrency: int) -> VLLMServerBackend:
    settings = embedded(
        VLLMEngineSettings, mode="server", base_url=base_url, api_key_env=None, timeout_s=timeout_s
    )
    return VLLMServerBackend(
        server_client(settings), "policy", _CharTokenizer(), concurrency=concurrency
    )


def _problems(count: int) -> list[list[dict[str, str]]]:
    return [[{"role": "user", "content": f"problem {i}"}] for i in range(count)]


_ONE_SAMPLE = SamplingParams(n=1, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0)


def test_vllm_request_timeout_excludes_time_queued_behind_the_concurrency_limit(
    completions_server: str,
) -> None:
    """One request at a time, 0.3 s each: the third waits 0.6 s for its turn, longer than the
    0.5 s limit, and is still answered at its first attempt."""
    _SlowCompletions.latency = 0.3
    backend = _vllm_server_backend(completions_server, timeout_s=0.5, concurrency=1)
    completions = backend.generate(_problems(3), _ONE_SAMPLE)
    assert [[c.text for c in problem] for problem in completions] == [["x"], ["x"], ["x"]]
    assert sorted(_SlowCompletions.seeds) == [0, 1, 2]  # no retry


def test_vllm_request_timeout_fires_when_the_server_hangs(completions_server: str) -> None:
    import openai

    _SlowCompletions.delays = {1: 5.0}  # problem 1's seed is 1 (problem_seed(0, 1))
    backend = _vllm_server_backend(completions_server, timeout_s=0.4, concurrency=2)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        backend.generate(_problems(2), _ONE_SAMPLE)
    # The client's two retries (after 0.5-1 s and 1-2 s) each get the same 0.4 s.
    assert time.monotonic() - started < 4.9
    assert sorted(_SlowCompletions.seeds) == [0, 1, 1, 1]


def test_flow_progress_throttle_counts_from_the_last_progress_line_logged(
    flow_module, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A patched clock: redraws at 0, 10, 16, 20, 31 s with a 15 s interval. The interval runs
    from the last redraw logged (0 -> 16 -> 31), not from the start or from any redraw."""
    now = [1000.0]
    monkeypatch.setattr(flow_module.time, "monotonic", lambda: now[0])
    lines: list[str] = []
    output = flow_module.OutputLogger(SimpleNamespace(info=lines.append), every_s=15.0)
    for second in (0, 10, 16, 20, 31):
        now[0] = 1000.0 + second
        output.feed(f"bar {second}\r")
    assert lines == ["bar 0", "bar 16", "bar 31"]


def test_consistency_solver_request_limit_queued_and_hung() -> None:
    """The answer-consistency solver sends through the same runner: an item queued behind the
    concurrency limit keeps its whole limit; an item whose request hangs fails (None) alone."""
    from tagrpo.config.equivalence import ConsistencyConfig, SolverEndpoint
    from tagrpo.equivalence.consistency import EndpointSolver
    from tagrpo.grading.types import SolveItem

    with FakeOpenAIServer(latency_s=0.25, reply=lambda body: ["\\boxed{1}"] * body["n"]) as server:
        server.add_fault(Fault("delay", match="hangs", delay_s=1.5))
        endpoint = embedded(
            SolverEndpoint,
            base_url=server.base_url,
            api_key_env=None,
            concurrency=1,
            timeout_s=0.4,
            max_attempts=1,
        )
        solver = EndpointSolver(endpoint, embedded(ConsistencyConfig, k=2, min_correct=1))
        items = [SolveItem(f"item {i}: 1?", "1") for i in range(3)] + [SolveItem("hangs", "1")]
        samples = solver.sample(items, k=2)
    assert samples == [["\\boxed{1}"] * 2] * 3 + [None]
    assert dict(solver.runner.stats.final_errors) == {"timeout": 1}
