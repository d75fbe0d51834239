"""dvc.yaml expansion (matrices from params), its agreement with the layout, and the git dirty
flag that ignores what the pipeline writes."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tagrpo.plumbing.dvc_stages import expand_stages, load_stages, pipeline_outputs
from tagrpo.plumbing.layout import stage_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import git_state


def test_stages_expand_matrices_from_params_as_dvc_names_them() -> None:
    dvc_yaml = {
        "stages": {
            "a": {"cmd": "x", "outs": ["data/x", {"r.md": {"cache": False}}]},
            "t": {
                "matrix": {"m": "${runs.methods}", "s": "${runs.seeds}"},
                "cmd": "train --method ${item.m} --seed ${item.s}",
                "params": ["train", "${train.backend}"],
                "outs": ["models/${item.m}-s${item.s}"],
                "metrics": [{"metrics/${item.m}.json": {"cache": False}}],
            },
        }
    }
    params = {"runs": {"methods": ["p", "q"], "seeds": [0]}, "train": {"backend": "local"}}
    stages = expand_stages(dvc_yaml, params)
    assert list(stages) == ["a", "t@p-0", "t@q-0"]
    assert stages["t@q-0"].cmd == "train --method q --seed 0"
    assert stages["t@q-0"].params == ("train", "local")
    assert stages["t@q-0"].outs == ("models/q-s0", "metrics/q.json")
    assert stages["a"].outs == ("data/x", "r.md")
    with pytest.raises(KeyError, match=r"runs\.methods"):
        expand_stages(dvc_yaml, {"train": {"backend": "local"}})
    # An empty list in a matrix gives no stage, as DVC expands it (e.g. no data-scaling runs).
    params["runs"]["seeds"] = []
    assert list(expand_stages(dvc_yaml, params)) == ["a"]


def test_dvc_yaml_declares_exactly_the_outputs_the_stages_write() -> None:
    """dvc.yaml and tagrpo/plumbing/layout.py: one set of paths, checked for every expanded
    stage."""
    stages = load_stages(project_root())
    assert stages
    for stage in stages.values():
        declared = set(stage.outs)
        plots = {p for p in declared if p.startswith("plots/") and p.endswith(".csv")}
        expected = {str(p) for p in stage_outputs(stage.stage, **stage.item).all()}
        assert declared == expected, (stage.name, declared ^ expected, plots)


def test_dvc_yaml_plots_read_outputs_of_the_layout() -> None:
    """Every file a dvc.yaml plot draws is an output some stage writes
    (tagrpo/plumbing/layout.py)."""
    import yaml

    root = project_root()
    written = {
        str(path)
        for stage in load_stages(root).values()
        for path in stage_outputs(stage.stage, **stage.item).all()
    }
    plots = yaml.safe_load((root / "dvc.yaml").read_text())["plots"]
    files = set()
    for plot in plots:
        ((name, definition),) = plot.items()
        y = definition.get("y") if isinstance(definition, dict) else None
        files |= set(y) if isinstance(y, dict) else {name}
    assert files
    assert files <= written, sorted(files - written)


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
    for name in ("dvc.lock", "metrics/m.json", "metrics/.gitignore", "params.yaml"):
        (tmp_path / name).write_text("a: 1\n")
    git("init", "-q")
    git("add", "-A")
    git("commit", "-q", "-m", "init")
    assert git_state(tmp_path)["git_dirty"] == "false"
    (tmp_path / "dvc.lock").write_text("a: 2\n")
    (tmp_path / "metrics/m.json").write_text("a: 2\n")
    (tmp_path / "metrics/.gitignore").write_text("/other\n")  # DVC lists cached outputs there
    (tmp_path / "untracked.txt").write_text("new\n")
    assert git_state(tmp_path)["git_dirty"] == "false"
    (tmp_path / "params.yaml").write_text("a: 2\n")
    state = git_state(tmp_path)
    assert state["git_dirty"] == "true"
    assert len(state["git_commit"]) == 40
