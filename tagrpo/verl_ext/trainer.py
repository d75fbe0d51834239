"""``tagrpo_sync``: verl's V1 sync trainer with the method's groups, diagnostics and dumps.

Selected with ``trainer.v1.trainer_mode=tagrpo_sync``. Everything verl does is kept (rollout
through TransferQueue, old/reference log-probs, the PPO update, DAPO filtering through
``algorithm.filter_groups``); three methods are overridden:

* ``_compute_advantage``: builds each trajectory's (question, prompt variant) from its
  TransferQueue key ``{uid}_{session}_{i}`` and the method's normalisation groups with
  :func:`tagrpo.algorithms.group_ids` (per question for GRPO, (N+1)xGRPO and TA-GRPO's joint
  groups, per (question, rephrasing) for TA-GRPO*), calls the estimator registered in verl
  (stock ``grpo`` or a tagrpo estimator) with those groups, writes advantages back, logs the
  zero-gradient diagnostics of :func:`tagrpo.algorithms.step_diagnostics` under the same
  names as the local backend (``original/zero_gradient_rate``, ``train/...``, ``avspo/...``).
* ``_log_rollout_data``: dumps the batch at 25/50/75/100% of training (the steps of
  :func:`tagrpo.training.outputs.checkpoint_steps`) as ``checkpoint-XXX.parquet`` with the
  local backend's columns.
* ``_save_checkpoint`` / ``_load_checkpoint``: a resumable checkpoint every
  ``runtime.verl.checkpoint_every`` steps, at those fractions and after the last step, written
  once verl has logged the step (a resumed run repeats no logged step and misses none), with
  the trainer's own state beside verl's (cumulative responses, the estimator's state: AVSPO's
  threshold); each fraction's checkpoint exported as a Hugging Face folder
  (:mod:`tagrpo.verl_ext.checkpoint`), again on resume if a crash came before the export.

verl branches on the literal trainer mode ``"sync"`` (replay buffer type, dataloader fetch
size, prompt persistence), so the subclass reports ``sync`` once it is registered under its
own name.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import torch
import transfer_queue as tq
from tensordict import TensorDict
from transfer_queue import KVBatchMeta
from verl.trainer.ppo import core_algos
from verl.trainer.ppo.v1.trainer_base import register_trainer
from verl.trainer.ppo.v1.trainer_sync import PPOTrainerSync
from verl.workers.utils.padding import response_from_nested, response_to_nested

from tagrpo.algorithms import group_ids, step_diagnostics
from tagrpo.algorithms.anchoring import anchoring_shift
from tagrpo.algorithms.estimators import get_estimator
from tagrpo.training.outputs import DUMP_COLUMNS, checkpoint_name, checkpoint_steps
from tagrpo.verl_ext import (
    ANCHORING_PARTITION,
    ORIGINAL_PROMPT_IDS,
    TRAINER_MODE,
    WEIGHTS_STEP_FIELD,
)
from tagrpo.verl_ext.agent_loop import as_messages, rephrased_prompts
from tagrpo.verl_ext.checkpoint import actor_dir, export_checkpoint, has_weights
from tagrpo.verl_ext.estimators import VERL_ESTIMATORS
from tagrpo.verl_ext.settings import (
    CONFIG_SECTION,
    MethodSettings,
    checkpoint_fractions,
    section,
    validate_run,
)

# The trainer's own state beside verl's in each checkpoint folder (global_step_N/).
TRAINER_STATE_FILE = "tagrpo_state.json"

# Columns the verl dumps add to the local backend's: token ids and what verl computed per token
# (old / reference / rollout log-probs, the advantages it trained with), for audits and tests.
VERL_DUMP_COLUMNS = (
    "key",
    "session",
    "prompt_ids",  # the stored prompt: q0 for TA-GRPO's neighbour responses (Eq. 4)
    "generation_prompt_ids",  # the prompt the rollout engine sampled from
    "response_ids",
    "response_mask",
    "token_advantages",
    "old_log_probs",
    "ref_log_probs",
    "rollout_log_probs",  # null when the engine was not asked for them (ta_grpo)
    "weights_step",  # the hf engine: step of the weights that sampled it (null: initial)
)


@dataclass(frozen=True)
class TrajectoryLayout:
    """Where each trajectory of a batch sits; padding rows (verl's no-op fill) excluded."""

    real: np.ndarray  # bool per trajectory
    uid: list[str]  # per real trajectory
    session: np.ndarray  # per real trajectory
    question: np.ndarray  # dense question index per real trajectory (first appearance)
    variant: np.ndarray  # prompt variant per real trajectory


def parse_key(key: str) -> tuple[str, int, int]:
    """``{uid}_{session}_{index}`` -> (uid, session, index); uids never contain ``_``."""
    uid, session, index = key.rsplit("_", 2)
    return uid, int(session), int(index)


def trajectory_layout(
    keys: Sequence[str], tags: Sequence[Mapping[str, Any]], settings: MethodSettings
) -> TrajectoryLayout:
    """Question and prompt variant of every real trajectory, from the TransferQueue keys."""
    real = np.array([not tag.get("is_padding", False) for tag in tags], dtype=bool)
    parsed = [parse_key(key) for key, keep in zip(keys, real, strict=True) if keep]
    uids = [uid for uid, _, _ in parsed]
    order = {uid: i for i, uid in enumerate(dict.fromkeys(uids))}
    session = np.array([s for _, s, _ in parsed], dtype=np.int64)
    return TrajectoryLayout(
        real=real,
        uid=uids,
        session=session,
        question=np.array([order[uid] for uid in uids], dtype=np.int64),
        variant=np.array([settings.variant_of(int(s)) for s in session], dtype=np.int64),
    )


def _values(column: Any) -> list[Any]:
    """A TransferQueue non-tensor column as plain Python values."""
    return [getattr(value, "data", value) for value in column]


@register_trainer(TRAINER_MODE)
class TATrainer(PPOTrainerSync):
    """The sync V1 trainer for every method of the paper (see the module docstring)."""

    responses_generated: float = 0.0  # sampled by this run, DS refills included
    pending_checkpoint: int | None = None  # the step whose checkpoint waits for its metrics

    def __init__(self, config: Any) -> None:
        self.ta = validate_run(config)
        # State an estimator keeps across steps (AVSPO's adaptive threshold); None for grpo.
        self.estimator_state = get_estimator(self.ta.spec.estimator).new_state(
            self.ta.estimator_config
        )
        super().__init__(config)

    def _build_replay_buffer(self):
        self.trainer_mode = "sync"
        return super()._build_replay_buffer()

    # -- the anchoring shift: neighbour responses scored under both prompts (Eq. 4) --

    def _compute_old_log_prob(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        batch = super()._compute_old_log_prob(batch, metrics)
        enabled = section(self.config.trainer, CONFIG_SECTION).get("anchoring", True)
        if self.ta.spec.use_neighbours and enabled:
            metrics.update(self._anchoring_shift(batch))
        return batch

    def _anchoring_shift(self, batch: KVBatchMeta) -> dict[str, float]:
        """:func:`tagrpo.algorithms.anchoring.anchoring_shift` of the step's neighbour responses.

        The old policy scored every trajectory under its stored prompt (q0 for TA-GRPO's
        neighbour responses, the sampled rephrasing for TA-GRPO* and unanchored TA-GRPO). One
        more ``compute_log_prob`` of the actor, before its update, scores each neighbour
        response under the other prompt: copies of their records with that prompt, in their own
        TransferQueue partition, cleared afterwards. Responses to q0 (whose two prompts are the
        same) and verl's padding rows are not scored again: N*G of a question's (N+1)*G
        responses, which the launcher checks split evenly over the GPUs and micro-batches
        (:func:`tagrpo.verl_ext.overrides.check_micro_batches`). A forward pass: the run is
        otherwise unchanged (``train.anchoring_diagnostic: false`` skips it).
        """
        layout = trajectory_layout(batch.keys, batch.tags, self.ta)
        rows = neighbour_rows(layout)
        if rows.size == 0:
            return {}
        keys = [batch.keys[row] for row in rows]
        stored = tq.kv_batch_get(keys=keys, partition_id=batch.partition_id)
        positions = np.flatnonzero(layout.variant > 0)
        labels = [f"{layout.uid[p]} session {int(layout.session[p])}" for p in positions]
        prompts = counterpart_prompt_ids(
            _values(stored["extra_fields"]), labels, self.ta.spec.anchor == "original"
        )
        records, tags = counterpart_records(stored, [batch.tags[row] for row in rows], prompts)
        meta = tq.kv_batch_put(
            keys=keys, partition_id=ANCHORING_PARTITION, fields=records, tags=tags
        )
        meta.extra_info.update(
            {
                "calculate_entropy": False,
                "compute_loss": False,
                "temperature": self.config.actor_rollout_ref.rollout.temperature,
            }
        )
        try:
            self.actor_rollout_wg.compute_log_prob(meta)
            rescored = tq.kv_batch_get(
                keys=keys,
                partition_id=ANCHORING_PARTITION,
                select_fields=["log_probs", "response_mask"],
            )
        finally:
            tq.kv_clear(keys=keys, partition_id=ANCHORING_PARTITION)
        old = tq.kv_batch_get(
            keys=keys, partition_id=batch.partition_id, select_fields=["old_log_probs"]
        )
        # log_probs cover prompt + response (shifted); old_log_probs the response only.
        rescored_response = response_from_nested(rescored["log_probs"], rescored["response_mask"])
        return anchoring_metrics(
            list(old["old_log_probs"].unbind()),
            list(rescored_response.unbind()),
            list(rescored["response_mask"].unbind()),
            layout.question[positions],
            layout.variant[positions],
            self.ta,
            labels,
        )

    # -- advantages and diagnostics --

    def _compute_advantage(self, batch: KVBatchMeta, metrics: dict) -> KVBatchMeta:
        data = tq.kv_batch_get(
            keys=batch.keys,
            partition_id=batch.partition_id,
            select_fields=["response_mask", "rm_scores"],
        )
        nested_mask = data["response_mask"]
        padded = data.to_padded_tensor()
        scores, mask = padded["rm_scores"].float(), padded["response_mask"]
        layout = trajectory_layout(batch.keys, batch.tags, self.ta)
        require_complete_groups(layout, self.ta.rollout_n)
        real = torch.as_tensor(layout.real)
        ids, _ = group_ids(layout.question, layout.variant, self.ta.spec.grouping)

        estimator = core_algos.get_adv_estimator_fn(self.config.algorithm.adv_estimator)
        extra: dict[str, Any] = {}
        estimator_metrics: dict[str, float] = {}
        if self.config.algorithm.adv_estimator in VERL_ESTIMATORS:  # ours: state, diagnostics
            extra = {"state": self.estimator_state, "diagnostics": estimator_metrics}
        advantages, returns = estimator(
            token_level_rewards=scores[real],
            response_mask=mask[real],
            index=ids,
            config=self.config.algorithm,
            norm_adv_by_std_in_grpo=self.config.algorithm.get("norm_adv_by_std_in_grpo", True),
            **extra,
        )
        full_advantages = torch.zeros_like(scores)
        full_returns = torch.zeros_like(scores)
        full_advantages[real] = advantages.to(scores.dtype)
        full_returns[real] = returns.to(scores.dtype)
        fields = TensorDict(
            {
                "advantages": response_to_nested(full_advantages, nested_mask),
                "returns": response_to_nested(full_returns, nested_mask),
            },
            batch_size=len(batch),
        )
        batch = tq.kv_batch_put(keys=batch.keys, partition_id=batch.partition_id, fields=fields)

        rewards = scores[real].sum(dim=-1).double().numpy()
        tokens = mask[real].sum(dim=-1).clamp(min=1)
        per_response = ((advantages * mask[real]).sum(dim=-1) / tokens).double().numpy()
        metrics.update(
            step_diagnostics(rewards, layout.question, layout.variant, ids, per_response)
        )
        metrics["advantage_abs_mean"] = float(np.abs(per_response).mean())
        metrics.update(estimator_metrics)
        generated = float(layout.real.sum())
        if self.ta.spec.dynamic_sampling:
            ds = dynamic_sampling_metrics(metrics, int(layout.question.max()) + 1)
            metrics.update(ds)
            extra_groups = ds["ds/dropped_groups"] + ds["ds/discarded_surplus_groups"]
            generated += extra_groups * self.ta.rollout_n
        # Cumulative, the local backend's budget metric (restored by a resume: _load_checkpoint).
        self.responses_generated += generated
        metrics["responses_generated"] = self.responses_generated
        metrics["optimiser_updates"] = float(optimiser_updates_per_step(self.config))
        return batch

    # -- checkpoints (resumable), exports and rollout dumps --

    def _checkpoint_at(self, step: int) -> float | None:
        """The fraction of training that ``step`` completes, if it is a checkpoint step."""
        steps = checkpoint_steps(
            self.total_training_steps, checkpoint_fractions(self.config.trainer)
        )
        return steps.get(step)

    def _checkpoint_due(self, step: int) -> bool:
        """A resumable checkpoint after ``step``: every ``checkpoint_every`` steps, at each
        fraction of ``train.checkpoints`` (exported) and after the last step."""
        every = int(section(self.config.trainer, CONFIG_SECTION).get("checkpoint_every") or 0)
        return (
            step >= self.total_training_steps
            or self._checkpoint_at(step) is not None
            or (every > 0 and step % every == 0)
        )

    def _save_checkpoint(self) -> None:
        # verl asks after every step's update (the launcher sets trainer.save_freq=1), before
        # the step's metrics and rollout dump are written. A checkpoint taken now and a crash
        # before those would resume after a step whose metrics and dump are lost: the save
        # waits until verl has logged the step (on_train_begin wraps its logger).
        if self._checkpoint_due(self.global_steps):
            self.pending_checkpoint = self.global_steps

    def on_train_begin(self) -> None:
        super().on_train_begin()
        log = self.logger.log

        def log_then_checkpoint(*args: Any, **kwargs: Any) -> None:
            log(*args, **kwargs)
            step = kwargs.get("step", args[1] if len(args) > 1 else None)
            if step is not None and step == self.pending_checkpoint:
                self.pending_checkpoint = None
                self._write_checkpoint()

        self.logger.log = log_then_checkpoint

    def _write_checkpoint(self) -> None:
        """verl's checkpoint of the current step, the trainer's own state beside it, and the
        Hugging Face export when the step is a ``train.checkpoints`` fraction."""
        super()._save_checkpoint()
        folder = Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}"
        state = {
            "responses_generated": self.responses_generated,
            "estimator_state": (
                None if self.estimator_state is None else self.estimator_state.state_dict()
            ),
        }
        (folder / TRAINER_STATE_FILE).write_text(json.dumps(state))
        self._export(self.global_steps)

    def _export(self, step: int) -> None:
        fraction = self._checkpoint_at(step)
        export_dir = section(self.config.trainer, CONFIG_SECTION).get("export_dir")
        if fraction is None or not export_dir:
            return
        export_checkpoint(
            actor_dir(self.config.trainer.default_local_dir, step),
            export_dir,
            checkpoint_name(fraction),
            final=step >= self.total_training_steps,
        )

    def _load_checkpoint(self) -> None:
        """verl's resume, then the trainer's own state (the cumulative response count, the
        estimator's state across steps: AVSPO's threshold), and the export of the checkpoint
        resumed from if a crash came between verl's save and the export."""
        super()._load_checkpoint()
        if self.global_steps == 0:
            return
        folder = Path(self.config.trainer.default_local_dir) / f"global_step_{self.global_steps}"
        state = json.loads((folder / TRAINER_STATE_FILE).read_text())
        self.responses_generated = float(state["responses_generated"])
        if self.estimator_state is not None:
            self.estimator_state.load_state_dict(state["estimator_state"])
        export_dir = section(self.config.trainer, CONFIG_SECTION).get("export_dir")
        fraction = self._checkpoint_at(self.global_steps)
        if export_dir and fraction is not None:
            exported = Path(export_dir) / "checkpoints" / checkpoint_name(fraction)
            final = self.global_steps >= self.total_training_steps
            if not has_weights(exported) or (final and not has_weights(Path(export_dir))):
                self._export(self.global_steps)

    def _log_rollout_data(
        self, batch: KVBatchMeta, timing_raw: dict, rollout_data_dir: str
    ) -> None:
        fraction = self._checkpoint_at(self.global_steps)
        if fraction is None:
            return
        fields = [
            "prompts",
            "responses",
            "response_mask",
            "rm_scores",
            "advantages",
            "old_log_probs",
            "raw_prompt",
            "extra_info",
            "extra_fields",
        ]
        if self.use_reference_policy:
            fields.append("ref_log_prob")
        if self.config.actor_rollout_ref.rollout.calculate_log_probs:
            fields.append("rollout_log_probs")
        data = tq.kv_batch_get(
            keys=batch.keys, partition_id=batch.partition_id, select_fields=fields
        )
        frame = rollout_dump_frame(
            batch.keys,
            batch.tags,
            data,
            self.tokenizer,
            self.ta,
            step=self.global_steps,
            checkpoint=checkpoint_name(fraction),
            response_length=int(self.config.actor_rollout_ref.rollout.response_length),
            chat_template_kwargs=dict(self.config.data.get("apply_chat_template_kwargs") or {}),
        )
        path = Path(rollout_data_dir) / f"{checkpoint_name(fraction)}.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        frame.to_parquet(path, index=False)


def neighbour_rows(layout: TrajectoryLayout) -> np.ndarray:
    """Rows of the batch (verl's order, padding included) holding a real response to a
    rephrasing: the anchoring pass scores these only."""
    return np.flatnonzero(layout.real)[layout.variant > 0]


def counterpart_prompt_ids(
    extra_fields: Sequence[Any], labels: Sequence[str], anchored: bool
) -> list[list[int]]:
    """Per neighbour response, the prompt the method does not score it under: the generation
    prompt for TA-GRPO's (stored under q0), q0's for the other methods' (stored under their
    rephrasing). ``labels`` name the responses in the error of one whose ids are missing."""
    field = "tagrpo_generation_prompt_ids" if anchored else ORIGINAL_PROMPT_IDS
    prompts = []
    for extra, label in zip(extra_fields, labels, strict=True):
        ids = (extra if isinstance(extra, Mapping) else {}).get(field)
        if not ids:
            raise RuntimeError(
                f"trajectory {label} has no {field} in its extra_fields: the tagrpo agent loop "
                "records it for every neighbour response"
            )
        prompts.append([int(x) for x in ids])
    return prompts


def counterpart_records(
    stored: TensorDict, tags: Sequence[Mapping[str, Any]], prompts: Sequence[list[int]]
) -> tuple[TensorDict, list[dict[str, Any]]]:
    """Copies of the records (every field, as fetched) with ``prompts[i]`` in place of the
    stored prompt: ``prompts``, ``input_ids = prompt + response``, its attention mask and
    position ids, and the length tags, as verl's agent-loop writer builds them."""
    rows = len(prompts)
    stored_prompts = list(stored["prompts"].unbind())
    responses = list(stored["responses"].unbind())
    stored_positions = list(stored["position_ids"].unbind())
    new_prompts, inputs, positions, masks, new_tags = [], [], [], [], []
    for row in range(rows):
        prompt = torch.tensor(prompts[row]).to(stored_prompts[row].dtype)
        ids = torch.cat([prompt, responses[row].to(prompt.dtype)])
        expected = torch.arange(len(stored_prompts[row]) + len(responses[row]))
        if stored_positions[row].dim() != 1 or not torch.equal(
            stored_positions[row].cpu(), expected.to(stored_positions[row].dtype)
        ):
            raise RuntimeError(
                "the anchoring pass re-scores text-only records (position ids 0..L-1); this "
                "record has other position ids (multi-modal inputs?)"
            )
        new_prompts.append(prompt)
        inputs.append(ids)
        positions.append(torch.arange(len(ids), dtype=stored_positions[row].dtype))
        masks.append(torch.ones_like(ids))
        tag = dict(tags[row])
        tag.update({"prompt_len": len(prompt), "seq_len": len(prompt) + len(responses[row])})
        new_tags.append(tag)
    records = stored.clone()
    for name, values in (
        ("prompts", new_prompts),
        ("input_ids", inputs),
        ("position_ids", positions),
        ("attention_mask", masks),
    ):
        records.set(name, torch.nested.as_nested_tensor(values, layout=torch.jagged))
    return records, new_tags


def anchoring_metrics(
    stored_log_probs: Sequence[torch.Tensor],
    counterpart_log_probs: Sequence[torch.Tensor],
    response_masks: Sequence[torch.Tensor],
    question: Sequence[int],
    variant: Sequence[int],
    settings: MethodSettings,
    labels: Sequence[str],
) -> dict[str, float]:
    """The ``anchoring/...`` metrics from verl's per-trajectory log-probs of the response tokens
    of neighbour responses (``question`` and rephrasing ``variant`` each) under the stored
    prompt (``old_log_probs``) and under the other one (the anchoring pass), over the tokens of
    ``response_masks``; groups: (question, rephrasing)."""
    under_q0, under_qn, groups = [], [], []
    anchored = settings.spec.anchor == "original"
    for row, label in enumerate(labels):
        mask = response_masks[row].bool()
        if not stored_log_probs[row].shape == counterpart_log_probs[row].shape == mask.shape:
            raise RuntimeError(
                f"trajectory {label}: {tuple(mask.shape)} response tokens, "
                f"{tuple(stored_log_probs[row].shape)} old log-probs, "
                f"{tuple(counterpart_log_probs[row].shape)} from the anchoring pass"
            )
        stored = stored_log_probs[row].double()[mask].numpy()
        other = counterpart_log_probs[row].double()[mask].numpy()
        under_q0.append(stored if anchored else other)
        under_qn.append(other if anchored else stored)
        groups.append(int(question[row]) * (settings.n_neighbours + 1) + int(variant[row]))
    return anchoring_shift(under_q0, under_qn, groups)


def require_complete_groups(layout: TrajectoryLayout, rollout_n: int) -> None:
    """Raise if a question of the batch lacks trajectories (failed agent-loop sessions).

    verl's sync trainer keeps a group whose sessions raised and pads the missing trajectories
    (``trainer_base``: "failed groups remain sampleable"): a session refused by the agent loop
    (e.g. a row without rephrasings) would silently become padding. Here it stops the run.
    """
    counts = np.bincount(layout.question, minlength=int(layout.question.max(initial=-1)) + 1)
    short = np.flatnonzero(counts != rollout_n)
    if short.size:
        first = int(short[0])
        uid = layout.uid[int(np.flatnonzero(layout.question == first)[0])]
        raise RuntimeError(
            f"{short.size} question(s) of the batch have a number of trajectories other than "
            f"rollout.n={rollout_n} (uid {uid}: {int(counts[first])}): agent-loop sessions "
            "failed; their error is in the rollout worker's log above"
        )


def optimiser_updates_per_step(config: Any) -> int:
    """verl's optimiser steps per training step: ``ppo_epochs`` passes over the step's
    ``data.train_batch_size`` questions in mini-batches of ``actor.ppo_mini_batch_size``
    (both in questions, before verl multiplies them by ``rollout.n``)."""
    actor = config.actor_rollout_ref.actor
    batch, mini = int(config.data.train_batch_size), int(actor.ppo_mini_batch_size)
    if mini < 1 or batch % mini:
        raise ValueError(
            f"data.train_batch_size={batch} is not a multiple of ppo_mini_batch_size={mini}"
        )
    return int(actor.get("ppo_epochs", 1)) * (batch // mini)


def dynamic_sampling_metrics(metrics: Mapping[str, Any], kept_groups: int) -> dict[str, float]:
    """DS bookkeeping from verl's replay-buffer counters (groups, not trajectories).

    verl evicts all-equal groups before the trainer sees the batch and discards the informative
    surplus of its speculative refills; the zero-gradient rate among all finished groups of the
    step is ``evicted / (evicted + kept + surplus)``.
    """
    evicted = float(metrics.get("training/filter_groups/evicted_samples", 0.0))
    surplus = float(metrics.get("training/filter_groups/discarded_surplus_samples", 0.0))
    total = evicted + kept_groups + surplus
    return {
        "ds/dropped_groups": evicted,
        "ds/discarded_surplus_groups": surplus,
        "ds/pre_filter_zero_gradient_rate": evicted / total if total else float("nan"),
    }


def rollout_dump_frame(
    keys: Sequence[str],
    tags: Sequence[Mapping[str, Any]],
    data: Any,
    tokenizer: Any,
    settings: MethodSettings,
    step: int,
    checkpoint: str,
    response_length: int,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> pd.DataFrame:
    """One row per real trajectory, with the local backend's dump columns.

    ``prompt_used`` is the chat-templated variant the response was sampled from,
    ``scored_under`` the decoded stored prompt (q0 for TA-GRPO's neighbour responses).
    """
    layout = trajectory_layout(keys, tags, settings)
    index = np.flatnonzero(layout.real)
    optional = {
        # TensorDict refuses `key in td`; its keys() view is the membership test.
        name: list(data[name].unbind()) if name in data.keys() else None  # noqa: SIM118
        for name in ("old_log_probs", "ref_log_prob", "rollout_log_probs")
    }
    prompts = list(data["prompts"].unbind())
    responses = list(data["responses"].unbind())
    scores = list(data["rm_scores"].unbind())
    advantages = list(data["advantages"].unbind())
    masks = list(data["response_mask"].unbind())
    raw_prompts = _values(data["raw_prompt"])
    extra_info = _values(data["extra_info"])
    extra_fields = _values(data["extra_fields"])
    eos = tokenizer.eos_token_id
    template_kwargs = dict(chat_template_kwargs or {})
    rows = []
    for position, row in enumerate(index):
        variant = int(layout.variant[position])
        info = extra_info[row] if isinstance(extra_info[row], Mapping) else {}
        messages = (
            as_messages(raw_prompts[row]) if variant == 0 else rephrased_prompts(info)[variant - 1]
        )
        response = responses[row].tolist()
        tokens = int(masks[row].sum())
        mask = masks[row].float()
        extra = extra_fields[row] or {}
        reward_info = extra.get("reward_extra_info", {}) or {}
        prompt_ids = prompts[row].tolist()
        generation_ids = extra.get("tagrpo_generation_prompt_ids")
        per_token = {
            column: None if values is None else values[row].float()[:tokens].tolist()
            for column, values in (
                ("old_log_probs", optional["old_log_probs"]),
                ("ref_log_probs", optional["ref_log_prob"]),
                ("rollout_log_probs", optional["rollout_log_probs"]),
            )
        }
        rows.append(
            {
                "step": step,
                "checkpoint": checkpoint,
                "question_id": str(info.get("id", layout.uid[position])),
                "variant": variant,
                "sample_index": int(layout.session[position]) % settings.responses_per_variant,
                "prompt_used": tokenizer.apply_chat_template(
                    messages, add_generation_prompt=True, tokenize=False, **template_kwargs
                ),
                "scored_under": tokenizer.decode(prompts[row].tolist()),
                "response": tokenizer.decode(response, skip_special_tokens=True),
                "reward": float(scores[row].sum()),
                "pred": str(reward_info.get("pred", "")),
                "advantage": float((advantages[row].float() * mask).sum() / max(tokens, 1)),
                "num_tokens": tokens,
                "finished": bool(response)
                and (len(response) < response_length or response[-1] == eos),
                "kept": True,
                # verl-only columns: what verl itself computed for this trajectory.
                "key": keys[row],
                "session": int(layout.session[position]),
                "prompt_ids": prompt_ids,
                "generation_prompt_ids": (
                    prompt_ids if generation_ids is None else [int(x) for x in generation_ids]
                ),
                "response_ids": response,
                "response_mask": mask.tolist(),
                "token_advantages": advantages[row].float().tolist(),
                **per_token,
                "weights_step": extra.get(WEIGHTS_STEP_FIELD),
            }
        )
    return pd.DataFrame(rows, columns=[*DUMP_COLUMNS, *VERL_DUMP_COLUMNS])
