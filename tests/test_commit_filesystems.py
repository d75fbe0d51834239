"""A stage's commit on outputs that live on another filesystem (issue 53.1): a symlinked output
folder (and metrics folder) on a tmpfs, a tmpfs mounted over the folder, a bind mount over it.

The new outputs replace the old ones in place (a symlink stays a symlink, a mount stays
mounted), and a failure injected at each step of the commit in turn, raised or as a process
that dies there (the next stage start recovering from the journal), leaves the old outputs or
the new ones, never neither, and no temporary copy. Mounting needs root (or CAP_SYS_ADMIN):
where it is refused the tests are skipped, saying so.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from scratch_project import EMPTY_PROJECT_EXPERIMENT

import tagrpo.pipeline.commit as commit
from tagrpo.config.params import Params, config_with
from tagrpo.pipeline.runtime import running_stage
from tagrpo.plumbing.errors import DiskFullError
from tagrpo.plumbing.layout import Outputs

OUTPUTS = Outputs(
    {"evals": Path("evals/p"), "table": Path("out/table.csv")}, Path("metrics/p.json")
)
OLD = {"responses.parquet": "old responses", "sub/summary.json": '{"old": 1}', "gone.txt": "x"}
NEW = {"responses.parquet": "new responses", "sub/summary.json": '{"new": 2}', "added.txt": "y"}


def _config() -> Params:
    # No MLflow run: the commit is what is tested, many times over.
    return config_with(
        {"common.tracking.experiment": EMPTY_PROJECT_EXPERIMENT, "common.tracking.enabled": False}
    )


def _mount(args: list[str]) -> None:
    done = subprocess.run(["mount", *args], capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"mounting is not allowed here (mount {' '.join(args)}: {done.stderr.strip()})")


@pytest.fixture
def mounts() -> Iterator[Callable[[list[str], Path], None]]:
    """``mount(args, target)``: mounts ``target`` (skips the test where mounting is refused);
    all unmounted at the end."""
    made: list[Path] = []

    def mount(args: list[str], target: Path) -> None:
        target.mkdir(parents=True, exist_ok=True)
        _mount([*args, str(target)])
        made.append(target)

    yield mount
    for target in reversed(made):
        subprocess.run(["umount", "-l", str(target)], check=False)


def _tmpfs(mount: Callable[[list[str], Path], None], target: Path) -> None:
    mount(["-t", "tmpfs", "-o", "size=8m", "tmpfs"], target)


def _layout(kind: str, project: Path, scratch: Path, mount: Callable) -> None:
    """``evals/p`` and ``metrics/`` on another filesystem, the ``kind`` way."""
    if kind == "symlink":  # the drill's layout: folders moved to a scratch disk, linked back
        _tmpfs(mount, scratch)
        (scratch / "p").mkdir()
        (scratch / "metrics").mkdir()
        (project / "evals").mkdir()
        (project / "evals/p").symlink_to(scratch / "p")
        (project / "metrics").symlink_to(scratch / "metrics")
    elif kind == "mount":  # a filesystem mounted straight over each folder
        _tmpfs(mount, project / "evals/p")
        _tmpfs(mount, project / "metrics")
    else:  # bind mounts: the same filesystem, yet no rename across them (EXDEV, EBUSY)
        (scratch / "p").mkdir(parents=True)
        (scratch / "metrics").mkdir()
        mount(["--bind", str(scratch / "p")], project / "evals/p")
        mount(["--bind", str(scratch / "metrics")], project / "metrics")


def _write_tree(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_text(text)


def _old_outputs(project: Path) -> None:
    _write_tree(project / "evals/p", OLD)
    _write_tree(project / "out", {"table.csv": "old table\n"})
    (project / "metrics/p.json").write_text('{"old": true}\n')


def _snapshot(project: Path, scratch: Path) -> dict[str, str]:
    """Every entry under the outputs' folders and the scratch filesystem, hidden temporary
    names included: path -> content (or ``-> target`` for a symlink, ``/`` for a folder)."""
    seen: dict[str, str] = {}
    for base, label, tops in (
        (project, "project", ("evals", "out", "metrics")),
        (scratch, "scratch", ("p", "metrics")),
    ):
        for top in tops:
            start = base / top
            if not os.path.lexists(start):
                continue
            for path in [start, *sorted(start.rglob("*"))]:
                key = f"{label}/{path.relative_to(base)}"
                if path.is_symlink():
                    seen[key] = f"-> {os.readlink(path)}"
                elif path.is_dir():
                    seen[key] = "/"
                else:
                    seen[key] = path.read_text()
    return seen


def _run_stage(project: Path) -> None:
    with running_stage("toy", OUTPUTS, _config()) as ctx:
        _write_tree(ctx.path("evals"), NEW)
        ctx.path("table").write_text("new table\n")
        ctx.set_metrics({"score": 0.5, "seconds": 1.0})  # the same file each run


class _Stopped(BaseException):
    """The process dies at this step (nothing after it runs, no clean-up of its own)."""


STEPS = ("_rename", "_copy", "_remove", "_write")


def _inject(monkeypatch: pytest.MonkeyPatch, fail_at: int, died: bool) -> list[str]:
    """Count the commit's filesystem steps (and journal writes); step ``fail_at`` (1-based)
    fails with an OSError, or as a process dying there (``died``: no undo, no finish)."""
    calls: list[str] = []

    def counted(name: str, real: Callable) -> Callable:
        def step(*args: object) -> object:
            calls.append(f"{name}{args[1:] if name == '_rename' else ''}")
            if len(calls) == fail_at:
                if died:
                    raise _Stopped(name)
                raise OSError(5, f"injected failure at {name}", str(args[0]))
            return real(*args)

        return step

    for name in STEPS:
        monkeypatch.setattr(commit, name, counted(name, getattr(commit, name)))
    monkeypatch.setattr(commit.Journal, "save", counted("save", commit.Journal.save))
    if died:
        monkeypatch.setattr(commit, "undo", lambda journal: None)
    return calls


@pytest.mark.parametrize("kind", ["symlink", "mount", "bind"])
def test_outputs_on_another_filesystem_are_replaced_in_place(
    kind: str, empty_project: Path, tmp_path_factory: pytest.TempPathFactory, mounts: Callable
) -> None:
    scratch = tmp_path_factory.mktemp("scratch")
    _layout(kind, empty_project, scratch, mounts)
    _old_outputs(empty_project)
    _run_stage(empty_project)
    evals = empty_project / "evals/p"
    assert {str(p.relative_to(evals)) for p in evals.rglob("*") if p.is_file()} == set(NEW)
    assert all((evals / name).read_text() == text for name, text in NEW.items())
    assert (empty_project / "out/table.csv").read_text() == "new table\n"
    assert json.loads((empty_project / "metrics/p.json").read_text())["score"] == 0.5
    if kind == "symlink":  # still links to the scratch disk, which holds the new content
        assert os.readlink(evals) == str(scratch / "p")
        assert (scratch / "p/responses.parquet").read_text() == "new responses"
        assert (empty_project / "metrics").is_symlink()
    else:  # still mounted: the new files are on the mounted filesystem
        assert evals in {Path(m) for m in commit.mount_points()}
    assert not any(".tagrpo-" in key for key in _snapshot(empty_project, scratch))
    assert not list((empty_project / commit.JOURNALS).glob("*.json"))


@pytest.mark.parametrize("died", [False, True], ids=["raises", "dies"])
@pytest.mark.parametrize("kind", ["symlink", "mount", "bind"])
def test_a_failure_at_any_step_of_the_commit_leaves_the_old_outputs_or_the_new(
    kind: str,
    died: bool,
    empty_project: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mounts: Callable,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scratch = tmp_path_factory.mktemp("scratch")
    _layout(kind, empty_project, scratch, mounts)

    def reset() -> None:
        for folder in (empty_project / "evals/p", scratch / "p"):
            if folder.is_dir():  # emptied in place: a mount point cannot be removed
                for entry in folder.iterdir():
                    commit._remove(entry)
        commit._remove(empty_project / "out")
        for entry in (empty_project / "metrics").iterdir():
            commit._remove(entry)
        _old_outputs(empty_project)

    reset()
    old = _snapshot(empty_project, scratch)
    with monkeypatch.context() as patch:
        steps = _inject(patch, 0, died)
        _run_stage(empty_project)
    new = _snapshot(empty_project, scratch)
    assert new != old and not any(".tagrpo-" in key for key in new)
    assert len(steps) >= 10, steps  # journal writes, prepare (copies), swaps, removals
    outcomes = []
    for fail_at in range(1, len(steps) + 1):
        reset()
        with monkeypatch.context() as patch:
            _inject(patch, fail_at, died)
            try:
                _run_stage(empty_project)
                failed = False
            except (OSError, _Stopped):
                failed = True
        step = steps[fail_at - 1]
        now = _snapshot(empty_project, scratch)
        if failed and not died:  # undone at once: exactly the old outputs
            assert now == old, f"failure at step {fail_at} ({step}): {now}"
        # The next stage start completes or undoes what is left (a journal).
        commit.recover_commits(empty_project, lambda journal: True)
        now = _snapshot(empty_project, scratch)
        assert now in (old, new), f"failure at step {fail_at} ({step}): {now}"
        assert not list((empty_project / commit.JOURNALS).glob("*.json"))
        outcomes.append("new" if now == new else "old")
    # Failing before the last new entry is placed keeps the old; after, the new stands.
    assert outcomes[0] == "old" and outcomes[-1] == "new"
    assert outcomes == sorted(outcomes, key=["old", "new"].index), outcomes


def test_a_commit_that_cannot_put_the_old_outputs_back_names_its_journal(
    empty_project: Path,
    tmp_path_factory: pytest.TempPathFactory,
    mounts: Callable,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The worst case: the swap fails and so does the undo. The error says so and names the
    journal; the next stage start finishes the undo."""
    scratch = tmp_path_factory.mktemp("scratch")
    _layout("symlink", empty_project, scratch, mounts)
    _old_outputs(empty_project)
    old = _snapshot(empty_project, scratch)
    real_rename = commit._rename
    asides: list[Path] = []

    def rename(source: Path, target: Path) -> None:
        if ".tagrpo-" in target.name and target.name.endswith("-old"):
            asides.append(target)
        elif asides and source == asides[0]:
            raise OSError(5, "the disk went away", str(source))  # the undo fails
        elif asides and ".tagrpo-" in source.name:
            raise OSError(28, "No space left on device", str(target))  # the swap fails
        real_rename(source, target)

    monkeypatch.setattr(commit, "_rename", rename)
    with pytest.raises(
        RuntimeError,
        match=r"and so did putting the old ones back .*the next "
        r"stage run retries, from .*\.tagrpo/commits/toy-\d+\.json",
    ):
        _run_stage(empty_project)
    monkeypatch.setattr(commit, "_rename", real_rename)
    after_failure = _snapshot(empty_project, scratch)
    assert after_failure != old  # the metrics were set aside and not put back
    commit.recover_commits(empty_project, lambda journal: True)
    assert _snapshot(empty_project, scratch) == old


def test_a_full_scratch_disk_keeps_the_old_outputs_and_names_the_file(
    empty_project: Path, tmp_path_factory: pytest.TempPathFactory, mounts: Callable
) -> None:
    """The new outputs do not fit on the scratch disk: the copy fails there, naming the file
    and what is free; the old outputs stay, and no partial copy."""
    scratch = tmp_path_factory.mktemp("scratch")
    mounts(["-t", "tmpfs", "-o", "size=256k", "tmpfs"], scratch)
    (scratch / "p").mkdir()
    (empty_project / "evals").mkdir()
    (empty_project / "evals/p").symlink_to(scratch / "p")
    (empty_project / "metrics").mkdir()
    _old_outputs(empty_project)
    old = _snapshot(empty_project, scratch)
    with pytest.raises(DiskFullError) as full, running_stage("toy", OUTPUTS, _config()) as ctx:
        ctx.path("evals").mkdir()
        (ctx.path("evals") / "weights.bin").write_bytes(os.urandom(1 << 20))
        ctx.path("table").write_text("new table\n")
    copied = scratch / f".p.tagrpo-{os.getpid()}-new/weights.bin"
    free = shutil.disk_usage(scratch).free / 2**20
    assert str(full.value) == (
        f"[Errno 28] no space left on the device writing {copied} ({free:.1f} MiB free "
        "there): free space on that filesystem (or point the output elsewhere), then rerun"
    )
    assert _snapshot(empty_project, scratch) == old


KILLED_STAGE = """
import time
from pathlib import Path
import tagrpo.pipeline.commit as commit
from tagrpo.config.params import load_config
from tagrpo.pipeline.runtime import running_stage
from tagrpo.plumbing.layout import Outputs

real_rename = commit._rename
def rename(source, target):
    real_rename(source, target)
    if target == Path("{scratch}/p"):  # the new folder in place, the old one aside: hang here
        Path("swapped").write_text("")
        time.sleep(120)
commit._rename = rename
outs = {{"evals": Path("evals/p"), "table": Path("out/table.csv")}}
outputs = Outputs(outs, Path("metrics/p.json"))
with running_stage("toy", outputs, load_config()) as ctx:
    ctx.path("evals").mkdir()
    (ctx.path("evals") / "responses.parquet").write_text("new responses")
    ctx.path("table").write_text("new table\\n")
"""


def test_a_stage_killed_mid_commit_is_undone_by_the_next_stage_start(
    empty_project: Path, tmp_path_factory: pytest.TempPathFactory, mounts: Callable
) -> None:
    """SIGKILL between two renames of the swap (nothing of the process's own runs after it):
    the next stage that starts finds the journal of a dead process and puts the old outputs
    back, removing the copies on the scratch disk."""
    scratch = tmp_path_factory.mktemp("scratch")
    _layout("symlink", empty_project, scratch, mounts)
    _old_outputs(empty_project)
    old = _snapshot(empty_project, scratch)
    params = yaml.safe_load((empty_project / "params.yaml").read_text())
    params["common"]["tracking"]["enabled"] = False  # the stage's commit is what is tested
    (empty_project / "params.yaml").write_text(yaml.safe_dump(params))
    (empty_project / "stage.py").write_text(KILLED_STAGE.format(scratch=scratch))
    env = {**os.environ, "PYTHONPATH": str(Path(commit.__file__).parents[2])}
    stage = subprocess.Popen([sys.executable, "stage.py"], cwd=empty_project, env=env)
    deadline = time.monotonic() + 120
    while not (empty_project / "swapped").exists():
        assert stage.poll() is None and time.monotonic() < deadline, "the stage did not commit"
        time.sleep(0.1)
    stage.kill()
    stage.wait()
    midway = _snapshot(empty_project, scratch)
    assert midway != old and (scratch / "p/responses.parquet").read_text() == "new responses"
    assert (empty_project / commit.JOURNALS / f"toy-{stage.pid}.json").exists()
    with running_stage("other", Outputs({}, Path("m/other.json")), _config()):
        assert _snapshot(empty_project, scratch) == old  # recovered before the work starts
    assert not list((empty_project / commit.JOURNALS).glob("*.json"))


def test_a_read_only_scratch_disk_is_refused_before_the_stage_works(
    empty_project: Path, tmp_path_factory: pytest.TempPathFactory, mounts: Callable
) -> None:
    """The writability check looks where the commit writes: behind the symlink."""
    scratch = tmp_path_factory.mktemp("scratch")
    _layout("symlink", empty_project, scratch, mounts)
    _old_outputs(empty_project)
    _mount(["-o", "remount,ro", str(scratch)])
    old = _snapshot(empty_project, scratch)
    ran = False
    with (
        pytest.raises(PermissionError, match=r"evals/p: \[Errno 30\] Read-only file system"),
        running_stage("toy", OUTPUTS, _config()),
    ):
        ran = True
    assert not ran and _snapshot(empty_project, scratch) == old


# Outputs behind a symlink that leaves the project. DVC writes a .gitignore beside each cached
# output and refuses one whose folder's real path is outside the repository, after its stage
# ran; a folder output that is itself such a symlink it records. The stages refuse the first
# layout before any work (the drill's evaluation ran, then DVC refused it).
_SYMLINK_STAGES = {
    "file_out": {"cmd": "echo new > behind/out.txt", "outs": ["behind/out.txt"]},
    "folder_out": {"cmd": "echo new > folder/out.txt", "outs": ["folder"]},
    "uncached": {
        "cmd": "echo new > quiet/out.json",
        "metrics": [{"quiet/out.json": {"cache": False}}],
    },
    "inside": {"cmd": "echo new > near/out.txt", "outs": ["near/out.txt"]},
}


def _symlink_project(project: Path, outside: Path) -> None:
    """``behind``, ``folder`` and ``quiet`` link to folders of ``outside``; ``near`` to a
    folder of the project."""
    (project / "dvc.yaml").write_text(yaml.safe_dump({"stages": _SYMLINK_STAGES}))
    for name in ("behind", "folder", "quiet"):
        (outside / name).mkdir(parents=True)
        (project / name).symlink_to(outside / name)
    (project / "real_near").mkdir()
    (project / "near").symlink_to(project / "real_near")


def _outside_line(name: str, outside: Path, out: str) -> str:
    return (
        f"{name} resolves to {outside / name}, outside the project: DVC records no output "
        f"there (it refuses {out} after the stage has run); mount that folder on {name} "
        f"instead (mount --bind {outside / name} {name}), or put DVC's cache on that disk "
        "(dvc cache dir PATH) and keep the outputs in the project"
    )


def test_outputs_behind_a_symlink_out_of_the_project_are_named_as_dvc_refuses_them(
    tmp_path: Path,
) -> None:
    """The rule is DVC's own: a real ``dvc repro`` of each stage, beside what the check says."""
    from tagrpo.plumbing.dvc_stages import outputs_outside_project

    if shutil.which("dvc") is None:
        pytest.skip("dvc is not installed")
    project, outside = tmp_path / "project", tmp_path / "scratch"
    project.mkdir()
    subprocess.run(["git", "init", "-q"], cwd=project, check=True)
    subprocess.run(["dvc", "init", "-q"], cwd=project, check=True)
    _symlink_project(project, outside)
    assert outputs_outside_project(project) == [_outside_line("behind", outside, "behind/out.txt")]
    assert outputs_outside_project(project, ["folder_out", "uncached", "inside"]) == []
    refused = {}
    for stage in _SYMLINK_STAGES:
        done = subprocess.run(
            ["dvc", "repro", "-s", stage], cwd=project, capture_output=True, text=True
        )
        refused[stage] = done.returncode != 0
        if refused[stage]:
            assert "is outside of git repository" in done.stdout + done.stderr
    # If a DVC release records the first layout, this check (and its refusal) can go.
    assert refused == {"file_out": True, "folder_out": False, "uncached": False, "inside": False}


def test_a_stage_under_dvc_refuses_outputs_behind_a_symlink_out_of_the_project(
    empty_project: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Refused before the stage works, in one line; run by hand (no DVC_STAGE) it commits."""
    from tagrpo.plumbing.errors import OutputOutsideProjectError

    outside = tmp_path_factory.mktemp("scratch")
    _symlink_project(empty_project, outside)
    outputs = Outputs({"out": Path("behind/out.txt")}, Path("m/toy.json"))
    monkeypatch.setenv("DVC_STAGE", "file_out")
    ran = False
    with (
        pytest.raises(OutputOutsideProjectError) as refused,
        running_stage("file_out", outputs, _config()),
    ):
        ran = True
    assert not ran and not (outside / "behind/out.txt").exists()
    assert str(refused.value) == "stage file_out refused before it ran: " + _outside_line(
        "behind", outside, "behind/out.txt"
    )
    monkeypatch.delenv("DVC_STAGE")
    with running_stage("file_out", outputs, _config()) as ctx:
        ctx.path("out").write_text("new\n")
        ctx.set_metrics({"seconds": 1.0})
    assert (outside / "behind/out.txt").read_text() == "new\n"


def test_the_preflight_refuses_outputs_behind_a_symlink_out_of_the_project(
    empty_project: Path,
    tmp_path_factory: pytest.TempPathFactory,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Before any stage of a ``dvc repro`` runs; nothing written."""
    from stages import preflight

    outside = tmp_path_factory.mktemp("scratch")
    _symlink_project(empty_project, outside)
    with pytest.raises(SystemExit) as stopped:
        preflight.main([])
    assert stopped.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert f"[preflight] {_outside_line('behind', outside, 'behind/out.txt')}" in lines
    assert lines[-1] == "[preflight] refused before any stage ran: no output was deleted"
    assert not (empty_project / "data").exists()
