"""Reading other processes from Linux ``/proc`` (no psutil): who a process is, who its parent
is, whether it is still the same process (a pid can be reused; its start time cannot), whether
it has exited (a zombie) and how much CPU it used. The one parser of ``/proc/<pid>/stat``."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Clock ticks per second, the unit of the CPU times and the start time in ``/proc/<pid>/stat``.
CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProcStat:
    name: str  # the command name (``comm``), e.g. ``dvc`` or ``sh``
    parent: int
    group: int  # the process group id
    start_ticks: int  # start time after boot, in clock ticks
    state: str  # ``R`` running, ``S`` sleeping, ``Z`` zombie (exited, not reaped), ...
    cpu_ticks: int  # user + system CPU time, in clock ticks

    @property
    def zombie(self) -> bool:
        return self.state == "Z"

    @property
    def cpu_seconds(self) -> float:
        """User + system CPU seconds (``os.times()``'s clock for this process)."""
        return self.cpu_ticks / CLOCK_TICKS


def proc_stat(pid: int) -> ProcStat | None:
    """``/proc/<pid>/stat`` of a live process (zombies included); None if it is gone."""
    try:  # the command name is any bytes the process chose: never fail on decoding it
        text = Path(f"/proc/{pid}/stat").read_bytes().decode(errors="replace")
    except OSError:
        return None
    if not text:  # reaped between open and read
        return None
    # The command name (field 2) may hold spaces and parentheses: split after the last ')'.
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()  # fields from the 3rd (state) on
    # stat(5): state is field 3, ppid 4, pgrp 5, utime 14, stime 15, starttime 22 (1-based).
    return ProcStat(
        name=name,
        parent=int(fields[1]),
        group=int(fields[2]),
        start_ticks=int(fields[19]),
        state=fields[0],
        cpu_ticks=int(fields[11]) + int(fields[12]),
    )


def process_alive(pid: int, start_ticks: int) -> bool:
    """The process still runs (the same one: pid reuse has another start time)."""
    stat = proc_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks


def pid_alive(pid: int) -> bool:
    """Some process runs under ``pid``: ``kill(pid, 0)`` finds it (another user's counts) and
    it is not a zombie (exited, not yet reaped by its parent; unreadable: alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = proc_stat(pid)
    return stat is None or not stat.zombie


def started_at(pid: int) -> float | None:
    """When ``pid``'s process started, in seconds since the epoch (None: gone, or not Linux)."""
    stat = proc_stat(pid)
    if stat is None:
        return None
    try:
        boot = next(
            int(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
    except (OSError, StopIteration, ValueError):
        return None
    return boot + stat.start_ticks / CLOCK_TICKS


def group_members(group: int) -> list[int]:
    """The processes of process group ``group`` that have not exited (zombies left out)."""
    members = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            stat = proc_stat(int(entry.name))
            if stat is not None and stat.group == group and not stat.zombie:
                members.append(int(entry.name))
    return sorted(members)
