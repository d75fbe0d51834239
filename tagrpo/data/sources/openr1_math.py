"""OpenR1-Math-220k (default config, ~94k rows): the data-scaling pool (paper section 5.5).

Not in ../shared/data: a user supplies ``openr1_math/train.jsonl`` (or ``.parquet``) or loads
it from the hub. A row is kept when it is a word problem whose ``answer`` at least one
generation reached, as checked by its own verifiers (``correctness_math_verify``, else
``correctness_llama``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.data.schema import Question
from tagrpo.data.sources.base import (
    HubSpec,
    Reject,
    Source,
    answer_text,
    compact,
    optional_text,
    problem_text,
)


def build(record: Mapping[str, Any], row_index: int) -> Question:
    question_id = SOURCE.question_id(record, row_index)
    problem = problem_text(record)
    kind = optional_text(record, "question_type") or "math-word-problem"
    if kind != "math-word-problem":
        raise Reject("unsupported_question_type", kind)
    verified = [
        bool(flag)
        for field in ("correctness_math_verify", "correctness_llama")
        for flag in (record.get(field) or [])
    ]
    if not any(verified):
        raise Reject("unverified_answer")
    raw = record.get("answer")
    if raw is None or not str(raw).strip():
        raise Reject("empty_answer")
    answer = answer_text(str(raw))
    if not answer or answer.lower() in ("proof", "notfound"):
        raise Reject("empty_answer", str(raw))
    return Question(
        id=question_id,
        source="openr1_math",
        split="train",
        problem=problem,
        answer=answer,
        solution=optional_text(record, "solution"),
        subject=optional_text(record, "problem_type"),
        meta=compact({"origin": optional_text(record, "source")}),
    )


SOURCE = Source(
    name="openr1_math",
    title="OpenR1-Math-220k",
    split="train",
    file="openr1_math/train.jsonl",
    id_field="uuid",
    build=build,
    # "default" holds the ~94k verified rows.
    hub=(HubSpec("open-r1/OpenR1-Math-220k", "train", ("default",)),),
)
