"""Hydra overrides of ``python -m verl.trainer.main_ppo`` for each method.

The hyper-parameters are the ``train`` section's, shared with the local backend, so one set of
values drives both; the paper profile sets them to Appendix B (prompt 512, response 3072,
temperature 1.0, KL loss 0.001, clip 0.2/0.2, batch 256, mini-batch 128, lr 1e-6, 2 epochs)
and G=8, N=3 (section 5.1). The ``verl`` section holds what only verl needs: GPUs, nodes,
model path, device, rollout engine, engine memory and micro-batch sizes.

=====================  ==========  ==============  ================  ==============  ====
method                 rollout.n   agent loop      adv_estimator     scored under    DS
=====================  ==========  ==============  ================  ==============  ====
grpo, grpo_ds          G           single_turn     grpo              q0              ds
grpo_x4, grpo_x4_ds    (N+1)G      single_turn     grpo              q0              ds
ta_grpo_star           (N+1)G      tagrpo_agent    grpo (per q^n)    own q^n
ta_grpo                (N+1)G      tagrpo_agent    grpo (joint)      q0
ta_grpo_unanchored     (N+1)G      tagrpo_agent    grpo (joint)      own q^n
avspo                  G           single_turn     avspo             q0
grpo_flipped           G           single_turn     grpo_flipped      q0
=====================  ==========  ==============  ================  ==============  ====

Groups are formed by the ``tagrpo_sync`` trainer from the method (the ``ta_grpo_star`` groups
differ from verl's per-uid ones); the estimator only sees them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagrpo.algorithms import get_method
from tagrpo.config.engines import VerlSettings
from tagrpo.config.params import Params
from tagrpo.config.train import EPSILON, TrainSettings, rows_per_question
from tagrpo.verl_ext import AGENT_LOOP_NAME, REWARD_MODULE, TRAINER_MODE
from tagrpo.verl_ext.device import cpu_overrides, device_env, run_device
from tagrpo.verl_ext.settings import MethodSettings, expected_estimator

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]*")
_RESERVED = {"true", "false", "null", "none", "nan", "inf"}


def hydra_value(value: Any) -> str:
    """A Python value in Hydra's override grammar (strings quoted when needed)."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{key}:{hydra_value(item)}" for key, item in value.items()) + "}"
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Sequence) and not isinstance(value, str):
        return "[" + ",".join(hydra_value(item) for item in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    escaped = text.replace("\\", "\\\\").replace("'", "\\'")
    return f"'{escaped}'"


@dataclass(frozen=True)
class RunPaths:
    """Absolute locations of one run's inputs and outputs."""

    train_file: Path
    val_file: Path
    checkpoint_dir: Path
    export_dir: Path
    rollout_dir: Path
    metrics_log: Path  # verl's file logger (JSONL, one line per step)
    temp_dir: Path | None = None  # the run's private temp dir (Ray's sessions, TMPDIR)


@dataclass(frozen=True)
class VerlRun:
    """Everything that identifies one verl training run."""

    method: str
    seed: int
    policy: str
    model: str
    paths: RunPaths
    experiment: str = "tagrpo"
    tracking: bool = True
    env: Mapping[str, str] = field(default_factory=dict)  # forwarded to every Ray worker
    # The Ray cluster to join (``auto``: the one ``ray start`` runs on this node; or the
    # address in RAY_ADDRESS); None: a private single-node cluster in ``paths.temp_dir``.
    cluster: str | None = None


def method_settings(method: str, train: TrainSettings) -> MethodSettings:
    """G, N and the estimator's settings (``train.estimators.<name>``) of ``method``."""
    return MethodSettings(
        method=method,
        group_size=train.group_size,
        n_neighbours=train.n_neighbours,
        estimator_config=train.estimator_config(get_method(method).estimator),
    )


def check_micro_batches(
    method: str,
    batch: int,
    mini_batches: int,
    rollout_n: int,
    gpus: int,
    verl: VerlSettings,
    rescored: int = 0,
) -> None:
    """Refuse micro-batch sizes that verl would reject in the middle of the first step.

    verl splits each GPU's share of a step (log-prob passes) and of a mini-batch (updates) into
    micro-batches of a fixed size and asserts that they divide it
    (``verl/workers/engine/utils.py``: "data size must be divisible by ..."). ``rescored``:
    responses per question of the anchoring pass (the N*G neighbour responses; 0 without it),
    a log-prob pass of its own.
    """
    per_gpu_step = batch * rollout_n // gpus
    per_gpu_update = per_gpu_step // mini_batches
    problems = []
    log_prob = verl.log_prob_micro_batch_size_per_gpu
    if per_gpu_step % log_prob:
        problems.append(
            f"verl.log_prob_micro_batch_size_per_gpu={log_prob} does not divide the "
            f"{per_gpu_step} trajectories per GPU of a step"
        )
    if rescored and (batch * rescored % gpus or batch * rescored // gpus % log_prob):
        problems.append(
            f"the anchoring pass scores {batch} x {rescored} neighbour responses, which do not "
            f"split into micro-batches of verl.log_prob_micro_batch_size_per_gpu={log_prob} "
            f"over {gpus} GPUs (or set train.anchoring_diagnostic: false)"
        )
    update = verl.micro_batch_size_per_gpu
    if per_gpu_update % update:
        problems.append(
            f"verl.micro_batch_size_per_gpu={update} does not divide the "
            f"{per_gpu_update} trajectories per GPU of a mini-batch"
        )
    if problems:
        raise ValueError(
            f"{method} ({batch} questions x {rollout_n} responses, {mini_batches} mini-batches, "
            f"{gpus} GPUs): " + "; ".join(problems)
        )


def verl_training_steps(rows: int, batch_questions: int, epochs: float) -> int:
    """The steps verl 0.9.1 runs: ``len(dataset) // data.train_batch_size`` per epoch (its
    training dataloader drops the last partial batch) times ``trainer.total_epochs``, an int
    (``verl/trainer/ppo/v1/trainer_base.py``: ``steps_per_epoch``, ``total_training_steps``).
    The local backend runs ``ceil(epochs x questions / batch)`` (:func:`tagrpo.training.train_stage.
    plan_training`): a partial batch at an epoch's end is filled from the next epoch."""
    if batch_questions < 1 or rows < 0:
        raise ValueError(f"{rows} rows, batch of {batch_questions}: not a training set")
    return (rows // batch_questions) * int(epochs)


def build_overrides(run: VerlRun, config: Params, execution: bool = True) -> list[str]:
    """The Hydra overrides of one run from the ``train``, ``verl``, ``common`` and ``runtime``
    sections.

    ``execution=False`` leaves out what only decides how the run executes, never what it
    computes (:func:`execution_overrides`: checkpoints, worker counts, logging, Ray's cluster
    and temp dir): the overrides that identify a run's results (a resumed run must have the
    same, :mod:`tagrpo.verl_ext.resume`).
    """
    train, verl, common = config.train, config.verl, config.common
    device = run_device(verl)
    if train.epsilon != EPSILON:
        # verl's stock grpo estimator hard-codes 1e-6, and algorithm.tagrpo carries no epsilon.
        raise ValueError(
            f"train.epsilon = {train.epsilon!r}: the verl backend normalises with {EPSILON} "
            "(verl's grpo estimator); set train.epsilon to it or use train.backend: local"
        )
    if train.steps is None and train.epochs != int(train.epochs):
        # verl counts whole epochs: 1.5 would train 1 without a word (the local backend 1.5).
        raise ValueError(
            f"train.epochs = {train.epochs:g}: verl trains whole epochs; give an integer, or "
            "set train.steps"
        )
    settings = method_settings(run.method, train)
    spec = settings.spec
    # One verl row per question, its variants drawn by the agent loop: in `rows` mode a batch
    # of R rows holds R / (variants per question) questions (the authors' 256 rows ~ 64).
    rows = rows_per_question(
        run.method, settings.n_neighbours, train.batch_unit, train.rows_matched_updates
    )
    if train.batch_questions % rows:
        raise ValueError(f"batch_questions {train.batch_questions} rows: not whole questions")
    batch = train.batch_questions // rows
    mini_batches = train.mini_batches
    if batch % mini_batches:
        raise ValueError(f"{batch} questions per step are not a multiple of mini_batches")
    rollout_n = settings.rollout_n
    gpus = verl.n_gpus_per_node * verl.nnodes
    if (batch * rollout_n) % gpus:
        raise ValueError(f"{batch} x {rollout_n} trajectories do not split over {gpus} GPUs")
    anchoring = spec.use_neighbours and train.anchoring_diagnostic
    rescored = rollout_n - settings.responses_per_variant if anchoring else 0
    check_micro_batches(run.method, batch, mini_batches, rollout_n, gpus, verl, rescored)
    paths = run.paths
    log_prob_micro_batch = verl.log_prob_micro_batch_size_per_gpu
    values: dict[str, Any] = {
        "algorithm.adv_estimator": expected_estimator(settings),
        "algorithm.use_kl_in_reward": False,
        "algorithm.norm_adv_by_std_in_grpo": True,
        "algorithm.filter_groups.enable": spec.dynamic_sampling,
        "data.train_files": str(paths.train_file),
        "data.val_files": str(paths.val_file),
        "data.train_batch_size": batch,
        "data.max_prompt_length": verl.max_prompt_length,
        "data.max_response_length": train.max_new_tokens,
        "data.filter_overlong_prompts": True,
        "data.truncation": "error",
        "data.shuffle": True,
        "data.seed": run.seed,
        "actor_rollout_ref.model.path": run.model,
        "actor_rollout_ref.model.use_remove_padding": True,
        "actor_rollout_ref.model.enable_gradient_checkpointing": verl.gradient_checkpointing,
        "actor_rollout_ref.actor.optim.lr": train.learning_rate,
        "actor_rollout_ref.actor.optim.lr_warmup_steps_ratio": train.warmup_ratio,
        "actor_rollout_ref.actor.optim.lr_scheduler_type": verl.lr_scheduler_type,
        "actor_rollout_ref.actor.optim.min_lr_ratio": train.min_lr_ratio,
        "actor_rollout_ref.actor.optim.weight_decay": train.weight_decay,
        "actor_rollout_ref.actor.optim.clip_grad": train.grad_clip,
        "actor_rollout_ref.actor.ppo_mini_batch_size": batch // mini_batches,
        "actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu": verl.micro_batch_size_per_gpu,
        "actor_rollout_ref.actor.ppo_epochs": 1,
        "actor_rollout_ref.actor.use_kl_loss": True,
        "actor_rollout_ref.actor.kl_loss_type": "low_var_kl",
        "actor_rollout_ref.actor.kl_loss_coef": train.kl_coef,
        "actor_rollout_ref.actor.clip_ratio_low": train.clip_low,
        "actor_rollout_ref.actor.clip_ratio_high": train.clip_high,
        "actor_rollout_ref.actor.loss_agg_mode": train.loss_agg_mode,
        "actor_rollout_ref.actor.entropy_coeff": 0,
        "actor_rollout_ref.actor.data_loader_seed": run.seed,
        "actor_rollout_ref.actor.checkpoint.save_contents": [
            "model",
            "optimizer",
            "extra",
            "hf_model",
        ],
        "actor_rollout_ref.rollout.name": verl.rollout_engine,
        "actor_rollout_ref.rollout.n": rollout_n,
        "actor_rollout_ref.rollout.temperature": train.temperature,
        "actor_rollout_ref.rollout.top_p": train.top_p,
        "actor_rollout_ref.rollout.seed": run.seed,
        "actor_rollout_ref.rollout.tensor_model_parallel_size": verl.tensor_parallel_size,
        "actor_rollout_ref.rollout.gpu_memory_utilization": verl.gpu_memory_utilization,
        "actor_rollout_ref.rollout.max_num_seqs": verl.max_num_seqs,
        "actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu": log_prob_micro_batch,
        "actor_rollout_ref.rollout.agent.default_agent_loop": (
            AGENT_LOOP_NAME if spec.use_neighbours else "single_turn_agent"
        ),
        "actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu": log_prob_micro_batch,
        "actor_rollout_ref.ref.fsdp_config.param_offload": verl.ref_param_offload,
        "reward.custom_reward_function.path": REWARD_MODULE,
        "reward.custom_reward_function.name": "compute_score",
        "trainer.use_v1": True,
        "trainer.v1.trainer_mode": TRAINER_MODE,
        "trainer.total_epochs": int(train.epochs),
        "trainer.n_gpus_per_node": verl.n_gpus_per_node,
        "trainer.nnodes": verl.nnodes,
        "trainer.val_before_train": False,
        "trainer.test_freq": -1,  # evaluation is the evaluate stage's (vLLM, pass@k)
        # verl is asked every step; the tagrpo_sync trainer saves at its own steps
        # (runtime.verl.checkpoint_every and train.checkpoints), once the step is logged.
        "trainer.save_freq": 1,
        "trainer.default_local_dir": str(paths.checkpoint_dir),
        # The launcher empties the run's work area unless it resumes the same run.
        "trainer.resume_mode": "auto",
        "trainer.rollout_data_dir": str(paths.rollout_dir),
    }
    if spec.anchor == "original":
        # vLLM's log-probs of neighbour responses are under q^n, not the q0 the ratios use.
        values["actor_rollout_ref.rollout.calculate_log_probs"] = False
    if spec.dynamic_sampling:
        values["algorithm.filter_groups.metric"] = verl.ds_metric
        inflight = verl.max_inflight_gen_batches
        values["algorithm.filter_groups.max_inflight_gen_batches"] = inflight
    if train.steps:
        values["trainer.total_training_steps"] = train.steps
    device_overrides = None
    if device == "cpu":
        device_overrides = cpu_overrides(verl)
        values.update(device_overrides.values)
    # Hydra's own output (the composed config, its log) next to the run's data, not in a new
    # outputs/<date>/ folder of the project root.
    values["hydra.run.dir"] = str(paths.train_file.parent / "hydra")
    overrides = [f"{key}={hydra_value(value)}" for key, value in values.items()]

    added: dict[str, Any] = {
        **{
            f"algorithm.tagrpo.{k}": v
            for k, v in settings.as_config().items()
            if k != spec.estimator
        },
        "trainer.tagrpo.export_dir": str(paths.export_dir),
        "trainer.tagrpo.checkpoints": list(train.checkpoints),
        "trainer.tagrpo.anchoring": train.anchoring_diagnostic,
        "reward.custom_reward_function.reward_kwargs.item_timeout_s": (
            common.grading.item_timeout_s
        ),
        "reward.custom_reward_function.reward_kwargs.grader": common.grading.grader,
    }
    if settings.estimator_config is not None:
        added.update(
            {
                f"algorithm.tagrpo.{spec.estimator}.{k}": v
                for k, v in settings.estimator_config.model_dump().items()
            }
        )
    for key, value in common.chat_template_kwargs.items():
        added[f"data.apply_chat_template_kwargs.{key}"] = value
    if device_overrides is not None:
        added.update(device_overrides.added)
    if execution:
        run_values, run_added = execution_overrides(run, config)
        overrides += [f"{key}={hydra_value(value)}" for key, value in run_values.items()]
        added.update(run_added)
        env = {**device_env(device, common.torch_threads), **run.env}
        for key, value in env.items():
            added[f"ray_kwargs.ray_init.runtime_env.env_vars.{key}"] = str(value)
    # `++` adds a key or overrides it: these keys are not in verl's default config.
    overrides += [f"++{key}={hydra_value(value)}" for key, value in added.items()]
    overrides += [str(item) for item in verl.extra_overrides]
    return overrides


def execution_overrides(run: VerlRun, config: Params) -> tuple[dict[str, Any], dict[str, Any]]:
    """The overrides that decide how a run executes and never what it computes: checkpoints
    (``runtime.verl``), grading workers, logging, Ray's cluster or private temp dir. As
    (keys of verl's config, keys it lacks); ``build_overrides(execution=False)`` leaves them
    out."""
    runtime = config.runtime.verl
    values: dict[str, Any] = {
        "trainer.logger": ["console", "file", *(["mlflow"] if run.tracking else [])],
        "trainer.project_name": run.experiment,
        "trainer.experiment_name": f"train-{run.policy}",
        "trainer.max_actor_ckpt_to_keep": runtime.max_checkpoints,
    }
    added: dict[str, Any] = {
        "trainer.tagrpo.checkpoint_every": runtime.checkpoint_every,
        "reward.custom_reward_function.reward_kwargs.grading_workers": runtime.grading_workers,
    }
    if run.cluster is not None:
        # Join the cluster `ray start` runs (multi-node): Ray's own temp dir, where the address
        # of that cluster is found (docs/paper-scale.md, "Several nodes").
        added["ray_kwargs.ray_init.address"] = run.cluster
    else:
        if run.paths.temp_dir is not None:
            # Ray's sessions (sockets, logs, spilled objects) in the run's own temp dir.
            added["ray_kwargs.ray_init._temp_dir"] = str(run.paths.temp_dir / "ray")
        if config.verl.device == "cpu":
            # The local cluster of a CPU run without Ray's dashboard process: on a 2-core
            # machine it cost about 10 s of each run's start (measured: ray.init, one task and
            # shutdown, 35.8 s with it and 25.4 s without, busy machine). Ray refuses the key
            # when joining a cluster, whose dashboard is that cluster's.
            added["ray_kwargs.ray_init.include_dashboard"] = False
    return values, added
