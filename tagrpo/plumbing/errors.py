"""Errors whose fix is the user's: a stage's entry point (and ``tagrpo``) prints them as one
line naming what to fix (the key, the host and port, the path), the trace only when asked
(``--traceback``, ``TAGRPO_TRACEBACK=1``; :func:`tagrpo.pipeline.runtime.run_main`).

They sit on the lowest floor so that every layer that meets such a mistake (a params section,
an endpoint client, the stage runtime) can raise one without importing the stage runtime.
"""

from __future__ import annotations

import errno
import os
import shutil
from collections.abc import Iterable
from pathlib import Path

# A full filesystem, or the user's quota on it.
DISK_FULL_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT})


class UserMistake(Exception):
    """An error the user fixes (not a bug): printed as one line by the stage's entry."""


class MissingSecretError(UserMistake, RuntimeError):
    """A secret's environment variable (an API key) is not set."""


class OutputOutsideProjectError(UserMistake):
    """An output's folder resolves outside the project, where DVC cannot record it."""


class DiskFullError(UserMistake, OSError):
    """No space left where the stage writes; the message names the path and what is free."""


def is_disk_full(error: BaseException) -> bool:
    return isinstance(error, OSError) and error.errno in DISK_FULL_ERRNOS


def disk_full(error: OSError, candidates: Iterable[Path] = ()) -> DiskFullError:
    """``error`` (ENOSPC or EDQUOT) as a :class:`DiskFullError` naming a path: the one the
    error names (a copy's target), else (a write's error names no file) the candidate folder
    whose filesystem has the least space left; and how much is free there."""
    # A copy's or rename's error names source and target: the target is what did not fit.
    given = error.filename2 or error.filename
    named = Path(os.fsdecode(given)) if given else None
    if named is None:
        usable = [path for path in candidates if _usage(path) is not None]
        named = min(usable, key=lambda path: _usage(path) or 0, default=None)
    cause = "quota exceeded" if error.errno == errno.EDQUOT else "no space left on the device"
    if named is None:
        return DiskFullError(error.errno, f"{cause} (no path given): free space, then rerun")
    free = _usage(named)
    where = f"{named}" + (f" ({free / 2**20:.1f} MiB free there)" if free is not None else "")
    return DiskFullError(
        error.errno,
        f"{cause} writing {where}: free space on that filesystem (or point the output "
        "elsewhere), then rerun",
    )


def _usage(path: Path) -> int | None:
    """Free bytes on ``path``'s filesystem (the nearest existing folder above it)."""
    for folder in (path, *path.parents):
        if folder.exists():
            try:
                return shutil.disk_usage(folder).free
            except OSError:
                return None
    return None
