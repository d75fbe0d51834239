"""``common.grading``: how answers are graded (processes and time limits), declared beside the
grader that reads it; ``tagrpo.config.common`` puts it in the params schema."""

from __future__ import annotations

from tagrpo.grading.kinds import Grader
from tagrpo.plumbing.config_model import ConfigModel, Field


class GradingSettings(ConfigModel):
    grader: Grader = Field(
        description="who grades math answers in training (both backends), evaluation and "
        "diagnostics: tagrpo (this project's grader), math_reward (verl's "
        "math_reward.compute_score, the TA-GRPO authors'), math_verify (math-verify as verl "
        "calls it); evaluation also grades with every grader (the parity table)"
    )
    workers: int = Field(ge=1, le=256, description="grading processes")
    # CPU time, not wall time: a verdict must not depend on how busy the machine is.
    item_timeout_s: float = Field(
        gt=0, le=600, description="CPU-seconds per graded answer (extraction included)"
    )
    kill_grace_s: float = Field(
        ge=0, le=600, description="extra CPU-seconds before a stuck worker is killed"
    )
    wall_timeout_s: float | None = Field(
        gt=0, description="wall-clock backstop per item (null = 3 x item_timeout_s + 10)"
    )
