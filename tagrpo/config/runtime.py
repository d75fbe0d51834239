"""``runtime``: how a run executes, never what it computes.

No stage lists this section in its DVC params (``tests/test_dvc_deps.py`` keeps it so), so
changing a key here reruns nothing: a setting belongs here only if every output of every stage
comes out the same whatever its value (docs/design.md, "What a stage depends on").
"""

from __future__ import annotations

from tagrpo.config.model import ConfigModel, Field


class VerlRuntimeSettings(ConfigModel):
    """Checkpoints, resuming and worker counts of a verl run (``train.backend: verl``)."""

    resume: bool = Field(
        description="a rerun continues the same run (same code, data and params: the stage's "
        "DVC deps) from its last checkpoint, keeping its exports; false: start afresh"
    )
    checkpoint_every: int = Field(
        ge=1,
        description="a resumable checkpoint every N steps (and at each train.checkpoints step)",
    )
    max_checkpoints: int = Field(
        ge=1, description="resumable checkpoints kept (the Hugging Face exports are all kept)"
    )
    checkpoint_dir: str = Field(
        min_length=1,
        description="each run's work area <dir>/<policy>: checkpoints, exports, dumps, metrics "
        "(on a shared file system for multi-node runs)",
    )
    grading_workers: int = Field(ge=1, description="grading processes per verl reward worker")


class RuntimeSettings(ConfigModel):
    verl: VerlRuntimeSettings
