"""Progress bars for the steps a person waits on (SFT, requests, solving, training, sampling).

A tqdm bar on standard error with counts and rate when it is a terminal, nothing otherwise (logs
of `dvc repro` in CI stay readable); ``TAGRPO_PROGRESS=1`` forces bars, ``=0`` hides them.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

T = TypeVar("T")
# What the bars opened inside :func:`labelled` are about, e.g. "mini_chains (2 of 4)": the
# sampler that draws the bar does not know which benchmark or variant it samples.
_LABEL: contextvars.ContextVar[str] = contextvars.ContextVar("tagrpo_progress_label", default="")


def enabled() -> bool:
    forced = os.environ.get("TAGRPO_PROGRESS")
    if forced in ("0", "1"):
        return forced == "1"
    return sys.stderr.isatty()


@contextlib.contextmanager
def labelled(label: str) -> Iterator[None]:
    """Bars opened inside say what they are about: ``sampling mini_chains (2 of 4)``."""
    token = _LABEL.set(label)
    try:
        yield
    finally:
        _LABEL.reset(token)


def describe(desc: str) -> str:
    """``desc`` with the current :func:`labelled` label."""
    label = _LABEL.get()
    return f"{desc} {label}" if label else desc


def bar(total: int | None, desc: str, unit: str = "it") -> Any:
    """A tqdm bar (``update(n)``, ``close()``, usable as a context manager), disabled off a tty."""
    # tqdm (and, through tqdm.auto, its notebook probe) loads only when a bar is drawn.
    from tqdm.auto import tqdm

    return tqdm(
        total=total,
        desc=describe(desc),
        unit=unit,
        disable=not enabled(),
        leave=False,
        dynamic_ncols=True,
    )


def track(items: Iterable[T], desc: str, total: int | None = None, unit: str = "it") -> Iterator[T]:
    """``items`` with a progress bar."""
    if total is None and hasattr(items, "__len__"):
        total = len(items)  # type: ignore[arg-type]
    with bar(total, desc, unit) as progress:
        for item in items:
            yield item
            progress.update(1)
