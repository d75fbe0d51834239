"""Every source by name: one line per benchmark (and per training set) in :data:`SOURCES`.

Also the benchmark -> answer kind lookup for rows that come without an ``answer_kind`` (lines
given to ``tagrpo grade``, verl rows from elsewhere): multiple choice for a registered
multiple-choice benchmark whose gold is an option letter.
"""

from __future__ import annotations

from tagrpo.data.sources import (
    aime24,
    aime25,
    amc23,
    gpqa_diamond,
    hendrycks_math,
    math500,
    minerva_math,
    olympiadbench,
    openr1_math,
)
from tagrpo.data.sources.base import Source
from tagrpo.grading.extract import choice_letter

SOURCES: dict[str, Source] = {
    source.name: source
    for source in (
        hendrycks_math.SOURCE,
        math500.SOURCE,
        amc23.SOURCE,
        aime24.SOURCE,
        aime25.SOURCE,
        olympiadbench.SOURCE,
        minerva_math.SOURCE,
        gpqa_diamond.SOURCE,
        openr1_math.SOURCE,
    )
}

# The mini world's benchmarks are generated from params (data.synthetic.benchmarks, where
# ``multiple_choice`` and ``options`` are set); "mini_choice" is the default's multiple-choice
# one, "miniworld_choice" its earlier name.
MINIWORLD_MULTIPLE_CHOICE = frozenset({"mini_choice", "miniworld_choice"})


def get_source(name: str) -> Source:
    """The registered source ``name``; KeyError naming the known ones."""
    if name not in SOURCES:
        raise KeyError(f"unknown source {name!r}; known: {sorted(SOURCES)}")
    return SOURCES[name]


def is_multiple_choice(benchmark: str | None) -> bool:
    """Whether the benchmark's gold answers are option letters (a source's ``answer_kind``)."""
    if benchmark in MINIWORLD_MULTIPLE_CHOICE:
        return True
    source = SOURCES.get(benchmark) if benchmark is not None else None
    return source is not None and source.answer_kind == "multiple_choice"


def answer_kind_for(benchmark: str | None, answer: str) -> str:
    """``multiple_choice`` for a registered benchmark whose gold is an option letter, else math.

    An explicit ``answer_kind`` given with the data always wins; callers check it first. A
    registered benchmark whose gold is not a letter (e.g. a copy that stores the option text)
    is graded as math rather than never matching.
    """
    if is_multiple_choice(benchmark) and choice_letter(answer) is not None:
        return "multiple_choice"
    return "math"
