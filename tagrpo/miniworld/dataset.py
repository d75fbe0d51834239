"""Mini-world splits in the normalised question schema (the ``synthetic`` data source).

The training split and every benchmark are disjoint by arithmetic (operation and operands),
and the warm-start corpus later excludes all of them. Each question's ``meta`` carries the
structured problem, so any phrasing of it can be rendered again downstream.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tagrpo.data.schema import LoadResult, Question
from tagrpo.miniworld.tasks import (
    DEFAULT_OPERATIONS,
    HELD_OUT_FAMILY,
    PHRASING_FAMILIES,
    MiniProblem,
    ProblemSpace,
    assign_families,
    choice_options,
    render,
    sample_problems,
)

SOURCE = "miniworld"


@dataclass(frozen=True)
class BenchmarkSpec:
    """One synthetic benchmark: how many problems, which operations, how they are posed."""

    size: int
    operations: dict[str, float]
    families: tuple[str, ...] = PHRASING_FAMILIES
    multiple_choice: bool = False


DEFAULT_BENCHMARKS: dict[str, BenchmarkSpec] = {
    # "competition" analogues: the training distribution, and its three-operand slice
    "mini_arith": BenchmarkSpec(96, dict(DEFAULT_OPERATIONS)),
    "mini_multistep": BenchmarkSpec(48, {"add3": 0.5, "addsub": 0.5}),
    # "out-of-distribution" analogues: a phrasing never trained on, and multiple choice
    "mini_unseen": BenchmarkSpec(48, dict(DEFAULT_OPERATIONS), families=(HELD_OUT_FAMILY,)),
    "mini_choice": BenchmarkSpec(48, dict(DEFAULT_OPERATIONS), multiple_choice=True),
}


@dataclass(frozen=True)
class MiniWorldConfig:
    seed: int = 0
    train_size: int = 200
    max_operand: int = 9
    train_operations: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_OPERATIONS))
    benchmarks: dict[str, BenchmarkSpec] = field(default_factory=lambda: dict(DEFAULT_BENCHMARKS))

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> MiniWorldConfig:
        benchmarks = {
            name: BenchmarkSpec(
                size=int(spec["size"]),
                operations=dict(spec["operations"]),
                families=tuple(spec.get("families", PHRASING_FAMILIES)),
                multiple_choice=bool(spec.get("multiple_choice", False)),
            )
            for name, spec in params.get("benchmarks", {}).items()
        }
        return cls(
            seed=int(params.get("seed", 0)),
            train_size=int(params.get("train_size", 200)),
            max_operand=int(params.get("max_operand", 9)),
            train_operations=dict(params.get("train_operations", cls().train_operations)),
            benchmarks=benchmarks or dict(DEFAULT_BENCHMARKS),
        )


def problem_meta(problem: MiniProblem, family: str) -> dict[str, Any]:
    return {
        "operation": problem.operation,
        "operands": list(problem.operands),
        "name": problem.name,
        "item": problem.item,
        "family": family,
        "key": problem.key(),
    }


def problem_from_meta(meta: Mapping[str, Any]) -> MiniProblem:
    """Rebuild the structured problem from a question's ``meta``."""
    return MiniProblem(
        operation=meta["operation"],
        operands=tuple(int(x) for x in meta["operands"]),
        name=meta["name"],
        item=meta["item"],
    )


def _questions(
    split: str,
    benchmark: str,
    problems: list[MiniProblem],
    families: list[str],
    multiple_choice: bool,
    seed: int,
) -> list[Question]:
    questions = []
    for index, (problem, family) in enumerate(zip(problems, families, strict=True)):
        meta = problem_meta(problem, family)
        choices, answer, kind = None, str(problem.answer), "math"
        if multiple_choice:
            choices, answer, kind = *choice_options(problem, seed), "multiple_choice"
        questions.append(
            Question(
                id=f"{benchmark}-{index:04d}",
                source=SOURCE,
                split=split,
                problem=render(problem, family),
                answer=answer,
                answer_kind=kind,
                subject=problem.operation,
                level=family,
                choices=choices,
                meta=meta,
            )
        )
    return questions


def build_miniworld(config: MiniWorldConfig) -> dict[str, LoadResult]:
    """The training split (key ``"train"``) and each benchmark (its own name)."""
    used: set[str] = set()
    results: dict[str, LoadResult] = {}
    # Benchmarks are drawn first, so changing the training size never changes a benchmark.
    for offset, (name, spec) in enumerate(sorted(config.benchmarks.items())):
        space = ProblemSpace(operations=spec.operations, max_operand=config.max_operand)
        problems = sample_problems(space, spec.size, seed=config.seed * 1000 + offset, exclude=used)
        used |= {problem.key() for problem in problems}
        families = assign_families(problems, spec.families, seed=config.seed * 1000 + 500 + offset)
        questions = _questions(
            "test", name, problems, families, spec.multiple_choice, seed=config.seed
        )
        results[name] = LoadResult(SOURCE, "test", len(questions), questions, [])
    space = ProblemSpace(operations=config.train_operations, max_operand=config.max_operand)
    problems = sample_problems(
        space, config.train_size, seed=config.seed * 1000 + 999, exclude=used
    )
    families = assign_families(problems, PHRASING_FAMILIES, seed=config.seed * 1000 + 998)
    train = _questions("train", "miniworld-train", problems, families, False, seed=config.seed)
    results["train"] = LoadResult(SOURCE, "train", len(train), train, [])
    return results
