"""A grading worker's side of :class:`tagrpo.grading.pool.GradingPool`: its loop, and each
item's CPU-time budget (``ITIMER_PROF`` raising :class:`ItemTimeout`) with the memo of answers
that ran out of it (the pool's docstring has the whole design)."""

from __future__ import annotations

import contextlib
import ctypes
import hashlib
import os
import resource
import signal
import time
from collections.abc import Callable, Mapping
from multiprocessing.connection import Connection
from typing import Any

from tagrpo.grading import verify  # called through the module: a test's patch of it is seen

# A grader for an answer kind beyond ANSWER_KINDS: (response, gold) -> (correct, pred, reason).
KindGrader = Callable[[str, str], tuple[bool, str, str]]
MEMO_LIMIT = 10_000  # remembered timeouts per worker (and in the parent)


class ItemTimeout(BaseException):
    """Raised inside a worker when an item exceeds its CPU-time budget."""


def _cpu_clock() -> float:
    """This process's user + system CPU seconds, on the same clock as ``/proc/<pid>/stat``."""
    times = os.times()
    return times.user + times.system


def item_key(item: tuple[str, str, str]) -> tuple[str, str, str]:
    """A memo key for a whole item: the response hashed (it may be 100 KB), gold and kind."""
    response, answer, kind = item
    digest = hashlib.blake2b(response.encode("utf-8", "surrogatepass"), digest_size=16)
    return digest.hexdigest(), answer, kind


def _on_cpu_timer(signum: int, frame: object) -> None:
    raise ItemTimeout


class _WorkerState:
    """What a worker remembers between items: timed-out answers and items."""

    def __init__(
        self, limit_s: float, extra_kinds: Mapping[str, KindGrader], known_items: list[Any]
    ) -> None:
        self.limit_s = limit_s
        self.extra_kinds = extra_kinds
        self.timed_out_preds: set[tuple[str | None, str, str]] = set()
        self.timed_out_items: set[tuple[str, str, str]] = set(known_items)


def _grade_with_limit(item: tuple[str, str, str], state: _WorkerState) -> tuple[bool, str, str]:
    """Extract and grade one item within its CPU budget; the result as a plain tuple."""

    response, answer, kind = item
    if state.timed_out_items and item_key(item) in state.timed_out_items:
        return False, "", "timeout"  # the watchdog had to kill a worker for this very item
    extracted: str | None = None
    extraction_done = False
    try:
        signal.setitimer(signal.ITIMER_PROF, state.limit_s)
        try:
            extra = state.extra_kinds.get(kind)
            if extra is not None:
                return extra(response, answer)
            extracted = verify.extract_answer(response, kind)
            extraction_done = True
            # Samples of one question often repeat an answer: one that ran out of time once
            # would again, so it is not given another full budget.
            if (extracted, answer, kind) in state.timed_out_preds:
                return False, extracted or "", "timeout"
            result = verify.grade_answer(extracted, answer, kind)
        finally:
            signal.setitimer(signal.ITIMER_PROF, 0)
    except ItemTimeout:
        if extraction_done:
            memo: set[Any] = state.timed_out_preds
            key: Any = (extracted, answer, kind)
        else:
            memo, key = state.timed_out_items, item_key(item)
        if len(memo) < MEMO_LIMIT:
            memo.add(key)
        return False, extracted or "", "timeout"
    except Exception:  # one bad item must not end the batch: record it and go on
        return False, extracted or "", "error"
    return result.correct, result.pred, result.reason


def _set_parent_death_signal() -> None:
    """Linux: get SIGKILLed when the forkserver (which exits with our parent) goes away."""
    with contextlib.suppress(Exception):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def worker_main(
    conn: Connection,
    slot: Any,
    limit_s: float,
    memory_limit_mb: int | None,
    extra_kinds: Mapping[str, KindGrader],
    known_items: list[tuple[str, str, str]],
) -> None:
    """Worker loop: receive a chunk, grade it item by item, send its results back.

    ``slot[0]`` is the position of the current item in the chunk, ``slot[1]`` its start time
    (``time.monotonic``, system-wide; 0 means idle or mid-update) and ``slot[2]`` this
    process's CPU clock at its start. Each result carries the item's wall and CPU seconds;
    each message, this process's CPU clock (so that the pool can account for all its CPU).
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    signal.signal(signal.SIGPROF, _on_cpu_timer)
    _set_parent_death_signal()
    state = _WorkerState(limit_s, extra_kinds, known_items)
    if memory_limit_mb:
        limit = memory_limit_mb * 1024 * 1024
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send(("ready", os.getpid(), _cpu_clock(), time.monotonic()))
    while True:
        try:
            chunk = conn.recv()
        except (EOFError, OSError):
            return
        if chunk is None:
            return
        results = []
        for position, item in enumerate(chunk):
            slot[1] = 0.0
            slot[0] = float(position)
            cpu_start = _cpu_clock()
            slot[2] = cpu_start
            wall_start = time.monotonic()
            slot[1] = wall_start
            try:
                outcome = _grade_with_limit(item, state)
            except ItemTimeout:  # the budget ran out between the last step and the disarm
                outcome = (False, "", "timeout")
            results.append((*outcome, time.monotonic() - wall_start, _cpu_clock() - cpu_start))
        slot[1] = 0.0
        conn.send(("results", results, _cpu_clock()))
