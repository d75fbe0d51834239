"""``evaluate`` (pass@k on the benchmarks), ``diagnostics`` (the paper's Figures 3-4) and
``report``."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from tagrpo.plumbing.config_model import ConfigModel, Field


class EvaluateSettings(ConfigModel):
    backend: Literal["hf", "vllm"] = Field(description="generation engine: hf | vllm")
    n: int = Field(ge=1, le=100_000, description="samples per problem; pass@k for k <= n")
    n_trained: int | None = Field(
        ge=1,
        le=100_000,
        description="at most this many samples per problem for a trained policy: it takes "
        "min(n, n_trained) (null = n); the base always takes n (world-v3.md, amendment 2: the "
        "base's n decides V3 and the edges)",
    )
    ks: list[int] = Field(min_length=1, description="k of pass@k")
    temperature: float = Field(gt=0, le=10, description="sampling temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(ge=1, le=131072, description="response length limit")
    max_questions_per_benchmark: int | None = Field(ge=1, description="null = every problem")
    # chat: the policy's chat template around Box 2 (the prompts training used). raw: the
    # authors' test.py string (their instruction, a newline, the question) without a template.
    prompt_format: Literal["chat", "raw"] = Field(
        description="chat (template + Box 2) | raw (the authors' text, vllm only)"
    )
    bootstrap_resamples: int = Field(ge=10, description="bootstrap resamples for CIs")
    groups: dict[str, list[str]] = Field(
        description="benchmark groups averaged like the paper's Table 1; an empty list is no "
        "group (how a profile drops one of the default's)",
    )

    @field_validator("groups")
    @classmethod
    def _drop_empty(cls, groups: dict[str, list[str]]) -> dict[str, list[str]]:
        # Profiles merge into params.yaml key by key, so a profile cannot delete a group; it
        # empties it instead.
        return {name: members for name, members in groups.items() if members}

    @model_validator(mode="after")
    def _ks(self) -> EvaluateSettings:
        if any(k < 1 for k in self.ks) or sorted(set(self.ks)) != self.ks:
            raise ValueError("ks must be increasing and >= 1")
        if self.ks[-1] > self.n:
            raise ValueError(f"largest k ({self.ks[-1]}) exceeds n ({self.n}) samples")
        if self.ks[-1] > self.samples(trained=True):
            raise ValueError(
                f"largest k ({self.ks[-1]}) exceeds a trained policy's "
                f"{self.samples(trained=True)} samples (n_trained)"
            )
        if self.prompt_format == "raw" and self.backend != "vllm":
            raise ValueError("prompt_format: raw is the authors' vLLM evaluation: backend vllm")
        return self

    def samples(self, trained: bool) -> int:
        """Samples per problem for a trained policy (``min(n, n_trained)``) or for the base."""
        if trained and self.n_trained is not None:
            return min(self.n, self.n_trained)
        return self.n


class EmbeddingSettings(ConfigModel):
    model: str = Field(min_length=1, description="response embedder")
    batch_size: int = Field(ge=1, description="texts per encoding batch")


def diagnostics_sampling(group: int, neighbours: int) -> tuple[tuple[int, int], ...]:
    """(prompt variant, responses) the diagnostics sample per training question: (N+1) x G
    from q0 (variant 0; its first G, N x G and all (N+1) x G are the size controls) and G from
    each neighbour q1..qN. The diagnostics stage samples these
    (:func:`tagrpo.evaluation.vanishing_diversity.sample_training_questions`) and the cost
    preflight prices them (:func:`tagrpo.verl_ext.cost.diagnostics_gpu_hours`)."""
    return ((0, (neighbours + 1) * group), *((v, group) for v in range(1, neighbours + 1)))


class DiagnosticsSettings(ConfigModel):
    policies: list[str] = Field(
        min_length=1,
        description="trained policies whose checkpoints are probed (<method>-s<seed>)",
    )
    checkpoints: list[str] = Field(
        description="checkpoint folders probed",
    )
    include_base: bool = Field(description="probe the base policy too (the paper's Base)")
    base_model: str = Field(min_length=1, description="the base policy's folder")
    input: str = Field(min_length=1, description="questions")
    neighbours: Literal["auto", "column", "miniworld", "none"] = Field(
        description="as train.neighbours"
    )
    n_neighbours: int = Field(ge=1, le=64, description="neighbours per question: N")
    questions: int = Field(ge=1, description="the first training questions probed")
    group_size: int = Field(ge=1, le=1024, description="responses per variant: G")
    temperature: float = Field(gt=0, le=10, description="the training temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(ge=1, le=131072, description="response length limit")
    backend: Literal["hf", "vllm"] = Field(description="generation engine: hf | vllm")
    # MiniLM reads at most 256 word pieces of a response.
    embedding: EmbeddingSettings

    @property
    def responses_per_question(self) -> int:
        """Responses sampled per question at each probed checkpoint: (2N+1) x G."""
        plan = diagnostics_sampling(self.group_size, self.n_neighbours)
        return sum(count for _, count in plan)

    @field_validator("checkpoints")
    @classmethod
    def _names(cls, names: list[str]) -> list[str]:
        bad = [n for n in names if not (n.startswith("checkpoint-") and n[11:].isdigit())]
        if bad:
            raise ValueError(f"checkpoint names look like checkpoint-050, got {bad}")
        return names


class ReportSettings(ConfigModel):
    title: str = Field(
        min_length=1,
        description="report heading",
    )
    curve_ks: list[int] = Field(min_length=1, description="k on the curves")
    in_distribution: str | None = Field(
        min_length=1,
        description="the evaluate.groups group of in-distribution benchmarks (V1, the positive "
        "control); null = every benchmark",
    )
    primary_group: str | None = Field(
        min_length=1,
        description="the evaluate.groups group of the primary endpoint (TA-GRPO - GRPO at "
        "pass@k_large, its widening with k, V3, V5): unsaturated and free-form only; null = "
        "every free-form benchmark",
    )
    primary_k: int | None = Field(
        ge=1,
        description="the k of the primary endpoint and the paper's other pass@k rows (TA-GRPO - "
        "GRPO at pass@k, its widening from pass@1, V5), one of evaluate.ks; null = the largest. "
        "World v3 picks it where trained GRPO is not at a ceiling (preregistration/world-v3.md)",
    )
    harder_group: str | None = Field(
        min_length=1,
        description="the evaluate.groups group harder than training (the competition band of "
        "the validity table, its bands from the run's pre-registration); null = no band",
    )
    preregistration: str | None = Field(
        min_length=1,
        description="the pre-registration file the run is judged under (its SHA-256 is in the "
        "report); null = none",
    )
    equivalence_margin: float = Field(
        gt=0,
        lt=1,
        description="TOST margin of the section 5.5 row, as a pass@k fraction (0.02 = 2 points)",
    )
    example_responses: int = Field(
        ge=0, le=100, description="responses shown per benchmark and policy (0 = none)"
    )
