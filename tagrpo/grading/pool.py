"""Grading in worker processes with a per-item CPU-time budget.

Why processes: math-verify and sympy are CPU-bound (threads give no speed-up), and a time limit
can only interrupt Python code through a signal, which works in a process's main thread only:
never in a thread pool or a Prefect task thread. The parent side uses no signals, so a pool can
be driven from any thread. The parent never grades: it does not even extract answers.

The limit is CPU time, so that a verdict does not depend on how busy the machine is (a wall
clock limit turns the same pair into ``timeout`` whenever other work steals the CPU). Three
layers enforce it:

1. In the worker (:mod:`tagrpo.grading.worker`), a CPU-time interval timer
   (``signal.setitimer(ITIMER_PROF)``, which counts only this process's CPU time) raises
   ``ItemTimeout`` when an item, extraction included, has used ``item_timeout_s`` CPU-seconds;
   the item is graded incorrect with reason ``timeout``. ``ItemTimeout`` is a
   ``BaseException`` so that the ``except Exception`` blocks inside math-verify cannot
   swallow it.
2. In the parent, a watchdog reads each worker's current item and CPU clock at its start from
   shared memory, and the worker's CPU clock now from ``/proc``; it SIGKILLs a worker whose item
   has used ``item_timeout_s + kill_grace_s`` CPU-seconds (C code that never returns to the
   interpreter, where no signal handler can run). That item is graded ``timeout`` with an empty
   ``pred``, the rest of the worker's chunk is re-queued and a fresh worker replaces it.
3. A wall-clock backstop, ``wall_timeout_s`` (default ``3 * item_timeout_s + 10``), catches a
   worker that makes no progress without using CPU (stopped, swapping). Such a kill says
   nothing about the item, so the item is retried once on a fresh worker and only then graded
   ``wall_timeout``.

The timeout memo: an answer (extracted pred, gold, kind) that ran out of its CPU budget would
again, so later identical samples are graded ``timeout`` at once. Only CPU-budget timeouts are
remembered; a wall-clock kill never is, so load cannot turn into a permanent wrong answer.

Workers are forked by a ``forkserver`` that has already imported :mod:`tagrpo.grading.verify`
and, for a ``warm_up`` pool (the default), graded a warm-up corpus (sympy, math-verify, the
LaTeX parser's caches), so a replacement starts warm in a fraction of a second. A pool made
with ``warm_up=False`` starts in well under a second and imports sympy only in a worker that
meets an answer needing it (for small jobs such as a one-line ``tagrpo grade``). The forkserver
is per process: the first pool to start it decides whether it is warm. Items travel in chunks
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
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from multiprocessing import forkserver
from multiprocessing.connection import wait
from typing import Any

from tagrpo.grading.graders import GRADER_KINDS
from tagrpo.grading.kinds import ANSWER_KINDS
from tagrpo.grading.types import GradeItem
from tagrpo.grading.verify import WARM_UP_ON_IMPORT_ENV, GradeResult
from tagrpo.grading.worker import MEMO_LIMIT, KindGrader, item_key, worker_main
from tagrpo.plumbing.procfs import proc_stat

_PRELOAD = ["tagrpo.grading.verify"]
_START_TIMEOUT_S = 120.0
_MAX_WAIT_S = 0.25  # the watchdog's polling period while items are in flight
_ENV_LOCK = threading.Lock()
_PLAIN_INTEGER = re.compile(r"-?\d+")


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of a live process from ``/proc`` (Linux); None if unreadable."""
    stat = proc_stat(pid)
    return None if stat is None else stat.cpu_seconds


# --- parent side -----------------------------------------------------------------------------


def _ensure_forkserver(warm_up: bool) -> None:
    """Start this process's forkserver (once); a warm one imports and warms up the grader.

    The forkserver inherits the environment at its start; the variable tells the preloaded
    :mod:`tagrpo.grading.verify` to run :func:`~tagrpo.grading.verify.warm_up`. If some other
    code started the forkserver first, workers start as that forkserver was made.
    """

    with _ENV_LOCK:
        previous = os.environ.get(WARM_UP_ON_IMPORT_ENV)
        if warm_up:
            os.environ[WARM_UP_ON_IMPORT_ENV] = "1"
        else:
            os.environ.pop(WARM_UP_ON_IMPORT_ENV, None)
        try:
            forkserver.ensure_running()
        finally:
            if previous is None:
                os.environ.pop(WARM_UP_ON_IMPORT_ENV, None)
            else:
                os.environ[WARM_UP_ON_IMPORT_ENV] = previous


class _Worker:
    def __init__(self, context: Any, pool: GradingPool) -> None:
        self.slot = context.RawArray("d", 3)
        self.conn, child_conn = context.Pipe(duplex=True)
        self.process = context.Process(
            target=worker_main,
            args=(
                child_conn,
                self.slot,
                pool.item_timeout_s,
                pool.memory_limit_mb,
                pool.extra_kinds,
                list(pool._known_timeouts),
            ),
            name="tagrpo-grader",
            daemon=True,
        )
        self.process.start()
        child_conn.close()
        self.ready = False
        self.ready_at = 0.0  # the worker's time.monotonic() when it said it was ready
        self.chunk: list[int] | None = None
        self.chunks_done = 0
        self.reported_cpu = 0.0  # the worker's CPU clock in its last message

    def current(self) -> tuple[int, float, float] | None:
        """(position in chunk, wall start, CPU clock at start) of the item being graded."""
        started = self.slot[1]
        position, cpu_start = self.slot[0], self.slot[2]
        if started <= 0.0 or self.slot[1] != started:
            return None  # idle, or the worker is moving to its next item
        return int(position), started, cpu_start

    def cpu_now(self) -> float | None:
        return process_cpu_seconds(self.process.pid) if self.process.pid else None

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join(timeout=5)
        self.conn.close()


class GradingPool:
    """A persistent pool of grading processes; use as a context manager.

    ``grade(items)`` returns one :class:`GradeResult` per item, in input order. Each item gets
    ``item_timeout_s`` CPU-seconds (+ ``kill_grace_s`` for hangs only a kill can end); the wall
    clock only backs that up (``wall_timeout_s``). The pool may be used from any thread of the
    parent; calls are serialised.

    ``extra_kinds`` grades answer kinds beyond ``ANSWER_KINDS`` with the given functions, in
    the worker and under the same CPU budget; they travel to the workers by pickle, so they
    must be module-level functions (the tests use them to stand in for a hang in C code).
    Every pool also grades the other graders' kinds (``math@math_reward``,
    :data:`tagrpo.grading.graders.GRADER_KINDS`).

    After each ``grade`` call: ``last_timings`` holds ``(wall_s, cpu_s)`` per item (input
    order) and ``worker_cpu_s`` the CPU seconds the workers spent on the call.
    """

    def __init__(
        self,
        workers: int = 2,
        item_timeout_s: float = 5.0,
        kill_grace_s: float = 1.0,
        chunk_size: int | None = None,
        memory_limit_mb: int | None = 2048,
        extra_kinds: Mapping[str, KindGrader] | None = None,
        wall_timeout_s: float | None = None,
        warm_up: bool = True,
    ) -> None:
        if workers < 1:
            raise ValueError("workers must be >= 1")
        if item_timeout_s <= 0 or kill_grace_s < 0:
            raise ValueError("item_timeout_s must be > 0 and kill_grace_s >= 0")
        wall = 3 * float(item_timeout_s) + 10.0 if wall_timeout_s is None else wall_timeout_s
        if wall <= 0:
            raise ValueError("wall_timeout_s must be > 0")
        self.workers = workers
        self.item_timeout_s = float(item_timeout_s)
        self.kill_grace_s = float(kill_grace_s)
        self.wall_timeout_s = float(wall)
        self.chunk_size = chunk_size
        self.memory_limit_mb = memory_limit_mb
        self.extra_kinds = {**GRADER_KINDS, **(extra_kinds or {})}
        self.warm_up = warm_up
        self.restarts = 0  # workers replaced after a kill or a crash
        self.startup_s: float | None = None  # launch to the last worker ready (s)
        self._launched_at = 0.0
        self.last_timings: list[tuple[float, float]] = []
        self.worker_cpu_s = 0.0
        self._context = mp.get_context("forkserver")
        # Takes effect when this process's forkserver starts (its first use).
        self._context.set_forkserver_preload(_PRELOAD)
        self._pool: list[_Worker] = []
        # launch() starts the workers from this thread: a forkserver answers a worker's start
        # only once it has imported (and warmed up) the grader, seconds the caller spends
        # loading its model instead of waiting (measured: 13.6 s of an evaluation stage's
        # 101 s on a busy machine were this wait).
        self._launcher: threading.Thread | None = None
        self._spawned: list[_Worker] = []  # what the launch thread started, until awaited
        self._launch_error: BaseException | None = None
        self._lock = threading.RLock()  # close() may run inside grade() on an error
        self._closed = False
        self._deaths_before_work = 0
        # Items whose worker the watchdog had to kill for CPU; replacements skip them at once.
        self._known_timeouts: set[tuple[str, str, str]] = set()

    # -- lifecycle --

    def __enter__(self) -> GradingPool:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the workers and wait until each is ready (idempotent)."""
        with self._lock:
            self._start()

    def launch(self) -> None:
        """Start the workers without waiting for them (idempotent): they import and warm up
        the grader while the caller loads a model; the first ``grade`` waits for them. Their
        processes are started from a thread of this pool (see ``_launcher``)."""
        with self._lock:
            if self._closed:
                raise RuntimeError("the grading pool is closed")
            if self._pool or self._launcher is not None:
                return
            self._launched_at = time.monotonic()
            self._launcher = threading.Thread(
                target=self._spawn_workers, name="tagrpo-grading-launch", daemon=True
            )
            self._launcher.start()

    def _spawn_workers(self) -> None:
        try:
            _ensure_forkserver(self.warm_up)
            self._spawned = [_Worker(self._context, self) for _ in range(self.workers)]
        except BaseException as error:  # re-raised by the caller's next use of the pool
            self._launch_error = error

    def _await_launch(self) -> None:
        """The workers a :meth:`launch` thread started, in the pool (or its error, raised)."""
        launcher, self._launcher = self._launcher, None
        if launcher is None:
            return
        launcher.join()
        error, self._launch_error = self._launch_error, None
        if error is not None:
            raise RuntimeError(f"the grading workers could not be started: {error}") from error
        self._pool, self._spawned = self._spawned, []

    def _launch(self) -> None:
        if self._closed:
            raise RuntimeError("the grading pool is closed")
        self._await_launch()
        if self._pool:
            return
        self._launched_at = time.monotonic()
        _ensure_forkserver(self.warm_up)
        self._pool = [_Worker(self._context, self) for _ in range(self.workers)]

    def _start(self) -> None:
        """Wait until every worker has said it is ready.

        The deadline guards the workers' start-up only, so it is measured from the moment this
        call starts waiting for them: after :meth:`launch` the caller may work for hours (load a
        model, sample) while the workers have long been ready, their messages unread. Messages
        already sent are read before the deadline is ever checked.
        """
        self._launch()
        if self.startup_s is not None:
            return
        deadline = time.monotonic() + _START_TIMEOUT_S
        while True:
            waiting = [worker for worker in self._pool if not worker.ready]
            if not waiting:
                break
            for conn in wait([worker.conn for worker in waiting], timeout=0):
                self._read_ready(next(w for w in waiting if w.conn is conn))
            if all(worker.ready for worker in self._pool):
                break
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise RuntimeError(
                    f"grading workers did not start within {_START_TIMEOUT_S:.0f} s of waiting "
                    f"for them ({len(waiting)} of {len(self._pool)} not ready)"
                )
            wait([worker.conn for worker in waiting], timeout=min(remaining, 1.0))
        # Launch to the last worker's own ready time (a shared monotonic clock), not to when the
        # caller came to read it.
        self.startup_s = max(worker.ready_at for worker in self._pool) - self._launched_at

    def _read_ready(self, worker: _Worker) -> None:
        try:
            message = worker.conn.recv()
        except (EOFError, OSError):
            self.close()
            raise RuntimeError(
                "a grading worker died while starting (is the calling script "
                "importable and guarded by `if __name__ == '__main__':`?)"
            ) from None
        if message[0] == "ready":
            worker.ready = True
            worker.reported_cpu = message[2]
            worker.ready_at = message[3]

    def close(self) -> None:
        """Stop the workers (idempotent; waits for a grade() running in another thread)."""
        with self._lock:
            self._closed = True
            with contextlib.suppress(RuntimeError):  # workers that never started: none to stop
                self._await_launch()
            for worker in self._pool:
                with contextlib.suppress(OSError):
                    worker.conn.send(None)
            for worker in self._pool:
                worker.process.join(timeout=2)
                worker.stop()
            self._pool = []

    @property
    def worker_pids(self) -> list[int]:
        with self._lock:
            self._await_launch()
            return [worker.process.pid for worker in self._pool if worker.process.pid]

    # -- grading --

    def grade(self, items: Sequence[GradeItem | tuple[str, ...]]) -> list[GradeResult]:
        """Grade ``(response, answer[, answer_kind])`` items; results in input order."""
        payload = [self._checked(item) for item in items]
        if not payload:
            self.last_timings, self.worker_cpu_s = [], 0.0
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
        self.last_timings = [(result[3], result[4]) for result in raw]
        return [GradeResult(*result[:3]) for result in raw]

    def _checked(self, item: GradeItem | tuple[str, ...]) -> tuple[str, str, str]:
        if len(item) == 2:
            (response, answer), kind = item, "math"
        else:
            response, answer, kind = item
        if kind not in ANSWER_KINDS and kind not in self.extra_kinds:
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
                cheap = (
                    kind.partition("@")[0] != "math"
                    or _PLAIN_INTEGER.fullmatch(answer.strip()) is not None
                )
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

    def _run(self, payload: list[tuple[str, str, str]]) -> list[tuple[Any, ...]]:
        results: list[tuple[Any, ...] | None] = [None] * len(payload)
        pending = self._affinity_order(payload)
        remaining = len(payload)
        wall_retried: set[int] = set()  # items already given a second chance after a wall kill
        self.worker_cpu_s = 0.0
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
                        message = handle.recv()
                    except (EOFError, OSError):
                        dead.append(worker)
                        continue
                    if message[0] == "ready":
                        worker.ready = True
                        worker.reported_cpu = message[2]
                        worker.ready_at = message[3]
                    elif worker.chunk is not None:
                        _, body, cpu_clock = message
                        for index, result in zip(worker.chunk, body, strict=True):
                            results[index] = result
                        self.worker_cpu_s += max(cpu_clock - worker.reported_cpu, 0.0)
                        worker.reported_cpu = cpu_clock
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
                if current is None:
                    continue
                position, wall_start, cpu_start = current
                cpu_now = worker.cpu_now()
                cpu_used = cpu_now - cpu_start if cpu_now is not None else None
                if cpu_used is not None and cpu_used > self.item_timeout_s + self.kill_grace_s:
                    remaining -= self._replace(
                        worker, payload, results, pending, "timeout", current, cpu_now
                    )
                elif now - wall_start > self.wall_timeout_s:
                    index = worker.chunk[position] if worker.chunk else -1
                    retry = index >= 0 and index not in wall_retried
                    wall_retried.add(index)
                    remaining -= self._replace(
                        worker, payload, results, pending, "wall_timeout", current, cpu_now, retry
                    )
        return results  # type: ignore[return-value]  # every slot is filled when remaining == 0

    def _wait_timeout(self) -> float:
        """Sleep until the next possible wall deadline, but poll at least every 0.25 s.

        CPU deadlines cannot be predicted from here (a busy machine slows the CPU clock down);
        the polling period bounds how late the watchdog notices one.
        """
        timeout = _MAX_WAIT_S
        for worker in self._pool:
            current = worker.current() if worker.chunk is not None else None
            if current:
                timeout = min(timeout, current[1] + self.wall_timeout_s - time.monotonic())
        return max(timeout, 0.005)

    def _replace(
        self,
        worker: _Worker,
        payload: list[tuple[str, str, str]],
        results: list[tuple[Any, ...] | None],
        pending: deque[int],
        reason: str,
        current: tuple[int, float, float] | None = None,
        cpu_now: float | None = None,
        retry: bool = False,
    ) -> int:
        """Kill ``worker`` and start another; returns how many items that settled.

        The item it was grading gets ``reason`` with an empty pred (``timeout`` from the CPU
        watchdog, ``wall_timeout`` from the wall-clock backstop, ``error`` for a worker that
        died by itself, so a crashing input cannot loop forever), or goes back to the queue
        (``retry``). The rest of its chunk, graded or not (their results died with it), goes
        back to the queue front. No grading happens here.
        """
        current = current or worker.current()  # the watchdog passes the item it timed
        if cpu_now is None:
            cpu_now = worker.cpu_now()
        worker.stop()
        if cpu_now is not None:
            self.worker_cpu_s += max(cpu_now - worker.reported_cpu, 0.0)
        if reason == "error" and worker.chunks_done == 0:
            self._deaths_before_work += 1
            if self._deaths_before_work > 3 * self.workers:
                raise RuntimeError("grading workers keep dying before doing any work")
        settled = 0
        chunk = worker.chunk or []
        if current is not None and 0 <= current[0] < len(chunk):
            position, wall_start, cpu_start = current
            index = chunk[position]
            chunk = chunk[:position] + chunk[position + 1 :]
            if retry:
                pending.appendleft(index)
            else:
                cpu_used = cpu_now - cpu_start if cpu_now is not None else float("nan")
                results[index] = (False, "", reason, time.monotonic() - wall_start, cpu_used)
                if reason == "timeout" and len(self._known_timeouts) < MEMO_LIMIT:
                    self._known_timeouts.add(item_key(payload[index]))
                settled = 1
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


__all__ = [
    "GradeItem",
    "GradingPool",
    "grade_many",
    "process_cpu_seconds",
]
