"""Grading in worker processes with a hard per-item time limit.

Why processes: math-verify and sympy are CPU-bound (threads give no speed-up), and a time limit
can only interrupt Python code through a signal, which works in a process's main thread only:
never in a thread pool or a Prefect task thread. The parent side uses no signals, so a pool can
be driven from any thread.

Two layers enforce the limit:

1. In the worker, an interval timer (``signal.setitimer``) raises :class:`ItemTimeout` when an
   item runs past ``item_timeout_s``; the item is graded incorrect with reason ``timeout``.
   ``ItemTimeout`` is a ``BaseException`` so that the ``except Exception`` blocks inside
   math-verify cannot swallow it.
2. In the parent, a watchdog reads each worker's current item and its start time from shared
   memory and SIGKILLs a worker stuck past ``item_timeout_s + kill_grace_s`` (C code that never
   returns to the interpreter, where no signal handler can run). That item is graded
   ``timeout``, the rest of the worker's chunk is re-queued and a fresh worker replaces it.

Workers are forked by a ``forkserver`` that has already imported :mod:`tagrpo.grading.verify`
(sympy, math-verify), so a replacement starts in a fraction of a second. Items travel in chunks
(one message per chunk each way) so that IPC stays far below the grading cost; a question's
samples stay in one chunk where possible, since each worker caches parsed gold answers.

As with any ``spawn``/``forkserver`` pool, each worker imports the caller's main module: a
script needs the ``if __name__ == "__main__":`` guard, and code piped through stdin cannot start
workers.
"""

from __future__ import annotations

import contextlib
import math
import multiprocessing as mp
import os
import re
import signal
import threading
import time
from collections import deque
from collections.abc import Sequence
from multiprocessing.connection import Connection, wait
from typing import Any, NamedTuple

from tagrpo.grading.verify import (
    ANSWER_KINDS,
    WARM_UP_ON_IMPORT_ENV,
    GradeResult,
    extract_pred,
    grade_response,
)

_PRELOAD = ["tagrpo.grading.verify"]
# Test-only answer kind: block SIGALRM and sleep, i.e. a hang the in-worker timer cannot end.
# Honoured only by pools built with ``enable_test_hooks=True``.
TEST_HANG_KIND = "_test_hang"
_START_TIMEOUT_S = 120.0
_MAX_WAIT_S = 0.25  # the watchdog's polling period while items are in flight
_ENV_LOCK = threading.Lock()
_PLAIN_INTEGER = re.compile(r"-?\d+")


class GradeItem(NamedTuple):
    response: str
    answer: str
    answer_kind: str = "math"


class ItemTimeout(BaseException):
    """Raised inside a worker when an item exceeds its time limit."""


# --- worker side -----------------------------------------------------------------------------


def _on_alarm(signum: int, frame: object) -> None:
    raise ItemTimeout


def _test_hang(pid_file: str) -> None:
    """Hang the way C code does: SIGALRM blocked, so only a SIGKILL ends it."""
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    if pid_file:
        with open(pid_file, "w", encoding="utf-8") as handle:
            handle.write(str(os.getpid()))
    time.sleep(3600)


def _grade_with_limit(
    item: tuple[str, str, str],
    limit_s: float,
    test_hooks: bool,
    timed_out: set[tuple[str, str, str]],
) -> tuple[bool, str, str]:
    response, answer, kind = item
    if kind == TEST_HANG_KIND and test_hooks:
        _test_hang(answer)
    # Samples of one question often repeat an answer: one that ran out of time once would
    # again, so it is not given another full time limit. Checked only once there is one.
    if timed_out and _timeout_key(item) in timed_out:
        return False, extract_pred(response, kind), "timeout"
    try:
        signal.setitimer(signal.ITIMER_REAL, limit_s)
        try:
            result = grade_response(response, answer, kind)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    except ItemTimeout:
        if len(timed_out) < 10_000:
            timed_out.add(_timeout_key(item))
        return False, extract_pred(response, kind), "timeout"
    except Exception:  # one bad item must not end the batch: record it and go on
        return False, extract_pred(response, kind), "error"
    return result.correct, result.pred, result.reason


def _timeout_key(item: tuple[str, str, str]) -> tuple[str, str, str]:
    response, answer, kind = item
    return extract_pred(response, kind), answer, kind


def _set_parent_death_signal() -> None:
    """Linux: get SIGKILLed when the forkserver (which exits with our parent) goes away."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def _worker_main(
    conn: Connection,
    slot: Any,
    limit_s: float,
    memory_limit_mb: int | None,
    test_hooks: bool,
    known_timeouts: list[tuple[str, str, str]],
) -> None:
    """Worker loop: receive a chunk, grade it item by item, send its results back.

    ``slot[0]`` is the position of the current item in the chunk and ``slot[1]`` its start time
    (``time.monotonic``, system-wide); ``slot[1] == 0`` means idle or mid-update.
    """
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's business
    signal.signal(signal.SIGALRM, _on_alarm)
    _set_parent_death_signal()
    timed_out = set(known_timeouts)  # (pred, gold, kind) that ran out of time before
    if memory_limit_mb:
        import resource

        limit = memory_limit_mb * 1024 * 1024
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    conn.send(("ready", os.getpid()))
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
            slot[1] = time.monotonic()
            results.append(_grade_with_limit(item, limit_s, test_hooks, timed_out))
        slot[1] = 0.0
        conn.send(("results", results))


# --- parent side -----------------------------------------------------------------------------


def _ensure_warm_forkserver() -> None:
    """Start this process's forkserver (once) so that it imports and warms up the grader.

    The forkserver inherits the environment at its start; the variable tells the preloaded
    :mod:`tagrpo.grading.verify` to run :func:`~tagrpo.grading.verify.warm_up`. If some other
    code started the forkserver first, workers simply start with colder caches.
    """
    from multiprocessing import forkserver

    with _ENV_LOCK:
        previous = os.environ.get(WARM_UP_ON_IMPORT_ENV)
        os.environ[WARM_UP_ON_IMPORT_ENV] = "1"
        try:
            forkserver.ensure_running()
        finally:
            if previous is None:
                os.environ.pop(WARM_UP_ON_IMPORT_ENV, None)
            else:
                os.environ[WARM_UP_ON_IMPORT_ENV] = previous


class _Worker:
    def __init__(self, context: Any, pool: GradingPool) -> None:
        self.slot = context.RawArray("d", 2)
        self.conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(
            target=_worker_main,
            args=(
                child_conn,
                self.slot,
                pool.item_timeout_s,
                pool.memory_limit_mb,
                pool.enable_test_hooks,
                list(pool._known_timeouts),
            ),
            name="tagrpo-grader",
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        self.ready = False
        self.chunk: list[int] | None = None
        self.chunks_done = 0

    def current(self) -> tuple[int, float] | None:
        """(position in chunk, start time) of the item being graded, None if unknown."""
        started = self.slot[1]
        position = self.slot[0]
        if started <= 0.0 or self.slot[1] != started:
            return None  # idle, or the worker is moving to its next item
        return int(position), started

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class GradingPool:
    """A persistent pool of grading processes; use as a context manager.

    ``grade(items)`` returns one :class:`GradeResult` per item, in input order. No item takes
    longer than ``item_timeout_s`` (+ ``kill_grace_s`` for hangs only a kill can end). The pool
    may be used from any thread of the parent; calls are serialised.
    """

    def __init__(
        self,
        workers: int = 2,
        item_timeout_s: float = 5.0,
        kill_grace_s: float = 1.0,
        chunk_size: int | None = None,
        memory_limit_mb: int | None = 2048,
        enable_test_hooks: bool = False,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if item_timeout_s <= 0 or kill_grace_s < 0:
            raise ValueError("item_timeout_s must be > 0 and kill_grace_s >= 0")
        self.workers = workers
        self.item_timeout_s = float(item_timeout_s)
        self.kill_grace_s = float(kill_grace_s)
        self.chunk_size = chunk_size
        self.memory_limit_mb = memory_limit_mb
        self.enable_test_hooks = enable_test_hooks
        self.restarts = 0  # workers replaced after a kill or a crash
        self.startup_s: float | None = None  # time start() took
        self._context = mp.get_context("forkserver")
        # Takes effect when this process's forkserver starts (its first use).
        self._context.set_forkserver_preload(_PRELOAD)
        self._pool: list[_Worker] = []
        self._lock = threading.RLock()  # close() may run inside grade() on an error
        self._closed = False
        self._deaths_before_work = 0
        # Answers whose worker the watchdog had to kill; replacements skip them at once.
        self._known_timeouts: set[tuple[str, str, str]] = set()

    # -- lifecycle --

    def __enter__(self) -> GradingPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the workers and wait until each has warmed up (idempotent)."""
        with self._lock:
            self._start()

    def _start(self) -> None:
        if self._closed:
            raise RuntimeError("the grading pool is closed")
        if self._pool:
            return
        began = time.monotonic()
        _ensure_warm_forkserver()
        self._pool = [_Worker(self._context, self) for _ in range(self.workers)]
        deadline = began + _START_TIMEOUT_S
        while not all(worker.ready for worker in self._pool):
            waiting = [worker for worker in self._pool if not worker.ready]
            if time.monotonic() > deadline:
                raise RuntimeError("grading workers did not start in time")
            for conn in wait([worker.conn for worker in waiting], timeout=1.0):
                worker = next(w for w in waiting if w.conn is conn)
                try:
                    worker.ready = conn.recv()[0] == "ready"
                except (EOFError, OSError):
                    self.close()
                    raise RuntimeError(
                        "a grading worker died while starting (is the calling script "
                        "importable and guarded by `if __name__ == '__main__':`?)"
                    ) from None
        self.startup_s = time.monotonic() - began

    def close(self) -> None:
        """Stop the workers (idempotent; waits for a grade() running in another thread)."""
        with self._lock:
            self._closed = True
            for worker in self._pool:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)
            for worker in self._pool:
                worker.process.join(timeout=2)
                worker.stop()
            self._pool = []

    @property
    def worker_pids(self) -> list[int]:
        return [worker.process.pid for worker in self._pool if worker.process.pid]

    # -- grading --

    def grade(self, items: Sequence[GradeItem | tuple[str, ...]]) -> list[GradeResult]:
        """Grade ``(response, answer[, answer_kind])`` items; results in input order."""
        payload = [self._checked(item) for item in items]
        if not payload:
            return []
        with self._lock:
            self._start()
            try:
                raw = self._run(payload)
            except BaseException:
                # Chunks may still be in flight (Ctrl-C, a crash loop): their late results
                # must not be read as another call's, so the pool ends here.
                self.close()
                raise
        return [GradeResult(*result) for result in raw]

    def _checked(self, item: GradeItem | tuple[str, ...]) -> tuple[str, str, str]:
        if len(item) == 2:
            (response, answer), kind = item, "math"
        else:
            response, answer, kind = item
        if kind not in ANSWER_KINDS and not (self.enable_test_hooks and kind == TEST_HANG_KIND):
            raise ValueError(f"answer_kind must be one of {ANSWER_KINDS}, got {kind!r}")
        return (response or "", answer or "", kind)

    @staticmethod
    def _affinity_order(payload: list[tuple[str, str, str]]) -> deque[int]:
        """Item indices grouped by gold answer, likely-expensive groups first.

        Grouping: each worker caches parsed answers; keeping a question's samples together
        sends them to one worker, so a gold is parsed once rather than once per worker.
        Expensive first (longest-processing-time order): questions whose gold is not a plain
        integer may need the LaTeX parser; ending on cheap integer questions keeps both
        workers busy until the end instead of one waiting for the other's last slow item.
        """
        first_seen: dict[str, tuple[int, int]] = {}
        keys = []
        for index, (_, answer, kind) in enumerate(payload):
            key = first_seen.get(answer)
            if key is None:
                cheap = kind != "math" or _PLAIN_INTEGER.fullmatch(answer.strip()) is not None
                key = first_seen[answer] = (int(cheap), index)
            keys.append(key)
        return deque(sorted(range(len(payload)), key=lambda index: (keys[index], index)))

    def _next_chunk(self, pending: deque[int], payload: list[tuple[str, str, str]]) -> list[int]:
        # Guided by default: large chunks while plenty is left, small ones at the end (balance).
        target = self.chunk_size or max(1, min(64, math.ceil(len(pending) / (4 * self.workers))))
        chunk = [pending.popleft() for _ in range(min(target, len(pending)))]
        # Finish the current gold's group (bounded) rather than split it across workers.
        gold = payload[chunk[-1]][1]
        while pending and len(chunk) < 2 * target and payload[pending[0]][1] == gold:
            chunk.append(pending.popleft())
        return chunk

    def _run(self, payload: list[tuple[str, str, str]]) -> list[tuple[bool, str, str]]:
        results: list[tuple[bool, str, str] | None] = [None] * len(payload)
        pending = self._affinity_order(payload)
        remaining = len(payload)
        while remaining:
            for worker in list(self._pool):
                if worker.ready and worker.chunk is None and pending:
                    worker.chunk = self._next_chunk(pending, payload)
                    # If it died between chunks, its sentinel tells below.
                    with contextlib.suppress(OSError):
                        worker.conn.send([payload[index] for index in worker.chunk])

            by_conn = {worker.conn: worker for worker in self._pool}
            by_sentinel = {worker.process.sentinel: worker for worker in self._pool}
            ready = wait([*by_conn, *by_sentinel], timeout=self._wait_timeout())
            dead: list[_Worker] = []
            for handle in ready:
                if handle in by_conn:
                    worker = by_conn[handle]
                    try:
                        kind, body = handle.recv()
                    except (EOFError, OSError):
                        dead.append(worker)
                        continue
                    if kind == "ready":
                        worker.ready = True
                    elif worker.chunk is not None:
                        for index, result in zip(worker.chunk, body, strict=True):
                            results[index] = result
                        remaining -= len(worker.chunk)
                        worker.chunk = None
                        worker.chunks_done += 1
                        self._deaths_before_work = 0
                else:
                    worker = by_sentinel[handle]
                    if worker.conn.poll():
                        continue  # read what it sent first; the sentinel stays ready
                    dead.append(worker)
            for worker in dict.fromkeys(dead):
                remaining -= self._replace(worker, payload, results, pending, "error")

            now = time.monotonic()
            for worker in list(self._pool):
                current = worker.current() if worker.chunk is not None else None
                if current and now - current[1] > self.item_timeout_s + self.kill_grace_s:
                    remaining -= self._replace(
                        worker, payload, results, pending, "timeout", current
                    )
        return results  # type: ignore[return-value]  # every slot is filled when remaining == 0

    def _wait_timeout(self) -> float:
        """Sleep until the next possible watchdog deadline, but poll at least every 0.25 s."""
        timeout = _MAX_WAIT_S
        limit = self.item_timeout_s + self.kill_grace_s
        for worker in self._pool:
            current = worker.current() if worker.chunk is not None else None
            if current:
                timeout = min(timeout, current[1] + limit - time.monotonic())
        return max(timeout, 0.005)

    def _replace(
        self,
        worker: _Worker,
        payload: list[tuple[str, str, str]],
        results: list[tuple[bool, str, str] | None],
        pending: deque[int],
        reason: str,
        current: tuple[int, float] | None = None,
    ) -> int:
        """Kill ``worker`` and start another; returns how many items that settled.

        The item it was grading gets ``reason`` (``timeout`` from the watchdog, ``error`` for a
        worker that died by itself, so a crashing input cannot loop forever); the rest of its
        chunk, graded or not (their results died with it), goes back to the queue front.
        """
        current = current or worker.current()  # the watchdog passes the item it timed
        worker.stop()
        if reason == "error" and worker.chunks_done == 0:
            self._deaths_before_work += 1
            if self._deaths_before_work > 3 * self.workers:
                raise RuntimeError("grading workers keep dying before doing any work")
        settled = 0
        chunk = worker.chunk or []
        if current is not None and 0 <= current[0] < len(chunk):
            index = chunk[current[0]]
            response, _, kind = payload[index]
            results[index] = (False, extract_pred(response, kind), reason)
            if reason == "timeout" and len(self._known_timeouts) < 10_000:
                self._known_timeouts.add(_timeout_key(payload[index]))
            settled = 1
            chunk = chunk[: current[0]] + chunk[current[0] + 1 :]
        pending.extendleft(reversed(chunk))
        self._pool[self._pool.index(worker)] = _Worker(self._context, self)
        self.restarts += 1
        return settled


def grade_many(
    items: Sequence[GradeItem | tuple[str, ...]], workers: int = 2, item_timeout_s: float = 5.0
) -> list[GradeResult]:
    """Grade once with a temporary pool (a long-lived :class:`GradingPool` saves start-up)."""
    with GradingPool(workers=workers, item_timeout_s=item_timeout_s) as pool:
        return pool.grade(items)


__all__ = ["TEST_HANG_KIND", "GradeItem", "GradingPool", "ItemTimeout", "grade_many"]
