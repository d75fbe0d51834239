"""The watcher's end state of a dvc parent run tells whether DVC kept its stages' work.

A synthetic SQLite store and a synthetic dvc.lock: one stage whose lock entry matches its
files (DVC recorded it) and one whose entry is an earlier run's (the stage command succeeded,
then dvc failed before writing dvc.lock). No dvc process is needed: ``finish_run`` is what the
watcher calls once dvc has exited.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml

from tagrpo.pipeline.parent_run import DVC_EXIT_TAG, LOCKED_TAG, ROOT_TAG, finish_run
from tagrpo.plumbing.verify import lock_entry_matches


def _md5(text: str) -> str:
    return hashlib.md5(text.encode()).hexdigest()


def _project(root: Path) -> None:
    """data's entry matches its files and params; train's entry is an older run's."""
    (root / "data").mkdir(parents=True)
    (root / "data" / "rows.txt").write_text("rows v2\n")
    (root / "models").mkdir()
    (root / "models" / "policy.txt").write_text("policy v2\n")  # the new run's output
    (root / "params.yaml").write_text("train:\n  steps: 20\n")
    lock = {
        "schema": "2.0",
        "stages": {
            "data": {
                "cmd": "x",
                "outs": [{"path": "data/rows.txt", "hash": "md5", "md5": _md5("rows v2\n")}],
            },
            "train": {
                "cmd": "y",
                "deps": [{"path": "data/rows.txt", "hash": "md5", "md5": _md5("rows v1\n")}],
                "params": {"params.yaml": {"train.steps": 10}},
                "outs": [{"path": "models/policy.txt", "hash": "md5", "md5": _md5("policy v1\n")}],
            },
        },
    }
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))


def _recorded_project(root: Path) -> None:
    """:func:`_project` with train's entry this run's: DVC recorded both stages."""
    _project(root)
    lock = yaml.safe_load((root / "dvc.lock").read_text())
    lock["stages"]["train"]["deps"][0]["md5"] = _md5("rows v2\n")
    lock["stages"]["train"]["params"]["params.yaml"]["train.steps"] = 20
    lock["stages"]["train"]["outs"][0]["md5"] = _md5("policy v2\n")
    (root / "dvc.lock").write_text(yaml.safe_dump(lock))


def test_lock_entry_matches_only_the_recorded_stage(tmp_path: Path) -> None:
    _project(tmp_path)
    assert lock_entry_matches(tmp_path, "data") is True
    assert lock_entry_matches(tmp_path, "train") is False
    assert lock_entry_matches(tmp_path, "evaluate") is False  # no entry at all
    assert lock_entry_matches(tmp_path / "gone", "data") is None  # nothing to compare with
    lock = yaml.safe_load((tmp_path / "dvc.lock").read_text())
    del lock["stages"]["data"]["outs"][0]["hash"]  # as DVC 2 wrote it: hashed otherwise
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump(lock))
    assert lock_entry_matches(tmp_path, "data") is None


def test_parent_run_fails_when_dvc_did_not_record_a_finished_stage(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    root = tmp_path / "checkout"
    _project(root)
    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("locks", artifact_location=(tmp_path / "a").as_uri())
    parent = client.create_run(experiment, tags={"tagrpo.origin": "dvc", ROOT_TAG: str(root)})
    parent_id = parent.info.run_id
    children = {}
    for stage in ("data", "train"):
        child = client.create_run(
            experiment,
            tags={"mlflow.parentRunId": parent_id, "tagrpo.dvc_stage": stage, "stage": stage},
        )
        client.set_terminated(child.info.run_id, status="FINISHED")  # the stage command: OK
        children[stage] = child.info.run_id

    # main ended this parent FINISHED: every stage run had.
    assert finish_run(client, parent_id) == "FAILED"
    ended = client.get_run(parent_id)
    assert ended.info.status == "FAILED"
    assert ended.data.tags[DVC_EXIT_TAG].startswith("nonzero")
    assert "train" in ended.data.tags[DVC_EXIT_TAG]
    assert ended.data.metrics["stages_not_in_lock"] == 1
    data, train = (client.get_run(children[s]) for s in ("data", "train"))
    assert data.info.status == "FINISHED" and data.data.tags[LOCKED_TAG] == "true"
    assert train.info.status == "FAILED" and train.data.tags[LOCKED_TAG] == "false"
    assert "dvc.lock does not record" in train.data.tags["mlflow.note.content"]


def _parent_with_a_finished_stage(tmp_path: Path, root: Path, stage: str):
    """A store with a dvc parent run for ``root`` and one FINISHED stage run under it:
    (client, parent run id, stage run id)."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = client.create_experiment("locks", artifact_location=(tmp_path / "a").as_uri())
    parent_id = client.create_run(experiment, tags={ROOT_TAG: str(root)}).info.run_id
    child = client.create_run(
        experiment, tags={"mlflow.parentRunId": parent_id, "tagrpo.dvc_stage": stage}
    )
    client.set_terminated(child.info.run_id, status="FINISHED")
    return client, parent_id, child.info.run_id


def test_parent_run_finishes_when_every_stage_is_recorded(tmp_path: Path) -> None:
    root = tmp_path / "checkout"
    _project(root)
    client, parent_id, _ = _parent_with_a_finished_stage(tmp_path, root, "data")
    assert finish_run(client, parent_id) == "FINISHED"
    assert client.get_run(parent_id).data.tags[DVC_EXIT_TAG].startswith("unknown")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_lock_entry_matches_what_real_dvc_records(tmp_path: Path) -> None:
    """The check hashes as DVC does (a folder dep with bytecode .dvcignore leaves out, a params
    section, files and a folder out); a stage whose command succeeded but left an output
    out makes dvc fail without writing dvc.lock, and the entry no longer matches."""
    import os
    import subprocess
    import sys

    dvc = Path(sys.executable).with_name("dvc")
    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run(args, cwd=tmp_path, env=env, capture_output=True, text=True)

    assert run("git", "init", "-q").returncode == 0
    assert run(str(dvc), "init", "-q").returncode == 0
    (tmp_path / ".dvcignore").write_text("__pycache__/\n*.pyc\n")
    (tmp_path / "code" / "__pycache__").mkdir(parents=True)
    (tmp_path / "code" / "step.py").write_text("x = 1\n")
    (tmp_path / "code" / "__pycache__" / "step.cpython-311.pyc").write_bytes(b"\0bytecode")
    # 1.0e-6: DVC writes it to dvc.lock as 1e-06, which YAML 1.1 (PyYAML) reads as a string.
    (tmp_path / "params.yaml").write_text(
        "train:\n  steps: 10\n  skip_extra: false\n  epsilon: 1.0e-6\n"
    )
    write = (
        "import yaml, pathlib; p = yaml.safe_load(open('params.yaml'))['train']; "
        "pathlib.Path('out.txt').write_text(str(p['steps'])); "
        "d = pathlib.Path('out_dir'); d.mkdir(exist_ok=True); "
        "(d / 'a.txt').write_text('a'); "
        "pathlib.Path('extra.txt').write_text('e') if not p['skip_extra'] else None"
    )
    stage = {
        "stages": {
            "train": {
                "cmd": f'{sys.executable} -c "{write}"',
                "deps": ["code"],
                "params": ["train"],
                "outs": ["out.txt", "out_dir", "extra.txt"],
            }
        }
    }
    (tmp_path / "dvc.yaml").write_text(yaml.safe_dump(stage))
    first = run(str(dvc), "repro")
    assert first.returncode == 0, first.stderr[-2000:]
    assert lock_entry_matches(tmp_path, "train") is True

    # The command runs (out.txt rewritten) but leaves extra.txt out: dvc fails, dvc.lock stays.
    (tmp_path / "params.yaml").write_text(
        "train:\n  steps: 20\n  skip_extra: true\n  epsilon: 1.0e-6\n"
    )
    second = run(str(dvc), "repro")
    assert second.returncode != 0
    assert (tmp_path / "out.txt").read_text() == "20"
    assert lock_entry_matches(tmp_path, "train") is False


def test_a_file_changed_after_dvc_exited_is_not_dvcs_failure(tmp_path: Path) -> None:
    """The watcher may check minutes after dvc exited (a busy machine, the grace for stages):
    the user's next command may have moved or edited a stage's files by then. A mismatch in a
    file changed after dvc's exit is "unknown", not a stage dvc failed to record; one changed
    before it stays a failure. (The exit time is taken after or before each change: inode
    change times cannot be set back.)"""
    import time

    _recorded_project(tmp_path)

    def dvc_exits() -> float:
        time.sleep(0.02)
        exited = time.time()
        time.sleep(0.02)
        return exited

    exited = dvc_exits()
    assert lock_entry_matches(tmp_path, "train", changed_after=exited) is True
    (tmp_path / "models" / "policy.txt").rename(tmp_path / "policy.txt")  # the user's `mv`
    assert lock_entry_matches(tmp_path, "train", changed_after=exited) is None
    assert lock_entry_matches(tmp_path, "train") is False  # no exit time: as before
    (tmp_path / "policy.txt").rename(tmp_path / "models" / "policy.txt")  # moved back
    assert lock_entry_matches(tmp_path, "train", changed_after=dvc_exits()) is True

    (tmp_path / "models" / "policy.txt").write_text("policy v3\n")  # dvc did not record this
    assert lock_entry_matches(tmp_path, "train", changed_after=dvc_exits()) is False

    (tmp_path / "models" / "policy.txt").write_text("policy v2\n")
    exited = dvc_exits()
    (tmp_path / "params.yaml").write_text("train:\n  steps: 30\n")  # edited after the exit
    assert lock_entry_matches(tmp_path, "train", changed_after=exited) is None
    assert lock_entry_matches(tmp_path, "train", changed_after=dvc_exits()) is False


def test_parent_run_finishes_unknown_when_the_user_moved_a_file_after_dvc(tmp_path: Path) -> None:
    import time

    root = tmp_path / "checkout"
    _recorded_project(root)
    exited = time.time()
    time.sleep(0.05)
    (root / "models" / "policy.txt").rename(root / "policy.txt")  # after dvc's exit
    client, parent_id, child_id = _parent_with_a_finished_stage(tmp_path, root, "train")
    assert finish_run(client, parent_id, dvc_exited_at=exited) == "FINISHED"
    ended = client.get_run(parent_id)
    assert "changed after dvc exited" in ended.data.tags[DVC_EXIT_TAG]
    assert client.get_run(child_id).data.tags[LOCKED_TAG] == "unknown"
