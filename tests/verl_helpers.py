"""Shared helpers for the verl tests: the paper profile's train params and a run's paths."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tagrpo.params import deep_merge, load_params
from tagrpo.paths import project_root
from tagrpo.verl_ext.overrides import RunPaths, VerlRun

ROOT = project_root()
MODEL = "Qwen/Qwen3-1.7B"


def paper_params() -> dict[str, Any]:
    """The train stage's params under the paper profile (train section + common)."""
    merged = deep_merge(
        load_params(ROOT / "params.yaml"),
        yaml.safe_load((ROOT / "profiles" / "paper.yaml").read_text()),
    )
    return {**merged["train"], "common": merged["common"]}


def run_for(method: str, tmp: Path, **env: str) -> VerlRun:
    """A run of ``method`` (seed 3) whose files live under ``tmp / "a dir"``."""
    names = ["train.parquet", "val.parquet", "ckpt", "models/p", "rollouts/p", "log.jsonl"]
    paths = RunPaths(*(tmp / "a dir" / name for name in names))
    return VerlRun(method=method, seed=3, policy=f"{method}-s3", model=MODEL, paths=paths, env=env)
