"""Two study draws side by side against one after the other, on this machine: the speed-up that
the study's size rule divides its cost by (``preregistration/study-v3.md``, "The size rule", 3).

    .venv/bin/python benchmarks/study_parallel.py --checkout .tagrpo/study/pilot-draw0 \\
        [--method grpo] [--steps 6]

The work is what a draw spends its time on: the local backend's training steps of ``--method``
(sampling G responses per prompt, grading, scoring, the optimiser updates) from the draw's base,
with ``common.torch_threads`` as the study sets it (1), in a fresh process each. It runs that
work twice one after the other, then twice at once, and prints both wall times and their ratio
(serial / side by side; 2.0 would be perfect); ``--out FILE`` also writes them as JSON with the
machine, its load average before the run, the commit and the time (the study's pilot report
reads ``reports/study/parallel.json``). ``--checkout`` is any folder with ``params.yaml``
and ``dvc.yaml`` valid for this code and ``models/base`` and ``data/rephrased/train.parquet``
built (a draw's checkout of an older commit: copy this tree's params with the study-pilot
profile applied and link the draw's ``models/`` and ``data/``); the work runs this tree's
code. Run it on an otherwise idle machine: another process on the cores changes both numbers.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path


def work(method: str, steps: int) -> float:
    """``steps`` training steps of ``method`` from the checkout's base (cwd), as the train stage
    plans them; the seconds (the model loads and a warm-up step not counted)."""
    import torch
    from local_train_step import method_trainer  # this folder's step profiler

    from tagrpo.config.params import load_config

    torch.set_num_threads(load_config().common.torch_threads)
    with method_trainer(method) as (trainer, _):
        trainer.step(1)
        started = time.perf_counter()
        for step in range(2, steps + 2):
            trainer.step(step)
        return time.perf_counter() - started


def _workers(checkout: Path, method: str, steps: int, count: int) -> float:
    """``count`` worker processes started at once; the wall seconds until the last ends."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}  # this tree
    command = [sys.executable, __file__, "--worker", "--method", method, "--steps", str(steps)]
    started = time.perf_counter()
    processes = [subprocess.Popen(command, cwd=checkout, env=env) for _ in range(count)]
    codes = [process.wait() for process in processes]
    if any(codes):
        raise SystemExit(f"a worker failed: exit codes {codes}")
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checkout", type=Path, default=Path("."))
    parser.add_argument("--method", default="grpo")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--out", type=Path, default=None, help="also write the result as JSON")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        print(f"worker: {work(args.method, args.steps):.1f} s of training steps", flush=True)
        return
    load = os.getloadavg()
    serial = sum(_workers(args.checkout, args.method, args.steps, 1) for _ in range(2))
    parallel = _workers(args.checkout, args.method, args.steps, 2)
    print(f"{args.method}, {args.steps} steps per draw, from {args.checkout}:")
    print(f"  one after the other: {serial:.1f} s; side by side: {parallel:.1f} s")
    print(f"  speed-up of 2 draws side by side: {serial / parallel:.2f}x")
    if args.out is not None:
        _write_result(args, serial, parallel, load)


def _write_result(args: argparse.Namespace, serial: float, parallel: float, load: tuple) -> None:
    import datetime
    import json

    from tagrpo.plumbing.device import describe_device

    root = Path(__file__).resolve().parents[1]
    commit = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.strip()
    result = {
        "method": args.method,
        "steps_per_draw": args.steps,
        "serial_s": round(serial, 1),
        "side_by_side_s": round(parallel, 1),
        "speedup": round(serial / parallel, 2),
        "load_average_before": [round(x, 2) for x in load],
        "device": describe_device(),
        "commit": commit,
        "measured": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"  written: {args.out}")


if __name__ == "__main__":
    main()
