"""What the repository commits of the pipeline's state is the current world's only (issue 40.1,
issue 41.9): dvc.lock holds entries of dvc.yaml's stages (under the committed params.yaml) and
no output twice; every committed file in the pipeline's output folders is an output of one of
those stages, with the content its dvc.lock entry records. Earlier worlds' files live under
``reports/world-vN/``."""

from __future__ import annotations

import subprocess
from collections import Counter
from pathlib import Path

import yaml

from tagrpo.plumbing.dvc_stages import load_stages
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.verify import dvc_md5

ROOT = project_root()
# The folders stages write into (their outputs' top-level folders, reports/ aside: it also
# holds hand-written and archived files).
OUTPUT_FOLDERS = ("metrics", "plots", "evals", "models", "rollouts", "diagnostics", "probes")


def _committed(*folders: str) -> list[str]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", "--", *folders],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted(name for name in listed.split("\0") if name)


def _lock() -> dict:
    return yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]


def _covered(path: str, outputs: set[str]) -> bool:
    return any(path == out or path.startswith(out.rstrip("/") + "/") for out in outputs)


def test_every_dvc_lock_entry_is_a_stage_of_dvc_yaml() -> None:
    stages = set(load_stages(ROOT))
    stale = sorted(set(_lock()) - stages)
    assert not stale, f"dvc.lock entries of stages dvc.yaml does not have: {stale}"


def test_no_output_is_recorded_by_two_lock_entries() -> None:
    counts = Counter(out["path"] for entry in _lock().values() for out in entry.get("outs", []))
    assert not [path for path, n in counts.items() if n > 1]


def test_every_committed_file_in_the_output_folders_is_an_output_of_dvc_yaml() -> None:
    outputs = {out for stage in load_stages(ROOT).values() for out in stage.outs}
    committed = _committed(*OUTPUT_FOLDERS)
    assert any(path.startswith("metrics/") for path in committed)
    # DVC's .gitignore files beside cached outputs, and the folders' placeholders.
    strays = [
        path
        for path in committed
        if not _covered(path, outputs) and Path(path).name not in (".gitignore", ".gitkeep")
    ]
    assert not strays, f"committed files that no stage of dvc.yaml writes: {strays}"


def test_every_committed_output_has_the_content_its_lock_entry_records() -> None:
    """The committed outputs in the output folders are one run's: each matches dvc.lock (a
    file moved in from an earlier world, or left by a stage the DAG lost, would not).
    (reports/ is left out: its figures folder was pruned by hand after the run, commit
    1b5c689, and the report stage reruns anyway.)"""
    locked = {
        out["path"]: out["md5"]
        for entry in _lock().values()
        for out in entry.get("outs", [])
        if "md5" in out
    }
    committed = set(_committed(*OUTPUT_FOLDERS))
    checked = [
        path
        for path in locked
        if path in committed or any(name.startswith(path + "/") for name in committed)
    ]
    assert any(path.startswith("metrics/") for path in checked)
    differ = [path for path in checked if dvc_md5(ROOT / path) != locked[path]]
    assert not differ, f"committed outputs that differ from dvc.lock: {differ}"
