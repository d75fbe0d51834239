"""The local backend: one process, transformers, CPU or one GPU; trains every method.

A step: take the next questions of the (seeded, per-epoch shuffled) stream; sample the method's
responses in one batched call and grade them (for dynamic sampling, drop all-equal groups and
refill); compute advantages and diagnostics with :mod:`tagrpo.algorithms`; score every response
under its anchor prompt with the current policy (old log-probs) and the frozen reference;
then ``mini_batches`` optimiser updates of the clipped loss plus the KL loss (the paper's
256-question batch with 128-question mini-batches is 2 updates per step).
"""

from __future__ import annotations

import copy
import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tagrpo.algorithms import (
    MethodSpec,
    advantages_and_diagnostics,
    get_estimator,
    get_method,
    policy_loss,
    step_diagnostics,
)
from tagrpo.algorithms.anchoring import anchoring_shift
from tagrpo.algorithms.dynamic_sampling import dynamic_sampling
from tagrpo.backends.base import SamplingParams
from tagrpo.backends.hf import HFBackend
from tagrpo.backends.models import resolve_device
from tagrpo.config.common import CommonSettings
from tagrpo.config.params import embedded
from tagrpo.config.train import LocalBackendSettings, TrainSettings
from tagrpo.grading.types import GradeFn
from tagrpo.plumbing.layout import checkpoint_name
from tagrpo.splits.training_set import TrainQuestion, require_neighbours
from tagrpo.training.outputs import checkpoint_steps, rollout_frame, save_policy_folder
from tagrpo.training.rollout import QuestionRollout, sample_rollouts
from tagrpo.training.schedule import warmup_cosine
from tagrpo.training.scoring import (
    anchor_variant,
    build_scoring_batch,
    forward_log_probs,
    score_log_probs,
    scoring_prompts,
)


@dataclass(frozen=True)
class TrainConfig:
    """One run: method, seed and step count, with the ``train`` and ``local`` params sections.

    The hyper-parameters are read from ``settings`` (one declaration, :mod:`tagrpo.config`);
    ``TrainConfig.create`` builds one from keyword overrides of either section (for tests and
    notebooks).
    """

    method: str
    steps: int
    seed: int = 0
    settings: TrainSettings = field(default_factory=TrainSettings)
    engine: LocalBackendSettings = field(default_factory=LocalBackendSettings)
    torch_threads: int = 2

    def __post_init__(self) -> None:
        spec = get_method(self.method)
        if self.steps < 1:
            raise ValueError("steps must be >= 1")
        if spec.use_neighbours and self.settings.n_neighbours < 1:
            raise ValueError(f"{self.method} samples rephrasings: n_neighbours must be >= 1")
        if self.settings.mini_batches > self.questions_per_step:
            raise ValueError(
                f"{self.questions_per_step} questions per step cannot make "
                f"{self.settings.mini_batches} mini-batches of whole questions"
            )

    @property
    def spec(self) -> MethodSpec:
        return get_method(self.method)

    @property
    def questions_per_step(self) -> int:
        """Questions a step samples (``train.batch_unit``: questions, or rows of them)."""
        return self.settings.questions_per_step(self.method)

    @classmethod
    def create(cls, method: str, steps: int = 20, seed: int = 0, **overrides: Any) -> TrainConfig:
        """Both sections (and ``common.torch_threads``) as the checkout's params.yaml sets them,
        with ``overrides`` (keys of ``train`` or ``local``)."""
        train_keys, local_keys = (
            set(TrainSettings.model_fields),
            set(LocalBackendSettings.model_fields),
        )
        unknown = sorted(set(overrides) - train_keys - local_keys)
        if unknown:
            raise ValueError(f"unknown train/local settings {unknown}")
        return cls(
            method=method,
            steps=steps,
            seed=seed,
            settings=embedded(
                TrainSettings, **{k: v for k, v in overrides.items() if k in train_keys}
            ),
            engine=embedded(
                LocalBackendSettings, **{k: v for k, v in overrides.items() if k in local_keys}
            ),
            torch_threads=embedded(CommonSettings).torch_threads,
        )


class QuestionStream:
    """Questions in a fresh seeded permutation every epoch, drawn ``k`` at a time."""

    def __init__(self, questions: Sequence[TrainQuestion], seed: int) -> None:
        if not questions:
            raise ValueError("no training questions")
        self.questions = list(questions)
        self.rng = np.random.default_rng(seed)
        self.order: list[int] = []
        self.drawn = 0

    def take(self, k: int) -> list[TrainQuestion]:
        taken = []
        for _ in range(k):
            if not self.order:
                self.order = self.rng.permutation(len(self.questions)).tolist()
            taken.append(self.questions[self.order.pop(0)])
        self.drawn += k
        return taken

    @property
    def epoch(self) -> float:
        return self.drawn / len(self.questions)


@dataclass
class TrainResult:
    history: list[dict[str, float]]
    checkpoints: dict[str, Path]
    dumps: dict[str, Path]
    seconds: float


@dataclass
class StepResult:
    """What one training step did.

    ``generated``: every rollout sampled this step (dynamic sampling's dropped ones included),
    each marked ``kept`` with its ``advantages`` set when it entered the update;
    ``scored_under``: the prompt text each (question id, variant) was scored with;
    ``updated``: whether an optimiser step was taken (not when DS found nothing to learn from).
    """

    metrics: dict[str, float]
    generated: list[QuestionRollout]
    scored_under: dict[tuple[str, int], str] = field(default_factory=dict)
    updated: bool = False

    @property
    def kept(self) -> list[QuestionRollout]:
        return [rollout for rollout in self.generated if rollout.kept]


class Trainer:
    """Trains ``model`` in place with the method of ``config`` (see the module docstring)."""

    def __init__(
        self,
        config: TrainConfig,
        model,
        tokenizer,
        questions: Sequence[TrainQuestion],
        grade: GradeFn,
        ref_model=None,
        out_dir: str | Path | None = None,
        dump_dir: str | Path | None = None,
        on_step: Callable[[int, dict[str, float]], None] | None = None,
    ) -> None:
        self.config = config
        self.settings = settings = config.settings
        self.spec = config.spec
        if self.spec.use_neighbours:
            require_neighbours(questions, settings.n_neighbours)
        torch.manual_seed(config.seed)
        torch.set_num_threads(config.torch_threads)
        self.device = resolve_device(config.engine.device, "local.device")
        self.model = model.to(self.device)
        self.tokenizer = tokenizer
        self.ref_model = ref_model if ref_model is not None else copy.deepcopy(model)
        self.ref_model.to(self.device).eval()
        for parameter in self.ref_model.parameters():
            parameter.requires_grad_(False)
        self.backend = HFBackend(model, tokenizer, config.engine.max_batch_sequences)
        self.grade = grade
        self.stream = QuestionStream(questions, config.seed)
        self.optimizer = torch.optim.AdamW(
            [p for p in model.parameters() if p.requires_grad],
            lr=settings.learning_rate,
            betas=(0.9, 0.999),
            weight_decay=settings.weight_decay,
        )
        warmup = int(settings.warmup_ratio * config.steps)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer,
            lambda step: warmup_cosine(step, config.steps, warmup, settings.min_lr_ratio),
        )
        self.estimator = get_estimator(self.spec.estimator)
        self.estimator_settings = settings.estimator_config(self.estimator.name)
        self.estimator_state = self.estimator.new_state(self.estimator_settings)
        self.out_dir = Path(out_dir) if out_dir else None
        self.dump_dir = Path(dump_dir) if dump_dir else None
        self.on_step = on_step
        self.responses_generated = 0

    # ---------------------------------------------------------------- sampling
    def _sampling(self, step: int, round_index: int) -> SamplingParams:
        return SamplingParams(
            n=1,
            temperature=self.settings.temperature,
            top_p=self.settings.top_p,
            max_new_tokens=self.settings.max_new_tokens,
            seed=self.config.seed * 1_000_003 + step * 1_009 + round_index,
        )

    def _draw(self, step: int) -> Callable[[int], list[QuestionRollout]]:
        rounds = {"n": 0}

        def draw(k: int) -> list[QuestionRollout]:
            sampling = self._sampling(step, rounds["n"])
            rounds["n"] += 1
            self.model.eval()
            return sample_rollouts(
                self.backend,
                self.stream.take(k),
                self.spec,
                self.settings.group_size,
                self.settings.n_neighbours,
                sampling,
                self.grade,
            )

        return draw

    # ---------------------------------------------------------------- one step
    def step(self, step: int) -> StepResult:
        """Run training step ``step`` (1-based)."""
        settings, spec = self.settings, self.spec
        started = time.perf_counter()
        draw = self._draw(step)
        metrics: dict[str, float] = {}
        if spec.dynamic_sampling:
            result = dynamic_sampling(
                draw,
                lambda r: r.group_rewards(spec.grouping),
                self.config.questions_per_step,
                settings.ds_max_rounds,
            )
            kept, generated = result.kept, result.kept + result.dropped
            metrics.update(
                {
                    "ds/rounds": float(result.rounds),
                    "ds/questions_drawn": float(result.drawn),
                    "ds/dropped_all_correct": float(result.dropped_all_correct),
                    "ds/dropped_all_wrong": float(result.dropped_all_wrong),
                    "ds/extra_rollouts": float(result.extra_rollouts),
                    "ds/filled": float(result.filled),
                }
            )
        else:
            kept = draw(self.config.questions_per_step)
            generated = kept
        for rollout in kept:
            rollout.kept = True
        rollout_seconds = time.perf_counter() - started
        self.responses_generated += sum(r.rewards.size for r in generated)

        # Diagnostics on everything generated (before any DS filter), as in Figure 3.
        all_question = np.concatenate([np.full(r.rewards.size, i) for i, r in enumerate(generated)])
        all_variant = np.concatenate([r.variant_of_response for r in generated])
        all_rewards = np.concatenate([r.rewards for r in generated])
        metrics.update(step_diagnostics(all_rewards, all_question, all_variant))
        if not kept:  # DS found no informative group within its rounds: no update at all
            metrics.update(self._bookkeeping(step, rollout_seconds, started))
            metrics["updated"] = 0.0
            metrics["optimiser_updates"] = 0.0
            return StepResult(metrics, generated)

        question = np.concatenate([np.full(r.rewards.size, i) for i, r in enumerate(kept)])
        variant = np.concatenate([r.variant_of_response for r in kept])
        rewards = np.concatenate([r.rewards for r in kept])
        core = advantages_and_diagnostics(
            spec,
            rewards,
            question,
            variant,
            self.estimator_settings,
            self.estimator_state,
            settings.epsilon,
        )
        metrics.update(core.diagnostics)  # train/... and the estimator's own, whatever they are
        offset = 0
        for rollout in kept:
            rollout.advantages = core.advantages[offset : offset + rollout.rewards.size]
            offset += rollout.rewards.size

        # Score every response under its anchor prompt: old policy and frozen reference.
        score_started = time.perf_counter()
        owners = [r.question for r in kept for _ in range(r.rewards.size)]
        prompts = scoring_prompts(spec, owners, variant, self.backend.prompt_ids)
        responses = [c.token_ids for r in kept for c in r.completions]
        batch = build_scoring_batch(prompts, responses, self.tokenizer.pad_token_id)
        self.model.eval()
        micro = self.config.engine.micro_batch_sequences
        old = score_log_probs(self.model, batch, micro, settings.temperature)
        ref = score_log_probs(self.ref_model, batch, micro, settings.temperature)
        score_seconds = time.perf_counter() - score_started
        if spec.use_neighbours and settings.anchoring_diagnostic:
            anchoring_started = time.perf_counter()
            metrics.update(self._anchoring_shift(owners, question, variant, responses, batch, old))
            metrics["time/anchoring_s"] = time.perf_counter() - anchoring_started

        update_started = time.perf_counter()
        metrics.update(self._update(batch, old, ref, core.advantages, question))
        self.scheduler.step()
        update_seconds = time.perf_counter() - update_started

        finished = [c.finished for r in kept for c in r.completions]
        metrics.update(
            {
                "updated": 1.0,
                "advantage_abs_mean": float(np.abs(core.advantages).mean()),
                "response_length_mean": float(np.mean([len(t) for t in responses])),
                "finished_rate": float(np.mean(finished)),
                "time/score_s": score_seconds,
                "time/update_s": update_seconds,
            }
        )
        metrics.update(self._bookkeeping(step, rollout_seconds, started))
        scored_under = {
            (r.question.id, v): self.backend.prompt_text(
                r.question.messages(anchor_variant(spec, v))
            )
            for r in kept
            for v in r.variants
        }
        return StepResult(metrics, generated, scored_under, updated=True)

    def _anchoring_shift(
        self,
        owners: Sequence[TrainQuestion],
        question: np.ndarray,
        variant: np.ndarray,
        responses: Sequence[Sequence[int]],
        batch,
        old: torch.Tensor,
    ) -> dict[str, float]:
        """:func:`tagrpo.algorithms.anchoring.anchoring_shift` of the neighbour responses: the
        old policy scores them once more under the prompt the method does not score with (their
        own for TA-GRPO, q0 for the others). A no-grad forward pass in eval mode: no random
        number is drawn, so the run's sampling and updates are unchanged."""
        spec = self.spec
        neighbour = np.flatnonzero(variant > 0)
        counterpart = dataclasses.replace(
            spec, anchor="own" if spec.anchor == "original" else "original"
        )
        prompts = scoring_prompts(
            counterpart, [owners[i] for i in neighbour], variant[neighbour], self.backend.prompt_ids
        )
        other_batch = build_scoring_batch(
            prompts, [responses[i] for i in neighbour], self.tokenizer.pad_token_id
        )
        self.model.eval()
        other = score_log_probs(
            self.model,
            other_batch,
            self.config.engine.micro_batch_sequences,
            self.settings.temperature,
        )
        scored = [old[i][batch.target_mask[i]].numpy() for i in neighbour]
        rescored = [other[j][other_batch.target_mask[j]].numpy() for j in range(neighbour.size)]
        under_q0, under_qn = (scored, rescored) if spec.anchor == "original" else (rescored, scored)
        groups = question[neighbour] * (self.settings.n_neighbours + 1) + variant[neighbour]
        return anchoring_shift(under_q0, under_qn, groups)

    def _bookkeeping(self, step: int, rollout_seconds: float, started: float) -> dict[str, float]:
        return {
            "step": float(step),
            "epoch": self.stream.epoch,
            "lr": self.optimizer.param_groups[0]["lr"],
            "responses_generated": float(self.responses_generated),
            "time/rollout_s": rollout_seconds,
            "time/step_s": time.perf_counter() - started,
        }

    def _update(
        self,
        batch,
        old: torch.Tensor,
        ref: torch.Tensor,
        advantages: np.ndarray,
        question: np.ndarray,
    ) -> dict[str, float]:
        """``mini_batches`` optimiser steps; each mini-batch holds whole questions."""
        settings = self.settings
        token_mean = settings.loss_agg_mode == "token-mean"
        micro = self.config.engine.micro_batch_sequences
        self.model.train()
        device = next(self.model.parameters()).device
        advantages_t = torch.tensor(advantages, dtype=torch.float32)
        per_question = np.bincount(question)
        totals = {"loss": 0.0, "pg_loss": 0.0, "kl": 0.0, "clip_fraction": 0.0, "ratio": 0.0}
        grad_norms = []
        chunks = [
            c for c in np.array_split(np.arange(per_question.size), settings.mini_batches) if c.size
        ]
        for chunk in chunks:
            rows = np.flatnonzero(np.isin(question, chunk))
            # Eq. 2/4: mean over a question's responses, then over the mini-batch's questions.
            weights = 1.0 / (len(chunk) * per_question[question[rows]])
            self.optimizer.zero_grad(set_to_none=True)
            tokens = float(batch.target_mask[rows].sum())
            for start in range(0, rows.size, micro):
                index = torch.as_tensor(rows[start : start + micro])
                sub = batch.rows(index)
                width = sub.target_mask.shape[1]
                out = policy_loss(
                    forward_log_probs(self.model, sub, settings.temperature),
                    old[index, :width].to(device),
                    advantages_t[index],
                    sub.target_mask.to(device),
                    torch.as_tensor(weights[start : start + index.numel()], dtype=torch.float32),
                    ref[index, :width].to(device),
                    settings.clip_low,
                    settings.clip_high,
                    settings.kl_coef,
                    token_mean_over=tokens if token_mean else None,
                )
                out.loss.backward()
                share = float(sub.target_mask.sum()) / tokens
                totals["loss"] += out.loss.item() / len(chunks)
                totals["pg_loss"] += out.policy_loss.item() / len(chunks)
                totals["kl"] += out.kl.item() / len(chunks)
                totals["clip_fraction"] += out.clip_fraction.item() * share / len(chunks)
                totals["ratio"] += out.ratio_mean.item() * share / len(chunks)
            grad_norms.append(
                float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), settings.grad_clip))
            )
            self.optimizer.step()
        self.model.eval()
        return {
            "loss": totals["loss"],
            "pg_loss": totals["pg_loss"],
            "kl": totals["kl"],
            "clip_fraction": totals["clip_fraction"],
            "ratio_mean": totals["ratio"],
            "grad_norm": float(np.mean(grad_norms)),
            "optimiser_updates": float(len(chunks)),
        }

    # ---------------------------------------------------------------- the run
    def train(self) -> TrainResult:
        """All steps, checkpoints and rollout dumps at the configured fractions of training."""
        started = time.perf_counter()
        marks = checkpoint_steps(self.config.steps, self.settings.checkpoints)
        history: list[dict[str, float]] = []
        checkpoints: dict[str, Path] = {}
        dumps: dict[str, Path] = {}
        for step in range(1, self.config.steps + 1):
            result = self.step(step)
            history.append(result.metrics)
            if self.on_step is not None:
                self.on_step(step, result.metrics)
            if step in marks:
                name = checkpoint_name(marks[step])
                if self.out_dir is not None and self.settings.save_checkpoints:
                    checkpoints[name] = self.out_dir / "checkpoints" / name
                    save_policy_folder(self.model, self.tokenizer, checkpoints[name])
                if self.dump_dir is not None:
                    frame = rollout_frame(step, name, result.generated, result.scored_under)
                    self.dump_dir.mkdir(parents=True, exist_ok=True)
                    dumps[name] = self.dump_dir / f"{name}.parquet"
                    frame.to_parquet(dumps[name], index=False)
        if self.out_dir is not None:
            save_policy_folder(self.model, self.tokenizer, self.out_dir)
        return TrainResult(history, checkpoints, dumps, time.perf_counter() - started)


def probe_success(
    model,
    tokenizer,
    questions: Sequence[TrainQuestion],
    group_size: int,
    sampling: SamplingParams,
    grade: GradeFn,
    max_batch_sequences: int = 512,
) -> dict[str, float]:
    """Success and G-group collapse rates of a policy on the questions' original phrasing."""
    backend = HFBackend(model, tokenizer, max_batch_sequences)
    model.eval()
    rollouts = sample_rollouts(
        backend, questions, get_method("grpo"), group_size, 0, sampling, grade
    )
    rewards = np.concatenate([r.rewards for r in rollouts])
    question = np.repeat(np.arange(len(rollouts)), group_size)
    diagnostics = step_diagnostics(rewards, question, np.zeros_like(question))
    return {
        "success": float(rewards.mean()),
        "zero_gradient_rate": diagnostics["original/zero_gradient_rate"],
        "all_correct_rate": diagnostics["original/all_correct_rate"],
        "all_wrong_rate": diagnostics["original/all_wrong_rate"],
    }
