"""A deterministic test solver: answers ``\\boxed{answer_for(text)}`` for every sample."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from tagrpo.grading.types import SolveItem


class ScriptedSolver:
    """Implements the :class:`~tagrpo.equivalence.consistency.Solver` protocol from a script.

    ``answer_for(text)`` gives the final answer written for a text, or None for a text the
    solver does not answer (like an endpoint whose requests all failed).
    """

    name = "scripted"

    def __init__(self, answer_for: Callable[[str], str | None]) -> None:
        self.answer_for = answer_for
        self.calls: list[list[str]] = []

    def sample(self, items: Sequence[SolveItem], k: int) -> list[list[str] | None]:
        self.calls.append([item.text for item in items])
        out: list[list[str] | None] = []
        for item in items:
            answer = self.answer_for(item.text)
            out.append(None if answer is None else [f"So the answer is \\boxed{{{answer}}}."] * k)
        return out
