"""The one ``/proc/<pid>/stat`` parser: name, parent, state, start time and CPU time of a process,
and the verl clean-up's liveness check built on it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tagrpo.grading.pool import process_cpu_seconds
from tagrpo.plumbing.procfs import CLOCK_TICKS, pid_alive, proc_stat, process_alive

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")

# A command name holding ") Z ", what a zombie's line holds after its name: a parser that looks
# for the state by substring took such a live process for an exited one.
ZOMBIE_LIKE_NAME = "a) Z (b"


def _wait_for(condition, seconds: float = 5.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_a_process_named_like_a_zombie_is_read_as_alive_then_zombie_then_gone(
    tmp_path: Path,
) -> None:
    program = tmp_path / ZOMBIE_LIKE_NAME
    shutil.copy("/bin/sleep", program)
    child = subprocess.Popen([str(program), "30"])
    try:
        stat = proc_stat(child.pid)  # Popen returns once the program is exec'd
        assert stat.name == ZOMBIE_LIKE_NAME
        assert stat.parent == os.getpid()
        assert not stat.zombie
        assert process_alive(child.pid, stat.start_ticks)
        assert pid_alive(child.pid)  # the verl clean-up must not stop waiting for it
    finally:
        child.kill()
    # Killed, not yet reaped: a zombie, which the verl clean-up counts as gone.
    assert _wait_for(lambda: proc_stat(child.pid).zombie)
    assert proc_stat(child.pid).start_ticks == stat.start_ticks
    assert not pid_alive(child.pid)
    child.wait()
    assert proc_stat(child.pid) is None
    assert not process_alive(child.pid, stat.start_ticks)


def test_cpu_seconds_are_the_kernel_clock_os_times_reads() -> None:
    burn_until = time.process_time() + 0.2
    while time.process_time() < burn_until:
        pass
    before = _ticks(os.times())
    stat = proc_stat(os.getpid())
    seconds = process_cpu_seconds(os.getpid())
    after = _ticks(os.times())
    # In clock ticks, the unit both count in (sums of their float seconds round differently).
    assert before <= stat.cpu_ticks <= round(seconds * CLOCK_TICKS) <= after
    assert stat.cpu_seconds == stat.cpu_ticks / CLOCK_TICKS >= 0.2


def _ticks(times: os.times_result) -> int:
    return round(times.user * CLOCK_TICKS) + round(times.system * CLOCK_TICKS)
