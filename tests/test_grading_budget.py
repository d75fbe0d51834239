"""Deterministic verdicts under load: the per-item limit is CPU time, the wall clock only a
backstop, and only CPU-budget timeouts are remembered.

Load is made, not hoped for: busy processes pinned with the worker to one core (so the worker
gets a fraction of it whatever else runs on the machine), or the worker stopped outright
(SIGSTOP: no CPU at all, a slow wall clock as far as the item is concerned).
"""

import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from grading_hooks import TEST_BURN_KIND, TEST_HANG_KIND, TEST_KINDS, TEST_SLEEP_KIND

from tagrpo.grading.pool import GradingPool, process_cpu_seconds
from tagrpo.grading.types import GradeItem
from tagrpo.grading.verify import GradeResult, grade_response

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

REAL_ITEMS = [
    GradeItem("\\boxed{\\frac{1}{2004 \\cdot 2003!}}", "\\frac{1}{2004!}"),
    GradeItem("\\boxed{\\frac{1}{2005!}}", "\\frac{1}{2004!}"),
    GradeItem("\\boxed{(x+1)^2}", "x^2 + 2x + 1"),
    GradeItem("\\boxed{x \\le 2}", "(-\\infty, 2]"),
    GradeItem("\\boxed{1.5708}", "1.6"),
    GradeItem("Answer: (c)", "C", "multiple_choice"),
]


class PinnedLoad:
    """``count`` busy-looping processes sharing one core with the pids given."""

    def __init__(self, pids: list[int], count: int = 3) -> None:
        self.core = min(os.sched_getaffinity(0))
        self.pids = pids
        self.count = count
        self.busy: list[subprocess.Popen] = []

    def __enter__(self) -> "PinnedLoad":
        for pid in self.pids:
            os.sched_setaffinity(pid, {self.core})
        for _ in range(self.count):
            process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
            os.sched_setaffinity(process.pid, {self.core})
            self.busy.append(process)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.busy:
            process.kill()
            process.wait()


def test_cpu_budget_ignores_load():
    """0.6 CPU-s of work under a 1 CPU-s budget passes even when it takes several seconds of
    wall time; 1.5 CPU-s of work times out, loaded or not."""
    items = [GradeItem("", "0.6", TEST_BURN_KIND), GradeItem("", "1.5", TEST_BURN_KIND)]
    with GradingPool(
        workers=1, item_timeout_s=1.0, kill_grace_s=1.0, extra_kinds=TEST_KINDS
    ) as pool:
        idle = pool.grade(items)
        with PinnedLoad(pool.worker_pids):
            began = time.monotonic()
            loaded = pool.grade(items[:1])
            loaded_wall = time.monotonic() - began
            loaded += pool.grade(items[1:])
        assert pool.restarts == 0
    expected = [GradeResult(True, "burned", "exact"), GradeResult(False, "", "timeout")]
    assert idle == expected
    assert loaded == expected
    # The premise: under this load a wall-clock limit of 1 s would have failed the first item.
    assert loaded_wall > 1.0


def test_real_items_give_the_same_verdicts_under_load():
    expected = [grade_response(*item) for item in REAL_ITEMS]
    with GradingPool(workers=1, item_timeout_s=2.0, warm_up=False) as pool:
        with PinnedLoad(pool.worker_pids, count=4):
            loaded = pool.grade(REAL_ITEMS)  # cold worker: imports sympy under load too
        assert loaded == expected
        assert pool.grade(REAL_ITEMS) == expected
    assert [r.correct for r in expected] == [True, False, True, True, True, True]


def test_a_starved_worker_is_retried_and_its_verdict_kept():
    """A worker that gets no CPU (stopped) trips the wall-clock backstop; the item is graded
    again on a fresh worker, correctly, and is not remembered as a timeout."""
    item = GradeItem("", "0.3", TEST_BURN_KIND)
    # The backstop leaves the fresh worker room to start and burn 0.3 CPU-s on a busy machine
    # (1.5 s was tripped twice at load 7 on 2 cores).
    with GradingPool(
        workers=1, item_timeout_s=1.0, wall_timeout_s=5.0, extra_kinds=TEST_KINDS
    ) as pool:
        stopped = pool.worker_pids[0]

        def stop_soon() -> None:
            time.sleep(0.1)
            os.kill(stopped, signal.SIGSTOP)

        stopper = threading.Thread(target=stop_soon)
        stopper.start()
        first = pool.grade([item])
        stopper.join()
        assert pool.restarts == 1
        assert stopped not in pool.worker_pids
        second = pool.grade([item])  # not memoised: graded in full again
        assert pool.restarts == 1
    assert first == second == [GradeResult(True, "burned", "exact")]


def test_a_worker_that_never_progresses_ends_as_wall_timeout_after_one_retry():
    items = [GradeItem("sleeps", "", TEST_SLEEP_KIND), GradeItem("\\boxed{3}", "3")]
    with GradingPool(
        workers=1, item_timeout_s=0.5, wall_timeout_s=1.0, extra_kinds=TEST_KINDS
    ) as pool:
        began = time.monotonic()
        results = pool.grade(items)
        elapsed = time.monotonic() - began
        assert pool.restarts == 2  # the first kill retries, the second settles
    assert results == [GradeResult(False, "", "wall_timeout"), GradeResult(True, "3", "exact")]
    assert elapsed < 3 * (2 * 1.0 + 1.0)


def test_cpu_watchdog_kills_a_hang_and_remembers_it():
    hang = GradeItem("hangs in C", "", TEST_HANG_KIND)
    with GradingPool(
        workers=1, item_timeout_s=0.5, kill_grace_s=0.5, extra_kinds=TEST_KINDS
    ) as pool:
        assert pool.grade([hang, GradeItem("\\boxed{4}", "4")]) == [
            GradeResult(False, "", "timeout"),
            GradeResult(True, "4", "exact"),
        ]
        assert pool.restarts == 1
        _, cpu = pool.last_timings[0]
        assert cpu >= 1.0  # killed for CPU: limit + grace used
        # A CPU-budget kill is remembered: the same item is not given another budget.
        assert pool.grade([hang]) == [GradeResult(False, "", "timeout")]
        assert pool.restarts == 1


def test_in_worker_budget_memo_covers_equal_answers():
    tower = "\\boxed{10^{10^{10^{10}}}}"
    items = [GradeItem(f"First. {tower}", "1"), GradeItem(f"Again, in other words. {tower}", "1")]
    with GradingPool(workers=1, item_timeout_s=0.5, kill_grace_s=2.0) as pool:
        results = pool.grade(items)
        assert pool.restarts == 0
        (_, first_cpu), (_, second_cpu) = pool.last_timings
    assert results == [GradeResult(False, "10^{10^{10^{10}}}", "timeout")] * 2
    assert first_cpu >= 0.45
    assert second_cpu < 0.1  # the same pred, gold and kind: no second budget


def test_pool_accounts_for_worker_cpu():
    with GradingPool(workers=2, item_timeout_s=2.0, extra_kinds=TEST_KINDS) as pool:
        pool.grade([GradeItem("", "0.3", TEST_BURN_KIND)] * 4)
        assert 1.1 < pool.worker_cpu_s < 2.0
        assert [round(cpu, 1) for _, cpu in pool.last_timings] == [0.3] * 4
        assert all(process_cpu_seconds(pid) is not None for pid in pool.worker_pids)
