"""The one normalised schema every split of every source is written in.

A *question row* is what evaluation and training read; a *rejection* records an upstream row
that could not be normalised, with the reason, so that ``rows in = kept + rejected`` per source.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa

if TYPE_CHECKING:  # pandas loads only when a frame is built (`to_pandas`): params checks stay fast
    pass

ANSWER_KINDS = ("math", "multiple_choice")

QUESTION_SCHEMA = pa.schema(
    [
        pa.field("id", pa.string(), nullable=False),
        pa.field("source", pa.string(), nullable=False),  # e.g. "math", "amc23", "miniworld"
        pa.field("split", pa.string(), nullable=False),  # "train" | "test"
        pa.field("problem", pa.string(), nullable=False),
        pa.field("answer", pa.string(), nullable=False),  # gold, normalised
        pa.field("answer_kind", pa.string(), nullable=False),  # one of ANSWER_KINDS
        pa.field("solution", pa.string()),
        pa.field("level", pa.string()),
        pa.field("subject", pa.string()),
        pa.field("choices", pa.list_(pa.string())),  # multiple choice only, in option order
        pa.field("meta", pa.string()),  # JSON object with source-specific extras
    ]
)

REJECTION_SCHEMA = pa.schema(
    [
        pa.field("source", pa.string(), nullable=False),
        pa.field("split", pa.string(), nullable=False),
        pa.field("row_index", pa.int64(), nullable=False),  # 0-based line in the upstream file
        pa.field("upstream_id", pa.string()),
        pa.field("reason", pa.string(), nullable=False),  # short machine-readable code
        pa.field("detail", pa.string()),
    ]
)


@dataclass(frozen=True)
class Question:
    id: str
    source: str
    split: str
    problem: str
    answer: str
    answer_kind: str = "math"
    solution: str | None = None
    level: str | None = None
    subject: str | None = None
    choices: list[str] | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.answer_kind not in ANSWER_KINDS:
            raise ValueError(f"answer_kind must be one of {ANSWER_KINDS}, got {self.answer_kind!r}")

    def to_record(self) -> dict[str, Any]:
        record = asdict(self)
        record["meta"] = json.dumps(self.meta, sort_keys=True) if self.meta else None
        return record


@dataclass(frozen=True)
class Rejection:
    source: str
    split: str
    row_index: int
    reason: str
    upstream_id: str | None = None
    detail: str | None = None


@dataclass
class LoadResult:
    """What a source loader returns for one (source, split): kept questions and rejections."""

    source: str
    split: str
    rows_in: int
    questions: list[Question]
    rejections: list[Rejection]

    def __post_init__(self) -> None:
        if self.rows_in != len(self.questions) + len(self.rejections):
            raise AssertionError(
                f"{self.source}/{self.split}: rows_in={self.rows_in} != kept "
                f"{len(self.questions)} + rejected {len(self.rejections)}"
            )

    def counts(self) -> dict[str, int]:
        return {
            "rows_in": self.rows_in,
            "kept": len(self.questions),
            "rejected": len(self.rejections),
        }


# A table's provenance, in its parquet schema's metadata (it travels with the file): the
# profile and the params keys, with their values, that decided its rows
# (tagrpo.config.data.table_provenance); readers check a table is the one their params build.
PROVENANCE_KEY = b"tagrpo-provenance"


def with_provenance(schema: pa.Schema, provenance: dict[str, Any] | None) -> pa.Schema:
    """``schema`` carrying ``provenance`` (None: as it is)."""
    if provenance is None:
        return schema
    return schema.with_metadata({PROVENANCE_KEY: json.dumps(provenance, sort_keys=True)})


def read_provenance(path: str) -> dict[str, Any] | None:
    """The provenance a table was written with; None for a table written without one."""
    import pyarrow.parquet as pq

    raw = (pq.read_schema(path).metadata or {}).get(PROVENANCE_KEY)
    return json.loads(raw) if raw else None


def write_questions(
    questions: list[Question], path: str, provenance: dict[str, Any] | None = None
) -> None:
    """Write questions to parquet with the fixed schema (stable column order and types)."""
    import pyarrow.parquet as pq

    records = [question.to_record() for question in questions]
    schema = with_provenance(QUESTION_SCHEMA, provenance)
    pq.write_table(pa.Table.from_pylist(records, schema=schema), path)


def write_rejections(rejections: list[Rejection], path: str) -> None:
    import pyarrow.parquet as pq

    records = [asdict(rejection) for rejection in rejections]
    pq.write_table(pa.Table.from_pylist(records, schema=REJECTION_SCHEMA), path)


def read_questions(path: str) -> list[Question]:
    """Read a questions parquet back into :class:`Question` objects."""
    import pyarrow.parquet as pq

    questions = []
    for record in pq.read_table(path).to_pylist():
        raw_meta = record.pop("meta", None)  # null when a source has no extras
        meta = json.loads(raw_meta) if raw_meta else {}
        questions.append(Question(**record, meta=meta))
    return questions
