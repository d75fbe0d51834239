"""An exact solver of mini-world text: parse the problem back from any phrasing, compute it.

The answer-consistency check needs a solver that is *independent* of the policy being trained:
the base policy as solver rejects exactly the rephrasings it fails on, i.e. it filters the
training signal TA-GRPO is meant to exploit (the rephrasings where q0's group is all-wrong but
a rephrasing is solved are kept only if the base policy solves them). For the mini world an
exact solver exists: every phrasing family is a fixed template, so the start and the changes can
be read back. Text in no known template (e.g. an LLM's free rephrasing) gets no answer,
and the check then calls the rephrasing unverifiable rather than guessing.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tagrpo.grading.types import SolveItem
from tagrpo.miniworld.tasks import MiniProblem

# One change of a chain: its sign word (or symbol) and its size, per family.
_SIGNED = re.compile(r"(?P<word>[+-]) (?P<n>\d+)")
_WORDS = re.compile(r"(?P<word>plus|minus) (?P<n>\d+)")
_IMPERATIVE = re.compile(r"(?P<word>Add|Subtract) (?P<n>\d+)\.")
_STORY = re.compile(r"(?P<word>finds|gets|buys|loses|gives away|sells) (?P<n>\d+)")


def _pairs(pattern: re.Pattern[str], text: str, plus: set[str]) -> list[int]:
    return [int(m["n"]) if m["word"] in plus else -int(m["n"]) for m in pattern.finditer(text)]


# (pattern of the whole problem, group of the start, group of the chain, parser of the chain):
# one per phrasing family of tagrpo.miniworld.tasks, the held-out family included.
_TEMPLATES: list[tuple[re.Pattern[str], int, int, Callable[[str], list[int]]]] = [
    (
        re.compile(r"What is (\d+)((?: [+-] \d+)+)\?"),
        1,
        2,
        lambda chain: _pairs(_SIGNED, chain, {"+"}),
    ),
    (
        re.compile(r"Compute (\d+)((?: (?:plus|minus) \d+)+)\."),
        1,
        2,
        lambda chain: _pairs(_WORDS, chain, {"plus"}),
    ),
    (
        re.compile(r"Start with (\d+)\.((?: (?:Add|Subtract) \d+\.)+) What number do you get\?"),
        1,
        2,
        lambda chain: _pairs(_IMPERATIVE, chain, {"Add"}),
    ),
    (
        re.compile(r"\b[A-Z][a-z]+ has (\d+) [a-z]+, (.+?)\. How many [a-z]+ does"),
        1,
        2,
        lambda chain: _pairs(_STORY, chain, {"finds", "gets", "buys"}),
    ),
    (
        re.compile(
            r"Begin with (\d+), ((?:then (?:plus|minus) \d+(?:, )?)+)\. What is the total\?"
        ),
        1,
        2,
        lambda chain: _pairs(_WORDS, chain, {"plus"}),
    ),
]


def parse_problem(text: str) -> MiniProblem | None:
    """The arithmetic of a mini-world problem in any known phrasing (None if none matches)."""
    for pattern, start_group, chain_group, chain_parser in _TEMPLATES:
        match = pattern.search(text)
        if match:
            try:
                return MiniProblem(int(match[start_group]), tuple(chain_parser(match[chain_group])))
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
