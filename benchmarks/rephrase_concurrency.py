"""Rephrasing throughput: concurrency 64 versus 1 against an endpoint with 200 ms latency.

    .venv/bin/python benchmarks/rephrase_concurrency.py [--questions 1000] [--latency-ms 200]
                                                        [--concurrency 64]

The endpoint is the test suite's OpenAI-compatible server (``tests/openai_fake_server.py``),
started as a separate process so that its CPU time is not the client's, answering every
request after ``--latency-ms``. The client is the pipeline's own: ``OpenAIRephraser`` with the
Appendix A prompt, one request per question (N=1, per-variant requests), the SQLite reply
cache written as each reply arrives.

Runs, each with a fresh cache unless stated: concurrency ``--concurrency`` ``--repeats``
times (the median counts: the machine is shared), concurrency 1 once, and a rerun of the
first on its (now complete) cache. The client's modules are imported before the clock starts
(a one-off second that a stage pays once, whatever the concurrency). Printed: wall and CPU
time of each, the ratio (target >= 50x), and the number of requests the server received in
the rerun (target 0, counted by the server). Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

from tagrpo.config.params import embedded

ROOT = Path(__file__).resolve().parents[1]
TARGET_RATIO = 50.0


def start_server(latency_ms: float, workdir: Path) -> tuple[subprocess.Popen, str]:
    port_file = workdir / "port"
    process = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "openai_fake_server.py"),
            "--latency-ms",
            str(latency_ms),
            "--port-file",
            str(port_file),
        ],
        stdout=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 60
    while not port_file.exists() or not port_file.read_text().strip():
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the fake server did not start")
        time.sleep(0.05)
    return process, f"http://127.0.0.1:{port_file.read_text().strip()}"


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of another process (Linux ``/proc``; None elsewhere)."""
    from tagrpo.plumbing.procfs import proc_stat  # main() puts this checkout on sys.path first

    stat = proc_stat(pid)
    return None if stat is None else stat.cpu_seconds


def server_received(root_url: str) -> int:
    with urllib.request.urlopen(f"{root_url}/stats", timeout=10) as response:
        return int(json.loads(response.read())["received"])


def run(
    base_url: str, cache_path: Path, questions: list, concurrency: int
) -> tuple[float, float, dict]:
    from tagrpo.data.rephrase_templates import APPENDIX_A
    from tagrpo.rephrase.cache import ReplyCache
    from tagrpo.rephrase.generate import OpenAIRephraser
    from tagrpo.rephrase.openai_backend import EndpointConfig

    endpoint = embedded(
        EndpointConfig,
        model="fake",
        base_url=base_url,
        api_key_env=None,
        concurrency=concurrency,
        timeout_s=30,
    )
    with ReplyCache(cache_path) as cache:
        rephraser = OpenAIRephraser(endpoint, APPENDIX_A, n=1, cache=cache)
        started, cpu = time.perf_counter(), time.process_time()
        candidates = rephraser.rephrase(questions)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
    missing = sum(c.text is None for c in candidates)
    if missing:
        raise RuntimeError(f"{missing} rephrasings missing")
    return seconds, cpu, rephraser.metrics()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--latency-ms", type=float, default=200.0)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT))
    import openai  # noqa: F401  (imported before timing; see the module docstring)

    from tagrpo.data.schema import Question

    questions = [
        Question(
            id=f"b{i}",
            source="bench",
            split="train",
            problem=f"Problem {i}: a box holds {i % 97} red and {i % 13} blue marbles. "
            "How many marbles are in the box?",
            answer=str(i % 97 + i % 13),
        )
        for i in range(args.questions)
    ]
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        server, root_url = start_server(args.latency_ms, workdir)
        base_url = f"{root_url}/v1"
        try:
            load = os.getloadavg()[0]
            fast_runs = []
            for repeat in range(args.repeats):
                before = server_received(root_url)
                server_cpu = process_cpu_seconds(server.pid)
                path = workdir / f"fast{repeat}.sqlite"
                seconds, cpu, metrics = run(base_url, path, questions, args.concurrency)
                if server_cpu is not None:
                    server_cpu = (process_cpu_seconds(server.pid) or 0.0) - server_cpu
                fast_runs.append(
                    (seconds, cpu, server_received(root_url) - before, metrics, server_cpu)
                )
            fast_runs.sort(key=lambda item: item[0])
            fast, fast_cpu, sent_fast, fast_metrics, fast_server_cpu = fast_runs[
                len(fast_runs) // 2
            ]
            before = server_received(root_url)
            slow, slow_cpu, _ = run(base_url, workdir / "slow.sqlite", questions, 1)
            sent_slow = server_received(root_url) - before
            before = server_received(root_url)
            rerun, _, rerun_metrics = run(
                base_url, workdir / "fast0.sqlite", questions, args.concurrency
            )
            sent_rerun = server_received(root_url) - before
        finally:
            server.terminate()
            server.wait(timeout=10)
    ratio = slow / fast
    ideal = args.questions * args.latency_ms / 1000.0
    print(f"questions {args.questions}, latency {args.latency_ms:g} ms, load average {load:.2f}")
    runs = ", ".join(f"{seconds:.2f}" for seconds, *_ in fast_runs)
    print(
        f"concurrency {args.concurrency:>3}: {fast:8.2f} s median of [{runs}] "
        f"({sent_fast} requests, {args.questions / fast:6.1f} req/s, client CPU "
        f"{fast_cpu:.2f} s, server CPU {fast_server_cpu or float('nan'):.2f} s, "
        f"ideal {ideal / args.concurrency:.2f} s)"
    )
    print(
        f"concurrency   1: {slow:8.2f} s  ({sent_slow} requests, "
        f"{args.questions / slow:6.1f} req/s, CPU {slow_cpu:.2f} s, ideal {ideal:.2f} s)"
    )
    print(
        f"ratio: {ratio:.1f}x (target >= {TARGET_RATIO:g}x); "
        f"load average at the end {os.getloadavg()[0]:.2f}"
    )
    print(
        f"rerun on the cache: {rerun:.2f} s, {sent_rerun} requests received by the server, "
        f"{rerun_metrics['requests/cache_hits']:.0f} cache hits"
    )
    assert fast_metrics["requests/http_requests"] == sent_fast  # client and server agree
    ok = ratio >= TARGET_RATIO and sent_rerun == 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
