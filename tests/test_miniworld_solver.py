"""The exact mini-world solver reads every phrasing family back (the independent solver)."""

from __future__ import annotations

import pytest

from tagrpo.grading.types import SolveItem
from tagrpo.miniworld.solver import MiniWorldSolver, parse_problem
from tagrpo.miniworld.tasks import OPERATIONS, RENDERERS, MiniProblem, choice_options

OPERANDS = {"add": (3, 4), "sub": (9, 2), "add3": (1, 2, 6), "addsub": (5, 7, 3)}


@pytest.mark.parametrize("family", sorted(RENDERERS))
@pytest.mark.parametrize("operation", OPERATIONS)
def test_every_template_parses_back(family: str, operation: str) -> None:
    problem = MiniProblem(operation, OPERANDS[operation], name="Ana", item="coins")
    parsed = parse_problem(RENDERERS[family](problem))
    assert parsed is not None
    assert (parsed.operation, parsed.operands, parsed.answer) == (
        problem.operation,
        problem.operands,
        problem.answer,
    )


def test_solver_answers_exactly_or_not_at_all() -> None:
    problem = MiniProblem("addsub", (5, 7, 3))
    options, letter = choice_options(problem, seed=1)
    items = [
        SolveItem(RENDERERS["story"](problem), "9"),
        SolveItem(RENDERERS["words"](problem), letter, "multiple_choice", tuple(options)),
        SolveItem("Explain how rainbows form.", "0"),
    ]
    answers = MiniWorldSolver().sample(items, 3)
    assert answers == [["\\boxed{9}"] * 3, [f"\\boxed{{{letter}}}"] * 3, None]
