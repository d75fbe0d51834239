"""The training set a trainer reads: each question q0 with its N neighbours q1..qN.

Two inputs are accepted (``train.input`` / ``train.neighbours`` in params.yaml):

* ``data/rephrased/train.parquet`` (the ``check_equivalence`` stage): the question schema plus a
  ``rephrasings`` column holding the accepted neighbours in slot order (exactly N after its
  fallback policy, which pads missing slots with the original text);
* ``data/processed/train.parquet`` (the ``data`` stage) for the mini world: neighbours are the
  same structured problem rendered in the other phrasing families
  (:func:`miniworld_neighbours`), equivalent by construction.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from tagrpo.data.prompts import chat_messages
from tagrpo.data.schema import Question
from tagrpo.miniworld.dataset import problem_from_meta
from tagrpo.miniworld.tasks import PHRASING_FAMILIES, render

NEIGHBOUR_SOURCES = ("auto", "column", "miniworld", "none")


@dataclass(frozen=True)
class TrainQuestion:
    """A training question: q0's text, its neighbours and the gold answer."""

    id: str
    problem: str
    answer: str
    answer_kind: str = "math"
    neighbours: tuple[str, ...] = ()
    choices: tuple[str, ...] | None = None

    def text(self, variant: int) -> str:
        """q0 for variant 0, the n-th neighbour for variant n."""
        if variant == 0:
            return self.problem
        if not 1 <= variant <= len(self.neighbours):
            raise IndexError(f"{self.id}: no neighbour {variant} (has {len(self.neighbours)})")
        return self.neighbours[variant - 1]

    def messages(self, variant: int) -> list[dict[str, str]]:
        """Chat messages of one variant, with the paper's answer-format instruction."""
        return chat_messages(self.text(variant), list(self.choices) if self.choices else None)


def miniworld_neighbours(question: Question, n: int) -> list[str]:
    """N neighbours of a mini-world question: its problem in the other phrasing families.

    Families are taken in :data:`PHRASING_FAMILIES` order, skipping the question's own; the
    held-out family is never used (it is the out-of-distribution benchmark). With fewer
    families than N, the remaining slots repeat the original text (the same fallback as the
    ``check_equivalence`` stage).
    """
    if "family" not in question.meta:
        raise ValueError(f"{question.id}: not a mini-world question (no meta.family)")
    problem = problem_from_meta(question.meta)
    own = question.meta["family"]
    texts = [render(problem, family) for family in PHRASING_FAMILIES if family != own][:n]
    return texts + [question.problem] * (n - len(texts))


def _read(path: Path) -> tuple[list[Question], list[list[str]] | None]:
    import json

    import pyarrow.parquet as pq

    table = pq.read_table(str(path))
    has_column = "rephrasings" in table.column_names
    questions, rephrasings = [], []
    for record in table.to_pylist():
        neighbours = record.pop("rephrasings", None)
        record.pop("rephrasings_fallback", None)
        raw_meta = record.pop("meta", None)  # null when a source has no extras
        meta = json.loads(raw_meta) if raw_meta else {}
        questions.append(Question(**record, meta=meta))
        rephrasings.append(list(neighbours or []))
    return questions, (rephrasings if has_column else None)


def load_training_questions(
    path: str | Path,
    n_neighbours: int,
    neighbours: str = "auto",
    limit: int | None = None,
) -> list[TrainQuestion]:
    """The first ``limit`` questions of ``path`` (all if None), each with N neighbours.

    ``neighbours``: ``column`` (the ``rephrasings`` column), ``miniworld`` (re-rendered),
    ``none`` (q0 only; methods sampling neighbours will refuse it) or ``auto`` (the column if
    present, else mini-world rendering, else none).
    """
    if neighbours not in NEIGHBOUR_SOURCES:
        raise ValueError(f"neighbours must be one of {NEIGHBOUR_SOURCES}, got {neighbours!r}")
    questions, rephrasings = _read(Path(path))
    if limit is not None:
        if limit > len(questions):
            raise ValueError(f"{path} has {len(questions)} questions, {limit} requested")
        questions = questions[:limit]
        rephrasings = rephrasings[:limit] if rephrasings is not None else None
    source = neighbours
    if source == "auto":
        if rephrasings is not None:
            source = "column"
        elif questions and all("family" in q.meta for q in questions):
            source = "miniworld"
        else:
            source = "none"
    result = []
    for index, question in enumerate(questions):
        if source == "column":
            if rephrasings is None:
                raise ValueError(f"{path} has no 'rephrasings' column")
            texts = rephrasings[index]
            if len(texts) < n_neighbours:
                raise ValueError(
                    f"{question.id}: {len(texts)} rephrasings, N={n_neighbours} needed"
                )
            texts = texts[:n_neighbours]
        elif source == "miniworld":
            texts = miniworld_neighbours(question, n_neighbours)
        else:
            texts = []
        result.append(
            TrainQuestion(
                id=question.id,
                problem=question.problem,
                answer=question.answer,
                answer_kind=question.answer_kind,
                neighbours=tuple(texts),
                choices=tuple(question.choices) if question.choices else None,
            )
        )
    return result


def require_neighbours(questions: Sequence[TrainQuestion], n_neighbours: int) -> None:
    """Raise unless every question has at least N neighbours (TA-GRPO and TA-GRPO*)."""
    short = [q.id for q in questions if len(q.neighbours) < n_neighbours]
    if short:
        raise ValueError(
            f"{len(short)} questions lack {n_neighbours} neighbours (e.g. {short[0]}): give a "
            "rephrased training set (train.input) or train.neighbours: miniworld"
        )
