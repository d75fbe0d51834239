"""``common``: settings every stage reads, and ``runs``: which policies the DAG trains."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_validator

from tagrpo.grading.settings import GradingSettings
from tagrpo.plumbing.config_model import ConfigModel, Field


def check_chain_lengths(weights: dict[int, float]) -> dict[int, float]:
    """Mini-world chain-length weights: lengths 2..12, weights >= 0, not all 0."""
    bad = sorted(length for length in weights if not 2 <= length <= 12)
    if bad:
        raise ValueError(f"chain lengths must be 2..12, got {bad}")
    if any(weight < 0 for weight in weights.values()) or not any(weights.values()):
        raise ValueError("chain-length weights must be >= 0 and not all 0")
    return weights


class TrackingSettings(ConfigModel):
    enabled: bool = Field(description="log every stage run to MLflow")
    uri: str = Field(
        description="SQLite file in the checkout, or a server URL; MLFLOW_TRACKING_URI wins",
    )
    experiment: str = Field(min_length=1, description="MLflow experiment name")


class MiniWorldSettings(ConfigModel):
    """The mini world's problem space (tagrpo/miniworld/tasks.py), shared by the data and
    base_model stages: a start value, then a chain of signed changes."""

    start_min: int = Field(ge=0, le=999, description="smallest start value")
    start_max: int = Field(ge=0, le=999, description="largest start value")
    max_change: int = Field(ge=2, le=99, description="changes are +/-1..max_change")
    max_total: int = Field(
        ge=1, le=9999, description="every running total of either path stays in 0..max_total"
    )
    big_from: int = Field(
        ge=2, le=99, description="a change of this size or more is 'big' (the habits' classes)"
    )
    train_lengths: dict[int, float] = Field(
        description="chain-length weights of the training split and the data-scaling pool",
    )

    @field_validator("train_lengths")
    @classmethod
    def _lengths(cls, weights: dict[int, float]) -> dict[int, float]:
        return check_chain_lengths(weights)

    @model_validator(mode="after")
    def _ranges(self) -> MiniWorldSettings:
        if not self.start_min <= self.start_max <= self.max_total:
            raise ValueError("need start_min <= start_max <= max_total")
        if self.big_from > self.max_change:
            raise ValueError("big_from must be <= max_change (else no change is big)")
        return self


# What common.profile may say: the embedded default, a shipped profile (one per
# profiles/<name>.yaml; tests/test_config.py keeps the two equal) or `custom` for params of
# one's own. The label tags every MLflow run and picks what `tagrpo compare` shows: a free-form
# one (a typo, a stale name) would file runs under a profile that does not exist.
SHIPPED_PROFILES = (
    "base-draws",
    "calibration",
    "confirmatory",
    "data-scaling",
    "local",
    "paper",
    "paper-authors-hparams",
    "real-tiny",
    "seeds3",
    "smoke",
    "study",
    "study-main",
    "study-pilot",
    "verl-cpu",
)
KNOWN_PROFILES = ("embedded", *SHIPPED_PROFILES, "custom")


class CommonSettings(ConfigModel):
    profile: str = Field(
        min_length=1,
        description="profile name, tags every run: embedded, a profiles/ name, or custom",
    )
    seed: int = Field(ge=0, description="the run's seed (stages derive theirs from it)")
    torch_threads: int = Field(
        ge=1,
        le=256,
        description="torch CPU threads of the base_model, train and diagnostics stages (and "
        "verl's CPU workers); a param of those stages, so a change reruns them: CPU kernels "
        "may sum in another order with another thread count",
    )
    data_dir: str = Field(
        min_length=1,
        description="third-party benchmark files (relative to the checkout; TAGRPO_DATA_DIR wins)",
    )
    tracking: TrackingSettings
    grading: GradingSettings
    chat_template_kwargs: dict[str, Any] = Field(
        description="chat-template options for verl and vLLM (e.g. {enable_thinking: false})",
    )
    miniworld: MiniWorldSettings

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, profile: str) -> str:
        if profile not in KNOWN_PROFILES:
            raise ValueError(
                f"must be one of {list(KNOWN_PROFILES)} (embedded: params.yaml as shipped; a "
                "profiles/ name; custom: params of your own)"
            )
        return profile


class DataScaling(ConfigModel):
    """The paper's data-scaling runs (section 5.5, Figure 7): baselines trained on the 1x set
    plus chunks of half its size from the data stage's pool, same epochs (so more steps)."""

    methods: list[str] = Field(description="methods of the scaling runs")
    multiples: list[float] = Field(
        description="training-set multiples (> 1); [] = no data-scaling runs",
    )
    seeds: list[int] = Field(description="seeds of the runs")

    @field_validator("methods")
    @classmethod
    def _known(cls, methods: list[str]) -> list[str]:
        from tagrpo.algorithms import METHODS

        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; allowed: {sorted(METHODS)}")
        rephrasing = [m for m in methods if METHODS[m].use_neighbours]
        if rephrasing:
            raise ValueError(
                f"{rephrasing} sample rephrasings, which the pool's extra questions lack: the "
                "data-scaling runs are the baselines' (paper 5.5)"
            )
        return methods

    @field_validator("multiples")
    @classmethod
    def _above_one(cls, multiples: list[float]) -> list[float]:
        if any(m <= 1.0 for m in multiples):
            raise ValueError("data-scaling multiples must be > 1 (1x is the ordinary run)")
        return multiples


class RunsSettings(ConfigModel):
    """What the DAG trains and evaluates: dvc.yaml's train/evaluate matrices read these lists."""

    methods: list[str] = Field(
        min_length=1,
        description="methods trained with every seed of `seeds` (tagrpo.algorithms.METHODS)",
    )
    seeds: list[int] = Field(min_length=1, description="seeds of `methods`")
    control_methods: list[str] = Field(
        description="methods trained with the seeds of `control_seeds`: the negative control, "
        "which V4 needs with >= 2 seeds but not with as many as GRPO (cost); [] for none",
    )
    control_seeds: list[int] = Field(min_length=1, description="seeds of control_methods")
    one_seed_methods: list[str] = Field(
        description="methods trained with the seeds of `one_seed` only (cost); [] to give all "
        "seeds",
    )
    one_seed: list[int] = Field(
        min_length=1,
        description="the seeds of one_seed_methods, some of `seeds` (the default: one; the "
        "study's main draws: S of them while GRPO keeps 3)",
    )
    data_scaling: DataScaling

    @field_validator("methods", "control_methods", "one_seed_methods")
    @classmethod
    def _known_methods(cls, methods: list[str]) -> list[str]:
        from tagrpo.algorithms import METHODS

        unknown = [m for m in methods if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown methods {unknown}; allowed: {sorted(METHODS)}")
        if len(set(methods)) != len(methods):
            raise ValueError("a method is listed twice")
        return methods

    @model_validator(mode="after")
    def _distinct_seeds(self) -> RunsSettings:
        for name, seeds in (("seeds", self.seeds), ("control_seeds", self.control_seeds)):
            if len(set(seeds)) != len(seeds) or min(seeds) < 0:
                raise ValueError(f"{name} must be distinct and >= 0")
        lists = {
            "methods": self.methods,
            "control_methods": self.control_methods,
            "one_seed_methods": self.one_seed_methods,
        }
        for first, second in (
            ("methods", "control_methods"),
            ("methods", "one_seed_methods"),
            ("control_methods", "one_seed_methods"),
        ):
            both = sorted(set(lists[first]) & set(lists[second]))
            if both:
                raise ValueError(f"{both} are in both {first} and {second}")
        if len(set(self.one_seed)) != len(self.one_seed) or not set(self.one_seed) <= set(
            self.seeds
        ):
            raise ValueError(f"one_seed {self.one_seed} must be distinct seeds of {self.seeds}")
        return self

    def all_methods(self) -> list[str]:
        """Every method the DAG trains (multi-seed ones first)."""
        return [*self.methods, *self.control_methods, *self.one_seed_methods]

    def seeds_of(self, method: str) -> list[int]:
        """The seeds a method is trained with."""
        if method in self.methods:
            return list(self.seeds)
        if method in self.control_methods:
            return list(self.control_seeds)
        if method in self.one_seed_methods:
            return list(self.one_seed)
        raise KeyError(
            f"{method} is not trained by this run (runs.methods, control_methods, one_seed_methods)"
        )

    def policies(self) -> list[str]:
        """Every trained policy, ``<method>-s<seed>``."""
        from tagrpo.plumbing.layout import policy_name

        return [policy_name(m, seed) for m in self.all_methods() for seed in self.seeds_of(m)]

    def scaling_policies(self) -> list[str]:
        """The data-scaling runs' policies, ``<method>_data<m>x-s<seed>``."""
        from tagrpo.plumbing.layout import policy_name

        scaling = self.data_scaling
        return [
            policy_name(method, seed, multiple)
            for method in scaling.methods
            for multiple in scaling.multiples
            for seed in scaling.seeds
        ]
