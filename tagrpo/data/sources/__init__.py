"""Upstream benchmark sources: local file loaders and their Hugging Face twins.

``load_local(name, data_dir)`` reads the copies under ``shared/data`` (the default, offline);
``load_hub(name)`` reads the same benchmark from the Hugging Face Hub (internet required).
Both return a :class:`~tagrpo.data.schema.LoadResult` built by the same row normalisers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tagrpo.data.sources.hub import HUB_SOURCES, HubSpec, hub_spec, load_hub
    from tagrpo.data.sources.local import (
        LOCAL_SOURCES,
        NORMALISERS,
        REJECTION_REASONS,
        SOURCE_FILES,
        gpqa_permutation,
        load_aime24,
        load_aime25,
        load_amc23,
        load_gpqa_diamond,
        load_local,
        load_math,
        load_math500,
        load_minerva_math,
        load_olympiadbench,
        normalise_aime24,
        normalise_aime25,
        normalise_amc23,
        normalise_gpqa_diamond,
        normalise_math,
        normalise_math500,
        normalise_minerva_math,
        normalise_olympiadbench,
        normalise_records,
    )

# Exports resolve lazily: the params check reads the loader names of ``local`` without
# loading the hub sources (and pandas with them).
_EXPORTS = {
    "HUB_SOURCES": "hub",
    "HubSpec": "hub",
    "hub_spec": "hub",
    "load_hub": "hub",
    "LOCAL_SOURCES": "local",
    "NORMALISERS": "local",
    "REJECTION_REASONS": "local",
    "SOURCE_FILES": "local",
    "gpqa_permutation": "local",
    "load_aime24": "local",
    "load_aime25": "local",
    "load_amc23": "local",
    "load_gpqa_diamond": "local",
    "load_local": "local",
    "load_math": "local",
    "load_math500": "local",
    "load_minerva_math": "local",
    "load_olympiadbench": "local",
    "normalise_aime24": "local",
    "normalise_aime25": "local",
    "normalise_amc23": "local",
    "normalise_gpqa_diamond": "local",
    "normalise_math": "local",
    "normalise_math500": "local",
    "normalise_minerva_math": "local",
    "normalise_olympiadbench": "local",
    "normalise_records": "local",
}

TRAIN_SOURCES = ("math", "openr1_math")
EVAL_SOURCES = (
    "math500",
    "amc23",
    "aime24",
    "aime25",
    "olympiadbench",
    "minerva_math",
    "gpqa_diamond",
)

__all__ = [
    "EVAL_SOURCES",
    "HUB_SOURCES",
    "LOCAL_SOURCES",
    "NORMALISERS",
    "REJECTION_REASONS",
    "SOURCE_FILES",
    "TRAIN_SOURCES",
    "HubSpec",
    "gpqa_permutation",
    "hub_spec",
    "load_aime24",
    "load_aime25",
    "load_amc23",
    "load_gpqa_diamond",
    "load_hub",
    "load_local",
    "load_math",
    "load_math500",
    "load_minerva_math",
    "load_olympiadbench",
    "normalise_aime24",
    "normalise_aime25",
    "normalise_amc23",
    "normalise_gpqa_diamond",
    "normalise_math",
    "normalise_math500",
    "normalise_minerva_math",
    "normalise_olympiadbench",
    "normalise_records",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
