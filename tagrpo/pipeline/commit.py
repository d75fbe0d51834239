"""Moving a stage's finished outputs into place: the old ones go only once the new ones are there.

A stage writes into its staging folder (``.tagrpo/staging/<stage>-<pid>``, on the checkout's
filesystem); an output may live elsewhere: a symlink to a scratch disk (``evals/grpo-s0 ->
/scratch/...``), a folder under a symlinked parent, a filesystem mounted over the folder itself.
A rename does not cross filesystems (nor mount points: ``EXDEV``), so :func:`commit_outputs`
works in three steps, each on the destination's own filesystem:

1. **prepare**: each new output is renamed, or where that is not possible copied, to a
   temporary name beside its destination (symlinks resolved: a symlinked output stays a
   symlink, its target gets the new content), the metrics file written there too;
2. **swap**: the old metrics are set aside first, then each old output is renamed aside
   (``.<name>.tagrpo-old-<pid>``) and its new version renamed into place, the new metrics
   last (no new output sits beside stale metrics); a folder that is a mount point cannot be
   renamed: its entries are swapped one by one instead;
3. **finish**: the old copies set aside are removed.

A failure in step 1 or 2 undoes what was done (the old outputs back in place, the temporary
copies removed) and raises: the old outputs or the new ones, never neither. Each step is
recorded first in a journal (``.tagrpo/commits/<stage>-<pid>.json``), so a commit cut short by
SIGKILL or a power cut is completed or undone the same way by the next stage that starts
(:func:`recover_commits`): undone while any new output was not yet in place, finished (old
copies removed) once all were.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

JOURNALS = Path(".tagrpo") / "commits"


@dataclass(frozen=True)
class Swap:
    """One entry to replace: the new version is renamed to ``destination`` once the old one
    (if any) is at ``aside``; all three paths on one filesystem, in one folder."""

    destination: str
    new: str | None  # None: the old entry goes and nothing replaces it
    aside: str | None  # None: nothing there before
    # (device, inode) of the new version once prepared: a rename keeps them, so the undo
    # tells the new version from the old wherever it is, however far a first undo got.
    identity: tuple[int, int] | None = None


@dataclass
class Journal:
    """What a commit does and how far it got (``preparing``, ``swapping``, ``swapped``)."""

    path: Path
    stage: str
    state: str
    swaps: list[Swap]
    scratch: list[str]  # temporary folders to remove at the end (a mount point's)

    def save(self, state: str) -> None:
        self.state = state
        self.path.parent.mkdir(parents=True, exist_ok=True)
        temporary = self.path.with_name(f".{self.path.name}.tmp")
        body = {
            "stage": self.stage,
            "state": state,
            "swaps": [asdict(swap) for swap in self.swaps],
            "scratch": self.scratch,
        }
        with open(temporary, "w", encoding="utf-8") as handle:
            json.dump(body, handle, indent=1)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(temporary, self.path)

    @classmethod
    def load(cls, path: Path) -> Journal:
        body = json.loads(path.read_text())
        swaps = [
            Swap(**{**swap, "identity": tuple(swap["identity"]) if swap["identity"] else None})
            for swap in body["swaps"]
        ]
        return cls(path, body["stage"], body["state"], swaps, list(body["scratch"]))


# The filesystem steps, one function each (tests inject a failure into each in turn).
def _rename(source: Path, target: Path) -> None:
    os.rename(source, target)


def _copy(source: Path, target: Path) -> None:
    """A copy of a file, symlink or folder; the first error raised as it is, naming the path
    it failed on (``shutil.copytree`` collects errors as text, losing a full disk's errno)."""
    try:
        if source.is_symlink():
            os.symlink(os.readlink(source), target)
        elif source.is_dir():
            target.mkdir()
            for entry in sorted(source.iterdir()):
                _copy(entry, target / entry.name)
            shutil.copystat(source, target)
        else:
            shutil.copy2(source, target)
    except OSError as error:
        if error.filename or error.errno is None:
            raise
        raise OSError(error.errno, error.strerror, str(target)) from error  # a write's error


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()


def _write(path: Path, text: str) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())


def real_destination(path: Path) -> Path:
    """Where ``path``'s content lives: every symlink on the way resolved (the link stays)."""
    return Path(os.path.realpath(path))


def mount_points() -> set[str]:
    """Every mount point of this process's view (``/proc/self/mountinfo``; bind mounts of the
    same filesystem included, which ``os.path.ismount`` does not see)."""
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return set()
    found = set()
    for line in lines:
        fields = line.split(" ")
        if len(fields) > 4:
            # Spaces, tabs, newlines and backslashes are octal escapes there (\040...).
            found.add(fields[4].encode().decode("unicode_escape"))
    return found


def is_mount_point(path: Path, mounts: set[str]) -> bool:
    return path.is_dir() and (os.path.ismount(path) or str(path) in mounts)


def _place(staged: Path, target: Path) -> None:
    """``staged`` at ``target`` (a rename, or a copy where a rename cannot reach)."""
    try:
        _rename(staged, target)
    except OSError as error:
        if error.errno != errno.EXDEV:
            raise
        try:
            _copy(staged, target)
        except BaseException:
            _remove(target)  # no half copy stays behind
            raise


def commit_outputs(
    root: Path, stage: str, staged: dict[Path, Path], metrics: Path, metrics_text: str
) -> None:
    """Put ``staged`` (final path -> staged path) and the metrics file in place; see the
    module docstring. Raises after undoing (old outputs in place) if step 1 or 2 fails."""
    tag = f"tagrpo-{os.getpid()}"
    mounts = mount_points()
    journal = Journal(
        root / JOURNALS / f"{stage.replace('/', '_')}-{os.getpid()}.json", stage, "", [], []
    )
    plan: list[tuple[Path, Path, bool]] = []  # (staged, new, is a mount point's entries)
    metrics_final = real_destination(root / metrics)
    metrics_aside = _aside(metrics_final, tag) if os.path.lexists(metrics_final) else None
    journal.swaps.append(Swap(str(metrics_final), None, _text(metrics_aside)))
    for final, source in staged.items():
        destination = real_destination(root / final)
        if is_mount_point(destination, mounts):
            if not source.is_dir():
                raise IsADirectoryError(
                    f"{final} is a mount point ({destination}); the stage wrote a file there"
                )
            container, old = destination / f".{tag}-new", destination / f".{tag}-old"
            journal.scratch += [str(container), str(old)]
            plan.append((source, container, True))
            present = {p.name for p in destination.iterdir()} - {container.name, old.name}
            for name in sorted(present | {p.name for p in source.iterdir()}):
                journal.swaps.append(
                    Swap(
                        str(destination / name),
                        str(container / name) if os.path.lexists(source / name) else None,
                        str(old / name) if name in present else None,
                    )
                )
        else:
            new = destination.with_name(f".{destination.name}.{tag}-new")
            aside = _aside(destination, tag) if os.path.lexists(destination) else None
            plan.append((source, new, False))
            journal.swaps.append(Swap(str(destination), str(new), _text(aside)))
    metrics_new = metrics_final.with_name(f".{metrics_final.name}.{tag}-new")
    journal.swaps.append(Swap(str(metrics_final), str(metrics_new), None))
    journal.save("preparing")
    try:
        for source, new, entries in plan:
            new.parent.mkdir(parents=True, exist_ok=True)
            _place(source, new)
            if entries:
                (new.parent / f".{tag}-old").mkdir()
        metrics_new.parent.mkdir(parents=True, exist_ok=True)
        _write(metrics_new, metrics_text)
        journal.swaps = [
            replace(swap, identity=_identity(Path(swap.new))) if swap.new else swap
            for swap in journal.swaps
        ]
        journal.save("swapping")
        for swap in journal.swaps:
            if swap.aside is not None:
                _rename(Path(swap.destination), Path(swap.aside))
            if swap.new is not None:
                _rename(Path(swap.new), Path(swap.destination))
        journal.save("swapped")
    except BaseException as error:
        try:
            undo(journal)
        except BaseException as failure:  # the journal stays: the next stage start retries
            raise RuntimeError(
                f"stage {stage}: committing its outputs failed ({type(error).__name__}: "
                f"{error}) and so did putting the old ones back ({type(failure).__name__}: "
                f"{failure}); the next stage run retries, from {journal.path}"
            ) from error
        raise
    finish(journal, print)


def _aside(path: Path, tag: str) -> Path:
    return path.with_name(f".{path.name}.{tag}-old")


def _text(path: Path | None) -> str | None:
    return None if path is None else str(path)


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        found = os.lstat(path)
    except FileNotFoundError:
        return None
    return found.st_dev, found.st_ino


def undo(journal: Journal) -> None:
    """The old outputs back in place and every temporary copy removed, from however far the
    commit (or an earlier undo) got: what sits where is read from the filesystem, a new
    version known by its inode. Removes the journal."""
    placed = {swap.identity for swap in journal.swaps if swap.identity}
    for swap in reversed(journal.swaps):
        destination = Path(swap.destination)
        if swap.new is not None and os.path.lexists(swap.new):
            _remove(Path(swap.new))  # not placed yet
        if _identity(destination) in placed:
            _remove(destination)  # a new version in place
        if swap.aside is not None and os.path.lexists(swap.aside):
            if os.path.lexists(destination):  # neither old nor new: not the commit's to drop
                raise FileExistsError(
                    f"{destination} appeared during the commit: the old version waits at "
                    f"{swap.aside}"
                )
            _rename(Path(swap.aside), destination)
    for folder in journal.scratch:
        _remove(Path(folder))
    journal.path.unlink(missing_ok=True)


def finish(journal: Journal, report: Callable[[str], None]) -> None:
    """Every new output is in place: remove the old copies set aside, then the journal. A copy
    that cannot be removed is reported (the stage's result stands) and stays in the journal."""
    left = []
    for path in [s.aside for s in journal.swaps if s.aside] + journal.scratch:
        try:
            _remove(Path(path))
        except OSError as error:
            left.append(f"{path} ({error.strerror or error})")
    if left:
        report(
            "[stage] the new outputs are in place; could not remove the old copies "
            f"{', '.join(left)}: the next stage run retries (or remove them by hand)"
        )
        return
    journal.path.unlink(missing_ok=True)


def recover_commits(root: Path, owner_gone: Callable[[Path], bool]) -> list[str]:
    """Complete or undo the commits that a stopped process left half done (its journal in
    ``.tagrpo/commits``; ``owner_gone(journal)`` says whether its process is gone). Returns
    one line per commit recovered (also printed)."""
    folder = root / JOURNALS
    done = []
    for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
        if not owner_gone(path):
            continue
        journal = Journal.load(path)
        if journal.state == "swapped":
            finish(journal, print)
            line = f"{journal.stage}: its new outputs were in place; removed the old copies"
        else:
            undo(journal)
            line = f"{journal.stage}: its commit was cut short; the old outputs are back"
        print(f"[stage] recovered an interrupted commit of {line}")
        done.append(line)
    return done
