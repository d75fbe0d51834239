"""``train``: the hyper-parameters every training backend shares; ``local``: the local backend's
engine settings. (``verl``, the verl backend's, is :class:`tagrpo.config.engines.VerlSettings`.)"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ValidationError, field_validator, model_validator

from tagrpo.plumbing.config_model import ConfigModel, Field

EPSILON = 1e-6  # verl's: A = (R - mean) / (std + 1e-6)


class TrainProbe(ConfigModel):
    enabled: bool = Field(description="success on the training q0s before and after")
    group_size: int = Field(ge=1, le=1024, description="samples per question")
    seed: int = Field(ge=0, description="sampling seed (the same before and after)")


class TrainSettings(ConfigModel):
    backend: Literal["local", "verl"] = Field(
        description="local (tagrpo/training) | verl (section verl)"
    )
    input: str = Field(min_length=1, description="q0 + accepted rephrasings")
    neighbours: Literal["auto", "column", "miniworld", "none"] = Field(
        description="where rephrasings come from: auto | column | miniworld | none"
    )
    model: str = Field(min_length=1, description="the starting policy's folder")
    questions: int | None = Field(
        ge=1, description="the 1x training set: the first questions of input (null = all)"
    )
    epochs: float = Field(gt=0, le=1000, description="passes over the training set")
    steps: int | None = Field(ge=1, description="overrides the epoch-based step count")
    group_size: int = Field(ge=1, le=1024, description="responses per prompt variant: G")
    n_neighbours: int = Field(ge=0, le=64, description="rephrasings per question: N")
    batch_questions: int = Field(
        ge=1, description="batch size per step, in batch_unit (paper: 256)"
    )
    # The two readings of the paper's "batch size 256": 256 questions, each with all its
    # responses (the paper's text; as many updates per epoch for TA-GRPO as for GRPO), or 256
    # dataset rows of one (question, variant) each (the authors' released scripts: a TA method
    # takes (N+1)x fewer questions per step, so about (N+1)x the updates per epoch).
    batch_unit: Literal["questions", "rows"] = Field(
        description="questions (the paper's text) | rows (the authors' scripts)"
    )
    # In rows mode (N+1)xGRPO takes (N+1)x the questions of TA-GRPO per step, so at equal
    # responses it gets 1/(N+1) of TA-GRPO's optimiser updates and a shorter schedule. This
    # variant counts its (N+1)G responses to q0 as N+1 rows: TA-GRPO's questions per step,
    # steps and updates, at the same responses per step.
    rows_matched_updates: bool = Field(
        description="batch_unit rows: (N+1)xGRPO counts N+1 rows per question"
    )
    mini_batches: int = Field(ge=1, description="optimiser updates per step (paper: 256/128)")
    # Eq. 2/4 average each response's tokens (1/|o_i|), then the responses: seq-mean-token-mean.
    # The authors' scripts kept verl's default token-mean (every token of a mini-batch alike).
    loss_agg_mode: Literal["seq-mean-token-mean", "token-mean"] = Field(
        description="policy/KL loss aggregation, both backends"
    )
    # The tiny policy needs a larger lr than the paper's 1e-6 (1.7B-4B models); 5e-4 and up
    # destroy it within a few steps (measured: KL > 0.1/token, success falls).
    learning_rate: float = Field(gt=0, le=1, description="peak AdamW learning rate")
    warmup_ratio: float = Field(ge=0, lt=1, description="linear warm-up share, then cosine")
    min_lr_ratio: float = Field(ge=0, le=1, description="cosine floor / peak")
    weight_decay: float = Field(ge=0, le=1, description="AdamW weight decay")
    grad_clip: float = Field(gt=0, description="gradient-norm clip")
    clip_low: float = Field(ge=0, lt=1, description="PPO ratio clip below 1")
    clip_high: float = Field(ge=0, description="PPO ratio clip above 1")
    kl_coef: float = Field(ge=0, description="low-variance KL loss coefficient")
    epsilon: float = Field(gt=0, description="A = (R - mean) / (std + epsilon)")
    temperature: float = Field(gt=0, le=10, description="sampling temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(ge=1, le=131072, description="response length (paper: 3072)")
    ds_max_rounds: int = Field(ge=1, le=1000, description="dynamic sampling refill rounds")
    estimators: dict[str, Any] = Field(
        description="settings of each registered advantage estimator (by name)",
    )
    checkpoints: list[float] = Field(
        min_length=1,
        description="fractions of training with a checkpoint and a rollout dump",
    )
    save_checkpoints: bool = Field(description="save the checkpoints as HF folders")
    # One more no-grad forward pass of the old policy per step over the neighbour responses
    # (methods that sample rephrasings): their log-probability under the other prompt, for the
    # anchoring/... metrics (tagrpo/algorithms/anchoring.py) and the report's figure.
    anchoring_diagnostic: bool = Field(
        description="score neighbour responses under the other prompt too (anchoring/...)"
    )
    probe: TrainProbe

    @field_validator("checkpoints")
    @classmethod
    def _fractions(cls, checkpoints: list[float]) -> list[float]:
        if any(not 0 < f <= 1 for f in checkpoints) or sorted(set(checkpoints)) != checkpoints:
            raise ValueError("checkpoints must be increasing fractions in (0, 1]")
        return checkpoints

    @field_validator("estimators", mode="before")
    @classmethod
    def _estimator_settings(cls, given: Any) -> dict[str, Any]:
        from tagrpo.algorithms.estimators import ESTIMATORS

        if not isinstance(given, dict):
            raise ValueError("must map estimator names to their settings")
        configurable = {n: s for n, s in ESTIMATORS.items() if s.config_model is not None}
        unknown = sorted(set(given) - set(configurable))
        if unknown:
            raise ValueError(
                f"no configurable estimator named {unknown}; allowed: {sorted(configurable)}"
            )
        settings = {}
        for name, spec in configurable.items():
            if name not in given:
                raise ValueError(f"{name}: required key is missing (the estimator's settings)")
            # Every key stated: params.yaml, not the settings model, holds the values.
            missing = sorted(set(spec.config_model.model_fields) - set(given[name] or {}))
            if missing:
                raise ValueError(f"{name}: required keys are missing: {missing}")
            try:
                settings[name] = spec.config_model.model_validate(given[name])
            except ValidationError as error:
                problems = "; ".join(
                    f"{name}.{'.'.join(map(str, e['loc']))}: {e['msg']}"
                    for e in error.errors(include_url=False)
                )
                raise ValueError(problems) from None
        return settings

    def estimator_config(self, name: str) -> Any:
        """The settings of estimator ``name`` (None for one without settings)."""
        return self.estimators.get(name)

    def rows_per_question(self, method: str) -> int:
        """Dataset rows one question fills (:func:`rows_per_question`)."""
        return rows_per_question(
            method, self.n_neighbours, self.batch_unit, self.rows_matched_updates
        )

    def questions_per_step(self, method: str) -> int:
        """Questions a step of ``method`` samples (``batch_questions`` rows in ``rows`` mode)."""
        rows = self.rows_per_question(method)
        if self.batch_questions % rows:
            raise ValueError(
                f"train.batch_questions = {self.batch_questions} rows do not hold whole "
                f"questions of {method} ({rows} rows each) with batch_unit: rows"
            )
        return self.batch_questions // rows

    @model_validator(mode="after")
    def _mini_batches(self) -> TrainSettings:
        if self.rows_matched_updates and self.batch_unit != "rows":
            raise ValueError(
                "rows_matched_updates: true applies to batch_unit: rows only (with questions "
                "every method takes the same questions per step already)"
            )
        if self.mini_batches > self.batch_questions:
            raise ValueError(
                f"mini_batches ({self.mini_batches}) > batch_questions ({self.batch_questions})"
            )
        return self


def rows_per_question(
    method: str, n_neighbours: int, batch_unit: str, rows_matched_updates: bool = False
) -> int:
    """Dataset rows one question of ``method`` fills: 1 with ``batch_unit: questions``; with
    ``rows`` its prompt variants (N+1 for TA methods, 1 for q0-only ones), and N+1 for a
    matched-budget method ((N+1)G responses to q0) when ``rows_matched_updates``."""
    from tagrpo.algorithms import get_method

    if batch_unit not in ("questions", "rows"):
        raise ValueError(f"batch_unit must be questions or rows, got {batch_unit!r}")
    if batch_unit == "questions":
        return 1
    spec = get_method(method)
    if spec.matched_budget and rows_matched_updates:
        return n_neighbours + 1
    return len(spec.variants(n_neighbours))


class LocalBackendSettings(ConfigModel):
    """The local backend (tagrpo/training): one process, transformers, CPU or one GPU."""

    device: Literal["cpu", "cuda", "auto"] = Field(
        description="cpu | cuda | auto (cuda when available)"
    )
    max_batch_sequences: int = Field(ge=1, description="generation batch, sequences")
    micro_batch_sequences: int = Field(
        ge=1, description="forward/backward micro-batch, sequences (lower for real models)"
    )
