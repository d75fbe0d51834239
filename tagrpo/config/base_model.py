"""``base_model``: the policy training starts from (and the equivalence checks' solver)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from tagrpo.config.model import ConfigModel, Field

WARMSTART_FAMILIES = ("expr", "words", "imperative", "story")
WARMSTART_STRATEGIES = ("forward", "backward")  # tagrpo.miniworld.tasks.STRATEGIES


class TinyModelConfig(ConfigModel):
    """The warm-started tiny Llama's shape."""

    hidden_size: int = Field(ge=8, le=8192, description="hidden width")
    intermediate_size: int = Field(ge=8, le=32768, description="MLP width")
    num_layers: int = Field(ge=1, le=64, description="transformer layers")
    num_heads: int = Field(ge=1, le=128, description="attention heads")
    num_kv_heads: int = Field(ge=1, le=128, description="key/value heads")
    max_positions: int = Field(ge=32, le=32768, description="context length, tokens")
    vocab_size: int = Field(ge=64, le=262144, description="BPE vocabulary trained on the corpus")

    @model_validator(mode="after")
    def _heads(self) -> TinyModelConfig:
        if self.hidden_size % self.num_heads or self.num_heads % self.num_kv_heads:
            raise ValueError(
                "hidden_size must be a multiple of num_heads, and num_heads of num_kv_heads"
            )
        return self


class Misconception(ConfigModel):
    when: Literal["always", "even_first", "small_first", "item_subset"] = Field(
        description="which problems the family's worked answers misread"
    )
    rate: float = Field(ge=0.0, le=1.0, description="probability of the misread when it applies")


class WarmStartCorpus(ConfigModel):
    examples: int = Field(ge=1, le=10_000_000, description="SFT examples")
    family_weights: dict[str, float] = Field(
        description="phrasing-family mix of the corpus",
    )
    # Phrasing-tied misconceptions: when a family's trigger holds for a problem, its worked
    # answer misreads the last operation with the given probability. The base policy inherits
    # these habits, so its success depends on phrasing and some (problem, phrasing) pairs are
    # almost always wrong: the all-wrong groups that TA-GRPO's rephrasings are meant to rescue.
    misconceptions: dict[str, Misconception] = Field(
        description="per family: when its worked answers misread, and how often",
    )
    # Two solution paths (tagrpo.miniworld.tasks.STRATEGIES) with different failure modes: the
    # misconceptions above are the forward path's; the backward path slips on a carry instead.
    strategies: dict[str, float] = Field(
        description="solution-path mix of the corpus (forward, backward)",
    )
    carry_slip: float = Field(
        ge=0.0,
        le=1.0,
        description="probability that a backward worked answer drops the ten of a result >= 10",
    )
    choice_fraction: float = Field(
        ge=0.0, le=1.0, description="share of examples posed as multiple choice"
    )
    choice_options: int = Field(
        ge=2, le=26, description="options per multiple-choice example (letters A-Z)"
    )

    @field_validator("family_weights", "misconceptions")
    @classmethod
    def _families(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(WARMSTART_FAMILIES))
        if unknown:
            raise ValueError(f"unknown families {unknown}; allowed: {list(WARMSTART_FAMILIES)}")
        return value

    @field_validator("strategies")
    @classmethod
    def _strategies(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(WARMSTART_STRATEGIES))
        if unknown:
            raise ValueError(f"unknown strategies {unknown}; allowed: {list(WARMSTART_STRATEGIES)}")
        return value

    @model_validator(mode="after")
    def _some_weight(self) -> WarmStartCorpus:
        for name, weights in (
            ("family_weights", self.family_weights.values()),
            ("strategies", self.strategies.values()),
        ):
            if any(w < 0 for w in weights) or not any(weights):
                raise ValueError(f"{name} must be >= 0 and not all 0")
        return self


class WarmStartTraining(ConfigModel):
    steps: int = Field(ge=1, le=1_000_000, description="SFT optimiser steps")
    batch_size: int = Field(ge=1, le=65536, description="sequences per SFT step")
    learning_rate: float = Field(gt=0, le=1.0, description="peak AdamW learning rate")
    warmup_steps: int = Field(ge=0, description="linear warm-up steps, then cosine to 10%")
    weight_decay: float = Field(ge=0, le=1.0, description="AdamW weight decay")


class WarmStartSettings(ConfigModel):
    model: TinyModelConfig
    corpus: WarmStartCorpus
    training: WarmStartTraining

    @model_validator(mode="after")
    def _batch(self) -> WarmStartSettings:
        if self.training.batch_size > self.corpus.examples:
            raise ValueError(
                f"training.batch_size ({self.training.batch_size}) exceeds corpus.examples "
                f"({self.corpus.examples})"
            )
        return self


class GgufPackageSettings(ConfigModel):
    package: str = Field(min_length=1, description="Python package with the file")
    gguf_file: str = Field(min_length=1, description="GGUF file in the package")


class HubModelSettings(ConfigModel):
    hub_id: str = Field(min_length=1, description="Hugging Face model id")


class LocalModelSettings(ConfigModel):
    path: str = Field(min_length=1, description="a Hugging Face folder")


class ProbeSettings(ConfigModel):
    enabled: bool = Field(description="sample the training questions in every phrasing")
    questions: int = Field(ge=1, description="training questions probed")
    group_size: int = Field(ge=1, le=1024, description="responses per (question, phrasing): G")
    temperature: float = Field(gt=0, le=10, description="sampling temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(ge=1, le=131072, description="response length limit")
    max_batch_sequences: int = Field(ge=1, description="generation batch, sequences")


class BaseModelSettings(ConfigModel):
    kind: Literal["warmstart", "gguf_package", "hub", "local"] = Field(
        description="warmstart (tiny Llama SFT on CPU) | gguf_package | hub | local",
    )
    warmstart: WarmStartSettings
    gguf_package: GgufPackageSettings
    hub: HubModelSettings
    local: LocalModelSettings
    probe: ProbeSettings
