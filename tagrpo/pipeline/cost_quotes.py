"""The cost preflight's quoted blocks: docs/paper-scale.md shows ``tagrpo plan --cost``'s output
rendered by the same functions, never typed (its GPU-hours, response counts and disk change
with the params and the cost model).

A block in Markdown (the syntax of the docs' other quoted blocks)::

    <!-- quote: plan-cost --profile paper --questions 7498 --problems 1245 -->
    (rendered text)
    <!-- end quote -->

:data:`COST_SOURCES` maps the source's name to its renderer (the docs' registry of sources
takes it whole); ``tests/test_verl_cost.py`` keeps every ``plan-cost`` block of
docs/paper-scale.md equal to it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path

from tagrpo.pipeline.rerun import RerunRequest


class _Arguments(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise ValueError(f"plan-cost: {message}")


def _parser() -> argparse.ArgumentParser:
    parser = _Arguments(prog="plan-cost", add_help=False)
    parser.add_argument("--profile", default="current")
    parser.add_argument("-S", "--set", action="append", default=[], dest="overrides")
    parser.add_argument("--questions", type=int, default=None)
    parser.add_argument("--problems", type=int, default=None)
    parser.add_argument("--models", nargs="+", default=None)
    parser.add_argument(
        "--lines", nargs="+", default=None, help="only the lines starting with these words"
    )
    return parser


def plan_cost(root: Path, args: list[str]) -> str:
    """``plan-cost [--profile P] [-S KEY=VALUE] [--questions N] [--problems N] [--models ID
    ...] [--lines WORDS ...]``: ``tagrpo plan --cost`` with those arguments in ``root``, in a
    code block; with ``--models``, its table (Markdown); with ``--lines``, only the lines that
    start with one of the words."""
    from tagrpo.pipeline.plan import render_cost, render_models

    parsed = _parser().parse_args(args)
    request = RerunRequest(profile=parsed.profile, overrides=list(parsed.overrides))
    if parsed.models:
        return render_models(root, request, parsed.models, parsed.questions, parsed.problems)
    text = render_cost(root, request, parsed.questions, parsed.problems)
    if parsed.lines:
        kept = [line for line in text.splitlines() if line.startswith(tuple(parsed.lines))]
        if not kept:
            raise ValueError(f"plan-cost: no line starts with {parsed.lines}")
        text = "\n".join(kept)
    return "```\n" + text + "\n```"


COST_SOURCES: dict[str, Callable[[Path, list[str]], str]] = {"plan-cost": plan_cost}
