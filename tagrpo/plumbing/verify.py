"""Outputs checked against dvc.lock by content, not by size and modification time.

DVC trusts its state cache: a file changed in place with the same size and mtime (a bad disk,
a tool that restores mtimes) still counts as the locked output, and ``dvc status`` says up to
date. :func:`verify_outputs` (``tagrpo verify``) rehashes each output the way DVC 3 hashes it
(a file: the md5 of its bytes; a folder: the md5 of the sorted JSON list of its files' md5 and
relative paths, plus ``.dir``) and compares with dvc.lock. Every stage checks the inputs it
reads that another stage wrote this way before it reads them (:func:`check_inputs`, called by
:func:`tagrpo.pipeline.runtime.running_stage` with the stage's dvc.yaml deps; train and
evaluate check their model and training set first, before planning reads them): a damaged
parquet or model is refused in one line naming it and the command that rebuilds it. Hashing is
cheap next to the work it guards (md5 runs at several hundred MB/s).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

_CHUNK = 1 << 20


def file_md5(path: Path) -> str:
    digest = hashlib.md5()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# What .dvcignore keeps out of DVC's hashes of folder deps (code packages): Python bytecode.
_IGNORED_PARTS = ("__pycache__",)
_IGNORED_SUFFIXES = (".pyc",)


def _bytecode(relative: Path) -> bool:
    return relative.name.endswith(_IGNORED_SUFFIXES) or any(
        part in _IGNORED_PARTS for part in relative.parts
    )


def directory_entries(path: Path, skip_bytecode: bool = False) -> list[dict[str, str]]:
    """DVC's listing of a folder: ``{"md5", "relpath"}`` per file, sorted by relpath; without
    the bytecode .dvcignore excludes when ``skip_bytecode``."""
    files = (
        p
        for p in path.rglob("*")
        if p.is_file() and not (skip_bytecode and _bytecode(p.relative_to(path)))
    )
    entries = [{"md5": file_md5(p), "relpath": p.relative_to(path).as_posix()} for p in files]
    return sorted(entries, key=lambda entry: entry["relpath"])


def dvc_md5(path: Path, skip_bytecode: bool = False) -> str:
    """The md5 dvc.lock records for ``path`` (``<md5>.dir`` for a folder; ``skip_bytecode``:
    as a folder dep is hashed under .dvcignore's bytecode rules)."""
    if path.is_dir():
        listing = json.dumps(directory_entries(path, skip_bytecode), sort_keys=True)
        return hashlib.md5(listing.encode("utf-8")).hexdigest() + ".dir"
    return file_md5(path)


def lock_stages(root: Path) -> dict[str, Any]:
    """Every entry of ``root/dvc.lock`` (stale ones included)."""
    lock = root / "dvc.lock"
    if not lock.is_file():
        return {}
    return (yaml.safe_load(lock.read_text(encoding="utf-8")) or {}).get("stages") or {}


def pipeline_stage_names(root: Path) -> set[str] | None:
    """The stages of ``root``'s pipeline under its params.yaml (dvc.yaml expanded as DVC
    expands it); None when there is no dvc.yaml (nothing to tell a stale entry by)."""
    from tagrpo.plumbing.dvc_stages import load_stages

    if not (root / "dvc.yaml").is_file():
        return None
    return set(load_stages(root))


def lock_entries(root: Path, stages: Collection[str] | None = None) -> dict[str, Any]:
    """dvc.lock's entries of the pipeline's stages: those named in ``stages`` or, by default,
    those of dvc.yaml under the current params.

    DVC keeps the entry of a stage that dvc.yaml or the params no longer have (a matrix item a
    profile dropped, an earlier world's stages), and such an entry may name the same output as
    a current stage with another hash: read together, the stale one could win. Every check
    against dvc.lock reads through here.
    """
    if stages is None:
        stages = pipeline_stage_names(root)
    entries = lock_stages(root)
    if stages is None:
        return entries
    return {name: entry for name, entry in entries.items() if name in stages}


def locked_outputs(root: Path, stages: Collection[str] | None = None) -> dict[str, str]:
    """Every output of dvc.lock's entries of the pipeline's stages (``stages``, by default
    those of dvc.yaml under the current params): path -> md5 (outs, metrics and plots alike)."""
    return {
        out["path"]: out["md5"]
        for stage in lock_entries(root, stages).values()
        for out in stage.get("outs") or []
        if "md5" in out
    }


def stale_lock_entries(root: Path, stages: Collection[str] | None = None) -> dict[str, list[str]]:
    """dvc.lock's entries of stages not in ``stages`` (default: the pipeline under the current
    params), with their outputs."""
    if stages is None:
        stages = pipeline_stage_names(root)
    if stages is None:
        return {}
    return {
        name: [out["path"] for out in entry.get("outs") or []]
        for name, entry in lock_stages(root).items()
        if name not in stages
    }


def prune_lock(root: Path, stages: Collection[str] | None = None) -> list[str]:
    """Remove dvc.lock's entries of stages not in ``stages`` (default: dvc.yaml's stages under
    the current params.yaml); returns the names removed, sorted.

    Written as DVC writes the file (its own YAML round trip: the entries kept are unchanged,
    byte for byte). DVC rewrites dvc.lock from the file after each stage, so a prune while a
    ``dvc repro`` runs a stage command (the preflight stage's) stays pruned.
    """
    if stages is None:
        stages = pipeline_stage_names(root)
    lock = root / "dvc.lock"
    if stages is None or not lock.is_file():
        return []
    stale = sorted(set(lock_stages(root)) - set(stages))
    if not stale:
        return []
    from dvc.utils.serialize import modify_yaml  # DVC's writer (slow import: only when needed)

    with modify_yaml(str(lock)) as data:
        entries = data.get("stages") or {}
        for name in stale:
            entries.pop(name, None)
    return stale


@dataclass(frozen=True)
class Mismatch:
    path: str
    expected: str
    found: str | None  # None: the output is missing
    files: tuple[str, ...] = ()  # the files of a folder that differ, when DVC's cache lists it

    def describe(self) -> str:
        if self.found is None:
            return f"{self.path}: missing (dvc.lock has {self.expected})"
        detail = f"; changed files: {', '.join(self.files)}" if self.files else ""
        return (
            f"{self.path}: content differs from dvc.lock ({self.found} != {self.expected}){detail}"
        )


def _cached_listing(root: Path, dir_md5: str) -> list[dict[str, Any]] | None:
    """The per-file listing of a locked folder from DVC's local cache, if it is there."""
    value = dir_md5.removesuffix(".dir")
    path = root / ".dvc" / "cache" / "files" / "md5" / value[:2] / f"{value[2:]}.dir"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _changed_files(root: Path, relative: str, expected: str) -> tuple[str, ...]:
    listing = _cached_listing(root, expected)
    if listing is None:
        return ()
    wanted = {entry["relpath"]: entry["md5"] for entry in listing}
    found = {entry["relpath"]: entry["md5"] for entry in directory_entries(root / relative)}
    return tuple(
        f"{relative}/{name}"
        for name in sorted(wanted.keys() | found.keys())
        if wanted.get(name) != found.get(name)
    )


def verify_output(root: Path, relative: str, expected: str) -> Mismatch | None:
    path = root / relative
    if not path.exists():
        return Mismatch(relative, expected, None)
    found = dvc_md5(path)
    if found == expected:
        return None
    files = _changed_files(root, relative, expected) if expected.endswith(".dir") else ()
    return Mismatch(relative, expected, found, files)


def verify_outputs(
    root: Path, paths: list[str] | None = None, stages: Collection[str] | None = None
) -> tuple[list[str], list[Mismatch]]:
    """The locked outputs checked (all, or those at or under ``paths``; only the entries of
    ``stages`` when given) and the mismatches."""
    locked = locked_outputs(root, stages)
    if paths:
        prefixes = [p.rstrip("/") for p in paths]
        unknown = [p for p in prefixes if not any(_under(out, p) for out in locked)]
        if unknown:
            raise KeyError(f"not outputs in dvc.lock: {unknown}")
        locked = {out: md5 for out, md5 in locked.items() if any(_under(out, p) for p in prefixes)}
    checked = sorted(locked)
    mismatches = [m for out in checked if (m := verify_output(root, out, locked[out]))]
    return checked, mismatches


def _under(path: str, prefix: str) -> bool:
    return path == prefix or path.startswith(prefix + "/")


def restore_command(relative: str) -> str:
    """The command that puts the locked content of ``relative`` back from DVC's cache:
    ``--relink`` rewrites the files whatever DVC's state cache says, ``--force`` without asking
    first when DVC does see the change (a truncated file; both tested)."""
    return f"dvc checkout --relink --force {relative}"


def _yaml12(path: Path) -> dict[str, Any]:
    """``path`` read as DVC reads its YAML files (ruamel, YAML 1.2)."""
    from ruamel.yaml import YAML  # DVC's own YAML library

    return YAML(typ="safe", pure=True).load(path.read_text(encoding="utf-8")) or {}


def lock_entry_matches(root: Path, name: str, changed_after: float | None = None) -> bool | None:
    """Whether dvc.lock's entry for stage ``name`` describes the files and params now in
    ``root``: every dep and out hashed as DVC hashes them, every param equal to params.yaml.

    Right after a stage ran, True means DVC recorded what it made (or it made exactly what
    was recorded); False means DVC did not record it (no entry, or the entry of an earlier
    run). None: nothing to compare with (no dvc.lock in ``root``: a ``dvc exp`` copy already
    gone; or an entry DVC 2 wrote, hashed differently), or, given ``changed_after`` (a wall
    time: when dvc exited), a file that differs from the entry was changed after it, by
    someone else (a user's next command): what dvc left cannot be told from it any more.
    """
    if not (root / "dvc.lock").is_file():
        return None
    stages = pipeline_stage_names(root)
    if stages is not None and name not in stages:
        return False  # not a stage of dvc.yaml under the current params: no entry of its own
    # Read as DVC reads it, YAML 1.2: PyYAML's YAML 1.1 reads dvc.lock's `1e-06` as a string
    # against params.yaml's `1.0e-6` float, a false mismatch.
    entry = (_yaml12(root / "dvc.lock").get("stages") or {}).get(name)
    if entry is None:
        return False

    def differs(path: Path) -> bool | None:
        if changed_after is not None and last_change(path) > changed_after:
            return None
        return False

    for item in [*(entry.get("deps") or []), *(entry.get("outs") or [])]:
        if "md5" not in item:
            continue
        if item.get("hash") != "md5":
            return None  # DVC 2's entry: md5 of the text with line endings normalised
        path = root / item["path"]
        if not path.exists() or dvc_md5(path, skip_bytecode=True) != item["md5"]:
            return differs(path)
    for file, values in (entry.get("params") or {}).items():
        path = root / file
        current = _yaml12(path) if path.is_file() else {}
        for key, value in (values or {}).items():
            node: Any = current
            for part in key.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if node != value:
                return differs(path)
    return True


def last_change(path: Path) -> float:
    """The latest change (wall clock) at ``path``: its modification or inode change time (a
    file moved into place keeps its modification time, not its change time), over a folder's
    whole tree; a missing path, the nearest folder above it that exists (a file moved away or
    deleted changes its folder)."""
    while not path.exists() and path != path.parent:
        path = path.parent
    items = [path, *(path.rglob("*") if path.is_dir() else ())]
    latest = 0.0
    for item in items:
        with contextlib.suppress(OSError):  # removed while walking: its folder tells
            stat = item.lstat()
            latest = max(latest, stat.st_mtime, stat.st_ctime)
    return latest


class OutputCorruptedError(RuntimeError):
    """An input differs from its record: an output from what dvc.lock recorded when it was
    produced (or, :class:`tagrpo.data.sources.manifests.SourceMismatchError`, a benchmark file
    from its manifest). A user's matter: printed as one line."""


def stage_inputs(root: Path, dvc_name: str) -> list[str]:
    """The deps dvc.yaml gives stage ``dvc_name`` (``train@grpo-0``) that another stage
    writes (the pipeline's intermediate data, models, metrics); [] for a stage dvc.yaml does
    not have (a stage run by hand under other params)."""
    from tagrpo.plumbing.dvc_stages import load_stages

    stages = load_stages(root)
    stage = stages.get(dvc_name)
    if stage is None:
        return []
    written = {out for other in stages.values() for out in other.outs}
    return [dep for dep in stage.deps if any(_overlap(dep, out) for out in written)]


def _overlap(a: str, b: str) -> bool:
    return _under(a, b) or _under(b, a)


def _files_under(folder: Path, relative: str, inner: str) -> dict[str, str]:
    """md5 by path (``<relative>/<file>``) of the files at ``folder/inner`` (a file or a folder)."""
    path = folder / inner
    if path.is_file():
        return {f"{relative}/{inner}": file_md5(path)}
    if not path.is_dir():
        return {}
    return {
        f"{relative}/{inner}/{entry['relpath']}": entry["md5"] for entry in directory_entries(path)
    }


def _part_mismatch(root: Path, relative: str, expected: str, inner: str) -> Mismatch | None:
    """The part ``inner`` of locked folder ``relative`` against DVC's listing of that folder
    (in its cache); the whole folder when the cache has no listing."""
    listing = _cached_listing(root, expected) if expected.endswith(".dir") else None
    if listing is None:
        return verify_output(root, relative, expected)
    wanted = {
        f"{relative}/{entry['relpath']}": entry["md5"]
        for entry in listing
        if _under(entry["relpath"], inner)
    }
    found = _files_under(root / relative, relative, inner)
    if found == wanted:
        return None
    changed = tuple(
        name for name in sorted(wanted.keys() | found.keys()) if wanted.get(name) != found.get(name)
    )
    if len(changed) == 1 and changed[0] in wanted:  # one file: its own hashes say it
        return Mismatch(changed[0], wanted[changed[0]], found.get(changed[0]))
    return Mismatch(relative, expected, dvc_md5(root / relative), changed)


def check_inputs(root: Path, paths: Collection[str]) -> list[str]:
    """Refuse any of ``paths`` (a stage's inputs) whose content differs from what dvc.lock
    recorded when the stage that wrote it ran: an output itself, a file inside a locked folder
    (checked against DVC's listing of it) or a folder holding locked outputs (each checked).

    By content, not DVC's size-and-mtime state: a parquet or a model damaged in place is
    refused by name before it is read. Returns the locked outputs checked (none: nothing in
    dvc.lock to compare with); raises :class:`OutputCorruptedError`, one line naming the
    damaged file and the command that rebuilds it.
    """
    # Each locked output -> (its md5, the stage that wrote it).
    locked = {
        out["path"]: (out["md5"], name)
        for name, entry in lock_entries(root).items()
        for out in entry.get("outs") or []
        if "md5" in out
    }
    checked = []
    for path in dict.fromkeys(p.rstrip("/") for p in paths):
        for out in sorted(o for o in locked if _overlap(path, o)):
            expected, stage = locked[out]
            mismatch = (
                _part_mismatch(root, out, expected, path[len(out) + 1 :])
                if path != out and _under(path, out)
                else verify_output(root, out, expected)
            )
            if mismatch is not None:
                raise OutputCorruptedError(damaged_input_message(mismatch, out, stage))
            checked.append(out)
    return list(dict.fromkeys(checked))


def damaged_input_message(mismatch: Mismatch, out: str, stage: str) -> str:
    """One line: what differs, and how to rebuild it (or put the recorded copy back)."""
    return (
        f"{mismatch.describe()}. It was changed after stage {stage} wrote it (DVC's state cache "
        "trusts size and mtime, so `dvc status` may not see it): rebuild it with "
        f"`dvc repro -f -s {stage}`, or restore it with `{restore_command(out)}`; if you changed "
        f"it on purpose, `dvc commit {stage}` records it"
    )


def check_against_lock(root: Path, relative: str) -> bool:
    """Refuse ``relative`` (e.g. ``models/grpo-s0``) if its content differs from dvc.lock
    (:func:`check_inputs`). False when dvc.lock has no entry for it (never produced by ``dvc
    repro``): nothing to compare with."""
    return bool(check_inputs(root, [relative]))
