"""Question parquet round trips, including sources with no extras (meta stored as null)."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from tagrpo.data.schema import Question, read_questions, write_questions
from tagrpo.splits.training_set import load_training_questions

PLAIN = Question(id="math-1", source="math", split="train", problem="What is $2+3$?", answer="5")
WITH_META = Question(
    id="math-2",
    source="math",
    split="train",
    problem="What is $7-4$?",
    answer="3",
    meta={"type": "Algebra"},
)


def test_meta_none_is_stored_as_null_and_read_back_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "q.parquet"
    write_questions([PLAIN, WITH_META], str(path))
    assert pq.read_table(path).column("meta").to_pylist() == [None, '{"type": "Algebra"}']
    assert read_questions(str(path)) == [PLAIN, WITH_META]


def test_training_reader_accepts_null_meta_with_rephrasings(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    records = [PLAIN.to_record(), WITH_META.to_record()]
    records[0]["rephrasings"] = ["Compute $2+3$.", "Add $2$ and $3$.", "Find $2+3$."]
    records[1]["rephrasings"] = ["Compute $7-4$.", "Subtract $4$ from $7$.", "Find $7-4$."]
    pq.write_table(pa.Table.from_pylist(records), path)
    loaded = load_training_questions(path, n_neighbours=3)
    assert [q.id for q in loaded] == ["math-1", "math-2"]
    assert loaded[0].neighbours == ("Compute $2+3$.", "Add $2$ and $3$.", "Find $2+3$.")
    assert loaded[1].answer == "3"
