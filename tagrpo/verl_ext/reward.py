"""The reward function verl loads through its custom reward hook.

    reward.custom_reward_function.path=pkg://tagrpo.verl_ext.reward
    reward.custom_reward_function.name=compute_score

It grades with the project's grading module (:mod:`tagrpo.grading`: last ``\\boxed{}``,
normalisation, math-verify with a hard per-item time limit; option letters for multiple
choice), exactly as evaluation does, with the math grader ``common.grading.grader`` names
(``reward_kwargs.grader``: the project's, or verl's own ``math_reward`` or ``math_verify``
run in the same grading workers, :mod:`tagrpo.grading.graders`), and returns
``{"score", "acc", "pred"}``: ``score`` is the binary reward, ``acc`` feeds
``algorithm.filter_groups.metric=acc`` (dynamic sampling) and ``pred`` verl's majority-vote
validation metrics.

Why async and batched: verl's naive reward manager runs a synchronous function in a thread,
where math-verify's signal-based timeouts cannot work. Here each reward worker process keeps
one :class:`tagrpo.grading.GradingPool` (processes, hard limits) and the coroutines of one
event loop are graded together: requests that arrive while a batch is being graded form the
next batch, so the pool is never called concurrently and IPC stays per batch.
"""

from __future__ import annotations

import asyncio
import atexit
import threading
import weakref
from collections.abc import Mapping
from typing import Any

from tagrpo.data.sources.registry import answer_kind_for
from tagrpo.grading.graders import grader_kind
from tagrpo.grading.pool import GradeItem, GradingPool
from tagrpo.grading.verify import ANSWER_KINDS, GradeResult

_POOL_LOCK = threading.Lock()
_POOLS: dict[tuple[int, float], GradingPool] = {}


def _pool(workers: int, item_timeout_s: float) -> GradingPool:
    """This process's grading pool for these settings (created on first use)."""
    key = (workers, item_timeout_s)
    with _POOL_LOCK:
        pool = _POOLS.get(key)
        if pool is None:
            pool = GradingPool(workers=workers, item_timeout_s=item_timeout_s)
            _POOLS[key] = pool
        return pool


def _discard_pool(workers: int, item_timeout_s: float) -> None:
    with _POOL_LOCK:
        pool = _POOLS.pop((workers, item_timeout_s), None)
    if pool is not None:
        pool.close()


@atexit.register
def close_pools() -> None:
    """Stop every grading pool of this process (also run at interpreter exit)."""
    with _POOL_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


class _Batcher:
    """Collects one event loop's grading requests and grades them batch by batch."""

    def __init__(self, workers: int, item_timeout_s: float) -> None:
        self.workers = workers
        self.item_timeout_s = item_timeout_s
        self.pending: list[tuple[GradeItem, asyncio.Future[GradeResult]]] = []
        self.flushing = False
        self.task: asyncio.Task[None] | None = None
        self.batches = 0  # batches graded (tests read it)

    async def grade(self, item: GradeItem) -> GradeResult:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[GradeResult] = loop.create_future()
        self.pending.append((item, future))
        if not self.flushing:
            self.flushing = True
            # Keep a reference: the loop holds tasks weakly and could drop a running flush.
            self.task = loop.create_task(self._flush())
        return await future

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            await asyncio.sleep(0)  # requests issued in the same tick join this batch
            while self.pending:
                batch, self.pending = self.pending, []
                items = [item for item, _ in batch]
                pool = _pool(self.workers, self.item_timeout_s)
                try:
                    results = await loop.run_in_executor(None, pool.grade, items)
                except Exception as error:
                    # A failed pool closes itself; the next batch gets a fresh one.
                    _discard_pool(self.workers, self.item_timeout_s)
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(error)
                    continue
                self.batches += 1
                for (_, future), result in zip(batch, results, strict=True):
                    if not future.done():
                        future.set_result(result)
        finally:
            self.flushing = False


_BATCHERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple, _Batcher]] = (
    weakref.WeakKeyDictionary()
)


def _batcher(workers: int, item_timeout_s: float) -> _Batcher:
    per_loop = _BATCHERS.setdefault(asyncio.get_running_loop(), {})
    key = (workers, item_timeout_s)
    if key not in per_loop:
        per_loop[key] = _Batcher(workers, item_timeout_s)
    return per_loop[key]


def answer_kind_of(data_source: str | None, ground_truth: str, extra_info: Any) -> str:
    """The row's ``extra_info.answer_kind`` if it has one, else inferred from the benchmark."""
    if isinstance(extra_info, Mapping):
        kind = extra_info.get("answer_kind")
        if kind in ANSWER_KINDS:
            return str(kind)
    return answer_kind_for(data_source, ground_truth)


async def compute_score(
    data_source: str | None,
    solution_str: str,
    ground_truth: str,
    extra_info: Any = None,
    grading_workers: int = 2,
    item_timeout_s: float = 5.0,
    grader: str = "tagrpo",
    **kwargs: Any,
) -> dict[str, Any]:
    """Binary reward of one response: ``{"score": 1.0|0.0, "acc": same, "pred": answer}``.

    ``grading_workers``, ``item_timeout_s`` and ``grader`` come from
    ``reward.custom_reward_function.reward_kwargs``; other keywords verl may pass are ignored.
    """
    kind = grader_kind(answer_kind_of(data_source, ground_truth, extra_info), grader)
    item = GradeItem(solution_str or "", str(ground_truth or ""), kind)
    result = await _batcher(int(grading_workers), float(item_timeout_s)).grade(item)
    reward = 1.0 if result.correct else 0.0
    return {"score": reward, "acc": reward, "pred": result.pred}
