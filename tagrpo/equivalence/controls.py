"""Negative controls: rephrasings that change the answer on purpose, to measure the checks.

Every check that never rejects anything looks the same as a check that works, so the stage
runs deliberately wrong "rephrasings" through the same layers and reports how many each layer
catches. Controls are never part of the training set.

``number_changed``     the start of a mini-world problem is one larger (the answer is one
                       larger), rendered in another phrasing family; for other text the first
                       number is one larger (which changes the answer in all but degenerate
                       problems). The structural layer should catch all of them.
``operation_flipped``  (mini world) the last change's sign is flipped, ``+`` <-> ``-``, with
                       the same numbers, in another phrasing family: same numbers, similar
                       text, a different answer. Only the answer-consistency solve can catch
                       it. Problems where the flip gives a negative result get no such control.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from tagrpo.data.schema import Question
from tagrpo.miniworld.dataset import problem_from_meta
from tagrpo.miniworld.tasks import PHRASING_FAMILIES, render

CONTROL_KINDS = ("number_changed", "operation_flipped")


@dataclass(frozen=True)
class Control:
    question_id: str
    kind: str  # one of CONTROL_KINDS
    text: str
    family: str | None = None


def _other_family(question: Question, seed: int) -> str:

    others = [f for f in PHRASING_FAMILIES if f != question.meta.get("family")]
    digest = hashlib.sha256(f"{seed}:{question.id}:control".encode()).hexdigest()
    return others[int(digest[:8], 16) % len(others)]


def _miniworld_controls(question: Question, seed: int) -> list[Control] | None:

    meta = question.meta or {}
    if question.source != "miniworld" or "changes" not in meta:
        return None
    try:
        problem = problem_from_meta(meta)
    except (KeyError, ValueError, TypeError):
        return None
    family = _other_family(question, seed)
    controls = []
    changed = replace(problem, start=problem.start + 1)
    controls.append(Control(question.id, "number_changed", render(changed, family), family))
    try:
        flipped = replace(problem, changes=(*problem.changes[:-1], -problem.changes[-1]))
    except ValueError:
        flipped = None  # the flipped problem would have a negative answer
    if flipped is not None and flipped.answer != problem.answer:
        controls.append(Control(question.id, "operation_flipped", render(flipped, family), family))
    return controls


def _generic_number_changed(question: Question) -> Control | None:
    match = re.search(r"(?<![\d.])\d+(?![\d.])", question.problem)
    if not match:
        return None
    bumped = str(int(match.group(0)) + 1)
    text = question.problem[: match.start()] + bumped + question.problem[match.end() :]
    return Control(question.id, "number_changed", text)


def make_controls(
    questions: Sequence[Question], seed: int = 0, max_questions: int | None = None
) -> list[Control]:
    """Controls for the first ``max_questions`` questions (all by default), in order."""
    controls: list[Control] = []
    for question in list(questions)[: max_questions if max_questions is not None else None]:
        made = _miniworld_controls(question, seed)
        if made is None:
            generic = _generic_number_changed(question)
            made = [generic] if generic else []
        controls.extend(made)
    return controls
