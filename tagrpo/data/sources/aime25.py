"""AIME 2025 (``aime25/test.jsonl``, 30 rows): the local copy has no id, so ids are
``aime25-<row>``."""

from __future__ import annotations

from tagrpo.data.sources.aime import aime_source
from tagrpo.data.sources.base import HubSpec

SOURCE = aime_source(
    "aime25",
    "AIME25",
    hub=(HubSpec("math-ai/aime25", "test"), HubSpec("yentinglin/aime_2025", "train")),
)
