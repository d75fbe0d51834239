"""The ``train`` stage's work for one (method, seed, data multiple): plan, train, summarise.

:func:`plan_training` reads and checks everything a run needs (the method, the training set and
that it holds enough questions, the step count) before the stage deletes an output or loads a
model. :func:`train_local` then runs the local backend; ``train.backend: verl`` goes through
:mod:`tagrpo.verl_ext.launcher`. Both report the same summary keys (:func:`run_summary`).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tagrpo.algorithms import MethodSpec, get_method
from tagrpo.config.params import Params
from tagrpo.plumbing.layout import policy_name
from tagrpo.splits.training_set import TrainQuestion, load_training_questions


@dataclass(frozen=True)
class TrainPlan:
    """One run, checked: what the stage will train, on what, for how many steps."""

    config: Params
    spec: MethodSpec
    seed: int
    data_multiple: float
    policy: str
    questions: list[TrainQuestion]
    steps: int

    @property
    def questions_per_step(self) -> int:
        return self.config.train.questions_per_step(self.spec.name)

    @property
    def updates_per_epoch(self) -> float:
        """Optimiser updates per pass over the training set (the batch semantics' effect)."""
        steps_per_epoch = len(self.questions) / self.questions_per_step
        return steps_per_epoch * self.config.train.mini_batches

    @property
    def tags(self) -> dict[str, str]:
        return {
            "method": self.spec.name,
            "seed": str(self.seed),
            "policy": self.policy,
            "data_multiple": f"{self.data_multiple:g}",
            "backend": self.config.train.backend,
            "estimator": self.spec.estimator,
        }


def plan_training(
    config: Params, method: str, seed: int, data_multiple: float = 1.0, root: Path | None = None
) -> TrainPlan:
    """Check a run before any work: the training set must hold ``data_multiple`` x questions."""
    from tagrpo.plumbing.paths import project_root

    spec = get_method(method)
    if data_multiple < 1.0:
        raise ValueError(f"--data-multiple must be >= 1, got {data_multiple:g}")
    if data_multiple > 1.0 and spec.use_neighbours:
        raise ValueError(
            f"{method} samples rephrasings, which the data-scaling pool lacks: the data-scaling "
            "runs are the baselines' (paper 5.5)"
        )
    settings = config.train
    policy = policy_name(spec.name, seed, data_multiple)
    root = root or project_root()
    path = root / settings.input
    if not path.exists():
        raise FileNotFoundError(
            f"train.input {settings.input} does not exist: run the DAG up to it"
        )
    questions = load_training_questions(
        path, settings.n_neighbours, settings.neighbours, limit=settings.questions
    )
    if not questions:
        raise ValueError(f"{settings.input} holds no training question")
    if data_multiple > 1.0:
        questions = questions + extra_questions(root, len(questions), data_multiple)
    per_step = settings.questions_per_step(spec.name)
    steps = settings.steps or math.ceil(settings.epochs * len(questions) / per_step)
    return TrainPlan(config, spec, seed, data_multiple, policy, questions, int(steps))


def extra_questions(root: Path, base: int, data_multiple: float) -> list[TrainQuestion]:
    """The data-scaling chunk for ``data_multiple``: the first ``round((m - 1) x base)``
    questions of the data stage's pool (seeded order; no rephrasings)."""
    from tagrpo.plumbing.layout import data_outputs

    pool = root / data_outputs()["processed"] / "extra.parquet"
    needed = round((data_multiple - 1.0) * base)
    available = load_training_questions(pool, 0, "none") if pool.exists() else []
    if needed > len(available):
        raise ValueError(
            f"--data-multiple {data_multiple:g} needs {needed} questions beyond the {base} of "
            f"the 1x set, but the data-scaling pool {pool.relative_to(root)} holds "
            f"{len(available)} (data.synthetic.extra_size, or data.<source>.extra: [openr1_math])"
        )
    return available[:needed]


# Per-step anchoring metrics (tagrpo.algorithms.anchoring) whose means over steps the summary
# keeps: what the report's training table shows; methods without rephrasings have none.
ANCHORING_SUMMARY = (
    "anchoring/log_ratio_mean",
    "anchoring/log_ratio_p1",
    "anchoring/log_ratio_p99",
    "anchoring/ess_fraction",
    "anchoring/ess_fraction_group_mean",
)


def run_summary(
    history: list[dict[str, float]], probe: dict[str, float], seconds: float
) -> dict[str, float]:
    """Flat summary of a run: timing, reward movement, mean zero-gradient rates, probe."""

    def mean_of(key: str, rows: list[dict[str, float]] | None = None) -> float:
        values = [row[key] for row in (rows or history) if key in row]
        return float(np.mean(values)) if values else float("nan")

    quarter = max(1, len(history) // 4)
    summary = {
        "steps": float(len(history)),
        "seconds": seconds,
        "seconds_per_step": seconds / max(1, len(history)),
        "responses_generated": history[-1]["responses_generated"] if history else 0.0,
        "reward_first_quarter": mean_of("original/reward_mean", history[:quarter]),
        "reward_last_quarter": mean_of("original/reward_mean", history[-quarter:]),
        "kl_last": history[-1].get("kl", float("nan")) if history else float("nan"),
    }
    for part in ("original", "neighbours", "joint", "train"):
        for rate in ("zero_gradient_rate", "all_correct_rate", "all_wrong_rate"):
            value = mean_of(f"{part}/{rate}")
            if value == value:
                summary[f"{part}/{rate}_mean"] = value
    for key in ("train/effective_zero_gradient_rate", "ds/rounds", "avspo/acr", "avspo/triggered"):
        value = mean_of(key)
        if value == value:
            summary[f"{key}_mean"] = value
    updates = [row["optimiser_updates"] for row in history if "optimiser_updates" in row]
    if updates:  # both backends log it every step (verl: tagrpo_sync)
        summary["optimiser_updates"] = float(sum(updates))
    for key in ANCHORING_SUMMARY:
        value = mean_of(key)
        if value == value:
            summary[f"{key}_mean"] = value
    extra = [row["ds/extra_rollouts"] for row in history if "ds/extra_rollouts" in row]
    if extra:
        summary["ds/extra_rollouts_total"] = float(sum(extra))
    skipped = [row for row in history if row.get("updated") == 0.0]
    if skipped:
        summary["steps_without_update"] = float(len(skipped))
    summary.update(probe)
    return summary


def train_local(
    plan: TrainPlan,
    model_dir: Path,
    rollout_dir: Path,
    history_path: Path,
    log: Callable[[dict[str, float], int | None], None] | None = None,
) -> dict[str, float]:
    """Train with the local backend: the policy, dumps and per-step table; the summary."""
    import torch

    from tagrpo.backends.base import SamplingParams
    from tagrpo.backends.models import load_causal_lm
    from tagrpo.grading.grade_fn import grade_fn_for
    from tagrpo.plumbing.paths import project_root
    from tagrpo.plumbing.progress import bar
    from tagrpo.training.outputs import write_history_csv
    from tagrpo.training.trainer import TrainConfig, Trainer, probe_success

    config, settings = plan.config, plan.config.train
    run = TrainConfig(
        method=plan.spec.name,
        steps=plan.steps,
        seed=plan.seed,
        settings=settings,
        engine=config.local,
        torch_threads=config.common.torch_threads,
    )
    torch.set_num_threads(run.torch_threads)
    start_from = project_root() / settings.model
    probe = settings.probe
    probe_sampling = SamplingParams(
        n=1,
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
        seed=probe.seed,
    )
    per_question = plan.spec.responses_per_question(settings.group_size, settings.n_neighbours)
    print(
        f"[train:{plan.policy}] {plan.spec.description}; {len(plan.questions)} questions, "
        f"{plan.steps} steps of {plan.questions_per_step} questions (batch_unit "
        f"{settings.batch_unit}), {per_question} responses each, {plan.updates_per_epoch:g} "
        f"optimiser updates per epoch, loss {settings.loss_agg_mode}"
    )
    started = time.perf_counter()
    summary_probe: dict[str, float] = {}
    with (
        # The graders start while the models load.
        grade_fn_for(config.common.grading, config.common.grading.grader) as grade,
        bar(plan.steps, f"train {plan.policy}", "step") as shown,
    ):
        model, tokenizer = load_causal_lm(start_from)
        reference, _ = load_causal_lm(start_from)  # frozen copy for the KL loss
        probe_args = (plan.questions, probe.group_size, probe_sampling, grade)
        max_batch = config.local.max_batch_sequences
        if probe.enabled:
            before = probe_success(model, tokenizer, *probe_args, max_batch)
            summary_probe.update({f"probe/before/{k}": v for k, v in before.items()})

        def on_step(step: int, metrics: dict[str, float]) -> None:
            shown.update(1)
            if log is not None:
                log(metrics, step)
            if step == 1 or step % 5 == 0 or step == plan.steps:
                print(
                    f"[train:{plan.policy}] step {step}/{plan.steps} reward(q0) "
                    f"{metrics.get('original/reward_mean', float('nan')):.3f} zero-grad(train "
                    f"groups) {metrics.get('train/zero_gradient_rate', float('nan')):.3f} kl "
                    f"{metrics.get('kl', float('nan')):.4f} {metrics['time/step_s']:.1f}s"
                )

        trainer = Trainer(
            run,
            model,
            tokenizer,
            plan.questions,
            grade,
            ref_model=reference,
            out_dir=model_dir,
            dump_dir=rollout_dir,
            on_step=on_step,
        )
        result = trainer.train()
        if probe.enabled:
            after = probe_success(model, tokenizer, *probe_args, max_batch)
            summary_probe.update({f"probe/after/{k}": v for k, v in after.items()})
            summary_probe["probe/success_gain"] = after["success"] - before["success"]
    summary = run_summary(result.history, summary_probe, time.perf_counter() - started)
    summary["train_seconds"] = result.seconds
    summary["updates_per_epoch"] = plan.updates_per_epoch
    if not rollout_dir.exists():
        rollout_dir.mkdir(parents=True)  # no checkpoint fraction fell on a step: empty dumps
    print(
        f"[train:{plan.policy}] done in {summary['seconds']:.0f}s: reward(q0) "
        f"{summary['reward_first_quarter']:.3f} -> {summary['reward_last_quarter']:.3f} "
        "(first/last quarter of steps)"
        + (
            f"; probe success {summary_probe['probe/before/success']:.3f} -> "
            f"{summary_probe['probe/after/success']:.3f}"
            if "probe/after/success" in summary_probe
            else ""
        )
    )
    write_history_csv(result.history, history_path)
    return summary
