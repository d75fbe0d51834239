"""The loaders on the real third-party files under ``shared_data_dir()`` (exact counts)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from tagrpo.data.prompts import CHOICE_LETTERS
from tagrpo.data.sources.local import load_local
from tagrpo.data.sources.registry import SOURCES
from tagrpo.plumbing.paths import shared_data_dir

pytestmark = pytest.mark.shared_data

EXPECTED_KEPT = {
    "math500": 500,
    "amc23": 40,
    "aime24": 30,
    "aime25": 30,
    "olympiadbench": 675,
    "minerva_math": 272,
    "gpqa_diamond": 198,
}
NO_BRACE_BOXES = ["train/algebra/24014.json", "train/algebra/25040.json"]
EMPTY_BOXES = ["train/number_theory/7115.json", "train/number_theory/7117.json"]


@pytest.fixture(scope="module")
def data_dir() -> Path:
    directory = shared_data_dir()
    if not directory.is_dir():
        pytest.skip(f"shared benchmark data not found at {directory} (set TAGRPO_DATA_DIR)")
    return directory


def _line_count(path: Path) -> int:
    with open(path, encoding="utf-8") as handle:
        return sum(1 for _ in handle)


@pytest.mark.parametrize("name", sorted(EXPECTED_KEPT))
def test_benchmark_counts(data_dir: Path, name: str) -> None:
    result = load_local(name, data_dir)
    assert result.rows_in == _line_count(data_dir / SOURCES[name].file)
    assert result.counts() == {
        "rows_in": EXPECTED_KEPT[name],
        "kept": EXPECTED_KEPT[name],
        "rejected": 0,
    }
    assert len({question.id for question in result.questions}) == EXPECTED_KEPT[name]


def test_math_train_paper_count(data_dir: Path) -> None:
    # The paper's 7,498: only the two "\boxed 2" / "\boxed 9" rows lack a braced box.
    result = load_local("math", data_dir, keep_empty_boxed=True)
    assert result.counts() == {"rows_in": 7500, "kept": 7498, "rejected": 2}
    assert {r.reason for r in result.rejections} == {"no_boxed_answer"}
    assert sorted(r.upstream_id for r in result.rejections) == NO_BRACE_BOXES


def test_math_train_default_rejects_empty_gold(data_dir: Path) -> None:
    # Two more solutions end in an empty \boxed{}: no response can match an empty gold.
    result = load_local("math", data_dir)
    assert result.counts() == {"rows_in": 7500, "kept": 7496, "rejected": 4}
    by_reason = collections.defaultdict(list)
    for rejection in result.rejections:
        by_reason[rejection.reason].append(rejection.upstream_id)
    assert dict(by_reason) == {"no_boxed_answer": NO_BRACE_BOXES, "empty_answer": EMPTY_BOXES}
    levels = collections.Counter(question.level for question in result.questions)
    assert levels["Level ?"] == 2
    assert len(levels) == 6


def test_gpqa_gold_letters_balanced(data_dir: Path) -> None:
    result = load_local("gpqa_diamond", data_dir)
    letters = collections.Counter(question.answer for question in result.questions)
    assert set(letters) == set(CHOICE_LETTERS[:4])
    assert all(30 <= letters[letter] <= 70 for letter in CHOICE_LETTERS[:4]), letters
    assert letters["B"] < len(result.questions)  # not the upstream "always B" order
    for question in result.questions:
        assert question.choices is not None and len(set(question.choices)) >= 3
    flagged = [q for q in result.questions if q.meta.get("duplicate_distractors")]
    assert len(flagged) == 2  # two upstream rows repeat an incorrect option; gold still unique


def test_every_source_loads(data_dir: Path) -> None:
    # OpenR1-Math is supplied by the user (data scaling); it is not among the shared files.
    assert set(SOURCES) == {*EXPECTED_KEPT, "math", "openr1_math"}
