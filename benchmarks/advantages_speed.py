"""Speed of the algorithm core: advantages + diagnostics for one step of 256 questions x 32.

    .venv/bin/python benchmarks/advantages_speed.py [--questions 256] [--responses 32]
        [--repeats 200] [--seed 0]

Times :func:`tagrpo.algorithms.advantages_and_diagnostics` (group ids, normalisation, AVSPO
where the method uses it, and every zero-gradient diagnostic) on seeded binary rewards whose
per-question success rates are spread like a real run's (a quarter of the questions nearly
always wrong, a quarter nearly always right), for the methods that differ in this code path.
Prints the median and 90th-percentile time per call and the ratio to the 5 ms target (the
second paper reports 3 ms for its ACR + virtual-sample bookkeeping). Exit status 1 if a
method's median misses the target.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import numpy as np

from tagrpo.algorithms import (
    AVSPOConfig,
    advantages_and_diagnostics,
    get_method,
    rollout_layout,
)

TARGET_MS = 5.0


def seeded_rewards(questions: int, responses: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    success = rng.choice([0.02, 0.3, 0.6, 0.98], size=questions)
    return (rng.random((questions, responses)) < success[:, None]).astype(np.float64).ravel()


def time_method(name: str, questions: int, responses: int, repeats: int, seed: int) -> list[float]:
    spec = get_method(name)
    if spec.use_neighbours:  # TA-GRPO layouts: 4 variants x responses/4
        layout = rollout_layout(questions, (0, 1, 2, 3), responses // 4)
    else:
        layout = rollout_layout(questions, (0,), responses)
    rewards = seeded_rewards(questions, responses, seed)
    config = AVSPOConfig(trigger="always")
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        advantages_and_diagnostics(spec, rewards, layout.question, layout.variant, config)
        times.append((time.perf_counter() - started) * 1000.0)
    return times


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=256)
    parser.add_argument("--responses", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=200)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(
        f"advantages + diagnostics, {args.questions} questions x {args.responses} responses, "
        f"{args.repeats} calls each (target {TARGET_MS:.0f} ms)"
    )
    worst = 0.0
    for name in ("grpo", "ta_grpo_star", "ta_grpo", "avspo"):
        times = time_method(name, args.questions, args.responses, args.repeats, args.seed)
        median = statistics.median(times)
        p90 = sorted(times)[int(0.9 * (len(times) - 1))]
        worst = max(worst, median)
        print(
            f"  {name:<13} median {median:6.3f} ms   p90 {p90:6.3f} ms   "
            f"{median / TARGET_MS:5.2f}x of target"
        )
    verdict = "meets" if worst <= TARGET_MS else "MISSES"
    print(f"slowest median {worst:.3f} ms = {worst / TARGET_MS:.2f}x the target: {verdict} it")
    return 0 if worst <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
