"""Settings shared by the rephrase and check_equivalence stages: the seeded ``rephrase``
section and its reply cache (kept outside DVC outputs, which DVC deletes before a rerun)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tagrpo.paths import home_root, resolve_path

CACHE_FILE = "replies.sqlite"


def open_cache(params: Mapping[str, Any]) -> Any:
    """The reply cache of a model backend (None for the rules backend, which needs none)."""
    if params.get("backend", "rules") == "rules":
        return None
    from tagrpo.rephrase.cache import ReplyCache

    directory = resolve_path(params.get("cache_dir", ".cache/rephrase"), base=home_root())
    return ReplyCache(directory / CACHE_FILE)


def rephrase_settings(params: Mapping[str, Any]) -> dict[str, Any]:
    """The ``rephrase`` section with the seed filled in from ``common.seed``."""
    settings = {key: value for key, value in params.items() if key != "common"}
    settings["seed"] = int(params.get("common", {}).get("seed", 0))
    return settings
