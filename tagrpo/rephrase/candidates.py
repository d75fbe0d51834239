"""The candidates a rephrasing backend produces, and the requests a model backend sends.

A :class:`Candidate` is one (question, variant slot, round): the text, or no text and a reason
(``generation_failed``, ``parse_missing``, ``no_transform``); the candidates table is their
parquet form. :func:`plan_requests` and :func:`candidates_from_reply` are shared by the model
backends (:mod:`tagrpo.rephrase.generate`'s ``openai`` and
:mod:`tagrpo.rephrase.local_backend`'s ``hf``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from tagrpo.data.rephrase_templates import RephraseTemplate
from tagrpo.data.schema import Question
from tagrpo.rephrase.cache import cache_key
from tagrpo.rephrase.parse import parse_reply

REQUEST_MODES = ("per_variant", "choices", "numbered")

CANDIDATE_SCHEMA = pa.schema(
    [
        pa.field("question_id", pa.string(), nullable=False),
        pa.field("variant", pa.int32(), nullable=False),  # slot 0..N-1
        pa.field("round", pa.int32(), nullable=False),  # 0 = the rephrase stage
        pa.field("text", pa.string()),  # None when no rephrasing was obtained
        pa.field("origin", pa.string(), nullable=False),  # backend and transform or model
        pa.field("error", pa.string()),  # reason code when text is None
        pa.field("detail", pa.string()),  # error message or parse repairs
        # How the reply was obtained when it was first asked for (a cache hit reproduces
        # them), so a rerun served from the cache writes a byte-identical file; whether this
        # run hit the cache is Candidate.cached, and the stage's requests/cache_hits metric.
        pa.field("attempts", pa.int32(), nullable=False),
        pa.field("prompt_tokens", pa.int64(), nullable=False),
        pa.field("completion_tokens", pa.int64(), nullable=False),
    ]
)


@dataclass(frozen=True)
class Candidate:
    question_id: str
    variant: int
    round: int
    text: str | None
    origin: str
    error: str | None = None
    detail: str | None = None
    cached: bool = False  # served from the reply cache in this run (not written to the file)
    attempts: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0


def candidates_table(candidates: Sequence[Candidate]) -> pa.Table:
    return pa.Table.from_pylist([asdict(c) for c in candidates], schema=CANDIDATE_SCHEMA)


def write_candidates(candidates: Sequence[Candidate], path: str | Path) -> None:
    pq.write_table(candidates_table(candidates), str(path))


def read_candidates(path: str | Path) -> list[Candidate]:
    table = pq.read_table(str(path))
    missing = set(CANDIDATE_SCHEMA.names) - set(table.column_names)
    if missing:
        raise ValueError(f"{path}: not a candidates table (missing columns {sorted(missing)})")
    return [Candidate(**row) for row in table.select(CANDIDATE_SCHEMA.names).to_pylist()]


class Rephraser(Protocol):
    """Produces candidates for the given slots (default: all N) of each question."""

    name: str
    n: int

    def rephrase(
        self,
        questions: Sequence[Question],
        round: int = 0,
        slots: Mapping[str, Sequence[int]] | None = None,
    ) -> list[Candidate]: ...

    def metrics(self) -> dict[str, float]: ...


def slots_for(question: Question, n: int, slots: Mapping[str, Sequence[int]] | None) -> list[int]:
    wanted = list(range(n)) if slots is None else list(slots.get(question.id, ()))
    bad = [slot for slot in wanted if not 0 <= slot < n]
    if bad:
        raise ValueError(f"{question.id}: variant slots {bad} outside 0..{n - 1}")
    return wanted


@dataclass(frozen=True)
class PlannedRequest:
    """One request of a model backend and the slots its reply fills."""

    question: Question
    slots: tuple[int, ...]
    key: str
    n_choices: int
    n_items: int
    seed: int
    messages: list[dict[str, str]] = field(hash=False, compare=False)


def plan_requests(
    questions: Sequence[Question],
    *,
    backend: str,
    model: str,
    template: RephraseTemplate,
    mode: str,
    n: int,
    seed: int,
    sampling: Mapping[str, Any],
    round: int,
    slots: Mapping[str, Sequence[int]] | None = None,
    endpoint: Mapping[str, Any] | None = None,
) -> list[PlannedRequest]:
    """The requests for these slots, each with its content-addressed cache key.

    The key covers the prompt as sent (the template's text, not only its name), and for an
    endpoint backend ``endpoint``: its URL, model and settings (a cache filled at one server
    must not answer for another).
    """
    if mode not in REQUEST_MODES:
        raise ValueError(f"requests must be one of {REQUEST_MODES}, got {mode!r}")
    planned = []
    for question in questions:
        wanted = slots_for(question, n, slots)
        if not wanted:
            continue
        groups = [(slot,) for slot in wanted] if mode == "per_variant" else [tuple(wanted)]
        for group in groups:
            n_items = len(group) if mode == "numbered" else 1
            n_choices = len(group) if mode == "choices" else 1
            messages = template.messages(question.problem, n_items)
            key = cache_key(
                {
                    "backend": backend,
                    "model": model,
                    "endpoint": dict(endpoint or {}),
                    "template": template.cache_version(n_items),
                    "prompt": cache_key({"messages": messages}),
                    "mode": mode,
                    "sampling": dict(sampling),
                    "seed": seed,
                    "question": question.problem,
                    "variants": list(group),
                    "round": round,
                }
            )
            planned.append(
                PlannedRequest(
                    question=question,
                    slots=group,
                    key=key,
                    n_choices=n_choices,
                    n_items=n_items,
                    # Distinct per slot and round, so seeded endpoints do not repeat a sample.
                    seed=seed * 1_000_003 + round * 1009 + group[0],
                    messages=messages,
                )
            )
    return planned


def candidates_from_reply(
    planned: PlannedRequest,
    texts: list[str] | None,
    origin: str,
    round: int,
    issues: Counter[str],
    *,
    error: str | None = None,
    cached: bool = False,
    attempts: int = 0,
    prompt_tokens: int = 0,
    completion_tokens: int = 0,
) -> list[Candidate]:
    """Parse a reply into one candidate per slot of ``planned`` (failures included)."""
    question_id = planned.question.id
    extra = {"cached": cached, "attempts": attempts}
    if texts is None:
        return [
            Candidate(question_id, slot, round, None, origin, "generation_failed", error, **extra)
            for slot in planned.slots
        ]
    items: list[str | None] = []
    notes: list[str] = []
    if planned.n_items > 1:
        parsed = parse_reply(texts[0] if texts else None, planned.n_items)
        items, notes = list(parsed.items), list(parsed.issues)
    else:
        for text in texts[: len(planned.slots)]:
            parsed = parse_reply(text, 1)
            items.append(parsed.items[0] if parsed.items else None)
            notes.extend(parsed.issues)
    issues.update(note.split(":")[0] for note in notes)
    detail = ",".join(notes) or None
    out = []
    for position, slot in enumerate(planned.slots):
        text = items[position] if position < len(items) else None
        # Token usage is the request's; it is written on its first slot only so sums are right.
        usage = (
            {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
            if position == 0
            else {}
        )
        if text is None:
            out.append(
                Candidate(
                    question_id,
                    slot,
                    round,
                    None,
                    origin,
                    "parse_missing",
                    detail,
                    **extra,
                    **usage,
                )
            )
        else:
            out.append(
                Candidate(question_id, slot, round, text, origin, None, detail, **extra, **usage)
            )
    return out
