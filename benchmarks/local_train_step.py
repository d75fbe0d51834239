"""A profile of the local backend's training step: where a step of each method spends its time.

    .venv/bin/python benchmarks/local_train_step.py [--methods grpo ta_grpo] [--steps 3]
        [--ops 15]

Needs the DAG up to check_equivalence (``models/base``, ``data/rephrased/train.parquet``): it
plans each method as the train stage does (``params.yaml``), trains ``--steps`` steps from the
base under torch's profiler, and prints per method the seconds of each phase of a step (the
trainer's own ``time/*`` clocks: sampling and grading, old and reference scoring, the anchoring
diagnostic, the optimiser updates) and the operators that took the most CPU time. The first
step is a warm-up and not counted. No target: it tells where to make a step faster
(preregistration/world-v3.md, "The embedded default": profile a step first).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import time
from collections.abc import Iterator
from typing import Any

import torch
from torch.profiler import ProfilerActivity, profile

from tagrpo.backends.models import load_causal_lm
from tagrpo.config.params import load_config
from tagrpo.grading.grade_fn import grade_fn_for
from tagrpo.plumbing.paths import project_root
from tagrpo.training.train_stage import plan_training
from tagrpo.training.trainer import TrainConfig, Trainer

PHASES = ("time/rollout_s", "time/score_s", "time/anchoring_s", "time/update_s", "time/step_s")


@contextlib.contextmanager
def method_trainer(method: str) -> Iterator[tuple[Trainer, Any]]:
    """A trainer of ``method`` from the checkout's base, planned as the train stage plans it
    (``params.yaml``), with its grading pool open; and the plan."""
    config = load_config()
    plan = plan_training(config, method, seed=0)
    run = TrainConfig(
        method=method,
        steps=plan.steps,
        seed=0,
        settings=config.train,
        engine=config.local,
        torch_threads=config.common.torch_threads,
    )
    start_from = project_root() / config.train.model
    with grade_fn_for(config.common.grading) as grade:
        model, tokenizer = load_causal_lm(start_from)
        reference, _ = load_causal_lm(start_from)
        yield Trainer(run, model, tokenizer, plan.questions, grade, ref_model=reference), plan


def profile_method(method: str, steps: int, ops: int) -> None:
    with method_trainer(method) as (trainer, plan):
        trainer.step(1)  # warm-up: first calls allocate and initialise
        rows = []
        started = time.perf_counter()
        with profile(activities=[ProfilerActivity.CPU]) as profiler:
            for step in range(2, steps + 2):
                rows.append(trainer.step(step).metrics)
        wall = time.perf_counter() - started
    print(
        f"\n== {method}: {plan.questions_per_step} questions a step, {len(rows)} steps in "
        f"{wall:.1f} s (load average {os.getloadavg()[0]:.2f}); of {plan.steps} steps a run"
    )
    for key in PHASES:
        values = [row.get(key, 0.0) for row in rows]
        print(f"  {key:20s} median {statistics.median(values):6.2f} s")
    print(profiler.key_averages().table(sort_by="self_cpu_time_total", row_limit=ops))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--methods", nargs="+", default=["grpo", "ta_grpo"])
    parser.add_argument("--steps", type=int, default=3, help="profiled steps after the warm-up")
    parser.add_argument("--ops", type=int, default=15, help="operators listed per method")
    args = parser.parse_args(argv)
    torch.set_num_threads(load_config().common.torch_threads)
    for method in args.methods:
        profile_method(method, args.steps, args.ops)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
