"""The rephrase and solver reply cache, kept outside DVC outputs (a stage replaces those whole,
and only when it succeeds): a rerun sends no request whose reply is stored, and a killed run
resumes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from tagrpo.config.rephrase import RephraseSettings
from tagrpo.plumbing.paths import home_root, resolve_path
from tagrpo.rephrase.cache import ReplyCache

CACHE_FILE = "replies.sqlite"


def open_cache(settings: RephraseSettings, needed: bool | None = None) -> Any:
    """The reply cache in ``settings.cache_dir``; None when no model backend needs it.

    ``needed`` defaults to "the rephrase backend is a model" (the rules backend needs none);
    the equivalence stage also needs it for an endpoint solver.
    """
    if needed is None:
        needed = settings.backend != "rules"
    if not needed:
        return None

    return ReplyCache(resolve_path(settings.cache_dir, base=home_root()) / CACHE_FILE)


QuestionT = TypeVar("QuestionT")


def questions_to_rephrase(
    questions: Sequence[QuestionT], settings: RephraseSettings
) -> list[QuestionT]:
    """The training questions the rephrase and check_equivalence stages work on: the first
    ``rephrase.max_questions`` (all when null), the ones the runs train on (train.questions)."""
    if settings.max_questions is None:
        return list(questions)
    kept = list(questions[: settings.max_questions])
    print(
        f"[rephrase] rephrase.max_questions = {settings.max_questions}: the first {len(kept)} "
        f"of {len(questions)} training questions"
    )
    return kept
