"""The verl training parquet: one row per original question, rephrasings in ``extra_info``.

Input is the equivalence stage's ``data/rephrased/train.parquet`` (the question schema plus
``rephrasings``, N accepted neighbours per question); the rows are written with
:func:`tagrpo.data.verl_format.write_verl_parquet`, so ``prompt`` is q0's chat messages with
the paper's Box 2 instruction and ``extra_info.rephrased_prompts`` the N neighbours in the same
format.

verl's ``data.filter_overlong_prompts`` only measures ``prompt`` (q0); a rephrasing longer than
``max_prompt_length`` would be silently left-truncated by the agent loop. Lengths are therefore
checked here, with the policy's tokenizer and chat template, before training:

* a question whose q0 is too long is dropped (verl would drop it too), counted;
* a rephrasing that is too long is replaced by q0's text, counted: the same fallback the
  equivalence stage applies to rephrasings that fail its checks, which keeps N variants per
  question so that session ``j`` still samples variant ``j // G``. Each replacement moves a TA
  run toward the matched-budget baseline (q0 sampled more often), so a method that samples
  rephrasings fails above ``verl.max_replaced_rephrasing_share``
  (:func:`check_replaced_share`), as the equivalence stage does above its padded share.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from tagrpo.data.prompts import chat_messages
from tagrpo.data.schema import QUESTION_SCHEMA, Question
from tagrpo.data.verl_format import write_verl_parquet
from tagrpo.splits.training_set import load_training_questions

Messages = list[dict[str, str]]
TokenCounter = Callable[[Messages], int]


@dataclass(frozen=True)
class VerlDataStats:
    """What the length filter did (logged to MLflow and the run's metrics)."""

    questions_in: int
    questions_written: int
    questions_dropped_too_long: int
    rephrasings_in: int
    rephrasings_too_long: int
    max_prompt_tokens: int  # the longest prompt written (q0 or rephrasing)

    def as_metrics(self) -> dict[str, float]:
        return {f"verl_data/{key}": float(value) for key, value in asdict(self).items()}


def chat_template_counter(tokenizer: Any, chat_template_kwargs: Mapping[str, Any] | None = None):
    """Tokens of a chat prompt as the rollout sees it (template + generation prompt)."""
    kwargs = dict(chat_template_kwargs or {})

    def count(messages: Messages) -> int:
        text = tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **kwargs
        )
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    return count


def read_question_rows(path: str | Path, limit: int | None = None) -> list[Question]:
    """The questions of a (rephrased) training parquet, without the extra columns."""
    import json

    table = pq.read_table(str(path), columns=QUESTION_SCHEMA.names)
    records = table.to_pylist()[:limit] if limit is not None else table.to_pylist()
    questions = []
    for record in records:
        meta = record.pop("meta", None)
        questions.append(Question(**record, meta=json.loads(meta) if meta else {}))
    return questions


def prepare_training_parquet(
    input_path: str | Path,
    out_path: str | Path,
    count_tokens: TokenCounter,
    max_prompt_length: int,
    n_neighbours: int,
    neighbours: str = "auto",
    limit: int | None = None,
) -> VerlDataStats:
    """Write the verl training parquet for the first ``limit`` questions of ``input_path``."""
    questions = read_question_rows(input_path, limit)
    with_neighbours = load_training_questions(input_path, n_neighbours, neighbours, limit=limit)
    kept: list[Question] = []
    rephrasings: dict[str, list[str]] = {}
    dropped = too_long = total = longest = 0
    for question, train_question in zip(questions, with_neighbours, strict=True):
        if question.id != train_question.id:
            raise ValueError(f"row order differs: {question.id} vs {train_question.id}")
        original_tokens = count_tokens(chat_messages(question.problem, question.choices))
        if original_tokens > max_prompt_length:
            dropped += 1
            continue
        longest = max(longest, original_tokens)
        texts = []
        for text in train_question.neighbours:
            total += 1
            tokens = count_tokens(chat_messages(text, question.choices))
            if tokens > max_prompt_length:
                too_long += 1
                texts.append(question.problem)
            else:
                longest = max(longest, tokens)
                texts.append(text)
        kept.append(question)
        rephrasings[question.id] = texts
    written = write_verl_parquet(kept, out_path, rephrasings)
    return VerlDataStats(
        questions_in=len(questions),
        questions_written=written,
        questions_dropped_too_long=dropped,
        rephrasings_in=total,
        rephrasings_too_long=too_long,
        max_prompt_tokens=longest,
    )


def check_replaced_share(stats: VerlDataStats, limit: float, method: str) -> None:
    """Raise when more than ``limit`` of the rephrasings written were replaced by q0.

    Only for methods that sample rephrasings; a q0-only method (grpo ...) never reads them.
    """
    from tagrpo.algorithms import get_method
    from tagrpo.rephrase.shares import check_failed_share

    if not get_method(method).use_neighbours:
        return
    check_failed_share(
        stats.rephrasings_too_long,
        stats.rephrasings_in,
        limit,
        f"rephrasings of the kept questions are over the prompt limit and were replaced by q0 "
        f"({method} would sample q0 in their place)",
        "raise verl.max_prompt_length, shorten or regenerate the rephrasings, or raise "
        "verl.max_replaced_rephrasing_share",
    )


VALIDATION_AGENT_LOOP = "single_turn_agent"


def prepare_validation_parquet(
    benchmark_path: str | Path, out_path: str | Path, limit: int | None = None
) -> int:
    """A validation parquet without rephrasings, answered from q0 by verl's stock loop.

    Its rows name their agent loop (``agent_name``, which verl prefers over the default), so
    the ``tagrpo_agent`` loop of the rephrasing methods, which refuses rows without
    rephrasings, never sees them.
    """
    import pyarrow as pa

    questions = read_question_rows(benchmark_path, limit)
    if not questions:
        raise ValueError(f"{benchmark_path} has no questions")
    written = write_verl_parquet(questions, out_path)
    table = pq.read_table(str(out_path))
    names = pa.array([VALIDATION_AGENT_LOOP] * table.num_rows, type=pa.string())
    pq.write_table(table.append_column("agent_name", names), str(out_path))
    return written


def require_rephrasings(path: str | Path, n_neighbours: int, method: str) -> int:
    """Raise unless every row of a verl training parquet has N rephrasings; returns the rows.

    The methods that sample rephrasings (``ta_grpo``, ``ta_grpo_star``) would otherwise draw
    every session from q0 for such a row. The error names the first such question and how many
    rows are short.
    """
    rows = pq.read_table(str(path), columns=["extra_info"]).column("extra_info").to_pylist()
    short = [
        (str(info.get("id")), len(info.get("rephrased_prompts") or []))
        for info in rows
        if len((info or {}).get("rephrased_prompts") or []) < n_neighbours
    ]
    if short:
        question, count = short[0]
        raise ValueError(
            f"{method} samples N={n_neighbours} rephrasings of every question, but question "
            f"{question!r} has {count} ({len(short)} of {len(rows)} training rows are short): give "
            "a rephrased training set (train.input, with train.neighbours: auto or column) or "
            "train.neighbours: miniworld; train.neighbours: none only suits methods sampling q0"
        )
    return len(rows)
