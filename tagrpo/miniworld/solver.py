"""An exact solver of mini-world text: parse the problem back from any phrasing, compute it.

The answer-consistency check needs a solver that is *independent* of the policy being trained:
the base policy as solver rejects exactly the rephrasings it fails on, i.e. it filters the
training signal TA-GRPO is meant to exploit (the rephrasings where q0's group is all-wrong but
a rephrasing is solved are kept only if the base policy solves them). For the mini world an
exact solver exists: every phrasing family is a fixed template, so the operation and operands
can be read back. Text in no known template (e.g. an LLM's free rephrasing) gets no answer,
and the check then calls the rephrasing unverifiable rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tagrpo.grading.types import SolveItem
from tagrpo.miniworld.tasks import MiniProblem

N = r"(\d+)"
W = r"[A-Za-z]+"
# (pattern, operation, operand order): one per (phrasing family, operation) template of
# tagrpo.miniworld.tasks, the held-out family included.
_TEMPLATES: list[tuple[re.Pattern[str], str, tuple[int, ...]]] = [
    (re.compile(rf"What is {N} \+ {N} \+ {N}\?"), "add3", (0, 1, 2)),
    (re.compile(rf"What is {N} \+ {N} - {N}\?"), "addsub", (0, 1, 2)),
    (re.compile(rf"What is {N} \+ {N}\?"), "add", (0, 1)),
    (re.compile(rf"What is {N} - {N}\?"), "sub", (0, 1)),
    (re.compile(rf"Compute the sum of {N}, {N} and {N}\."), "add3", (0, 1, 2)),
    (re.compile(rf"Compute the sum of {N} and {N}, minus {N}\."), "addsub", (0, 1, 2)),
    (re.compile(rf"Compute the sum of {N} and {N}\."), "add", (0, 1)),
    (re.compile(rf"Compute the difference when {N} is taken away from {N}\."), "sub", (1, 0)),
    (re.compile(rf"Start with {N}, add {N}, then add {N}\."), "add3", (0, 1, 2)),
    (re.compile(rf"Start with {N}, add {N}, then subtract {N}\."), "addsub", (0, 1, 2)),
    (re.compile(rf"Add {N} to {N}\."), "add", (1, 0)),
    (re.compile(rf"Subtract {N} from {N}\."), "sub", (1, 0)),
    (re.compile(rf"has {N} {W}, finds {N} more and then buys {N} more\."), "add3", (0, 1, 2)),
    (re.compile(rf"has {N} {W}, finds {N} more and then loses {N}\."), "addsub", (0, 1, 2)),
    (re.compile(rf"has {N} {W} and gets {N} more\."), "add", (0, 1)),
    (re.compile(rf"has {N} {W} and gives away {N}\."), "sub", (0, 1)),
    (re.compile(rf"if three boxes hold {N}, {N} and {N} {W}\?"), "add3", (0, 1, 2)),
    (re.compile(rf"Two boxes hold {N} and {N} {W}\. If {W} takes {N},"), "addsub", (0, 1, 2)),
    (re.compile(rf"if one box holds {N} {W} and another {N}\?"), "add", (0, 1)),
    (re.compile(rf"After {W} eats {N} of {N} {W},"), "sub", (1, 0)),
]


def parse_problem(text: str) -> MiniProblem | None:
    """The arithmetic of a mini-world problem in any known phrasing (None if none matches)."""
    for pattern, operation, order in _TEMPLATES:
        match = pattern.search(text)
        if match:
            numbers = [int(value) for value in match.groups()]
            operands = tuple(numbers[i] for i in order)
            try:
                return MiniProblem(operation, operands)
            except ValueError:
                return None
    return None


def _choice_letter(answer: int, choices: Sequence[str] | None) -> str | None:
    if not choices:
        return str(answer)
    for letter, option in zip("ABCDEFGHIJKLMNOPQRSTUVWXYZ", choices, strict=False):
        if option.strip() == str(answer):
            return letter
    return None


class MiniWorldSolver:
    """A :class:`~tagrpo.equivalence.consistency.Solver` that reads the problem back and
    answers it exactly (k identical responses), or gives no answer for unknown text."""

    name = "miniworld-exact"

    def sample(self, items: Sequence[SolveItem], k: int) -> list[list[str] | None]:
        answers: list[list[str] | None] = []
        for item in items:
            problem = parse_problem(item.text)
            letter = _choice_letter(problem.answer, item.choices) if problem else None
            answers.append(None if letter is None else [f"\\boxed{{{letter}}}"] * k)
        return answers
