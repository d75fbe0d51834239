"""``check_equivalence``: structural, similarity and answer-consistency checks of rephrasings."""

from __future__ import annotations

from typing import Literal

from pydantic import model_validator

from tagrpo.config.rephrase import EndpointConfig
from tagrpo.plumbing.config_model import ConfigModel, Field


class StructuralConfig(ConfigModel):
    numbers: Literal["off", "set", "multiset", "strict"] = Field(
        description="which numbers of the original must survive: off|set|multiset|strict",
    )
    reject_new_numbers: bool = Field(description="reject numbers the original lacks")
    min_length_ratio: float = Field(ge=0, le=1, description="shortest rephrasing / original")
    max_length_ratio: float = Field(ge=1, description="longest rephrasing / original")
    length_slack_chars: int = Field(ge=0, description="characters allowed beyond the ratios")
    answer_revealed: bool = Field(description="reject a rephrasing that writes the answer")


class SimilaritySettings(ConfigModel):
    enabled: bool = Field(description="embedding-similarity check")
    model: str = Field(
        min_length=1,
        description="package, folder or sentence-transformers id",
    )
    # Mini-world (v2) equivalents in other families score down to 0.33 (words vs story),
    # off-topic text about 0.0-0.15; LLM paraphrases of MATH problems score far higher.
    threshold: float = Field(ge=-1, le=1, description="minimum cosine similarity")
    batch_size: int = Field(ge=1, description="texts per encoding batch")


class LocalSolverSettings(ConfigModel):
    model: str = Field(min_length=1, description="a transformers model folder")
    max_batch_sequences: int = Field(ge=1, description="generation batch, sequences")


class SolverEndpoint(EndpointConfig):
    model: str = Field(min_length=1, description="model name at the endpoint")
    max_tokens: int = Field(ge=1, le=1_000_000, description="reply length limit, tokens")
    timeout_s: float = Field(gt=0, le=86400, description="per-request timeout, seconds")


class ConsistencyConfig(ConfigModel):
    """The answer-consistency rule (:mod:`tagrpo.equivalence.consistency` documents it)."""

    k: int = Field(ge=1, le=1024, description="samples of the original and of each rephrasing")
    temperature: float = Field(gt=0, le=10, description="solver sampling temperature")
    top_p: float = Field(gt=0, le=1, description="nucleus sampling")
    max_new_tokens: int = Field(ge=1, le=131072, description="solver response length")
    min_correct: int = Field(ge=1, description="accept when the gold is reached this often")
    alpha: float = Field(gt=0, lt=1, description="reject when never reached and Fisher's p < alpha")
    on_unverifiable: Literal["accept", "reject"] = Field(
        description="when the solver solves neither form, or too rarely to tell"
    )

    @model_validator(mode="after")
    def _min_correct(self) -> ConsistencyConfig:
        if self.min_correct > self.k:
            raise ValueError(f"min_correct ({self.min_correct}) cannot exceed k ({self.k})")
        return self


class ConsistencySettings(ConsistencyConfig):
    enabled: bool = Field(description="answer-consistency solve")
    # The base policy as solver rejects exactly the rephrasings it fails on, i.e. the signal
    # TA-GRPO exploits; an independent solver is the default wherever one exists.
    solver: Literal["miniworld", "local", "openai"] = Field(
        description="miniworld (exact, mini world only) | local (a model) | openai (an endpoint)",
    )
    local: LocalSolverSettings
    openai: SolverEndpoint

    def rule(self) -> ConsistencyConfig:
        """The decision rule alone (what the solver and the verdicts need)."""
        return ConsistencyConfig(
            **{name: getattr(self, name) for name in ConsistencyConfig.model_fields}
        )


class DifficultyProbe(ConfigModel):
    """The policy's success on each candidate, split by verdict: does the check keep the
    rephrasings the policy already solves (a shift of the training set's difficulty)?"""

    enabled: bool = Field(description="sample consistency.local.model on every candidate")
    k: int = Field(ge=1, le=1024, description="samples per candidate")


class PolicyConfig(ConfigModel):
    max_rounds: int = Field(ge=0, le=100, description="regeneration rounds for rejected slots")
    fallback: Literal["pad_original", "drop"] = Field(
        description="a slot still rejected: pad with the original, or drop the question",
    )
    max_padded_share: float = Field(
        ge=0.0,
        le=1.0,
        description="fail the stage when more than this share of slots is padded or dropped",
    )


class ControlsSettings(ConfigModel):
    enabled: bool = Field(description="answer-changing negative controls")
    max_questions: int | None = Field(ge=1, description="null = every training question")


class CheckEquivalenceSettings(ConfigModel):
    # 1, measured on this 2-core machine while another process held a core: 800 MiniLM
    # encodings 4.0 s (1 thread) vs 14.3 s (2), 800 solver samples 3.9 s vs 26 s (OpenMP threads
    # spin for a core they do not get). On an idle machine 2 threads sample 1.4x faster (2.3 s
    # vs 3.2 s): the stage takes ~48 s, not ~58.
    torch_threads: int = Field(ge=1, le=256, description="torch threads (wins over common)")
    structural: StructuralConfig
    similarity: SimilaritySettings
    consistency: ConsistencySettings
    policy: PolicyConfig
    controls: ControlsSettings
    difficulty_probe: DifficultyProbe
    report_examples: int = Field(ge=0, le=1000, description="examples shown in the report")
