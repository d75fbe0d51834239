"""What the mini world's design forces, computed before any model is trained.

A policy that had learned the warm-start corpus exactly would misread each step of its habit
with probability ``r`` and nothing else; its success on a (problem, phrasing) along a path is
then ``(1 - r) ** m`` for the ``m`` habit steps of that path, and with the corpus's path mix
the per-sample success ``q`` of every (problem, phrasing) follows. From ``q`` this module
computes the quantities the world's acceptance bands are about, for a chain-length
distribution and a range of ``r`` (the trained model's effective rate, not the corpus's, is
unknown before training, so the pre-registration states them over a range):

* base pass@1 and pass@k (``1 - (1 - q) ** k``, the expected value of the unbiased estimator);
* the identical-reward rate of a G-group (all G rewards equal: ``q**G + (1 - q)**G``);
* V3's margin: pass@k minus the best single-path pass@k;
* ceilings for RL without new skills: every question on its better path (oracle path choice),
  or each family on its better path on average (what a policy can learn from the phrasing
  alone);
* TA's extra signal: the share of all-wrong q0 groups (``q < wrong_below``) whose problem has a
  phrasing with ``q >= solvable_from``, and the share of problems no phrasing solves.

Run ``python -m tagrpo.miniworld.design`` for the table of ``params.yaml``'s world.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tagrpo.miniworld.tasks import (
    PHRASING_FAMILIES,
    STRATEGIES,
    MiniProblem,
    ProblemSpace,
    misread_steps,
)

Habits = Mapping[str, Mapping[str, Sequence[str]]]


@dataclass(frozen=True)
class Forced:
    """The design's consequences for one chain-length distribution and misread rate."""

    lengths: tuple[int, ...]
    misread_rate: float
    pass_at_1: float
    pass_at_k: float
    k: int
    best_single_path_at_k: float
    identical_rate: float  # of G-groups of the original phrasing
    oracle_path_at_1: float  # every (problem, phrasing) on its better path
    family_path_at_1: float  # each family on its better path (learnable from the phrasing)
    all_wrong: float  # share of (problem, phrasing) with q < wrong_below
    rescuable: float  # of those, the share whose problem has a phrasing with q >= solvable_from
    unsolvable: float  # share of problems no phrasing solves (every q < wrong_below)

    @property
    def v3_margin(self) -> float:
        return self.pass_at_k - self.best_single_path_at_k


def path_success(
    problems: Sequence[MiniProblem],
    habits: Habits,
    big_from: int,
    misread_rate: float,
    families: Sequence[str] = PHRASING_FAMILIES,
) -> np.ndarray:
    """``success[i, f, p]``: a corpus-exact policy's success on problem i, family f, path p."""
    success = np.ones((len(problems), len(families), len(STRATEGIES)))
    for i, problem in enumerate(problems):
        for f, family in enumerate(families):
            for p, strategy in enumerate(STRATEGIES):
                steps = misread_steps(problem, family, strategy, habits, big_from)
                success[i, f, p] = (1.0 - misread_rate) ** len(steps)
    return success


def forced(
    space: ProblemSpace,
    habits: Habits,
    big_from: int,
    misread_rate: float,
    path_mix: Mapping[str, float],
    k: int = 32,
    group_size: int = 8,
    problems: int = 4000,
    seed: int = 0,
    wrong_below: float = 0.02,
    solvable_from: float = 0.2,
) -> Forced:
    """The design's consequences for ``space``'s chain lengths (a seeded sample of problems;
    every family equally often, as the data stage assigns them)."""
    rng = random.Random(seed)
    drawn = [space.sample(rng) for _ in range(problems)]
    success = path_success(drawn, habits, big_from, misread_rate)
    mix = np.array([path_mix.get(s, 0.0) for s in STRATEGIES], dtype=np.float64)
    if mix.sum() <= 0:
        raise ValueError("the path mix has no weight")
    mix = mix / mix.sum()
    q = success @ mix  # [problem, family]
    single = [float((1.0 - (1.0 - success[:, :, p]) ** k).mean()) for p in range(len(mix))]
    family_best = success.mean(axis=0).max(axis=1).mean()  # best path per family, averaged
    all_wrong = q < wrong_below
    solvable = (q >= solvable_from).any(axis=1, keepdims=True)
    rescued = (all_wrong & solvable).sum()
    return Forced(
        lengths=tuple(sorted(space.lengths)),
        misread_rate=misread_rate,
        pass_at_1=float(q.mean()),
        pass_at_k=float((1.0 - (1.0 - q) ** k).mean()),
        k=k,
        best_single_path_at_k=max(single),
        identical_rate=float((q**group_size + (1.0 - q) ** group_size).mean()),
        oracle_path_at_1=float(success.max(axis=2).mean()),
        family_path_at_1=float(family_best),
        all_wrong=float(all_wrong.mean()),
        rescuable=float(rescued / all_wrong.sum()) if all_wrong.any() else float("nan"),
        unsolvable=float(all_wrong.all(axis=1).mean()),
    )


def forced_table(rows: Sequence[Forced]) -> str:
    """A markdown table of :class:`Forced` rows (percentages)."""
    from tagrpo.plumbing.markdown import markdown_table

    def pct(value: float) -> str:
        return "n/a" if np.isnan(value) else f"{100 * value:.1f}"

    return markdown_table(
        [
            "chain lengths",
            "misread rate r",
            "pass@1",
            f"pass@{rows[0].k}" if rows else "pass@k",
            "V3 margin (points)",
            "identical q0 groups",
            "family path choice pass@1",
            "oracle path pass@1",
            "all-wrong (q < 2%)",
            "of which rescuable",
            "unsolvable problems",
        ],
        [
            [
                "/".join(map(str, row.lengths)),
                f"{row.misread_rate:.2f}",
                pct(row.pass_at_1),
                pct(row.pass_at_k),
                pct(row.v3_margin),
                pct(row.identical_rate),
                pct(row.family_path_at_1),
                pct(row.oracle_path_at_1),
                pct(row.all_wrong),
                pct(row.rescuable),
                pct(row.unsolvable),
            ]
            for row in rows
        ],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", default="params.yaml", help="the params file to read")
    parser.add_argument(
        "--rates", type=float, nargs="+", default=[1.0, 0.99, 0.97, 0.95, 0.93],
        help="effective misread rates to tabulate",
    )  # fmt: skip
    parser.add_argument("--lengths", type=int, nargs="+", default=[3, 4, 5, 6])
    args = parser.parse_args(argv)
    from tagrpo.config.params import load_config
    from tagrpo.miniworld.dataset import problem_space

    config = load_config(args.params)
    world = config.common.miniworld
    corpus = config.base_model.warmstart.corpus
    rows = [
        forced(
            problem_space(world, {length: 1.0}),
            corpus.habits,
            world.big_from,
            rate,
            corpus.strategies,
            k=max(config.evaluate.ks),
            group_size=config.train.group_size,
        )
        for length in args.lengths
        for rate in args.rates
    ]
    print(forced_table(rows))


if __name__ == "__main__":
    main()
