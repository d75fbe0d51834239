"""``tagrpo grade``: grade a JSONL file of responses, one verdict row per input line.

Every input line becomes one output row, in input order: a graded verdict, or (with
``--skip-invalid``) a rejection naming the line and the problem (lines in = graded + rejected).
Without ``--skip-invalid`` an invalid line stops the command before any grading, naming it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tagrpo.data.sources.registry import answer_kind_for
from tagrpo.grading import pool as grading_pool
from tagrpo.grading.graders import grader_kind
from tagrpo.grading.kinds import ANSWER_KINDS

GRADE_REQUIRED_FIELDS = ("id", "response", "answer")
_STRING_FIELDS = ("id", "response", "answer", "benchmark", "answer_kind")
_MAX_ERRORS_SHOWN = 10
# Below this many answers the grading pool starts cold: the forkserver's warm-up (grading a
# built-in corpus, about two seconds) costs more than it saves on a few answers.
_WARM_POOL_MIN_ITEMS = 200


@dataclass(frozen=True)
class _GradeRequest:
    line: int
    id: Any
    response: str
    answer: str
    answer_kind: str


@dataclass(frozen=True)
class _Rejection:
    line: int
    id: Any
    error: str


class _NonStandardConstant(ValueError):
    """NaN or Infinity: Python's json reads them, but they are not JSON."""


def _refuse_constant(name: str) -> Any:
    raise _NonStandardConstant(name)


def _lone_surrogate(record: dict[str, Any]) -> str | None:
    """The first string field holding a lone surrogate (valid JSON, not encodable as UTF-8)."""
    for name in _STRING_FIELDS:
        value = record.get(name)
        if not isinstance(value, str):
            continue
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as error:
            code = ord(value[error.start])
            return f"{name} holds a lone surrogate (U+{code:04X} at index {error.start})"
    return None


def _id_key(record_id: Any) -> tuple[str, Any]:
    """Ids 1 and 1.0 are one number; the string "1" is another id."""
    return ("string", record_id) if isinstance(record_id, str) else ("number", record_id)


def _parse_grade_line(number: int, line: str) -> _GradeRequest | _Rejection:
    """One decoded input line -> a request, or a rejection that says what is wrong with it."""
    if not line.strip():
        return _Rejection(number, None, "empty line")
    try:
        record = json.loads(line, parse_constant=_refuse_constant)
    except _NonStandardConstant as error:
        return _Rejection(number, None, f"invalid JSON ({error} is not a JSON value)")
    except json.JSONDecodeError as error:
        return _Rejection(number, None, f"invalid JSON ({error.msg} at column {error.colno})")
    if not isinstance(record, dict):
        return _Rejection(number, None, "not a JSON object")
    surrogate = _lone_surrogate(record)
    record_id = record.get("id")
    if surrogate is not None:  # caught here: it would only fail when the output is written
        shown_id = record_id if _is_valid_id(record_id) and surrogate[:3] != "id " else None
        return _Rejection(number, shown_id, surrogate)
    missing = [name for name in GRADE_REQUIRED_FIELDS if record.get(name) is None]
    if "response" in record and record["response"] is None:
        missing.remove("response")  # a null response is an empty one: graded "no_answer"
    if missing:
        shown_id = record_id if _is_valid_id(record_id) else None
        return _Rejection(number, shown_id, f"missing field(s): {', '.join(missing)}")
    if not _is_valid_id(record_id):
        return _Rejection(number, None, "id must be a string or a number")
    response, answer = record["response"] or "", record["answer"]
    if not isinstance(response, str):
        return _Rejection(number, record_id, "response must be a string")
    if isinstance(answer, bool) or not isinstance(answer, (str, int, float)):
        return _Rejection(number, record_id, "answer must be a string or a number")
    benchmark = record.get("benchmark")
    if benchmark is not None and not isinstance(benchmark, str):
        return _Rejection(number, record_id, "benchmark must be a string")
    kind = record.get("answer_kind")
    if kind is not None and kind not in ANSWER_KINDS:
        return _Rejection(number, record_id, f"answer_kind must be one of {list(ANSWER_KINDS)}")
    answer = str(answer)
    # An explicit answer_kind always wins over the benchmark registry.
    return _GradeRequest(
        number, record_id, response, answer, kind or answer_kind_for(benchmark, answer)
    )


def _is_valid_id(record_id: Any) -> bool:
    return isinstance(record_id, (str, int, float)) and not isinstance(record_id, bool)


def _read_grade_input(path: Path) -> list[_GradeRequest | _Rejection]:
    """Every line of ``path``, decoded on its own: a bad line is rejected with its number.

    Lines end at ``\n`` only (JSON strings cannot hold a raw line break); a UTF-8 byte-order
    mark on the first line is ignored. Repeated ids are rejected after their first line.
    """
    parsed: list[_GradeRequest | _Rejection] = []
    first_line_of: dict[tuple[str, Any], int] = {}
    with path.open("rb") as stream:
        for number, raw in enumerate(stream, 1):
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as error:
                byte = raw[error.start]
                parsed.append(
                    _Rejection(
                        number,
                        None,
                        f"not valid UTF-8 (byte 0x{byte:02x} at byte {error.start + 1} of the "
                        "line)",
                    )
                )
                continue
            row = _parse_grade_line(number, line)
            if isinstance(row, _GradeRequest):
                key = _id_key(row.id)
                first = first_line_of.setdefault(key, number)
                if first != number:
                    row = _Rejection(number, row.id, f"duplicate id (first on line {first})")
            parsed.append(row)
    return parsed


def _write_jsonl_atomically(path: Path, rows: list[dict[str, Any]]) -> None:
    """Write all rows or nothing: a crash never leaves a half-written output behind."""
    directory = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            for row in rows:
                stream.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def cmd_grade(args: argparse.Namespace) -> int:
    if getattr(args, "parity", False):
        from tagrpo.pipeline.parity_command import cmd_grade_parity

        return cmd_grade_parity(args)
    input_path, output_path = Path(args.input), Path(args.output)
    try:
        parsed = _read_grade_input(input_path)
    except OSError as error:
        print(f"tagrpo grade: cannot read {input_path}: {error}", file=sys.stderr)
        return 2

    rejections = [row for row in parsed if isinstance(row, _Rejection)]
    if rejections and not args.skip_invalid:
        for rejection in rejections[:_MAX_ERRORS_SHOWN]:
            print(f"tagrpo grade: {input_path}, line {rejection.line}: {rejection.error}",
                  file=sys.stderr)  # fmt: skip
        more = len(rejections) - _MAX_ERRORS_SHOWN
        if more > 0:
            print(f"tagrpo grade: ... and {more} more invalid line(s)", file=sys.stderr)
        print(
            f"tagrpo grade: {len(rejections)} of {len(parsed)} input line(s) invalid; nothing "
            "written (use --skip-invalid to write them as rejected rows)",
            file=sys.stderr,
        )
        return 2

    requests = [row for row in parsed if isinstance(row, _GradeRequest)]
    results = []
    restarts = 0
    if requests:  # the pool (and its processes) start only when there is something to grade
        grader = getattr(args, "grader", "tagrpo")
        items = [
            grading_pool.GradeItem(r.response, r.answer, grader_kind(r.answer_kind, grader))
            for r in requests
        ]
        with grading_pool.GradingPool(
            workers=min(args.workers, len(items)),
            item_timeout_s=args.item_timeout,
            warm_up=len(items) >= _WARM_POOL_MIN_ITEMS,
        ) as pool:
            results = pool.grade(items)
            restarts = pool.restarts
    verdicts = dict(zip((r.line for r in requests), results, strict=True))

    rows: list[dict[str, Any]] = []
    for row in parsed:  # input order
        if isinstance(row, _Rejection):
            reason = f"invalid_input: line {row.line}: {row.error}"
            rows.append({"id": row.id, "correct": False, "pred": "", "reason": reason})
        else:
            verdict = verdicts[row.line]
            rows.append(
                {
                    "id": row.id,
                    "correct": verdict.correct,
                    "pred": verdict.pred or "",
                    "reason": verdict.reason,
                }
            )
    try:
        _write_jsonl_atomically(output_path, rows)
    except OSError as error:
        print(f"tagrpo grade: cannot write {output_path}: {error}", file=sys.stderr)
        return 2

    correct = sum(result.correct for result in results)
    reasons = Counter(result.reason for result in results)
    share = f" ({correct / len(results):.1%})" if results else ""
    print(
        f"lines in {len(parsed)} = graded {len(results)} + rejected {len(rejections)}; "
        f"correct {correct}/{len(results)}{share}; timeouts {reasons['timeout']} (CPU budget) "
        f"+ {reasons['wall_timeout']} (wall clock), errors {reasons['error']}, worker restarts "
        f"{restarts}; wrote {output_path}"
    )
    return 0
