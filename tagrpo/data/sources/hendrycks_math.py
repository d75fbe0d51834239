"""MATH train (Hendrycks et al.; ``math/train.jsonl``, 7,500 rows): the training split.

Gold answer = the content of the last balanced ``\\boxed{}`` of the solution.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Source,
    boxed_answer,
    optional_text,
    problem_text,
    required_text,
)

SUBJECT_CONFIGS = (
    "algebra",
    "counting_and_probability",
    "geometry",
    "intermediate_algebra",
    "number_theory",
    "prealgebra",
    "precalculus",
)


def build(record: Mapping[str, Any], row_index: int, *, keep_empty_boxed: bool = False) -> Question:
    """``keep_empty_boxed=True`` keeps the two problems whose solution ends in an empty
    ``\\boxed{}`` (answer ""), which reproduces the paper's 7,498 count; by default an empty
    gold is rejected because no response can be graded against it.
    """
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record)
    solution = required_text(record, "solution")
    answer = boxed_answer(solution, allow_empty=keep_empty_boxed)
    return Question(
        id=question_id,
        source="math",
        split="train",
        problem=problem,
        answer=answer,
        solution=solution,
        level=optional_text(record, "level"),  # "Level ?" stays as is
        subject=optional_text(record, "type"),
        # Kept for the paper's count only: no response can be graded correct against "".
        meta={"empty_gold": True} if not answer else {},
    )


# MATH train on the hub has no unique_id: ids are generated (one EleutherAI config per subject).
def _eleuther(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    return {**record, "unique_id": f"train/{config}/hub-{row}"}


def _lighteval(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    return {**record, "unique_id": f"train/hub-{row}"}


SOURCE = Source(
    name="math",
    title="MATH",
    split="train",
    file="math/train.jsonl",
    id_field="unique_id",
    build=build,
    hub=(
        HubSpec("EleutherAI/hendrycks_math", "train", SUBJECT_CONFIGS, _eleuther),
        HubSpec("DigitalLearningGmbH/MATH-lighteval", "train", ("default",), _lighteval),
    ),
    bare_ids=True,  # "train/algebra/0.json" is unique already
)
