"""The process pool: input order, hard time limits, hung and killed workers, any-thread use."""

import os
import signal
import threading
import time
from pathlib import Path

import pytest
from grading_hooks import TEST_HANG_KIND, TEST_KINDS

from tagrpo.grading.pool import GradingPool, grade_many
from tagrpo.grading.types import GradeItem
from tagrpo.grading.verify import GradeResult, grade_response
from tagrpo.plumbing.procfs import proc_stat

MIXED = [
    GradeItem("so \\boxed{\\dfrac{1}{2}}", "0.5"),
    GradeItem("\\boxed{3} then \\boxed{4}", "3"),
    GradeItem("no box", "7"),
    GradeItem("\\boxed{x \\le 2}", "(-\\infty, 2]"),
    GradeItem("\\boxed{(2, 1)}", "(1, 2)"),
    GradeItem("Answer: (c)", "C", "multiple_choice"),
    GradeItem("\\boxed{2\\sqrt{2}}", "\\sqrt{8}"),
    GradeItem("\\boxed{1,000}", "1000"),
] * 5


@pytest.fixture(scope="module")
def pool():
    with GradingPool(workers=2, item_timeout_s=5.0, chunk_size=3) as shared:
        yield shared


def test_results_in_input_order_match_in_process_grading(pool):
    expected = [grade_response(*item) for item in MIXED]
    assert pool.grade(MIXED) == expected
    assert [r.correct for r in expected[:8]] == [True, False, False, True, False, True, True, True]


def test_plain_tuples_default_to_math_and_empty_input(pool):
    assert pool.grade([("\\boxed{5}", "5")]) == [GradeResult(True, "5", "exact")]
    assert pool.grade([]) == []


def test_unknown_answer_kind_is_rejected_before_grading(pool):
    with pytest.raises(ValueError, match="answer_kind"):
        pool.grade([GradeItem("\\boxed{1}", "1", "essay")])
    with pytest.raises(ValueError, match="answer_kind"):  # hooks are off in this pool
        pool.grade([GradeItem("", "", TEST_HANG_KIND)])


def test_usable_from_another_thread():
    outcome: list = []

    def run() -> None:  # a Prefect task thread, say: no signals may be used here
        with GradingPool(workers=1) as threaded:
            outcome.append(threaded.grade(MIXED[:8]))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout=60)
    assert outcome == [[grade_response(*item) for item in MIXED[:8]]]


def test_grade_many():
    results = grade_many([("\\boxed{4}", "4"), ("\\boxed{5}", "4")], workers=1)
    assert results == [GradeResult(True, "4", "exact"), GradeResult(False, "5", "mismatch")]


def test_closed_pool_refuses_work():
    closed = GradingPool(workers=1)
    closed.close()
    with pytest.raises(RuntimeError, match="closed"):
        closed.grade([("\\boxed{1}", "1")])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_pathological_answer_hits_the_time_limit():
    tower = "Huge: \\boxed{10^{10^{10^{10}}}}"
    items = [
        GradeItem("\\boxed{1}", "1"),
        GradeItem(tower, "1"),
        GradeItem("\\boxed{2}", "2"),
        GradeItem(f"Again. {tower}", "1"),  # the same answer does not get a second full limit
        GradeItem(f"And again. {tower}", "1"),
    ]
    with GradingPool(workers=2, item_timeout_s=1.0, kill_grace_s=0.5) as limited:
        began = time.monotonic()
        results = limited.grade(items)
        elapsed = time.monotonic() - began
    assert results[0] == GradeResult(True, "1", "exact")
    assert results[2] == GradeResult(True, "2", "exact")
    for index in (1, 3, 4):
        assert results[index] == GradeResult(False, "10^{10^{10^{10}}}", "timeout")
    assert elapsed < 1.0 + 0.5 + 2.0  # limit + grace + slack for a busy machine


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_watchdog_kills_a_hang_the_timer_cannot_stop():
    items = [GradeItem(f"\\boxed{{{i}}}", str(i)) for i in range(10)]
    items.insert(4, GradeItem("hangs in C", "", TEST_HANG_KIND))
    with GradingPool(
        workers=2, item_timeout_s=0.5, kill_grace_s=0.5, chunk_size=4, extra_kinds=TEST_KINDS
    ) as hooked:
        began = time.monotonic()
        results = hooked.grade(items)
        elapsed = time.monotonic() - began
        assert hooked.restarts == 1
        # The replacement worker grades the next batch normally.
        assert hooked.grade([("\\boxed{9}", "9")]) == [GradeResult(True, "9", "exact")]
    assert results[4] == GradeResult(False, "", "timeout")
    assert [r.correct for i, r in enumerate(results) if i != 4] == [True] * 10
    assert elapsed < 0.5 + 0.5 + 2.5  # limit + grace + slack for the restart


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_externally_killed_worker_is_replaced(tmp_path: Path):
    pid_file = tmp_path / "hung_worker.pid"
    items = [GradeItem(f"\\boxed{{{i}}}", str(i)) for i in range(20)]
    items.insert(2, GradeItem("hangs", str(pid_file), TEST_HANG_KIND))

    def kill_the_hung_worker() -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if pid_file.exists() and pid_file.read_text():
                os.kill(int(pid_file.read_text()), signal.SIGKILL)
                return
            time.sleep(0.02)

    # The limit is long, so the watchdog stays out of it: only the external kill ends the hang.
    with GradingPool(workers=2, item_timeout_s=60, chunk_size=5, extra_kinds=TEST_KINDS) as hooked:
        killer = threading.Thread(target=kill_the_hung_worker)
        killer.start()
        began = time.monotonic()
        results = hooked.grade(items)
        elapsed = time.monotonic() - began
        killer.join()
        assert hooked.restarts == 1
    assert results[2] == GradeResult(False, "", "error")
    assert [r.correct for i, r in enumerate(results) if i != 2] == [True] * 20
    assert elapsed < 10


# --- the start-up deadline guards start-up, not the caller's work before its first grade ------


def test_first_grade_after_a_caller_slower_than_the_start_up_deadline(monkeypatch):
    """Sampling for longer than the deadline between launch() and the first grade must not
    fail: the workers were ready long ago, their messages just unread (issue 19)."""
    import tagrpo.grading.pool as pool_module

    monkeypatch.setattr(pool_module, "_START_TIMEOUT_S", 1.0)
    pool = GradingPool(workers=2, warm_up=False)
    pool.launch()
    try:
        time.sleep(2.5)  # the caller "samples" for longer than the whole start-up deadline
        assert pool.grade([("\\boxed{3}", "3")]) == [GradeResult(True, "3", "exact")]
        assert pool.startup_s is not None and pool.startup_s < 2.5  # launch to ready, not to read
    finally:
        pool.close()


def test_first_grade_after_the_clock_moved_past_launch_plus_deadline(monkeypatch):
    """The same with a shifted clock: an hour between launch and the first grade."""
    import tagrpo.grading.pool as pool_module

    pool = GradingPool(workers=1, warm_up=False)
    pool.launch()
    try:
        real_monotonic = time.monotonic
        time.sleep(1.0)
        monkeypatch.setattr(pool_module.time, "monotonic", lambda: real_monotonic() + 3600.0)
        assert pool.grade([("\\boxed{4}", "4")])[0].correct
    finally:
        monkeypatch.undo()
        pool.close()


def test_start_up_deadline_still_fires_and_counts_from_the_wait(monkeypatch):
    """Workers that never become ready fail the first grade one deadline after it began
    waiting, however long the caller worked after launch(), and the pool is closed."""
    from hanging_worker import never_ready

    import tagrpo.grading.pool as pool_module

    monkeypatch.setattr(pool_module, "_START_TIMEOUT_S", 1.5)
    monkeypatch.setattr(pool_module, "worker_main", never_ready)
    pool = GradingPool(workers=1, warm_up=False)
    pool.launch()
    pids = pool.worker_pids
    time.sleep(2.0)  # longer than the deadline: it must not have been spent already
    began = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start within 2 s of waiting"):
        pool.grade([("\\boxed{1}", "1")])
    waited = time.monotonic() - began
    assert 1.5 <= waited < 5.0
    with pytest.raises(RuntimeError, match="closed"):
        pool.grade([("\\boxed{1}", "1")])
    for pid in pids:  # the hanging workers were stopped with the pool
        deadline = time.monotonic() + 5
        while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        stat = proc_stat(pid)
        assert stat is None or stat.zombie


def test_grade_fn_survives_a_slow_first_call(monkeypatch):
    """The evaluation path as the issue reproduced it: make_grade_fn(), then sampling longer
    than the start-up deadline, then the first call."""
    import tagrpo.grading.pool as pool_module
    from tagrpo.grading.grade_fn import make_grade_fn

    monkeypatch.setattr(pool_module, "_START_TIMEOUT_S", 1.0)
    with make_grade_fn(workers=1) as grade:
        time.sleep(2.0)
        assert grade(["\\boxed{7}"], ["7"], ["math"]) == [(True, "7", "exact")]


def test_launch_returns_while_the_forkserver_still_imports_the_grader(monkeypatch):
    """launch() does not wait for the forkserver (it answers a worker's start only after its
    imports): a caller loading its model meanwhile is not held up. A failed start surfaces at
    the first grade, named, and close() still works."""
    import threading

    import tagrpo.grading.pool as pool_module

    real = pool_module._ensure_forkserver
    imported = threading.Event()

    def slow_forkserver(warm_up: bool) -> None:
        assert imported.wait(timeout=30)  # the grader's imports, until the test says done
        real(warm_up)

    monkeypatch.setattr(pool_module, "_ensure_forkserver", slow_forkserver)
    pool = GradingPool(workers=1, warm_up=False)
    pool.launch()  # returns with the forkserver "still importing"
    pool.launch()  # idempotent while the first is under way
    try:
        assert not imported.is_set()
        imported.set()
        assert pool.grade([("\\boxed{5}", "5")]) == [GradeResult(True, "5", "exact")]
        assert len(pool.worker_pids) == 1
    finally:
        pool.close()

    def broken_forkserver(warm_up: bool) -> None:
        raise OSError("no forkserver here")

    monkeypatch.setattr(pool_module, "_ensure_forkserver", broken_forkserver)
    failing = GradingPool(workers=1, warm_up=False)
    failing.launch()
    with pytest.raises(RuntimeError, match="could not be started: no forkserver here"):
        failing.grade([("\\boxed{5}", "5")])
    failing.close()
    with pytest.raises(RuntimeError, match="closed"):
        failing.grade([("\\boxed{5}", "5")])
