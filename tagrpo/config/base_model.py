"""``base_model``: the policy training starts from (and the equivalence checks' solver)."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from tagrpo.plumbing.config_model import ConfigModel, Field

WARMSTART_FAMILIES = ("expr", "words", "imperative", "story")
WARMSTART_STRATEGIES = ("forward", "backward")  # tagrpo.miniworld.tasks.STRATEGIES
STEP_CLASSES = ("plus_small", "plus_big", "minus_small", "minus_big")  # tasks.STEP_CLASSES


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


class WarmStartCorpus(ConfigModel):
    examples: int = Field(ge=1, le=10_000_000, description="SFT examples")
    lengths: dict[int, float] = Field(
        description="chain-length weights of the corpus (cover every benchmark's lengths)",
    )
    family_weights: dict[str, float] = Field(
        description="phrasing-family mix of the corpus",
    )
    strategies: dict[str, float] = Field(
        description="solution-path mix of the corpus (forward, backward)",
    )
    # Phrasing- and content-tied habits: in a family, a path misreads (flips the sign of) the
    # steps of the listed classes. The base policy inherits them, so its success depends on
    # phrasing and some (problem, phrasing) pairs are almost always wrong: the all-wrong groups
    # that TA-GRPO's rephrasings are meant to rescue (the design: preregistration/world-v2.md).
    habits: dict[str, dict[str, list[str]]] = Field(
        description="per family and path: the step classes its worked answers misread",
    )
    misread_rate: float = Field(
        ge=0.0, le=1.0, description="probability that a habit's step is misread when it applies"
    )
    choice_fraction: float = Field(
        ge=0.0, le=1.0, description="share of examples posed as multiple choice"
    )
    choice_options: int = Field(
        ge=2, le=26, description="options per multiple-choice example (letters A-Z)"
    )

    @field_validator("lengths")
    @classmethod
    def _lengths(cls, weights: dict[int, float]) -> dict[int, float]:
        from tagrpo.config.common import check_chain_lengths

        return check_chain_lengths(weights)

    @field_validator("family_weights", "habits")
    @classmethod
    def _families(cls, value: dict) -> dict:
        unknown = sorted(set(value) - set(WARMSTART_FAMILIES))
        if unknown:
            raise ValueError(f"unknown families {unknown}; allowed: {list(WARMSTART_FAMILIES)}")
        return value

    @field_validator("habits")
    @classmethod
    def _habits(cls, value: dict[str, dict[str, list[str]]]) -> dict[str, dict[str, list[str]]]:
        for family, paths in value.items():
            unknown = sorted(set(paths) - set(WARMSTART_STRATEGIES))
            if unknown:
                raise ValueError(
                    f"habits.{family}: unknown paths {unknown}; "
                    f"allowed: {list(WARMSTART_STRATEGIES)}"
                )
            for path, classes in paths.items():
                bad = sorted(set(classes) - set(STEP_CLASSES))
                if bad:
                    raise ValueError(
                        f"habits.{family}.{path}: unknown step classes {bad}; "
                        f"allowed: {list(STEP_CLASSES)}"
                    )
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
    seed: int = Field(
        ge=0, description="the base draw: seeds the corpus, the tokenizer and the SFT"
    )
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
