"""Answer kinds that stand in for pathological grading, for GradingPool(extra_kinds=TEST_KINDS).

A hang that burns CPU with the CPU timer's signal blocked (what C code looks like: only a
SIGKILL ends it), a hang that sleeps with that signal blocked (only the wall-clock backstop
sees it), and an item that burns ``float(answer)`` CPU-seconds and is then graded correct. The
functions run in the pool's workers, which import this module by name (it is on the path of
every test, so of the forkserver the pool starts).
"""

from __future__ import annotations

import os
import signal
import time

TEST_HANG_KIND = "_test_hang"
TEST_SLEEP_KIND = "_test_sleep"
TEST_BURN_KIND = "_test_burn"


def burn(response: str, answer: str) -> tuple[bool, str, str]:
    deadline = time.process_time() + float(answer)
    while time.process_time() < deadline:
        pass
    return True, "burned", "exact"


def _block_cpu_timer(answer: str) -> None:
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGPROF})
    if answer:  # a file for the test to read this worker's pid from
        with open(answer, "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))


def sleep(response: str, answer: str) -> tuple[bool, str, str]:
    _block_cpu_timer(answer)
    time.sleep(3600)
    raise AssertionError("unreachable: the pool kills the worker first")


def hang(response: str, answer: str) -> tuple[bool, str, str]:
    _block_cpu_timer(answer)
    while True:  # burn CPU until killed
        pass


TEST_KINDS = {TEST_HANG_KIND: hang, TEST_SLEEP_KIND: sleep, TEST_BURN_KIND: burn}
