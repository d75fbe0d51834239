"""The preflight stage in a scratch DVC project: a params mistake deletes no output, and a
changed benchmark file outside the repository reruns the data stage (issue 25, points 1-2)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from scratch_project import run_checked, scratch_project

from tagrpo.plumbing.paths import project_root

FIXTURES = project_root() / "tests" / "fixtures" / "data"

# Time limit: each test runs `dvc repro` in a scratch project (268 s measured, niced, on 2
# loaded cores).
pytestmark = [
    pytest.mark.skipif(shutil.which("dvc") is None, reason="dvc is not installed"),
    pytest.mark.timeout(1200),
]


def _snapshot(root: Path, paths: list[str]) -> dict[str, bytes]:
    """Every file under ``paths`` (files or folders) by relative path, with its bytes."""
    found: dict[str, bytes] = {}
    for relative in paths:
        path = root / relative
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            found[str(file.relative_to(root))] = file.read_bytes()
    return found


def _dvc_fails(args: list[str], cwd: Path, env: dict[str, str]) -> str:
    result = subprocess.run(["dvc", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert result.returncode != 0, result.stdout + result.stderr
    return result.stdout + result.stderr


def test_a_params_mistake_fails_before_dvc_deletes_any_output(tmp_path: Path) -> None:
    env = scratch_project(tmp_path, profile="profiles/smoke.yaml")
    run_checked(["dvc", "repro", "data"], tmp_path, env)
    outputs = ["data/processed", "metrics/data.json"]
    before = _snapshot(tmp_path, outputs)
    assert "data/processed/train.parquet" in before
    params_path = tmp_path / "params.yaml"
    good = params_path.read_text()

    # A misspelt key of the stage's own section (the drill: train.learnig_rate).
    params = yaml.safe_load(good)
    params["data"]["synthetic"]["trian_size"] = 9
    params_path.write_text(yaml.safe_dump(params, sort_keys=False))
    output = _dvc_fails(["repro", "data"], tmp_path, env)
    assert "data.synthetic.trian_size: unknown key" in output
    assert "Running stage 'data'" not in output
    assert _snapshot(tmp_path, outputs) == before

    # A misspelt section (the drill: reprot:): the stage's params section is gone.
    params_path.write_text(good.replace("\ndata:\n", "\ndtaa:\n", 1))
    output = _dvc_fails(["repro", "data"], tmp_path, env)
    assert "dtaa: unknown key" in output
    assert _snapshot(tmp_path, outputs) == before

    # Fixed: preflight writes the same params.ok, so the data stage is not rerun.
    params_path.write_text(good)
    output = run_checked(["dvc", "repro", "data"], tmp_path, env)
    assert "Running stage 'preflight'" in output
    assert "Stage 'data' didn't change, skipping" in output
    assert _snapshot(tmp_path, outputs) == before


def _rows_in(root: Path, source: str) -> int:
    metrics = json.loads((root / "metrics" / "data.json").read_text())
    return metrics["sources"][source]["rows_in"]


def test_a_changed_benchmark_file_outside_the_repo_reruns_the_data_stage(tmp_path: Path) -> None:
    project, data_dir, other_dir = tmp_path / "project", tmp_path / "data", tmp_path / "other"
    project.mkdir()
    shutil.copytree(FIXTURES, data_dir)
    shutil.copytree(FIXTURES, other_dir)
    env = scratch_project(project, profile="profiles/local.yaml")
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["common"]["data_dir"] = str(data_dir)
    params["data"]["verify_sources"] = False  # the fixtures: not the shared files' content
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))

    run_checked(["dvc", "repro", "data"], project, env)
    rows = _rows_in(project, "test/amc23")
    output = run_checked(["dvc", "repro", "data"], project, env)
    assert "Stage 'data' didn't change, skipping" in output

    # Fix a benchmark file in place (drop its last row): the data stage reruns.
    benchmark = data_dir / "amc23" / "test.jsonl"
    lines = benchmark.read_text().splitlines(keepends=True)
    benchmark.write_text("".join(lines[:-1]))
    status = run_checked(["dvc", "status", "--with-deps", "data"], project, env)
    assert "always changed" in status  # preflight: it hashes the files DVC cannot see
    # `dvc status` of the data stage alone sees the edit through preflight's links (33.2).
    status = run_checked(["dvc", "status", "data"], project, env)
    assert status.split() == ["data:", "changed", "deps:", "modified:", "data/preflight/raw"]
    # ... and `tagrpo plan` says data reruns, and why.
    from tagrpo.pipeline.plan import plan_rerun
    from tagrpo.pipeline.rerun import RerunRequest

    plan = plan_rerun(project, RerunRequest())
    by_name = {stage.name: stage.reasons for stage in plan.runs}
    assert by_name["data"] == (
        "changed deps: data/preflight/raw",
        "changed deps: data/preflight/inputs.json (rewritten by preflight)",
    )
    output = run_checked(["dvc", "repro", "data"], project, env)
    assert "Running stage 'data'" in output
    assert _rows_in(project, "test/amc23") == rows - 1

    # TAGRPO_DATA_DIR pointing at other content is seen too (the unedited copy: rows back).
    moved = {**env, "TAGRPO_DATA_DIR": str(other_dir)}
    output = run_checked(["dvc", "repro", "data"], project, moved)
    assert "Stage 'data' didn't change" not in output  # rerun, or restored from DVC's run cache
    assert _rows_in(project, "test/amc23") == rows
    # Same content in another folder: nothing to redo.
    os.rename(other_dir, tmp_path / "elsewhere")
    moved["TAGRPO_DATA_DIR"] = str(tmp_path / "elsewhere")
    output = run_checked(["dvc", "repro", "data"], project, moved)
    assert "Stage 'data' didn't change, skipping" in output


def test_a_data_dir_that_does_not_exist_is_refused_before_dvc_deletes_data(
    tmp_path: Path,
) -> None:
    """TAGRPO_DATA_DIR naming no folder: refused by preflight, data/processed kept (33.2)."""
    project, data_dir = tmp_path / "project", tmp_path / "data"
    project.mkdir()
    shutil.copytree(FIXTURES, data_dir)
    env = scratch_project(project, profile="profiles/local.yaml")
    env = {**env, "TAGRPO_DATA_DIR": str(data_dir)}
    params = yaml.safe_load((project / "params.yaml").read_text())
    params["data"]["verify_sources"] = False  # the fixtures: not the shared files' content
    (project / "params.yaml").write_text(yaml.safe_dump(params, sort_keys=False))
    run_checked(["dvc", "repro", "data"], project, env)
    outputs = ["data/processed", "metrics/data.json"]
    before = _snapshot(project, outputs)
    assert "data/processed/train.parquet" in before
    gone = tmp_path / "no-such-folder"
    output = _dvc_fails(["repro", "data"], project, {**env, "TAGRPO_DATA_DIR": str(gone)})
    assert (
        f"[preflight] data.source is local, but its data directory {gone} "
        f"(TAGRPO_DATA_DIR={gone}) does not exist: point TAGRPO_DATA_DIR or common.data_dir at "
        "the folder of benchmark files"
    ) in output
    assert "Running stage 'data'" not in output and "Traceback" not in output
    assert _snapshot(project, outputs) == before
