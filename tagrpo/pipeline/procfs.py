"""Reading other processes from Linux ``/proc`` (no psutil): who a process is, who its parent
is, and whether it is still the same process (a pid can be reused; its start time cannot)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class ProcStat:
    name: str  # the command name (``comm``), e.g. ``dvc`` or ``sh``
    parent: int
    start_ticks: int  # start time after boot, in clock ticks


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` of a live process (zombies included); None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on
    return ProcStat(name, int(fields[1]), int(fields[19]))


def process_alive(pid: int, start_ticks: int) -> bool:
    """The process still runs (the same one: pid reuse has another start time)."""
    stat = proc_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks
