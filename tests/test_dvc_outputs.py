"""dvc.yaml output expansion, and the git dirty flag that ignores what the pipeline writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tagrpo.dvc_outputs import dvc_out_paths, pipeline_outputs
from tagrpo.tracking import git_state


def test_dvc_out_paths_expand_matrices() -> None:
    paths = dvc_out_paths(
        {
            "stages": {
                "a": {"outs": ["data/x", {"r.md": {"cache": False}}]},
                "t": {
                    "matrix": {"m": ["p", "q"], "s": [0]},
                    "outs": ["models/${item.m}-s${item.s}"],
                    "metrics": [{"metrics/${item.m}.json": {"cache": False}}],
                },
            }
        }
    )
    assert paths == {
        "data/x",
        "r.md",
        "models/p-s0",
        "models/q-s0",
        "metrics/p.json",
        "metrics/q.json",
    }


def test_pipeline_outputs_of_a_folder_without_dvc_yaml_is_empty(tmp_path: Path) -> None:
    assert pipeline_outputs(tmp_path) == set()


def test_git_dirty_ignores_dvc_lock_and_declared_outputs(tmp_path: Path) -> None:
    def git(*args: str) -> None:
        subprocess.run(
            ["git", "-c", "user.name=t", "-c", "user.email=t@example.invalid", *args],
            cwd=tmp_path,
            check=True,
            capture_output=True,
        )

    (tmp_path / "dvc.yaml").write_text(
        "stages:\n  s:\n    cmd: x\n    metrics:\n      - metrics/m.json:\n          cache: false\n"
    )
    (tmp_path / "metrics").mkdir()
    for name in ("dvc.lock", "metrics/m.json", "params.yaml"):
        (tmp_path / name).write_text("a: 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "init")
    assert git_state(tmp_path)["git_dirty"] == "false"
    (tmp_path / "dvc.lock").write_text("a: 2\n")
    (tmp_path / "metrics/m.json").write_text("a: 2\n")
    (tmp_path / "untracked.txt").write_text("new\n")
    assert git_state(tmp_path)["git_dirty"] == "false"
    (tmp_path / "params.yaml").write_text("a: 2\n")
    state = git_state(tmp_path)
    assert state["git_dirty"] == "true"
    assert len(state["git_commit"]) == 40
