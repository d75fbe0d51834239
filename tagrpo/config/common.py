"""``common``: settings every stage reads, and ``runs``: which policies the DAG trains."""

from __future__ import annotations

from typing import Any

from pydantic import field_validator, model_validator

from tagrpo.config.model import ConfigModel, Field

MINIWORLD_OPERATIONS = ("add", "sub", "add3", "addsub")


def check_operation_weights(weights: dict[str, float]) -> dict[str, float]:
    """Mini-world operation weights: known operations, non-negative, not all zero."""
    unknown = sorted(set(weights) - set(MINIWORLD_OPERATIONS))
    if unknown:
        raise ValueError(f"unknown operations {unknown}; allowed: {list(MINIWORLD_OPERATIONS)}")
    if any(weight < 0 for weight in weights.values()) or not any(weights.values()):
        raise ValueError("operation weights must be >= 0 and not all 0")
    return weights


class TrackingSettings(ConfigModel):
    enabled: bool = Field(True, description="log every stage run to MLflow")
    uri: str = Field(
        "mlflow.db",
        description="SQLite file in the checkout, or a server URL; MLFLOW_TRACKING_URI wins",
    )
    experiment: str = Field("tagrpo", min_length=1, description="MLflow experiment name")


class GradingSettings(ConfigModel):
    workers: int = Field(2, ge=1, le=256, description="grading processes")
    # CPU time, not wall time: a verdict must not depend on how busy the machine is.
    item_timeout_s: float = Field(
        5.0, gt=0, le=600, description="CPU-seconds per graded answer (extraction included)"
    )
    kill_grace_s: float = Field(
        1.0, ge=0, le=600, description="extra CPU-seconds before a stuck worker is killed"
    )
    wall_timeout_s: float | None = Field(
        None, gt=0, description="wall-clock backstop per item (null = 3 x item_timeout_s + 10)"
    )


class MiniWorldSettings(ConfigModel):
    max_operand: int = Field(9, ge=1, le=99, description="operands are drawn from 0..max_operand")
    train_operations: dict[str, float] = Field(
        default_factory=lambda: {"add": 0.15, "sub": 0.1, "add3": 0.4, "addsub": 0.35},
        description="operation weights of the training split (and the warm-start corpus)",
    )

    @field_validator("train_operations")
    @classmethod
    def _weights(cls, weights: dict[str, float]) -> dict[str, float]:
        return check_operation_weights(weights)


class CommonSettings(ConfigModel):
    profile: str = Field("embedded", min_length=1, description="profile name, tags every run")
    seed: int = Field(0, ge=0, description="the run's seed (stages derive theirs from it)")
    torch_threads: int = Field(2, ge=1, le=256, description="torch CPU threads per stage")
    data_dir: str = Field(
        "../shared/data",
        min_length=1,
        description="third-party benchmark files (relative to the checkout; TAGRPO_DATA_DIR wins)",
    )
    tracking: TrackingSettings = Field(default_factory=TrackingSettings)
    grading: GradingSettings = Field(default_factory=GradingSettings)
    chat_template_kwargs: dict[str, Any] = Field(
        default_factory=dict,
        description="chat-template options for verl and vLLM (e.g. {enable_thinking: false})",
    )
    miniworld: MiniWorldSettings = Field(default_factory=MiniWorldSettings)


# Methods the embedded default trains once (seed runs.seeds[0]): baselines that are not in the
# claims' main comparisons; the seeds3 profile gives them every seed too.
ONE_SEED_DEFAULT = ("grpo_ds", "grpo_x4_ds", "avspo")


def _registered_methods() -> list[str]:
    from tagrpo.algorithms import METHODS

    # The negative control is not in the default's runs yet: it joins them (and this default)
    # with the redesigned mini world in which it can be detected (issue 21, V4).
    return [
        name
        for name, spec in METHODS.items()
        if name not in ONE_SEED_DEFAULT and not spec.negative_control
    ]


class DataScaling(ConfigModel):
    """The paper's data-scaling runs (section 5.5, Figure 7): baselines trained on the 1x set
    plus chunks of half its size from the data stage's pool, same epochs (so more steps)."""

    methods: list[str] = Field(
        default_factory=lambda: ["grpo", "grpo_ds"], description="methods of the scaling runs"
    )
    multiples: list[float] = Field(
        default_factory=list,
        description="training-set multiples (> 1); [] = no data-scaling runs",
    )
    seeds: list[int] = Field(default_factory=lambda: [0], description="seeds of the runs")

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
        default_factory=lambda: _registered_methods(),
        min_length=1,
        description="methods trained with every seed of `seeds` (tagrpo.algorithms.METHODS)",
    )
    seeds: list[int] = Field(
        default_factory=lambda: [0, 1, 2], min_length=1, description="seeds of `methods`"
    )
    one_seed_methods: list[str] = Field(
        default_factory=lambda: list(ONE_SEED_DEFAULT),
        description="methods trained with the first seed only (cost); [] to give all seeds",
    )
    one_seed: list[int] = Field(
        default_factory=lambda: [0],
        min_length=1,
        max_length=1,
        description="the seed of one_seed_methods (a list: dvc.yaml's matrix reads it)",
    )
    data_scaling: DataScaling = Field(default_factory=DataScaling)

    @field_validator("methods", "one_seed_methods")
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
        if len(set(self.seeds)) != len(self.seeds) or min(self.seeds) < 0:
            raise ValueError("seeds must be distinct and >= 0")
        both = sorted(set(self.methods) & set(self.one_seed_methods))
        if both:
            raise ValueError(f"{both} are in both methods and one_seed_methods")
        if self.one_seed[0] not in self.seeds:
            raise ValueError(f"one_seed {self.one_seed} must be one of seeds {self.seeds}")
        return self

    def all_methods(self) -> list[str]:
        """Every method the DAG trains (multi-seed ones first)."""
        return [*self.methods, *self.one_seed_methods]

    def seeds_of(self, method: str) -> list[int]:
        """The seeds a method is trained with."""
        if method in self.methods:
            return list(self.seeds)
        if method in self.one_seed_methods:
            return list(self.one_seed)
        raise KeyError(f"{method} is not trained by this run (runs.methods, one_seed_methods)")

    def policies(self) -> list[str]:
        """Every trained policy, ``<method>-s<seed>``."""
        from tagrpo.layout import policy_name

        return [policy_name(m, seed) for m in self.all_methods() for seed in self.seeds_of(m)]

    def scaling_policies(self) -> list[str]:
        """The data-scaling runs' policies, ``<method>_data<m>x-s<seed>``."""
        from tagrpo.layout import policy_name

        scaling = self.data_scaling
        return [
            policy_name(method, seed, multiple)
            for method in scaling.methods
            for multiple in scaling.multiples
            for seed in scaling.seeds
        ]
