"""The paths a DVC pipeline writes: every outs/metrics/plots entry of dvc.yaml's stages."""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml


def dvc_out_paths(dvc_yaml: Mapping[str, Any]) -> set[str]:
    """Output paths of every stage, with ``matrix`` stages expanded (``${item.x}`` filled in)."""
    paths: set[str] = set()
    for stage in (dvc_yaml.get("stages") or {}).values():
        entries = [
            next(iter(entry)) if isinstance(entry, dict) else entry
            for key in ("outs", "metrics", "plots")
            for entry in stage.get(key, [])
        ]
        matrix = stage.get("matrix", {})
        combos = [
            dict(zip(matrix, values, strict=True)) for values in itertools.product(*matrix.values())
        ]
        for combo in combos or [{}]:
            for entry in entries:
                for name, value in combo.items():
                    entry = entry.replace(f"${{item.{name}}}", str(value))
                paths.add(entry)
    return paths


def pipeline_outputs(root: str | Path) -> set[str]:
    """:func:`dvc_out_paths` of ``root/dvc.yaml`` (empty when there is none)."""
    path = Path(root) / "dvc.yaml"
    if not path.exists():
        return set()
    return dvc_out_paths(yaml.safe_load(path.read_text()) or {})
