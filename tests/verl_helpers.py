"""Shared helpers for the verl tests: the params under the paper profile and a run's paths."""

from __future__ import annotations

from pathlib import Path

from tagrpo.config.params import Params, validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.plumbing.paths import project_root
from tagrpo.verl_ext.overrides import RunPaths, VerlRun

ROOT = project_root()
MODEL = "Qwen/Qwen3-1.7B"


def paper_config() -> Params:
    """The params under the paper profile."""
    return validate_params(
        merged_with_profile(ROOT / "profiles" / "paper.yaml", ROOT / "params.yaml")
    )


def run_for(method: str, tmp: Path, **env: str) -> VerlRun:
    """A run of ``method`` (seed 3) whose files live under ``tmp / "a dir"``."""
    names = ["train.parquet", "val.parquet", "ckpt", "models/p", "rollouts/p", "log.jsonl"]
    paths = RunPaths(*(tmp / "a dir" / name for name in names))
    return VerlRun(method=method, seed=3, policy=f"{method}-s3", model=MODEL, paths=paths, env=env)
