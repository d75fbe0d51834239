"""The rephrase and solver reply cache, kept outside DVC outputs (DVC deletes those before a
rerun): a rerun sends no request whose reply is stored, and a killed run resumes."""

from __future__ import annotations

from typing import Any

from tagrpo.config.rephrase import RephraseSettings
from tagrpo.pipeline.paths import home_root, resolve_path
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
