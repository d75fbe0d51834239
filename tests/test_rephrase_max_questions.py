"""``rephrase.max_questions``: a profile that trains on a few questions rephrases and checks
only those (local.yaml: 2 MATH questions trained, all 7,500 checked in 25 min before).

The rephrase and check_equivalence stages run in a scratch project (as in
tests/test_equivalence_stage.py) on 6 mini-world questions with the limit at 2.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from stages import check_equivalence, rephrase
from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.data import SyntheticSettings
from tagrpo.config.params import config_with, deep_merge, embedded, repo_params
from tagrpo.data.schema import read_questions, write_questions
from tagrpo.equivalence.dataset import read_rephrased
from tagrpo.miniworld.dataset import build_miniworld
from tagrpo.plumbing.tracking import PARENT_RUN_ENV
from tagrpo.rephrase.candidates import read_candidates


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in ("MLFLOW_TRACKING_URI", PARENT_RUN_ENV, "TAGRPO_DATA_DIR"):
        monkeypatch.delenv(key, raising=False)
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    built = build_miniworld(
        embedded(SyntheticSettings, seed=3, train_size=6), embedded(MiniWorldSettings)
    )
    (tmp_path / "data" / "processed").mkdir(parents=True)
    write_questions(built["train"].questions, str(tmp_path / "data/processed/train.parquet"))
    sections = {
        "common": {"profile": "custom", "seed": 0, "torch_threads": 1},
        "rephrase": {"backend": "rules", "n": 3, "max_questions": 2},
        "train": {"questions": 2},
        "check_equivalence": {
            "similarity": {"enabled": False},
            "consistency": {"enabled": False},
            "difficulty_probe": {"enabled": False},
            "controls": {"enabled": True},
        },
    }
    full = deep_merge(repo_params().model_dump(mode="json"), sections)
    full["common"]["tracking"]["enabled"] = False
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(full, sort_keys=False))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_only_the_first_questions_are_rephrased_and_checked(project: Path) -> None:
    produced = rephrase.main([])
    assert (produced["questions"], produced["slots"], produced["missing"]) == (2, 6, 0)
    assert produced["questions_not_rephrased"] == 4
    candidates = read_candidates(project / "data/rephrased/candidates.parquet")
    source = read_questions(str(project / "data/processed/train.parquet"))
    assert [c.question_id for c in candidates] == [q.id for q in source[:2] for _ in range(3)]
    summary = check_equivalence.main([])
    assert summary["questions"] == {"rows_in": 2, "kept": 2, "rejected": 0}
    rows = read_rephrased(project / "data/rephrased/train.parquet")
    assert len(rows) == 2 and all(len(texts) == 3 for _, texts, _ in rows)


def test_training_on_more_questions_than_were_rephrased_is_refused() -> None:
    with pytest.raises(ValueError, match=r"train.questions \(3\) exceeds rephrase.max_questions"):
        config_with({"rephrase.max_questions": 2, "train.questions": 3})
    with pytest.raises(ValueError, match=r"train.questions \(null: all\) exceeds"):
        config_with({"rephrase.max_questions": 2})
    assert config_with({"rephrase.max_questions": 2, "train.questions": 2}).rephrase.max_questions
