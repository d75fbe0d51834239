"""The method's settings as they travel in the verl config, and the checks every process runs.

The launcher writes them as Hydra overrides under ``algorithm.tagrpo`` (``+algorithm.tagrpo.
method=ta_grpo`` ...): the algorithm section is what verl hands to advantage estimators, and
the agent loops and the trainer see the whole config. Run bookkeeping (where to export models,
at which fractions of training to dump rollouts) goes under ``trainer.tagrpo``.

Pure Python: importable without verl, so the launcher and the tests of the layout rules do not
pay for importing it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from tagrpo.algorithms import MethodSpec, get_method
from tagrpo.algorithms.estimators import get_estimator
from tagrpo.verl_ext import AGENT_LOOP_NAME

CONFIG_SECTION = "tagrpo"


def section(config: Any, key: str) -> Mapping[str, Any]:
    """``config[key]`` as a mapping ({} if absent); works for DictConfig, dicts and dataclasses."""
    if config is None:
        return {}
    if isinstance(config, Mapping) or hasattr(config, "get"):
        value = config.get(key, None)
    else:
        value = getattr(config, key, None)
    if value is None:
        return {}
    if isinstance(value, Mapping) or hasattr(value, "items"):
        return value
    if hasattr(value, "__dataclass_fields__"):
        return asdict(value)
    if hasattr(value, "model_dump"):
        return value.model_dump()
    raise TypeError(f"config section {key!r} is a {type(value).__name__}, not a mapping")


def _written(settings: Mapping[str, Any], key: str, parent: str) -> Any:
    """``<parent>.tagrpo.<key>`` as the launcher wrote it; a clear error when it is missing."""
    value = settings.get(key, None)
    if value is None:
        raise ValueError(
            f"{parent}.{CONFIG_SECTION}.{key} is not set: build the command with "
            "tagrpo.verl_ext.overrides (python -m stages.train --method M --dry-run)"
        )
    return value


@dataclass(frozen=True)
class MethodSettings:
    """What a verl process needs to know about the method of the run.

    ``group_size`` is G and ``n_neighbours`` N of the paper; the response layout of a question
    follows :class:`tagrpo.algorithms.MethodSpec`: session ``j`` of a question (verl's
    ``session_id``, 0 .. rollout.n - 1) is sampled from prompt variant ``j // responses per
    variant``.
    """

    method: str
    group_size: int
    n_neighbours: int
    # The settings of the method's advantage estimator (its registered settings model; None
    # for an estimator without settings, e.g. grpo): ``algorithm.tagrpo.<estimator>``.
    estimator_config: Any = None

    def __post_init__(self) -> None:
        get_method(self.method)
        if self.group_size < 1 or self.n_neighbours < 0:
            raise ValueError("group_size must be >= 1 and n_neighbours >= 0")
        estimator = get_estimator(self.spec.estimator)
        if (self.estimator_config is None) != (estimator.config_model is None):
            raise ValueError(
                f"{self.method}'s estimator {estimator.name} takes "
                + ("no settings" if estimator.config_model is None else "its settings")
                + f" (train.estimators.{estimator.name}), got {self.estimator_config!r}"
            )

    @property
    def spec(self) -> MethodSpec:
        return get_method(self.method)

    @property
    def responses_per_variant(self) -> int:
        return self.spec.responses_per_variant(self.group_size, self.n_neighbours)

    @property
    def rollout_n(self) -> int:
        """verl's ``actor_rollout_ref.rollout.n``: responses per question (G or (N+1)G)."""
        return self.spec.responses_per_question(self.group_size, self.n_neighbours)

    def variant_of(self, session_id: int) -> int:
        """Prompt variant (0 = q0, n = n-th rephrasing) that session ``session_id`` samples."""
        if session_id < 0:
            raise ValueError(f"session_id must be >= 0, got {session_id}")
        if not self.spec.use_neighbours:
            return 0
        variant = session_id // self.responses_per_variant
        if variant > self.n_neighbours:
            raise ValueError(
                f"session {session_id} maps to variant {variant}, but {self.method} samples "
                f"{self.n_neighbours + 1} variants of {self.responses_per_variant}: "
                f"actor_rollout_ref.rollout.n must be {self.rollout_n}"
            )
        return variant

    @classmethod
    def from_algorithm(cls, algorithm: Any) -> MethodSettings:
        """Read ``algorithm.tagrpo`` (raises, naming the key, if the launcher did not write it)."""
        settings = section(algorithm, CONFIG_SECTION)
        method = str(_written(settings, "method", "algorithm"))
        estimator = get_estimator(get_method(method).estimator)
        config = None
        if estimator.config_model is not None:
            given = _written(settings, estimator.name, "algorithm")
            config = estimator.config_model.model_validate(dict(given))
        return cls(
            method=method,
            group_size=int(_written(settings, "group_size", "algorithm")),
            n_neighbours=int(_written(settings, "n_neighbours", "algorithm")),
            estimator_config=config,
        )

    def as_config(self) -> dict[str, Any]:
        """The ``algorithm.tagrpo`` section for these settings."""
        config: dict[str, Any] = {
            "method": self.method,
            "group_size": self.group_size,
            "n_neighbours": self.n_neighbours,
        }
        if self.estimator_config is not None:
            config[self.spec.estimator] = self.estimator_config.model_dump()
        return config


def refuse_rollout_correction(method: str, algorithm: Any) -> None:
    """Raise for rollout-correction modes that would use vLLM's log-probs under a rephrasing.

    TA-GRPO scores every response under q0 (Eq. 4), but vLLM computed its log-probabilities of
    neighbour responses under q^n. ``bypass_mode`` would make those the old log-probabilities of
    the PPO ratio, and ``rollout_is``/``rollout_rs`` would weight or reject samples by the
    q^n-vs-q0 shift as if it were an engine mismatch. Methods scored under their own prompt
    (all others) are unaffected.
    """
    if get_method(method).anchor != "original":
        return
    correction = section(algorithm, "rollout_correction")
    problems = []
    if correction.get("bypass_mode", False):
        problems.append("bypass_mode=True (old log-probs := vLLM's, computed under q^n)")
    for key in ("rollout_is", "rollout_rs"):
        if correction.get(key, None):
            problems.append(
                f"{key}={correction.get(key)} (weights from vLLM's log-probs under q^n)"
            )
    if problems:
        raise ValueError(
            f"{method} computes old, reference and current log-probabilities of every response "
            "under the original question q0 (Eq. 4), but algorithm.rollout_correction has "
            + "; ".join(problems)
            + ". Set algorithm.rollout_correction.bypass_mode=False, rollout_is=null and "
            "rollout_rs=null (and keep actor_rollout_ref.rollout.calculate_log_probs=False)."
        )


def expected_estimator(settings: MethodSettings) -> str:
    """verl's ``algorithm.adv_estimator`` for the method: its registered estimator's name
    (``grpo`` is verl's stock estimator; the others are registered by
    :mod:`tagrpo.verl_ext.estimators`)."""
    return settings.spec.estimator


def validate_run(config: Any) -> MethodSettings:
    """Check a composed verl config against its method; returns the method's settings.

    The ``tagrpo_sync`` trainer runs this at start-up, so a hand-edited command fails before
    any GPU work rather than training something other than the method it is named after.
    """
    algorithm = section(config, "algorithm")
    settings = MethodSettings.from_algorithm(algorithm)
    refuse_rollout_correction(settings.method, algorithm)
    spec = settings.spec
    rollout = section(section(config, "actor_rollout_ref"), "rollout")
    problems = []
    if not section(config, "trainer").get("use_v1", True):
        problems.append("trainer.use_v1 must be True (the agent loop needs session ids)")
    estimator = expected_estimator(settings)
    if algorithm.get("adv_estimator") != estimator:
        problems.append(f"algorithm.adv_estimator must be {estimator}")
    if algorithm.get("use_kl_in_reward", False):
        problems.append("algorithm.use_kl_in_reward must be False (Appendix B: KL loss)")
    if int(rollout.get("n", 0)) != settings.rollout_n:
        problems.append(f"actor_rollout_ref.rollout.n must be {settings.rollout_n}")
    filter_groups = section(algorithm, "filter_groups")
    if bool(filter_groups.get("enable", False)) != spec.dynamic_sampling:
        problems.append(f"algorithm.filter_groups.enable must be {spec.dynamic_sampling}")
    agent = section(rollout, "agent").get("default_agent_loop")
    if spec.use_neighbours and agent != AGENT_LOOP_NAME:
        problems.append(
            f"actor_rollout_ref.rollout.agent.default_agent_loop must be {AGENT_LOOP_NAME}"
        )
    correction = section(algorithm, "rollout_correction")
    if correction.get("rollout_is", None) or correction.get("rollout_rs", None):
        problems.append("rollout_is / rollout_rs are not supported by the tagrpo_sync trainer")
    if problems:
        raise ValueError(
            f"verl config does not match method {settings.method}: " + "; ".join(problems)
        )
    return settings


def checkpoint_fractions(trainer: Any) -> tuple[float, ...]:
    """Fractions of training at which the trainer dumps rollouts and exports the policy
    (``train.checkpoints``, which the launcher writes as ``trainer.tagrpo.checkpoints``)."""
    values = _written(section(trainer, CONFIG_SECTION), "checkpoints", "trainer")
    return tuple(float(x) for x in values)
