"""The slow test tier one test at a time against ``make test``'s two pytest-xdist workers, side
by side.

    .venv/bin/python benchmarks/suite_workers.py [--rounds 1] [--workers 2] [FILE ...]

Runs ``pytest -m "not core"`` on the given test files (default: a mix of subprocess-, server-
and model-bound files that takes minutes, not the hour of the whole tier) alternately with
``-n 0`` and with ``-n WORKERS --dist loadgroup`` (tests/harness.py's groups), ``--rounds``
times each. Prints, per run, the wall seconds, the CPU seconds of pytest and everything it
waited for (its workers, stages, servers: ``RUSAGE_CHILDREN``), the busy cores (CPU / wall)
and the load average before and after; then the median wall seconds of each setting and their
ratio. On a machine shared with other jobs the ratio overstates the gain (two workers also
take a larger share of the machine): read it with the load average, and the busy cores of the
one-at-a-time run, which bound what a second core can add.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FILES = [
    "tests/test_plan.py",
    "tests/test_pipeline_flow.py",
    "tests/test_preflight.py",
    "tests/test_verify.py",
    "tests/test_runtime.py",
    "tests/test_parent_run_lock.py",
    "tests/test_tracking_shared_store.py",
    "tests/test_grading_pool.py",
]


def load() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_run(files: list[str], workers: int) -> dict[str, float | str]:
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not core"]
    if workers:
        command += ["-n", str(workers), "--dist", "loadgroup", "--no-loadscope-reorder"]
    load_before, cpu_before, started = load(), children_cpu(), time.monotonic()
    result = subprocess.run([*command, *files], cwd=ROOT, capture_output=True, text=True)
    wall = time.monotonic() - started
    cpu = children_cpu() - cpu_before
    summary = (result.stdout.strip().splitlines() or ["(no output)"])[-1]
    return {
        "workers": workers,
        "wall_s": wall,
        "cpu_s": cpu,
        "busy_cores": cpu / wall,
        "load": f"{load_before} -> {load()}",
        "result": summary,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="*", default=DEFAULT_FILES, help="test files")
    parser.add_argument("--rounds", type=int, default=1, help="runs of each setting")
    parser.add_argument("--workers", type=int, default=2, help="xdist workers")
    args = parser.parse_args()
    print(f"{os.cpu_count()} CPUs; files: {' '.join(args.files)}")
    walls: dict[int, list[float]] = {0: [], args.workers: []}
    for _ in range(args.rounds):
        for workers in (0, args.workers):
            run = one_run(args.files, workers)
            walls[workers].append(float(run["wall_s"]))
            print(
                f"-n {run['workers']}: wall {run['wall_s']:.0f} s, CPU {run['cpu_s']:.0f} s, "
                f"busy cores {run['busy_cores']:.2f}, load {run['load']}; {run['result']}",
                flush=True,
            )
    one, many = statistics.median(walls[0]), statistics.median(walls[args.workers])
    print(f"median wall: -n 0 {one:.0f} s, -n {args.workers} {many:.0f} s; ratio {one / many:.2f}")


if __name__ == "__main__":
    main()
