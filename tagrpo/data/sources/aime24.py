"""AIME 2024 (``aime24/test.jsonl``, 30 rows): integer answers; ids ``aime24-<upstream id>``."""

from __future__ import annotations

from tagrpo.data.sources.aime import aime_source
from tagrpo.data.sources.base import HubSpec

SOURCE = aime_source(
    "aime24",
    "AIME24",
    hub=(HubSpec("HuggingFaceH4/aime_2024", "train"), HubSpec("math-ai/aime24", "test")),
)
