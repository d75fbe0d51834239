"""What every source shares: the :class:`Source` object, its Hugging Face copies
(:class:`HubSpec`), the field helpers its row builder uses, the file readers and
:func:`normalise_records`.

A row builder turns one upstream record into a :class:`~tagrpo.data.schema.Question` or raises
:class:`Reject` with a reason code from :data:`REJECTION_REASONS`; :meth:`Source.normalise`
turns that into a :class:`~tagrpo.data.schema.Rejection` carrying the upstream id, so nothing is
dropped silently (``rows_in = kept + rejected``).
"""

from __future__ import annotations

import ast
import inspect
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

from tagrpo.data.schema import LoadResult, Question, Rejection
from tagrpo.grading.extract import last_boxed

# Reason codes written to Rejection.reason (short, machine-readable, stable).
REJECTION_REASONS: dict[str, str] = {
    "empty_line": "blank line in a JSONL file",
    "invalid_json": "line is not valid JSON",
    "not_an_object": "JSON value is not an object",
    "missing_field": "a required field is absent or null",
    "invalid_field": "a field has the wrong type",
    "empty_problem": "problem text is empty after stripping",
    "no_boxed_answer": "no balanced \\boxed{...} in the solution",
    "empty_answer": "the gold answer is empty",
    "bad_answer": "the gold answer could not be parsed",
    "empty_option": "a multiple-choice option is empty",
    "duplicate_options": "the correct option is not distinct from the others",
    "duplicate_id": "the id was already kept from an earlier row of the same file",
    "invalid_encoding": "the line is not valid UTF-8, or holds a lone surrogate",
    "too_long": "the problem text exceeds data.max_problem_chars",
    "unsupported_question_type": "OpenR1-Math: a proof or multiple-choice row (no gradable answer)",
    "unverified_answer": "OpenR1-Math: no generation of the row was verified correct",
    "in_training_set": "a data-scaling pool question whose text is already a training question",
}

Adapter = Callable[[Mapping[str, Any], "str | None", int], dict[str, Any]]
RowBuilder = Callable[..., Question]


class Reject(Exception):
    """Raised by a row builder or a field helper; :meth:`Source.normalise` turns it into a
    :class:`~tagrpo.data.schema.Rejection`."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


def same_fields(record: Mapping[str, Any], config: str | None, row: int) -> dict[str, Any]:
    """The adapter of a hub copy whose fields already match the local file."""
    return dict(record)


@dataclass(frozen=True)
class HubSpec:
    """One Hugging Face copy of a source: repo, configs (concatenated in order), split, and the
    adapter that renames its fields to the local file's layout."""

    repo_id: str
    split: str
    configs: tuple[str | None, ...] = (None,)
    adapter: Adapter = same_fields


@dataclass(frozen=True)
class Source:
    """One upstream data set: where its rows come from, how a row becomes a question, and what
    the report needs to know about it.

    ``build(record, row_index, **options)`` returns a Question or raises :class:`Reject`; its
    keyword-only parameters are the loader options params.yaml may set (``data.<source>.options``).
    ``hub[0]`` is the default Hugging Face copy; the others can be chosen with ``repo_id``.
    """

    name: str
    title: str  # the benchmark's name as papers write it
    split: Literal["train", "test"]
    file: str  # path under the data directory (a .parquet beside it is read when it is absent)
    id_field: str  # the field carrying the upstream id
    build: RowBuilder
    hub: tuple[HubSpec, ...]
    answer_kind: Literal["math", "multiple_choice"] = "math"
    choices: int | None = None  # options per question of a multiple-choice benchmark
    group: str | None = None  # the paper's Table 1 average it belongs to (profiles' groups)
    # MATH ids ("train/algebra/0.json") are unique already and required; every other source's
    # ids are prefixed with its name (or are ``<name>-<row>`` when the record has no id).
    bare_ids: bool = False

    def __post_init__(self) -> None:
        if (self.answer_kind == "multiple_choice") != (self.choices is not None):
            raise ValueError(f"{self.name}: a multiple-choice source needs choices, others none")
        if not self.hub:
            raise ValueError(f"{self.name}: no Hugging Face copy (hub)")

    @property
    def chance_level(self) -> float | None:
        """pass@1 of guessing uniformly (multiple choice), None for free-form answers."""
        return None if self.choices is None else 1.0 / self.choices

    def loader_options(self) -> set[str]:
        """The keyword options of its row builder (``seed`` for GPQA-Diamond, ...)."""
        parameters = inspect.signature(self.build).parameters.values()
        return {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}

    def upstream_id(self, record: Mapping[str, Any]) -> str | None:
        """The record's own id as a string, or None when the layout has none."""
        value = record.get(self.id_field)
        if value is None:
            return None
        text = str(value).strip()
        return text or None

    def question_id(self, record: Mapping[str, Any], row_index: int) -> str:
        raw = self.upstream_id(record)
        if self.bare_ids:
            if raw is None:
                raise Reject("missing_field", self.id_field)
            return raw
        # Prefix so ids stay unique when sources are pooled; row number when there is no id.
        return f"{self.name}-{raw if raw is not None else row_index}"

    def normalise(
        self, record: Mapping[str, Any], row_index: int, **options: Any
    ) -> Question | Rejection:
        """One upstream record -> a Question, or a Rejection with the reason and upstream id."""
        try:
            return self.build(record, row_index, **options)
        except Reject as rejected:
            return Rejection(
                source=self.name,
                split=self.split,
                row_index=row_index,
                reason=rejected.reason,
                upstream_id=self.upstream_id(record),
                detail=rejected.detail,
            )


# --------------------------------------------------------------------------- field helpers


def required_text(record: Mapping[str, Any], key: str) -> str:
    if key not in record or record[key] is None:
        raise Reject("missing_field", key)
    value = record[key]
    if not isinstance(value, str):
        raise Reject("invalid_field", f"{key} is {type(value).__name__}, expected str")
    return value.strip()


def optional_text(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def problem_text(record: Mapping[str, Any], key: str = "problem") -> str:
    problem = required_text(record, key)
    if not problem:
        raise Reject("empty_problem")
    return problem


def answer_text(value: str | None) -> str:
    if value is None or not value.strip():
        raise Reject("empty_answer")
    return value.strip()


def boxed_answer(solution: str, *, allow_empty: bool = False) -> str:
    boxed = last_boxed(solution)
    if boxed is None:
        raise Reject("no_boxed_answer")
    if not boxed and not allow_empty:
        raise Reject("empty_answer", "\\boxed{} is empty")
    return boxed


def numeric_answer(value: Any) -> str:
    """Float-like answers as integers where integral ("27.0" -> "27"); others kept as written.

    Used for AMC (answers stored as floats) and AIME (ints or strings, depending on the copy).
    """
    if isinstance(value, bool):
        raise Reject("invalid_field", "answer is a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Reject("bad_answer", repr(value))
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise Reject("invalid_field", f"answer is {type(value).__name__}")
    text = answer_text(value)
    try:
        number = Decimal(text)
    except InvalidOperation:
        return text  # not a plain number (e.g. a LaTeX expression): keep verbatim
    if number.is_finite() and number == number.to_integral_value():
        return str(int(number))
    return text  # non-integer decimals keep their written form ("3.5")


_UNESCAPED_DOLLAR = re.compile(r"(?<!\\)\$")


def strip_math_delimiters(text: str) -> str:
    """Remove ``$`` math delimiters from an answer (``$69$,$84$`` -> ``69,84``).

    All unescaped ``$`` go, not only the outer pair, because OlympiadBench writes several
    answers as ``$a$,$b$``; a full stop after the closing ``$`` is sentence punctuation.
    """
    text = text.strip()
    if "$" in text:
        text = re.sub(r"\$\s*\.$", "$", text)
        text = _UNESCAPED_DOLLAR.sub("", text)
    return text.strip()


def literal_list(value: Any, field_name: str) -> list[Any]:
    """A list field that some copies store as a Python-literal string ("['2']")."""
    if isinstance(value, list | tuple):
        return list(value)
    if isinstance(value, str):
        text = value.strip()
        if not text.startswith("["):
            return [text]
        try:
            parsed = ast.literal_eval(text)  # literals only: safe on untrusted text
        except (ValueError, SyntaxError) as error:
            raise Reject("bad_answer", f"{field_name}: {error}") from None
        if not isinstance(parsed, list | tuple):
            raise Reject("bad_answer", f"{field_name} is not a list")
        return list(parsed)
    raise Reject("invalid_field", f"{field_name} is {type(value).__name__}")


def as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def compact(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without its None values."""
    return {key: value for key, value in meta.items() if value is not None}


# --------------------------------------------------------------------------- file reading


def read_jsonl_records(path: Path) -> Iterator[tuple[int, Mapping[str, Any] | tuple[str, str]]]:
    """``(row_index, record)`` per line; an unreadable line gives ``(row_index, (reason, detail))``.

    Lines are decoded one by one, so a byte that is not UTF-8 rejects its line
    (``invalid_encoding``, with file and line number) instead of the whole file. Blank lines
    count as rows (rejected ``empty_line``) so that nothing disappears silently.
    """
    with open(path, "rb") as handle:
        for row_index, raw in enumerate(handle):
            where = f"{path}:{row_index + 1}"
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                yield (
                    row_index,
                    ("invalid_encoding", f"{where}: {error.reason} at byte {error.start}"),
                )
                continue
            if not line.strip():
                yield row_index, ("empty_line", "")
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as error:
                yield row_index, ("invalid_json", str(error))
                continue
            if not isinstance(value, dict):
                yield row_index, ("not_an_object", type(value).__name__)
                continue
            if _has_lone_surrogate(value):
                yield row_index, ("invalid_encoding", f"{where}: a string holds a lone surrogate")
                continue
            yield row_index, value


def _has_lone_surrogate(value: Any) -> bool:
    """True if a string anywhere in ``value`` cannot be encoded as UTF-8 (``"\\ud800"``)."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return True
        return False
    if isinstance(value, Mapping):
        return any(_has_lone_surrogate(k) or _has_lone_surrogate(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_lone_surrogate(v) for v in value)
    return False


def read_parquet_records(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(row_index, record)`` per row of a parquet file (a user-supplied copy)."""
    import pyarrow.parquet as pq  # only a user-supplied parquet copy needs it

    table = pq.ParquetFile(path)
    row_index = 0
    for batch in table.iter_batches(batch_size=4096):
        for record in batch.to_pylist():
            yield row_index, record
            row_index += 1


def normalise_records(
    source: Source,
    records: Iterable[tuple[int, Mapping[str, Any] | tuple[str, str]]],
    max_problem_chars: int | None = None,
    **options: Any,
) -> LoadResult:
    """Apply a source's row builder to every record; reject repeated ids; count everything.

    Shared by the local and the Hugging Face loaders. The first row with a given id is kept,
    later ones are rejected as ``duplicate_id``; a problem longer than ``max_problem_chars``
    is rejected as ``too_long`` (a 1 MB problem must not reach a tokenizer).
    """
    name, split = source.name, source.split
    questions: list[Question] = []
    rejections: list[Rejection] = []
    first_row: dict[str, int] = {}
    rows_in = 0
    for row_index, record in records:
        rows_in += 1
        if isinstance(record, tuple):
            reason, detail = record
            rejections.append(Rejection(name, split, row_index, reason, None, detail or None))
            continue
        outcome = source.normalise(record, row_index, **options)
        if isinstance(outcome, Rejection):
            rejections.append(outcome)
        elif max_problem_chars is not None and len(outcome.problem) > max_problem_chars:
            rejections.append(
                Rejection(
                    source=name,
                    split=split,
                    row_index=row_index,
                    reason="too_long",
                    upstream_id=source.upstream_id(record),
                    detail=f"{len(outcome.problem)} characters > {max_problem_chars}",
                )
            )
        elif outcome.id in first_row:
            rejections.append(
                Rejection(
                    source=name,
                    split=split,
                    row_index=row_index,
                    reason="duplicate_id",
                    upstream_id=source.upstream_id(record),
                    detail=f"{outcome.id} already kept from row {first_row[outcome.id]}",
                )
            )
        else:
            first_row[outcome.id] = row_index
            questions.append(outcome)
    return LoadResult(name, split, rows_in, questions, rejections)
