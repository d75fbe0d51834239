"""The AIME row builder, shared by :mod:`.aime24` and :mod:`.aime25`: integer answers (an int or
a string, depending on the copy), or the last ``\\boxed{}`` of the solution for copies that only
box it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Reject,
    Source,
    boxed_answer,
    compact,
    numeric_answer,
    optional_text,
    problem_text,
)


def aime_source(name: str, title: str, hub: tuple[HubSpec, ...]) -> Source:
    """An AIME year: ``<name>/test.jsonl``, ids ``<name>-<upstream id>`` (or ``-<row>``)."""

    def build(record: Mapping[str, Any], row_index: int) -> Question:
        question_id = source.question_id(record, row_index)
        problem = problem_text(record)
        solution = optional_text(record, "solution")
        if record.get("answer") is not None:
            answer = numeric_answer(record["answer"])
        elif solution is not None:
            answer = boxed_answer(solution)  # copies that only box the answer in the solution
        else:
            raise Reject("missing_field", "answer")
        return Question(
            id=question_id,
            source=name,
            split="test",
            problem=problem,
            answer=answer,
            solution=solution,
            meta=compact({"url": optional_text(record, "url")}),
        )

    source = Source(
        name=name,
        title=title,
        split="test",
        file=f"{name}/test.jsonl",
        id_field="id",
        build=build,
        hub=hub,
        group="competition",
    )
    return source
