"""Questions in the verl RL training format (one parquet row per question).

verl's RL dataset reads ``prompt`` (chat messages), ``data_source`` and ``reward_model`` and
hands ``extra_info`` to the reward function. The prompt is the paper's Box 2 instruction
(:func:`tagrpo.data.prompts.chat_messages`). ``extra_info.rephrased_prompts`` holds TA-GRPO's
rephrased variants as chat-message lists in the same format; it is always present (empty list
until the rephrasing stage fills it) so the parquet schema does not change between stages.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tagrpo.data.prompts import chat_messages
from tagrpo.data.schema import Question

MESSAGE_TYPE = pa.struct([pa.field("role", pa.string()), pa.field("content", pa.string())])
MESSAGES_TYPE = pa.list_(MESSAGE_TYPE)

VERL_SCHEMA = pa.schema(
    [
        pa.field("data_source", pa.string()),
        pa.field("prompt", MESSAGES_TYPE),
        pa.field("ability", pa.string()),
        pa.field(
            "reward_model",
            pa.struct([pa.field("style", pa.string()), pa.field("ground_truth", pa.string())]),
        ),
        pa.field(
            "extra_info",
            pa.struct(
                [
                    pa.field("index", pa.int64()),
                    pa.field("id", pa.string()),
                    pa.field("split", pa.string()),
                    pa.field("answer_kind", pa.string()),
                    pa.field("question", pa.string()),
                    pa.field("rephrased_prompts", pa.list_(MESSAGES_TYPE)),
                ]
            ),
        ),
    ]
)


def to_verl_row(
    question: Question, index: int, rephrased_problems: Sequence[str] = ()
) -> dict[str, Any]:
    """One verl row; ``rephrased_problems`` are alternative problem texts for TA-GRPO."""
    return {
        "data_source": question.source,
        "prompt": chat_messages(question.problem, question.choices),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": question.answer},
        "extra_info": {
            "index": index,
            "id": question.id,
            "split": question.split,
            "answer_kind": question.answer_kind,
            "question": question.problem,
            # Same options as the original: a rephrasing changes the wording, not the choices.
            "rephrased_prompts": [
                chat_messages(text, question.choices) for text in rephrased_problems
            ],
        },
    }


def verl_table(
    questions: Iterable[Question], rephrasings: Mapping[str, Sequence[str]] | None = None
) -> pa.Table:
    """The verl rows as an Arrow table with :data:`VERL_SCHEMA` (index = position)."""
    rephrasings = rephrasings or {}
    rows = [
        to_verl_row(question, index, rephrasings.get(question.id, ()))
        for index, question in enumerate(questions)
    ]
    return pa.Table.from_pylist(rows, schema=VERL_SCHEMA)


def write_verl_parquet(
    questions: Iterable[Question],
    path: str | Path,
    rephrasings: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Write one verl row per question to ``path``; returns the number of rows.

    ``rephrasings`` maps question id to rephrased problem texts; questions without an entry get
    an empty ``rephrased_prompts`` list, and ids not among ``questions`` are ignored (a cache
    may cover more questions than a reduced profile trains on).
    """
    table = verl_table(questions, rephrasings)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(table, str(path))
    return table.num_rows
