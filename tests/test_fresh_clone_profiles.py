"""Every profile the README lists, taken the README's way on a fresh clone: the committed
dvc.lock and outputs, ``tagrpo params apply profiles/<name>.yaml``, then ``tagrpo plan``.

Issue 40.1: the committed dvc.lock held entries of stages the current dvc.yaml does not have
(world v1's, and the default's when a profile changes the DAG), naming the same outputs as the
profile's stages with other hashes; a stage read the stale hash and refused the model it had
just trained. After ``params apply`` every entry is a stage of the new DAG, no output is
recorded twice, and the plan reads the lock without error. (The smoke profile also goes
through a full ``dvc repro`` from such a clone: tests/test_pipeline_smoke.py.)
"""

from __future__ import annotations

import os
import re
from collections import Counter
from pathlib import Path

import pytest
import yaml
from scratch_project import ROOT, scratch_project

from tagrpo.pipeline.cli import main as tagrpo
from tagrpo.plumbing.dvc_stages import load_stages

# A few seconds per profile: `params apply`, then `tagrpo plan` (which runs `dvc status`).
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

# `profiles/<name>.yaml` as the README names them (not reports/profiles/...).
_PROFILE_LINK = re.compile(r"(?<![\w/.-])profiles/([A-Za-z0-9_-]+)\.yaml")


def readme_profiles() -> list[str]:
    names = sorted(set(_PROFILE_LINK.findall((ROOT / "README.md").read_text(encoding="utf-8"))))
    assert names, "README.md names no profiles/<name>.yaml"
    missing = [name for name in names if not (ROOT / "profiles" / f"{name}.yaml").is_file()]
    assert not missing, f"README.md names profiles that do not exist: {missing}"
    return names


@pytest.fixture(scope="module")
def clone(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    checkout = tmp_path_factory.mktemp("fresh-clone")
    env = scratch_project(checkout, fresh_clone=True)
    shared = ROOT.parent / "shared" / "data"  # the local profiles' files, as CI has them
    if shared.is_dir():
        env["TAGRPO_DATA_DIR"] = str(shared.resolve())
    return checkout, env


def test_the_clone_keeps_the_committed_lock(clone: tuple[Path, dict[str, str]]) -> None:
    checkout, _ = clone
    assert (checkout / "dvc.lock").read_bytes() == (ROOT / "dvc.lock").read_bytes()
    assert (checkout / "metrics" / "report.json").is_file()


@pytest.mark.parametrize("profile", readme_profiles())
def test_profile_applies_and_plans_on_a_fresh_clone(
    clone: tuple[Path, dict[str, str]],
    profile: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    checkout, env = clone
    # Each profile on the clone as committed (params.yaml and dvc.lock of the default). The
    # commands run in this process (the same `main` as the `tagrpo` executable: no start-up
    # per call); `tagrpo plan` runs `dvc status` as a subprocess, as it always does.
    for name in ("params.yaml", "dvc.lock"):
        (checkout / name).write_bytes((ROOT / name).read_bytes())
    monkeypatch.chdir(checkout)
    for key in [key for key in os.environ if key.startswith(("MLFLOW_", "TAGRPO_"))]:
        monkeypatch.delenv(key)
    if "TAGRPO_DATA_DIR" in env:
        monkeypatch.setenv("TAGRPO_DATA_DIR", env["TAGRPO_DATA_DIR"])
    assert tagrpo(["params", "apply", f"profiles/{profile}.yaml"]) == 0
    applied = capsys.readouterr().out
    assert f"profile is now {profile!r}" in applied
    # Every profile reruns stages whose outputs the commit holds: said before any run.
    assert "warning: the next `dvc repro` rewrites " in applied, applied

    stages = load_stages(checkout)
    lock = yaml.safe_load((checkout / "dvc.lock").read_text())["stages"]
    stale = sorted(set(lock) - set(stages))
    assert not stale, f"{profile}: dvc.lock keeps entries of stages it lacks: {stale}"
    recorded = Counter(out["path"] for entry in lock.values() for out in entry.get("outs", []))
    assert not [path for path, n in recorded.items() if n > 1]
    dropped = set(yaml.safe_load((ROOT / "dvc.lock").read_text())["stages"]) - set(stages)
    if dropped:
        assert f"dvc.lock: removed {len(dropped)} entries" in applied

    assert tagrpo(["plan"]) == 0, capsys.readouterr().err[-2000:]
    plan = capsys.readouterr().out
    total = re.search(r"dvc repro would run (?:\d+ of |nothing: all )(\d+) stages", plan)
    assert total and int(total.group(1)) == len(stages), plan[-2000:]
    assert "params changed from params.yaml: none" in plan  # the plan reads the applied file
