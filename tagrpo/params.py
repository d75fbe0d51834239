"""Reading ``params.yaml`` (one section per stage) and applying profile overrides."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from tagrpo.paths import project_root


def load_params(path: str | Path | None = None) -> dict[str, Any]:
    """The whole params file as a dict (``params.yaml`` at the project root by default)."""
    params_path = Path(path) if path else project_root() / "params.yaml"
    with open(params_path, encoding="utf-8") as handle:
        loaded = yaml.safe_load(handle) or {}
    if not isinstance(loaded, dict):
        raise ValueError(f"{params_path}: expected a mapping at the top level")
    return loaded


def stage_params(section: str, path: str | Path | None = None) -> dict[str, Any]:
    """One stage's section plus the shared ``common`` section under the key ``common``."""
    params = load_params(path)
    if section not in params:
        raise KeyError(f"params.yaml has no section {section!r} (sections: {sorted(params)})")
    merged = dict(params[section] or {})
    merged.setdefault("common", params.get("common", {}))
    return merged


def deep_merge(base: Mapping[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    """Recursively merge ``override`` into a copy of ``base``; lists and scalars are replaced."""
    merged = copy.deepcopy(dict(base))
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), Mapping):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def apply_profile(
    profile_path: str | Path, params_path: str | Path | None = None
) -> dict[str, Any]:
    """Write ``params.yaml`` merged with a profile override file; return the merged params.

    DVC then sees ordinary param changes, so only the affected stages rerun, and
    ``git checkout params.yaml`` returns to the embedded default.
    """
    target = Path(params_path) if params_path else project_root() / "params.yaml"
    with open(profile_path, encoding="utf-8") as handle:
        override = yaml.safe_load(handle) or {}
    merged = deep_merge(load_params(target), override)
    with open(target, "w", encoding="utf-8") as handle:
        yaml.safe_dump(merged, handle, sort_keys=False, width=100)
    return merged
