"""Mini-world splits in the normalised question schema (the ``synthetic`` data source).

The training split, the data-scaling pool and every benchmark are disjoint by arithmetic
(start and changes), and the warm-start corpus excludes all of them
(:func:`tagrpo.training.base_policy.warm_start_policy` reads their keys from the data stage's
outputs). Each question's ``meta`` carries the structured problem, so any phrasing of it can
be rendered again downstream.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.data import SyntheticSettings
from tagrpo.data.schema import LoadResult, Question
from tagrpo.miniworld.tasks import (
    PHRASING_FAMILIES,
    MiniProblem,
    ProblemSpace,
    assign_families,
    choice_options,
    render,
    sample_problems,
)

SOURCE = "miniworld"


def problem_space(
    world: MiniWorldSettings, lengths: Mapping[int, float] | None = None
) -> ProblemSpace:
    """``common.miniworld``'s problem space with these chain lengths (default: training's)."""
    return ProblemSpace(
        lengths=dict(lengths if lengths is not None else world.train_lengths),
        start_min=world.start_min,
        start_max=world.start_max,
        max_change=world.max_change,
        max_total=world.max_total,
    )


def problem_meta(problem: MiniProblem, family: str) -> dict[str, Any]:
    return {
        "start": problem.start,
        "changes": list(problem.changes),
        "name": problem.name,
        "item": problem.item,
        "family": family,
        "key": problem.key(),
    }


def problem_from_meta(meta: Mapping[str, Any]) -> MiniProblem:
    """Rebuild the structured problem from a question's ``meta``."""
    return MiniProblem(
        start=int(meta["start"]),
        changes=tuple(int(x) for x in meta["changes"]),
        name=meta["name"],
        item=meta["item"],
    )


def question_keys(questions: Iterable[Question]) -> set[str]:
    """The arithmetic keys of mini-world questions (what the warm-start corpus must avoid)."""
    keys = set()
    for question in questions:
        if question.source != SOURCE:
            continue
        key = question.meta.get("key")
        if not key or key != problem_from_meta(question.meta).key():
            raise ValueError(f"{question.id}: its meta.key does not match its problem")
        keys.add(key)
    return keys


def _questions(
    split: str,
    benchmark: str,
    problems: list[MiniProblem],
    families: list[str],
    multiple_choice: bool,
    seed: int,
    options: int = 4,
) -> list[Question]:
    questions = []
    for index, (problem, family) in enumerate(zip(problems, families, strict=True)):
        meta = problem_meta(problem, family)
        choices, answer, kind = None, str(problem.answer), "math"
        if multiple_choice:
            choices, answer, kind = *choice_options(problem, seed, options), "multiple_choice"
        questions.append(
            Question(
                id=f"{benchmark}-{index:04d}",
                source=SOURCE,
                split=split,
                problem=render(problem, family),
                answer=answer,
                answer_kind=kind,
                subject=f"chain{problem.length}",
                level=family,
                choices=choices,
                meta=meta,
            )
        )
    return questions


def build_miniworld(
    synthetic: SyntheticSettings, world: MiniWorldSettings
) -> dict[str, LoadResult]:
    """The training split (key ``"train"``), the data-scaling pool (``"extra"``, if
    ``extra_size``) and each benchmark (its own name).

    ``synthetic`` is ``data.synthetic`` (sizes, seed, benchmarks), ``world`` is
    ``common.miniworld`` (the problem space, the training chain lengths).
    """
    seed = synthetic.seed
    used: set[str] = set()
    results: dict[str, LoadResult] = {}
    # Benchmarks are drawn first, so changing the training size never changes a benchmark.
    for offset, (name, spec) in enumerate(sorted(synthetic.benchmarks.items())):
        space = problem_space(world, spec.lengths)
        problems = sample_problems(space, spec.size, seed=seed * 1000 + offset, exclude=used)
        used |= {problem.key() for problem in problems}
        families = assign_families(problems, tuple(spec.families), seed=seed * 1000 + 500 + offset)
        questions = _questions(
            "test", name, problems, families, spec.multiple_choice, seed=seed, options=spec.options
        )
        results[name] = LoadResult(SOURCE, "test", len(questions), questions, [])
    space = problem_space(world)
    problems = sample_problems(space, synthetic.train_size, seed=seed * 1000 + 999, exclude=used)
    families = assign_families(problems, PHRASING_FAMILIES, seed=seed * 1000 + 998)
    train = _questions("train", "miniworld-train", problems, families, False, seed=seed)
    used |= {problem.key() for problem in problems}
    # The data-scaling pool (paper 5.5): more training questions of the same distribution,
    # drawn after the training split so that its size never changes the training set.
    if synthetic.extra_size:
        extra_problems = sample_problems(
            space, synthetic.extra_size, seed=seed * 1000 + 997, exclude=used
        )
        extra_families = assign_families(extra_problems, PHRASING_FAMILIES, seed=seed * 1000 + 996)
        extra = _questions("train", "miniworld-extra", extra_problems, extra_families, False, seed)
        results["extra"] = LoadResult(SOURCE, "train", len(extra), extra, [])
    results["train"] = LoadResult(SOURCE, "train", len(train), train, [])
    return results
