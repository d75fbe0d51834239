"""The way back after a profile run: ``tagrpo params restore`` (issue 53).

A profile run changes three things the commit holds: params.yaml (``tagrpo params apply``),
dvc.lock (``dvc repro``; ``.dvc/config`` sets ``core.autostage``, so DVC also stages it, and a
plain ``git checkout dvc.lock`` then restores the staged copy, the profile's) and the outputs git
tracks (the committed run's ``cache: false`` metrics, plots and report, rewritten in place, and
the ``.gitignore`` files DVC keeps beside its outputs, staged). :func:`restore_committed` puts
back all three from HEAD, in the index and the work tree alike (a file the run added is
removed), then the cached outputs HEAD's dvc.lock names (``dvc checkout``). ``dvc checkout``
also deletes the outputs of the profile's own stages (its extra matrix items: in the dvc.lock it
replaces, not in HEAD's), ``cache: false`` ones included; each is listed (the cached ones come
back with the profile: ``tagrpo params apply`` it again, then ``dvc checkout``; an uncached
metric only by rerunning, its values are in MLflow), and any left in the work tree too.

:func:`tracked_outputs_rewritten` is what ``tagrpo params apply`` says first: HEAD's files
among the outputs of the stages the new params rerun.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from tagrpo.pipeline.plan import plan_rerun
from tagrpo.pipeline.rerun import RerunRequest, dvc_binary, resolve_params
from tagrpo.plumbing.dvc_stages import ExpandedStage, expand_stages, load_stages, safe_load

# What the restore takes from HEAD besides the outputs.
RESTORED_FILES = ("params.yaml", "dvc.lock")
_TAIL_LINES = 15
# A line of dvc checkout's summary: M (modified), A (added) or D (deleted), then the path.
_CHECKOUT_LINE = re.compile(r"^([MAD])\s+(\S.*)$")
_FAILED_TARGETS = "Checkout failed for following targets:"


class RestoreError(RuntimeError):
    """A git step of the way back failed, or dvc could not start; the message names it."""


def _git(root: Path, *args: str) -> str:
    """``git ARGS`` in ``root`` (paths relative to it, also when it is a subfolder of the
    repository); its output, or :class:`RestoreError` with git's error line."""
    try:
        result = subprocess.run(
            ["git", "--literal-pathspecs", *args],
            cwd=root,
            capture_output=True,
            text=True,
            check=False,
        )
    except OSError as error:
        raise RestoreError(f"git {args[0]} could not start in {root}: {error}") from error
    if result.returncode != 0:
        lines = result.stderr.strip().splitlines() or ["no message"]
        error = next((line for line in lines if line.startswith(("fatal:", "error:"))), lines[0])
        raise RestoreError(f"git {args[0]} failed in {root}: {error}")
    return result.stdout


def _names(output: str) -> set[str]:
    return {name for name in output.split("\0") if name}


def head_stages(root: Path) -> dict[str, ExpandedStage]:
    """The stages of HEAD's dvc.yaml under HEAD's params.yaml (the committed pipeline)."""
    dvc_yaml = safe_load(_git(root, "show", "HEAD:./dvc.yaml")) or {}
    params = safe_load(_git(root, "show", "HEAD:./params.yaml")) or {}
    return expand_stages(dvc_yaml, params)


def _outputs(stages: Iterable[ExpandedStage]) -> set[str]:
    return {PurePosixPath(out).as_posix() for stage in stages for out in stage.outs}


def _locked_outputs(text: str) -> set[str]:
    """The outputs a dvc.lock's text records (every entry's ``outs``)."""
    stages = (safe_load(text) or {}).get("stages") or {}
    return {
        PurePosixPath(out["path"]).as_posix()
        for entry in stages.values()
        for out in entry.get("outs") or []
        if isinstance(out, dict) and "path" in out
    }


def run_outputs(root: Path) -> set[str]:
    """What the run to undo made: the outputs of the pipeline under params.yaml as it is and
    those its dvc.lock records, in the work tree and in the index (params.yaml may already be
    HEAD's, and a plain ``git checkout dvc.lock`` puts back the staged one)."""
    found = _outputs(load_stages(root).values())
    lock = root / "dvc.lock"
    if lock.is_file():
        found |= _locked_outputs(lock.read_text(encoding="utf-8"))
    if "dvc.lock" in _names(_git(root, "ls-files", "-z", "--", "dvc.lock")):
        found |= _locked_outputs(_git(root, "show", ":./dvc.lock"))
    return found


def _beside(outputs: Iterable[str]) -> set[str]:
    """The ``.gitignore`` DVC keeps beside each output (the root's for a top-level one)."""
    return {(PurePosixPath(out).parent / ".gitignore").as_posix() for out in outputs}


def files_under(files: Iterable[str], outputs: set[str]) -> set[str]:
    """The files that are one of ``outputs`` or lie inside one (a folder output)."""
    found = set()
    for name in files:
        path = PurePosixPath(name)
        if name in outputs or any(parent.as_posix() in outputs for parent in path.parents):
            found.add(name)
    return found


def tracked_outputs_rewritten(root: Path, request: RerunRequest | None = None) -> list[str]:
    """HEAD's files among the outputs of the stages the next ``dvc repro`` runs with
    params.yaml as it is, or as ``request`` changes it (:func:`tagrpo.pipeline.plan.plan_rerun`
    from the params and dvc.lock: what the params change reruns, and everything downstream)."""
    head = _names(_git(root, "ls-tree", "-r", "-z", "--name-only", "HEAD"))  # first: no commit
    request = request or RerunRequest()
    plan = plan_rerun(root, request, status={})
    dvc_yaml = safe_load((root / "dvc.yaml").read_text(encoding="utf-8")) or {}
    stages = expand_stages(dvc_yaml, resolve_params(root, request))
    rerun = _outputs(stages[stage.name] for stage in plan.runs)
    return sorted(files_under(head, rerun))


def summarise(files: list[str], limit: int = 8) -> str:
    """``files`` by name, or past ``limit`` of them by top-level folder with counts
    (``metrics/ (15), plots/ (9), reports/report.md``; a folder's lone file by its name)."""
    names = sorted(files)
    if len(names) <= limit:
        return ", ".join(names)
    folders: dict[str, list[str]] = {}
    for name in names:
        parts = PurePosixPath(name).parts
        folders.setdefault(parts[0] if len(parts) > 1 else name, []).append(name)
    return ", ".join(
        f"{folder}/ ({len(inside)})" if len(inside) > 1 else inside[0]
        for folder, inside in folders.items()
    )


@dataclass(frozen=True)
class Restored:
    """What :func:`restore_committed` did."""

    changed: list[str]  # files that differed from HEAD (index or work tree) and were restored
    removed: list[str]  # of those, files HEAD does not have (the run added them): removed
    checkout_ok: bool  # dvc checkout succeeded
    checked_out: list[str]  # outputs dvc checkout restored from the cache (M, A)
    checkout_removed: list[str]  # outputs dvc checkout removed: not in HEAD's dvc.lock (D)
    not_in_cache: list[str]  # outputs dvc checkout could not restore: in no DVC cache here
    checkout_tail: list[str]  # the last lines dvc checkout printed besides M, A and D
    kept: list[str]  # the run's outputs the committed pipeline lacks, still in the work tree


def restore_committed(root: Path) -> Restored:
    """params.yaml, dvc.lock and the outputs git tracks as HEAD has them (index and work
    tree), then ``dvc checkout`` of HEAD's dvc.lock."""
    committed = _outputs(head_stages(root).values())
    made = run_outputs(root)
    outputs = made | committed
    head = _names(_git(root, "ls-tree", "-r", "-z", "--name-only", "HEAD"))
    index = _names(_git(root, "ls-files", "-z"))
    known = head | index  # git restore refuses a path it knows neither place
    candidates = (set(RESTORED_FILES) | files_under(known, outputs | _beside(outputs))) & known
    differing: set[str] = set()
    if candidates:
        paths = sorted(candidates)
        differing = _names(
            _git(root, "diff", "--relative", "--name-only", "-z", "HEAD", "--", *paths)
        )
        # No-overlay (git restore's default): a file the index has and HEAD lacks is removed.
        _git(root, "restore", "--source=HEAD", "--staged", "--worktree", "--", *paths)
    try:
        checkout = subprocess.run(
            [dvc_binary(), "checkout"], cwd=root, capture_output=True, text=True, check=False
        )
    except OSError as error:
        raise RestoreError(
            f"dvc checkout could not start in {root} ({error}); the files from git HEAD are "
            "restored: run `dvc checkout` there"
        ) from error
    lines = [line for line in (checkout.stdout + checkout.stderr).splitlines() if line.strip()]
    changes = [match.groups() for match in map(_CHECKOUT_LINE.match, lines) if match]
    return Restored(
        changed=sorted(differing),
        removed=sorted(differing - head),
        checkout_ok=checkout.returncode == 0,
        checked_out=sorted(path for kind, path in changes if kind in "MA"),
        checkout_removed=sorted(path for kind, path in changes if kind == "D"),
        not_in_cache=_failed_targets(lines),
        checkout_tail=[line for line in lines if not _CHECKOUT_LINE.match(line)][-_TAIL_LINES:],
        kept=sorted(out for out in made - committed if (root / out).exists()),
    )


def _failed_targets(lines: list[str]) -> list[str]:
    """The outputs dvc checkout lists after "Checkout failed for following targets:"."""
    start = next((i for i, line in enumerate(lines) if _FAILED_TARGETS in line), None)
    if start is None:
        return []
    targets = []
    for line in lines[start + 1 :]:
        if not line.strip() or " " in line.strip() or line.startswith("<"):
            break  # "Is your cache up to date?" and DVC's link close the list
        targets.append(line.strip())
    return sorted(targets)


def report_lines(restored: Restored) -> list[str]:
    """What ``tagrpo params restore`` prints."""
    lines = [
        f"restored from git HEAD, in the index and the work tree: {len(restored.changed)} "
        "file(s) that differed" + (f": {summarise(restored.changed)}" if restored.changed else "")
    ]
    if restored.removed:
        lines.append(
            f"removed {len(restored.removed)} file(s) the run added that HEAD does not have: "
            + summarise(restored.removed)
        )
    if restored.checked_out:
        lines.append(
            f"dvc checkout: {len(restored.checked_out)} cached output(s) back as HEAD's dvc.lock "
            f"records them: {summarise(restored.checked_out)}"
        )
    if restored.checkout_removed:
        lines.append(
            f"dvc checkout removed {len(restored.checkout_removed)} output(s) HEAD's dvc.lock "
            f"does not have (the profile's own stages): {summarise(restored.checkout_removed)}; "
            "the cached ones come back with the profile (apply it, then dvc checkout)"
        )
    if restored.not_in_cache:
        lines.append(
            f"dvc checkout could not restore {len(restored.not_in_cache)} cached output(s), in "
            f"no DVC cache here (this clone never made them): {summarise(restored.not_in_cache)}"
            "; each holds what the profile's run left there, or nothing: `dvc repro` makes them"
        )
    elif not restored.checkout_ok:
        lines.append("dvc checkout failed; its last lines:")
        lines += [f"  {line}" for line in restored.checkout_tail]
    if restored.kept:
        lines.append(
            f"left in place: {len(restored.kept)} output(s) of the profile's own stages (the "
            f"committed pipeline has none of them): {summarise(restored.kept)}"
        )
    return lines
