"""Outputs rehashed against dvc.lock (``tagrpo verify``, the evaluate stage's model check): a
file corrupted in place with its size and mtime kept, which DVC's state cache does not see."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tagrpo.pipeline.cli import main as cli
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.verify import OutputCorruptedError, check_against_lock, dvc_md5, verify_outputs

pytestmark = pytest.mark.skipif(shutil.which("dvc") is None, reason="dvc is not installed")

# A stage that writes a small "model" folder (nested files, as a saved policy has).
_WRITE_MODEL = (
    "import pathlib; m = pathlib.Path('models/base'); (m / 'tok').mkdir(parents=True); "
    "(m / 'model.safetensors').write_bytes(bytes(range(256)) * 64); "
    "(m / 'config.json').write_text('{\"layers\": 2}'); "
    "(m / 'tok' / 'vocab.txt').write_text('a b c')"
)


def _dvc(root: Path, *args: str) -> str:
    result = subprocess.run(
        ["dvc", *args], cwd=root, capture_output=True, text=True, env={**os.environ}
    )
    assert result.returncode == 0, result.stdout + result.stderr
    return result.stdout + result.stderr


@pytest.fixture
def dvc_project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A DVC project (no git) whose one stage wrote models/base, with the real params.yaml."""
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    shutil.copy(project_root() / "params.yaml", tmp_path / "params.yaml")
    stage = {"cmd": f'{sys.executable} -c "{_WRITE_MODEL}"', "outs": ["models/base"]}
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"base_model": stage}}))
    _dvc(tmp_path, "init", "--no-scm", "-q")
    _dvc(tmp_path, "repro")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _corrupt_in_place(path: Path) -> None:
    """Flip one byte; same size, same mtime (what a bad disk or an mtime-restoring tool does)."""
    stat = path.stat()
    data = bytearray(path.read_bytes())
    data[100] ^= 0xFF
    path.write_bytes(bytes(data))
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert path.stat().st_size == stat.st_size and path.stat().st_mtime_ns == stat.st_mtime_ns


def test_dvc_md5_is_the_hash_dvc_records(dvc_project: Path) -> None:
    lock = yaml.safe_load((dvc_project / "dvc.lock").read_text())
    (out,) = lock["stages"]["base_model"]["outs"]
    assert out["md5"].endswith(".dir") and dvc_md5(dvc_project / "models/base") == out["md5"]
    (dvc_project / "notes.txt").write_text("x\n")
    _dvc(dvc_project, "add", "-q", "notes.txt")
    added = yaml.safe_load((dvc_project / "notes.txt.dvc").read_text())["outs"][0]["md5"]
    assert dvc_md5(dvc_project / "notes.txt") == added


def test_a_model_corrupted_in_place_is_found_by_verify_and_refused_by_evaluate(
    dvc_project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli(["verify"]) == 0
    assert "1 output(s) of dvc.lock checked by content: 0 differ" in capsys.readouterr().out
    assert check_against_lock(dvc_project, "models/base") is True

    _corrupt_in_place(dvc_project / "models/base/model.safetensors")
    # The drill: DVC's state cache trusts size and mtime, so DVC sees nothing.
    assert "up to date" in _dvc(dvc_project, "status")

    checked, mismatches = verify_outputs(dvc_project)
    assert checked == ["models/base"]
    assert [(m.path, m.files) for m in mismatches] == [
        ("models/base", ("models/base/model.safetensors",))
    ]
    assert cli(["verify", "models/base"]) == 1
    err = capsys.readouterr().err
    assert "models/base: content differs from dvc.lock" in err
    assert "changed files: models/base/model.safetensors" in err
    assert cli(["verify", "models/other"]) == 2

    # The evaluate stage refuses before it deletes or loads anything.
    from stages.evaluate import main as evaluate

    with pytest.raises(OutputCorruptedError, match=r"models/base/model\.safetensors"):
        evaluate(["--policy", "base"])
    assert (dvc_project / "models/base/model.safetensors").is_file()


def test_a_retrained_model_is_checked_against_its_new_lock_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """DVC writes a stage's lock entry as soon as it ends: a model the same repro retrained
    passes the check of the evaluation that follows (no false alarm on a legitimate rerun)."""
    shutil.copy(project_root() / "params.yaml", tmp_path / "params.yaml")
    (tmp_path / "size.txt").write_text("64")
    write = _WRITE_MODEL.replace("* 64", "* int(pathlib.Path('size.txt').read_text())")
    check = (
        "from pathlib import Path; from tagrpo.plumbing.verify import check_against_lock; "
        "assert check_against_lock(Path.cwd(), 'models/base'); Path('checked').write_text('ok')"
    )
    stages = {
        "base_model": {
            "cmd": f'{sys.executable} -c "{write}"',
            "deps": ["size.txt"],
            "outs": ["models/base"],
        },
        "evaluate": {
            "cmd": f'{sys.executable} -c "{check}"',
            "deps": ["models/base"],
            "outs": ["checked"],
        },
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    monkeypatch.setenv("PYTHONPATH", str(project_root()))  # this checkout's tagrpo
    _dvc(tmp_path, "init", "--no-scm", "-q")
    _dvc(tmp_path, "repro")
    (tmp_path / "size.txt").write_text("65")  # retrain: a new model, a new lock entry
    output = _dvc(tmp_path, "repro")
    assert "Running stage 'base_model'" in output and "Running stage 'evaluate'" in output


def test_no_lock_entry_means_nothing_to_compare(tmp_path: Path) -> None:
    (tmp_path / "models/base").mkdir(parents=True)
    assert check_against_lock(tmp_path, "models/base") is False


def test_the_suggested_restore_puts_the_locked_content_back(dvc_project: Path) -> None:
    """`dvc checkout models/base` (and --force) keep a file changed in place with its size and
    mtime; the command the error suggests restores it (issue 33.6)."""
    model = dvc_project / "models/base/model.safetensors"
    original = model.read_bytes()
    _corrupt_in_place(model)
    _dvc(dvc_project, "checkout", "--force", "models/base")
    assert model.read_bytes() != original  # the drill: DVC's own checkout trusts its state
    with pytest.raises(OutputCorruptedError) as refused:
        check_against_lock(dvc_project, "models/base")
    (command,) = re.findall(r"restore it with `([^`]+)`", str(refused.value))
    assert command == "dvc checkout --relink --force models/base"
    _dvc(dvc_project, *shlex.split(command)[1:])
    assert model.read_bytes() == original
    assert check_against_lock(dvc_project, "models/base") is True


def test_verify_leaves_out_lock_entries_of_stages_the_params_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """dvc.lock keeps the entry of a matrix item the params no longer have (here: method b
    after runs.methods lost it), whose output is rightly gone: not a failure (issue 33.6/9)."""
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    params = yaml.safe_load((project_root() / "params.yaml").read_text())
    params["runs"]["methods"] = ["grpo", "grpo_flipped"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    stage = {
        "matrix": {"method": "${runs.methods}"},
        "cmd": "mkdir -p out && echo ${item.method} > out/${item.method}.txt",
        "outs": ["out/${item.method}.txt"],
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": {"write": stage}}))
    _dvc(tmp_path, "init", "--no-scm", "-q")
    _dvc(tmp_path, "repro")
    params["runs"]["methods"] = ["grpo"]
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "out/grpo_flipped.txt").unlink()
    _dvc(tmp_path, "repro")
    assert "write@grpo_flipped" in yaml.safe_load((tmp_path / "dvc.lock").read_text())["stages"]
    assert "up to date" in _dvc(tmp_path, "status")
    monkeypatch.chdir(tmp_path)
    assert cli(["verify"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "not checked: 1 output(s) of 1 dvc.lock entries of stages the current params do not "
        "have (write@grpo_flipped)",
        "1 output(s) of dvc.lock checked by content: 0 differ",
    ]
    (tmp_path / "out/grpo.txt").write_text("changed\n")
    assert cli(["verify"]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "tagrpo verify: to restore them: dvc checkout --relink --force out/grpo.txt"
    )


def test_training_refuses_a_base_model_changed_since_dvc_locked_it(dvc_project: Path) -> None:
    """A corrupted models/base is refused by name before training, not trained on (33.6)."""
    from stages.train import main as train

    _corrupt_in_place(dvc_project / "models/base/model.safetensors")
    with pytest.raises(OutputCorruptedError, match=r"models/base/model\.safetensors"):
        train(["--method", "grpo", "--seed", "0"])
    assert not (dvc_project / "models/grpo-s0").exists()


DEFAULT_ONE_SEED = ["grpo_ds", "grpo_x4", "ta_grpo_star", "ta_grpo"]
MOVED = ["grpo_ds", "ta_grpo_star", "ta_grpo"]  # grpo_x4 moved to runs.methods


def _two_matrices(tmp_path: Path, methods: list[str], one_seed: list[str], text: str) -> None:
    """A pipeline whose two matrix stages write the same path for a method, as train and
    train_one_seed do: which stage owns `out/<method>.txt` depends on the params."""
    params = yaml.safe_load((project_root() / "params.yaml").read_text())
    params["runs"]["methods"], params["runs"]["one_seed_methods"] = methods, one_seed
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    stage = {
        "cmd": f"mkdir -p out && echo {text} > out/${{item.method}}.txt",
        "outs": ["out/${item.method}.txt"],
    }
    stages = {
        "write": {"matrix": {"method": "${runs.methods}"}, **stage},
        "write_one_seed": {"matrix": {"method": "${runs.one_seed_methods}"}, **stage},
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump({"stages": stages}))


def test_a_stale_entry_naming_a_current_output_is_never_read_and_is_pruned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40.1 in small: the params move grpo_x4 from one matrix stage to another and back
    (a profile, a world); dvc.lock keeps the other stage's entry, whose hash of the same
    output is another content. Every check reads the current stage's entry only; the prune drops the
    stale entry and leaves the others byte for byte (DVC then finds them up to date)."""
    from tagrpo.plumbing.verify import locked_outputs, prune_lock, stale_lock_entries

    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    _two_matrices(tmp_path, ["grpo", "grpo_x4"], MOVED, "old")
    _dvc(tmp_path, "init", "--no-scm", "-q")
    _dvc(tmp_path, "repro")
    _two_matrices(tmp_path, ["grpo"], DEFAULT_ONE_SEED, "one-seed")  # another profile
    _dvc(tmp_path, "repro")
    _two_matrices(tmp_path, ["grpo", "grpo_x4"], MOVED, "new")  # and back
    _dvc(tmp_path, "repro")
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())["stages"]
    stale, current = "write_one_seed@grpo_x4", "write@grpo_x4"
    assert {stale, current} <= set(lock)  # DVC kept the stale one
    stale_md5, current_md5 = (lock[name]["outs"][0]["md5"] for name in (stale, current))
    assert stale_md5 != current_md5
    # Read together, the entry listed last won: the stale one (DVC updates an entry in place
    # and appends a new one), as the default's train_one_seed entries did in issue 40.
    assert list(lock).index(stale) > list(lock).index(current)
    assert locked_outputs(tmp_path)["out/grpo_x4.txt"] == current_md5
    assert check_against_lock(tmp_path, "out/grpo_x4.txt") is True
    assert stale_lock_entries(tmp_path) == {stale: ["out/grpo_x4.txt"]}

    entries = re.findall(r"(?ms)^  (\S+):\n(.*?)(?=^  \S|\Z)", (tmp_path / "dvc.lock").read_text())
    kept = {name: text for name, text in entries if name != stale}
    assert prune_lock(tmp_path) == [stale]
    after = (tmp_path / "dvc.lock").read_text()
    assert f"{stale}:" not in after
    for name, text in kept.items():
        assert f"  {name}:\n{text}" in after  # the entries kept are unchanged
    assert prune_lock(tmp_path) == []
    assert "up to date" in _dvc(tmp_path, "status")
    monkeypatch.chdir(tmp_path)
    assert cli(["verify"]) == 0
    assert "not checked" not in capsys.readouterr().out


def test_params_apply_prunes_the_entries_of_stages_the_profile_drops(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DVC_NO_ANALYTICS", "1")
    _two_matrices(tmp_path, ["grpo", "grpo_flipped"], DEFAULT_ONE_SEED, "old")
    _dvc(tmp_path, "init", "--no-scm", "-q")
    _dvc(tmp_path, "repro")
    profile = tmp_path / "moved.yaml"
    profile.write_text(
        "common: {profile: custom}\n"
        f"runs: {{methods: [grpo, grpo_flipped, grpo_x4], control_methods: [], "
        f"one_seed_methods: {MOVED}}}\n"
    )
    monkeypatch.chdir(tmp_path)
    assert cli(["params", "apply", str(profile)]) == 0
    out = capsys.readouterr().out
    assert (
        "dvc.lock: removed 1 entries of stages these params do not have "
        "(write_one_seed@grpo_x4)" in out
    )
    stages = set(yaml.safe_load((tmp_path / "dvc.lock").read_text())["stages"])
    assert "write_one_seed@grpo_x4" not in stages and "write_one_seed@ta_grpo" in stages
