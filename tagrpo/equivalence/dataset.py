"""The accepted training set the trainers read: ``data/rephrased/train.parquet``.

Columns: exactly those of :data:`~tagrpo.data.schema.QUESTION_SCHEMA`, then

``rephrasings``           list<string>, the accepted neighbours q1..qN in slot order; with the
                          default fallback always exactly N items, a slot that no rephrasing
                          survived holding the original text;
``rephrasings_fallback``  int32, how many of the N items are such padded originals.

One row per original kept, in the order of ``data/processed/train.parquet``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from tagrpo.data.schema import QUESTION_SCHEMA, Question, with_provenance

REPHRASED_SCHEMA = pa.schema(
    [
        *QUESTION_SCHEMA,
        pa.field("rephrasings", pa.list_(pa.string()), nullable=False),
        pa.field("rephrasings_fallback", pa.int32(), nullable=False),
    ]
)


def write_rephrased(
    rows: Sequence[tuple[Question, list[str], int]],
    path: str | Path,
    provenance: dict[str, Any] | None = None,
) -> None:
    """Write (question, rephrasings, padded count) rows with :data:`REPHRASED_SCHEMA` (and
    ``provenance``, :func:`tagrpo.data.schema.read_provenance`)."""

    records = []
    for question, rephrasings, fallback in rows:
        if not 0 <= fallback <= len(rephrasings):
            raise ValueError(f"{question.id}: fallback count {fallback} out of range")
        records.append(
            {
                **question.to_record(),
                "rephrasings": list(rephrasings),
                "rephrasings_fallback": fallback,
            }
        )
    schema = with_provenance(REPHRASED_SCHEMA, provenance)
    pq.write_table(pa.Table.from_pylist(records, schema=schema), str(path))


def read_rephrased(path: str | Path) -> list[tuple[Question, list[str], int]]:
    """Read the training set back as (question, rephrasings, padded count) rows."""

    table = pq.read_table(str(path))
    if table.schema.names != REPHRASED_SCHEMA.names:
        raise ValueError(f"{path}: columns {table.schema.names} != {REPHRASED_SCHEMA.names}")
    rows = []
    for record in table.to_pylist():
        rephrasings = list(record.pop("rephrasings"))
        fallback = int(record.pop("rephrasings_fallback"))
        meta = json.loads(record.pop("meta")) if record.get("meta") else {}
        rows.append((Question(**record, meta=meta), rephrasings, fallback))
    return rows
