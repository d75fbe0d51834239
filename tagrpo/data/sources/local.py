"""Loaders for the local copies of the upstream benchmark files (``shared/data``, see SOURCES.md).

Each source has a *row normaliser* ``normalise_<name>(record, row_index, **options)`` that turns
one upstream record into a :class:`~tagrpo.data.schema.Question` or a
:class:`~tagrpo.data.schema.Rejection`. The same normalisers serve the Hugging Face loaders in
:mod:`tagrpo.data.sources.hub`, so every rule (answer extraction, id scheme, rejection reasons)
is written once.

Every upstream row ends up either kept or rejected with a reason code from
:data:`REJECTION_REASONS`; nothing is dropped silently (``rows_in = kept + rejected``).
"""

from __future__ import annotations

import ast
import hashlib
import itertools
import json
import math
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

from tagrpo.data.prompts import CHOICE_LETTERS
from tagrpo.data.schema import LoadResult, Question, Rejection
from tagrpo.grading.extract import last_boxed
from tagrpo.pipeline.paths import shared_data_dir

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

# (split, path under the data directory) per source.
SOURCE_FILES: dict[str, tuple[str, str]] = {
    "math": ("train", "math/train.jsonl"),
    "math500": ("test", "math500/test.jsonl"),
    "amc23": ("test", "amc23/test.jsonl"),
    "aime24": ("test", "aime24/test.jsonl"),
    "aime25": ("test", "aime25/test.jsonl"),
    "olympiadbench": ("test", "olympiadbench/test.jsonl"),
    "minerva_math": ("test", "minerva_math/test.jsonl"),
    "gpqa_diamond": ("test", "gpqa_diamond/test.jsonl"),
    # OpenR1-Math-220k (default config, ~94k rows): the data-scaling pool (paper section 5.5).
    # Not in ../shared/data: a user supplies it (jsonl or parquet) or loads it from the hub.
    "openr1_math": ("train", "openr1_math/train.jsonl"),
}

# Field carrying the upstream id; sources without one get ``<source>-<row>``.
ID_FIELDS: dict[str, str] = {
    "math": "unique_id",
    "math500": "unique_id",
    "amc23": "id",
    "aime24": "id",
    "aime25": "id",
    "olympiadbench": "id",
    "minerva_math": "idx",
    "gpqa_diamond": "Record ID",  # present on the Hugging Face copy only
    "openr1_math": "uuid",
}

# Upstream option 0 is the correct answer.
GPQA_OPTION_FIELDS = (
    "Correct Answer",
    "Incorrect Answer 1",
    "Incorrect Answer 2",
    "Incorrect Answer 3",
)

DATA_DIR_HINT = (
    "set the TAGRPO_DATA_DIR environment variable (or the shared data directory in params.yaml, "
    "resolved by tagrpo.pipeline.paths.shared_data_dir) to the folder holding the benchmark files "
    "described in SOURCES.md"
)

Normaliser = Callable[..., "Question | Rejection"]


class _Reject(Exception):
    """Internal: raised by field helpers, turned into a Rejection by the normaliser wrapper."""

    def __init__(self, reason: str, detail: str | None = None) -> None:
        super().__init__(reason)
        self.reason = reason
        self.detail = detail


# --------------------------------------------------------------------------- field helpers


def upstream_id(source: str, record: Mapping[str, Any]) -> str | None:
    """The record's own id as a string, or None when the layout has none."""
    value = record.get(ID_FIELDS[source])
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _question_id(source: str, record: Mapping[str, Any], row_index: int) -> str:
    raw = upstream_id(source, record)
    if source in ("math", "math500"):
        if raw is None:
            raise _Reject("missing_field", "unique_id")
        return raw  # MATH ids are already globally unique ("train/algebra/0.json")
    # Prefix so ids stay unique when sources are pooled; row number when there is no id.
    return f"{source}-{raw if raw is not None else row_index}"


def _required_text(record: Mapping[str, Any], key: str) -> str:
    if key not in record or record[key] is None:
        raise _Reject("missing_field", key)
    value = record[key]
    if not isinstance(value, str):
        raise _Reject("invalid_field", f"{key} is {type(value).__name__}, expected str")
    return value.strip()


def _optional_text(record: Mapping[str, Any], key: str) -> str | None:
    value = record.get(key)
    if value is None:
        return None
    text = str(value).strip()
    return text or None


def _problem(record: Mapping[str, Any], key: str = "problem") -> str:
    problem = _required_text(record, key)
    if not problem:
        raise _Reject("empty_problem")
    return problem


def _answer_text(value: str | None) -> str:
    if value is None or not value.strip():
        raise _Reject("empty_answer")
    return value.strip()


def _boxed_answer(solution: str, *, allow_empty: bool = False) -> str:
    boxed = last_boxed(solution)
    if boxed is None:
        raise _Reject("no_boxed_answer")
    if not boxed and not allow_empty:
        raise _Reject("empty_answer", "\\boxed{} is empty")
    return boxed


def numeric_answer(value: Any) -> str:
    """Float-like answers as integers where integral ("27.0" -> "27"); others kept as written.

    Used for AMC (answers stored as floats) and AIME (ints or strings, depending on the copy).
    """
    if isinstance(value, bool):
        raise _Reject("invalid_field", "answer is a boolean")
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _Reject("bad_answer", repr(value))
        return str(int(value)) if value.is_integer() else repr(value)
    if not isinstance(value, str):
        raise _Reject("invalid_field", f"answer is {type(value).__name__}")
    text = _answer_text(value)
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


def _literal_list(value: Any, field_name: str) -> list[Any]:
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
            raise _Reject("bad_answer", f"{field_name}: {error}") from None
        if not isinstance(parsed, list | tuple):
            raise _Reject("bad_answer", f"{field_name} is not a list")
        return list(parsed)
    raise _Reject("invalid_field", f"{field_name} is {type(value).__name__}")


def _as_bool(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def _compact(meta: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in meta.items() if value is not None}


def _normaliser(source: str, split: str) -> Callable[[Callable[..., Question]], Normaliser]:
    """Wrap a row builder so that field errors become Rejections with the upstream id."""

    def decorate(build: Callable[..., Question]) -> Normaliser:
        def normalise(
            record: Mapping[str, Any], row_index: int, **options: Any
        ) -> Question | Rejection:
            try:
                return build(record, row_index, **options)
            except _Reject as rejected:
                return Rejection(
                    source=source,
                    split=split,
                    row_index=row_index,
                    reason=rejected.reason,
                    upstream_id=upstream_id(source, record),
                    detail=rejected.detail,
                )

        normalise.__name__ = build.__name__
        normalise.__qualname__ = build.__qualname__
        normalise.__doc__ = build.__doc__
        return normalise

    return decorate


# --------------------------------------------------------------------------- row normalisers


@_normaliser("math", "train")
def normalise_math(
    record: Mapping[str, Any], row_index: int, *, keep_empty_boxed: bool = False
) -> Question:
    """MATH train: answer = content of the last balanced ``\\boxed{}`` of the solution.

    ``keep_empty_boxed=True`` keeps the two problems whose solution ends in an empty
    ``\\boxed{}`` (answer ""), which reproduces the paper's 7,498 count; by default an empty
    gold is rejected because no response can be graded against it.
    """
    question_id = _question_id("math", record, row_index)
    problem = _problem(record)
    solution = _required_text(record, "solution")
    answer = _boxed_answer(solution, allow_empty=keep_empty_boxed)
    return Question(
        id=question_id,
        source="math",
        split="train",
        problem=problem,
        answer=answer,
        solution=solution,
        level=_optional_text(record, "level"),  # "Level ?" stays as is
        subject=_optional_text(record, "type"),
        # Kept for the paper's count only: no response can be graded correct against "".
        meta={"empty_gold": True} if not answer else {},
    )


@_normaliser("math500", "test")
def normalise_math500(record: Mapping[str, Any], row_index: int) -> Question:
    """MATH-500: given ``answer``; integer level written as "Level N" like MATH train."""
    question_id = _question_id("math500", record, row_index)
    problem = _problem(record)
    answer = _answer_text(_required_text(record, "answer"))
    level = record.get("level")
    level_text = f"Level {level}" if isinstance(level, int) else _optional_text(record, "level")
    return Question(
        id=question_id,
        source="math500",
        split="test",
        problem=problem,
        answer=answer,
        solution=_optional_text(record, "solution"),
        level=level_text,
        subject=_optional_text(record, "subject"),
    )


@_normaliser("amc23", "test")
def normalise_amc23(record: Mapping[str, Any], row_index: int) -> Question:
    """AMC 2023: float answers ("27.0") written as integers where integral."""
    question_id = _question_id("amc23", record, row_index)
    problem = _problem(record)
    if record.get("answer") is None:
        raise _Reject("missing_field", "answer")
    return Question(
        id=question_id,
        source="amc23",
        split="test",
        problem=problem,
        answer=numeric_answer(record["answer"]),
        meta=_compact({"url": _optional_text(record, "url")}),
    )


def _build_aime(source: str, record: Mapping[str, Any], row_index: int) -> Question:
    question_id = _question_id(source, record, row_index)
    problem = _problem(record)
    solution = _optional_text(record, "solution")
    if record.get("answer") is not None:
        answer = numeric_answer(record["answer"])
    elif solution is not None:
        answer = _boxed_answer(solution)  # copies that only box the answer in the solution
    else:
        raise _Reject("missing_field", "answer")
    return Question(
        id=question_id,
        source=source,
        split="test",
        problem=problem,
        answer=answer,
        solution=solution,
        meta=_compact({"url": _optional_text(record, "url")}),
    )


@_normaliser("aime24", "test")
def normalise_aime24(record: Mapping[str, Any], row_index: int) -> Question:
    """AIME 2024: integer answers; id ``aime24-<upstream id>``."""
    return _build_aime("aime24", record, row_index)


@_normaliser("aime25", "test")
def normalise_aime25(record: Mapping[str, Any], row_index: int) -> Question:
    """AIME 2025: the local copy has no id, so ids are ``aime25-<row>``."""
    return _build_aime("aime25", record, row_index)


@_normaliser("olympiadbench", "test")
def normalise_olympiadbench(record: Mapping[str, Any], row_index: int) -> Question:
    """OlympiadBench (OE_TO_maths_en_COMP): ``final_answer`` is a list or a list-like string.

    Several list entries are joined with ", "; ``$`` delimiters are removed. ``unit``,
    ``answer_type``, ``subfield``, ``is_multiple_answer`` and the numeric tolerance ``error``
    go to ``meta``.
    """
    question_id = _question_id("olympiadbench", record, row_index)
    problem = _problem(record, "question")
    context = _optional_text(record, "context")
    if context:
        problem = f"{context}\n\n{problem}"  # multi-part problems need their shared context
    if record.get("final_answer") is None:
        raise _Reject("missing_field", "final_answer")
    raw_answers = _literal_list(record["final_answer"], "final_answer")
    answers = [strip_math_delimiters(str(item)) for item in raw_answers]
    answers = [item for item in answers if item]
    if not answers:
        raise _Reject("empty_answer")
    solution_value = record.get("solution")
    solution: str | None = None
    if solution_value is not None:
        try:
            solution = "\n\n".join(
                str(s).strip() for s in _literal_list(solution_value, "solution")
            ).strip()
        except _Reject:
            solution = str(solution_value).strip()  # an unparsable solution is not fatal
    return Question(
        id=question_id,
        source="olympiadbench",
        split="test",
        problem=problem,
        answer=", ".join(answers),
        solution=solution or None,
        subject=_optional_text(record, "subfield"),
        meta=_compact(
            {
                "unit": _optional_text(record, "unit"),
                "answer_type": _optional_text(record, "answer_type"),
                "subfield": _optional_text(record, "subfield"),
                "is_multiple_answer": _as_bool(record.get("is_multiple_answer", False)),
                "error": _optional_text(record, "error"),
                "context_prepended": True if context else None,
            }
        ),
    )


@_normaliser("minerva_math", "test")
def normalise_minerva_math(record: Mapping[str, Any], row_index: int) -> Question:
    """Minerva-Math: gold = last ``\\boxed{}`` of the solution (an ``answer`` field wins if any)."""
    question_id = _question_id("minerva_math", record, row_index)
    problem = _problem(record)
    solution = _optional_text(record, "solution")
    given = _optional_text(record, "answer")
    if given is not None:
        answer = given
    elif solution is not None:
        answer = _boxed_answer(solution)
    else:
        raise _Reject("missing_field", "solution")
    return Question(
        id=question_id,
        source="minerva_math",
        split="test",
        problem=problem,
        answer=answer,
        solution=solution,
        subject=_optional_text(record, "type"),
    )


GPQA_OPTIONS = 4  # one correct answer and three distractors per question


def gpqa_permutation(question_text: str, seed: int) -> tuple[int, ...]:
    """Option order for one GPQA question: ``perm[k]`` = index of the upstream option at letter k.

    Upstream option 0 is the correct answer. The permutation comes straight from
    sha256(seed, question) rather than ``random.shuffle`` so it is identical on every Python
    version and platform, and independent of row order.
    """
    digest = hashlib.sha256(f"{seed}\x00{question_text}".encode()).digest()
    permutations = list(itertools.permutations(range(GPQA_OPTIONS)))
    return permutations[int.from_bytes(digest, "big") % len(permutations)]


@_normaliser("gpqa_diamond", "test")
def normalise_gpqa_diamond(
    record: Mapping[str, Any],
    row_index: int,
    *,
    seed: int = 0,
    reject_duplicate_distractors: bool = False,
) -> Question:
    """GPQA-Diamond: four options shuffled per question; the gold is the letter of the correct one.

    ``Question_w_answers`` is never read: it puts the correct answer at B in every row. Two
    upstream rows repeat an *incorrect* option; the gold letter is still unique, so they are
    kept (``meta.duplicate_distractors``) unless ``reject_duplicate_distractors`` is set.
    """
    question_id = _question_id("gpqa_diamond", record, row_index)
    problem = _problem(record, "Question")
    options = [_required_text(record, field_name) for field_name in GPQA_OPTION_FIELDS]
    if not all(options):
        empty = [name for name, text in zip(GPQA_OPTION_FIELDS, options, strict=True) if not text]
        raise _Reject("empty_option", ", ".join(empty))
    correct, distractors = options[0], options[1:]
    if correct in distractors:
        raise _Reject("duplicate_options", "the correct answer also appears as an incorrect one")
    duplicate_distractors = len(set(distractors)) < len(distractors)
    if duplicate_distractors and reject_duplicate_distractors:
        raise _Reject("duplicate_options", "two incorrect answers are identical")
    permutation = gpqa_permutation(problem, seed)
    choices = [options[upstream_index] for upstream_index in permutation]
    gold_letter = CHOICE_LETTERS[permutation.index(0)]
    return Question(
        id=question_id,
        source="gpqa_diamond",
        split="test",
        problem=problem,
        answer=gold_letter,
        answer_kind="multiple_choice",
        choices=choices,
        subject=_optional_text(record, "High-level domain"),
        meta=_compact(
            {
                "shuffle_seed": seed,
                "duplicate_distractors": True if duplicate_distractors else None,
                "subdomain": _optional_text(record, "Subdomain"),
            }
        ),
    )


@_normaliser("openr1_math", "train")
def normalise_openr1_math(record: Mapping[str, Any], row_index: int) -> Question:
    """OpenR1-Math-220k: a word problem whose ``answer`` at least one generation reached, as
    checked by its own verifiers (``correctness_math_verify``, else ``correctness_llama``)."""
    question_id = _question_id("openr1_math", record, row_index)
    problem = _problem(record)
    kind = _optional_text(record, "question_type") or "math-word-problem"
    if kind != "math-word-problem":
        raise _Reject("unsupported_question_type", kind)
    verified = [
        bool(flag)
        for field in ("correctness_math_verify", "correctness_llama")
        for flag in (record.get(field) or [])
    ]
    if not any(verified):
        raise _Reject("unverified_answer")
    raw = record.get("answer")
    if raw is None or not str(raw).strip():
        raise _Reject("empty_answer")
    answer = _answer_text(str(raw))
    if not answer or answer.lower() in ("proof", "notfound"):
        raise _Reject("empty_answer", str(raw))
    return Question(
        id=question_id,
        source="openr1_math",
        split="train",
        problem=problem,
        answer=answer,
        solution=_optional_text(record, "solution"),
        subject=_optional_text(record, "problem_type"),
        meta=_compact({"origin": _optional_text(record, "source")}),
    )


NORMALISERS: dict[str, Normaliser] = {
    "math": normalise_math,
    "math500": normalise_math500,
    "amc23": normalise_amc23,
    "aime24": normalise_aime24,
    "aime25": normalise_aime25,
    "olympiadbench": normalise_olympiadbench,
    "minerva_math": normalise_minerva_math,
    "gpqa_diamond": normalise_gpqa_diamond,
    "openr1_math": normalise_openr1_math,
}


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


def normalise_records(
    source: str,
    records: Iterable[tuple[int, Mapping[str, Any] | tuple[str, str]]],
    max_problem_chars: int | None = None,
    **options: Any,
) -> LoadResult:
    """Apply a source's normaliser to every record; reject repeated ids; count everything.

    Shared by the local and the Hugging Face loaders. The first row with a given id is kept,
    later ones are rejected as ``duplicate_id``; a problem longer than ``max_problem_chars``
    is rejected as ``too_long`` (a 1 MB problem must not reach a tokenizer).
    """
    split = SOURCE_FILES[source][0]
    normalise = NORMALISERS[source]
    questions: list[Question] = []
    rejections: list[Rejection] = []
    first_row: dict[str, int] = {}
    rows_in = 0
    for row_index, record in records:
        rows_in += 1
        if isinstance(record, tuple):
            reason, detail = record
            rejections.append(Rejection(source, split, row_index, reason, None, detail or None))
            continue
        outcome = normalise(record, row_index, **options)
        if isinstance(outcome, Rejection):
            rejections.append(outcome)
        elif max_problem_chars is not None and len(outcome.problem) > max_problem_chars:
            rejections.append(
                Rejection(
                    source=source,
                    split=split,
                    row_index=row_index,
                    reason="too_long",
                    upstream_id=upstream_id(source, record),
                    detail=f"{len(outcome.problem)} characters > {max_problem_chars}",
                )
            )
        elif outcome.id in first_row:
            rejections.append(
                Rejection(
                    source=source,
                    split=split,
                    row_index=row_index,
                    reason="duplicate_id",
                    upstream_id=upstream_id(source, record),
                    detail=f"{outcome.id} already kept from row {first_row[outcome.id]}",
                )
            )
        else:
            first_row[outcome.id] = row_index
            questions.append(outcome)
    return LoadResult(source, split, rows_in, questions, rejections)


def source_path(name: str, data_dir: Path) -> Path:
    """The upstream file of a source under ``data_dir``; FileNotFoundError with a hint if absent."""
    path = Path(data_dir) / SOURCE_FILES[name][1]
    if not path.is_file():
        where = "the data directory does not exist" if not Path(data_dir).is_dir() else "no file"
        raise FileNotFoundError(
            f"{name}: upstream file {path} not found ({where}); {DATA_DIR_HINT}"
        )
    return path


def read_parquet_records(path: Path) -> Iterator[tuple[int, Mapping[str, Any]]]:
    """``(row_index, record)`` per row of a parquet file (a user-supplied copy)."""
    import pyarrow.parquet as pq

    table = pq.ParquetFile(path)
    row_index = 0
    for batch in table.iter_batches(batch_size=4096):
        for record in batch.to_pylist():
            yield row_index, record
            row_index += 1


def _load(
    name: str, data_dir: Path, max_problem_chars: int | None = None, **options: Any
) -> LoadResult:
    jsonl = Path(data_dir) / SOURCE_FILES[name][1]
    parquet = jsonl.with_suffix(".parquet")
    if not jsonl.is_file() and parquet.is_file():
        records: Iterator[Any] = read_parquet_records(parquet)
    else:
        records = read_jsonl_records(source_path(name, data_dir))
    return normalise_records(name, records, max_problem_chars=max_problem_chars, **options)


def _keyword_options(loader: Any) -> set[str]:
    import inspect

    parameters = inspect.signature(loader).parameters.values()
    return {p.name for p in parameters if p.kind is inspect.Parameter.KEYWORD_ONLY}


# --------------------------------------------------------------------------- one loader per file


def load_math(
    data_dir: Path, *, keep_empty_boxed: bool = False, max_problem_chars: int | None = None
) -> LoadResult:
    """MATH train (``math/train.jsonl``, 7,500 rows)."""
    return _load("math", data_dir, max_problem_chars, keep_empty_boxed=keep_empty_boxed)


def load_math500(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """MATH-500 (``math500/test.jsonl``, 500 rows), the in-domain check set."""
    return _load("math500", data_dir, max_problem_chars)


def load_amc23(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """AMC 2023 (``amc23/test.jsonl``, 40 rows)."""
    return _load("amc23", data_dir, max_problem_chars)


def load_aime24(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """AIME 2024 (``aime24/test.jsonl``, 30 rows)."""
    return _load("aime24", data_dir, max_problem_chars)


def load_aime25(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """AIME 2025 (``aime25/test.jsonl``, 30 rows)."""
    return _load("aime25", data_dir, max_problem_chars)


def load_olympiadbench(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """OlympiadBench OE_TO_maths_en_COMP (``olympiadbench/test.jsonl``, 675 rows)."""
    return _load("olympiadbench", data_dir, max_problem_chars)


def load_minerva_math(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """Minerva-Math (``minerva_math/test.jsonl``, 272 rows)."""
    return _load("minerva_math", data_dir, max_problem_chars)


def load_gpqa_diamond(
    data_dir: Path,
    *,
    seed: int = 0,
    reject_duplicate_distractors: bool = False,
    max_problem_chars: int | None = None,
) -> LoadResult:
    """GPQA-Diamond (``gpqa_diamond/test.jsonl``, 198 rows), options shuffled with ``seed``."""
    return _load(
        "gpqa_diamond",
        data_dir,
        max_problem_chars,
        seed=seed,
        reject_duplicate_distractors=reject_duplicate_distractors,
    )


def load_openr1_math(data_dir: Path, *, max_problem_chars: int | None = None) -> LoadResult:
    """OpenR1-Math-220k (``openr1_math/train.jsonl`` or ``.parquet``, supplied by the user)."""
    return _load("openr1_math", data_dir, max_problem_chars)


LOCAL_SOURCES: dict[str, Callable[..., LoadResult]] = {
    "math": load_math,
    "math500": load_math500,
    "amc23": load_amc23,
    "aime24": load_aime24,
    "aime25": load_aime25,
    "olympiadbench": load_olympiadbench,
    "minerva_math": load_minerva_math,
    "gpqa_diamond": load_gpqa_diamond,
    "openr1_math": load_openr1_math,
}


def load_local(
    name: str,
    data_dir: str | Path | None = None,
    max_problem_chars: int | None = None,
    **options: Any,
) -> LoadResult:
    """Load one source by name from ``data_dir`` (default:
    :func:`tagrpo.pipeline.paths.shared_data_dir`)."""
    if name not in LOCAL_SOURCES:
        raise KeyError(f"unknown source {name!r}; known: {sorted(LOCAL_SOURCES)}")
    directory = Path(data_dir) if data_dir is not None else shared_data_dir()
    unknown = sorted(set(options) - _keyword_options(LOCAL_SOURCES[name]))
    if unknown:
        raise TypeError(f"{name}: unknown loader options {unknown}")
    return LOCAL_SOURCES[name](directory, max_problem_chars=max_problem_chars, **options)
