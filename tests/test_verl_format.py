"""The verl parquet rows: structure, prompts and the optional rephrasings field."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest

from tagrpo.data.prompts import (
    ANSWER_FORMAT_INSTRUCTION,
    MULTIPLE_CHOICE_INSTRUCTION,
    chat_messages,
)
from tagrpo.data.schema import Question
from tagrpo.data.verl_format import VERL_SCHEMA, to_verl_row, write_verl_parquet

MATH_QUESTION = Question(
    id="train/algebra/1.json",
    source="math",
    split="train",
    problem="What is $1+1$?",
    answer="2",
    level="Level 1",
    subject="Algebra",
)
CHOICE_QUESTION = Question(
    id="gpqa_diamond-0",
    source="gpqa_diamond",
    split="test",
    problem="Which is lightest?",
    answer="C",
    answer_kind="multiple_choice",
    choices=["proton", "neutron", "electron", "deuteron"],
)


def test_to_verl_row_math() -> None:
    row = to_verl_row(MATH_QUESTION, 5)
    assert row == {
        "data_source": "math",
        "prompt": chat_messages("What is $1+1$?"),
        "ability": "math",
        "reward_model": {"style": "rule", "ground_truth": "2"},
        "extra_info": {
            "index": 5,
            "id": "train/algebra/1.json",
            "split": "train",
            "answer_kind": "math",
            "question": "What is $1+1$?",
            "rephrased_prompts": [],
        },
    }
    assert row["prompt"][0]["role"] == "user"
    assert row["prompt"][0]["content"].endswith(ANSWER_FORMAT_INSTRUCTION)


def test_to_verl_row_multiple_choice_lists_options() -> None:
    row = to_verl_row(CHOICE_QUESTION, 0)
    content = row["prompt"][0]["content"]
    assert "(C) electron" in content and content.endswith(MULTIPLE_CHOICE_INSTRUCTION)
    assert row["reward_model"]["ground_truth"] == "C"
    assert row["extra_info"]["answer_kind"] == "multiple_choice"


def test_write_without_rephrasings(tmp_path: Path) -> None:
    path = tmp_path / "nested" / "train.parquet"
    assert write_verl_parquet([MATH_QUESTION, CHOICE_QUESTION], path) == 2
    table = pq.read_table(path)
    assert table.schema.equals(VERL_SCHEMA)
    rows = table.to_pylist()
    assert rows == [to_verl_row(MATH_QUESTION, 0), to_verl_row(CHOICE_QUESTION, 1)]
    assert all(row["extra_info"]["rephrased_prompts"] == [] for row in rows)

    frame = pd.read_parquet(path)
    assert list(frame.columns) == ["data_source", "prompt", "ability", "reward_model", "extra_info"]
    assert frame.loc[0, "reward_model"] == {"style": "rule", "ground_truth": "2"}
    assert frame.loc[1, "extra_info"]["index"] == 1
    assert list(frame.loc[0, "prompt"]) == chat_messages("What is $1+1$?")


def test_write_with_rephrasings(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    rephrasings = {
        MATH_QUESTION.id: ["Compute one plus one.", "Add $1$ and $1$."],
        CHOICE_QUESTION.id: ["Which particle has the least mass?"],
        "not/in/this/file.json": ["ignored"],
    }
    write_verl_parquet([MATH_QUESTION, CHOICE_QUESTION], path, rephrasings=rephrasings)
    rows = pq.read_table(path).to_pylist()
    assert rows[0]["extra_info"]["rephrased_prompts"] == [
        chat_messages("Compute one plus one."),
        chat_messages("Add $1$ and $1$."),
    ]
    mc = rows[1]["extra_info"]["rephrased_prompts"]
    assert mc == [chat_messages("Which particle has the least mass?", CHOICE_QUESTION.choices)]
    assert rows[0]["prompt"] == chat_messages(MATH_QUESTION.problem)  # original untouched


def test_partial_rephrasings_give_empty_lists(tmp_path: Path) -> None:
    path = tmp_path / "train.parquet"
    write_verl_parquet([MATH_QUESTION, CHOICE_QUESTION], path, {MATH_QUESTION.id: ["Again."]})
    rows = pq.read_table(path).to_pylist()
    assert [len(r["extra_info"]["rephrased_prompts"]) for r in rows] == [1, 0]


def test_readable_by_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    path = tmp_path / "train.parquet"
    write_verl_parquet([MATH_QUESTION, CHOICE_QUESTION], path, {MATH_QUESTION.id: ["Again."]})
    dataset = datasets.Dataset.from_parquet(str(path), cache_dir=str(tmp_path / "cache"))
    assert len(dataset) == 2
    first = dataset[0]
    assert first["prompt"] == chat_messages(MATH_QUESTION.problem)
    assert first["reward_model"]["ground_truth"] == "2"
    assert first["extra_info"]["rephrased_prompts"] == [chat_messages("Again.")]
    assert dataset[1]["extra_info"]["rephrased_prompts"] == []


def test_empty_question_list_writes_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.parquet"
    assert write_verl_parquet([], path) == 0
    assert pq.read_table(path).schema.equals(VERL_SCHEMA)
