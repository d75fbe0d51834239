"""The exact mini-world solver reads every phrasing family back (the independent solver)."""

from __future__ import annotations

import pytest

from tagrpo.grading.types import SolveItem
from tagrpo.miniworld.solver import MiniWorldSolver, parse_problem
from tagrpo.miniworld.tasks import RENDERERS, MiniProblem, choice_options

PROBLEMS = [
    MiniProblem(12, (7, -4), name="Ana", item="coins"),
    MiniProblem(5, (-3, 9, -2), name="Tom", item="eggs"),
    MiniProblem(25, (-9, -8, 4, 1, -5, 3), name="Zoe", item="pens"),
]


@pytest.mark.parametrize("family", sorted(RENDERERS))
@pytest.mark.parametrize("problem", PROBLEMS, ids=lambda p: f"chain{p.length}")
def test_every_template_parses_back(family: str, problem: MiniProblem) -> None:
    text = RENDERERS[family](problem)
    for wrapped in (text, f"Solve the following problem. {text}\n\nSolve the problem above."):
        parsed = parse_problem(wrapped)
        assert parsed is not None, wrapped
        assert (parsed.start, parsed.changes, parsed.answer) == (
            problem.start,
            problem.changes,
            problem.answer,
        )


def test_unknown_or_impossible_text_gives_no_problem() -> None:
    assert parse_problem("Explain how rainbows form.") is None
    assert parse_problem("What is 3?") is None  # not a chain
    assert parse_problem("What is 2 - 5 - 1?") is None  # a negative answer: not this world's


def test_solver_answers_exactly_or_not_at_all() -> None:
    problem = PROBLEMS[1]
    options, letter = choice_options(problem, seed=1, count=10)
    items = [
        SolveItem(RENDERERS["story"](problem), "9"),
        SolveItem(RENDERERS["words"](problem), letter, "multiple_choice", tuple(options)),
        SolveItem("Explain how rainbows form.", "0"),
    ]
    answers = MiniWorldSolver().sample(items, 3)
    assert answers == [["\\boxed{9}"] * 3, [f"\\boxed{{{letter}}}"] * 3, None]
