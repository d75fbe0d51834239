"""DVC stage ``train``: train one policy with one method and seed (the local backend).

    python -m stages.train --method ta_grpo [--seed 0] [--data-multiple 1.0] [--policy NAME]
    python -m stages.train --data-scaling [--seed 0]   # every run of train.data_scaling

Reads ``train.input`` (the rephrased training set; the processed set with mini-world
neighbours also works), takes the first ``train.questions`` questions as the 1x training set
(``--data-multiple m`` takes the first ``m`` times as many: the paper's data-scaling runs,
section 5.5) and trains for ``ceil(epochs * questions / batch_questions)`` steps starting from
``train.model``. A success probe on the training questions' original phrasing runs before and
after training with the same sampling seed.

Outputs for policy ``P`` (default ``<method>[_data<m>x]-s<seed>``):
``models/P/`` (HF folder; ``checkpoints/checkpoint-025`` ... ``-100`` inside),
``rollouts/P/checkpoint-*.parquet`` (that step's responses: question id, variant, prompt used,
response, reward, advantage), ``plots/train/P.csv`` (every step's metrics) and
``metrics/train_P.json``; one MLflow run per method and seed, tagged.
"""

from __future__ import annotations

import argparse
import json
import math
import shutil
import time
from typing import Any

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

from tagrpo.params import stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.tracking import log_metrics, stage_run  # noqa: E402


def policy_name(method: str, seed: int, data_multiple: float = 1.0) -> str:
    """``ta_grpo-s0``; data-scaling runs add the multiple: ``grpo_data2.5x-s0``."""
    scale = "" if data_multiple == 1.0 else f"_data{data_multiple:g}x"
    return f"{method}{scale}-s{seed}"


def run_summary(
    history: list[dict[str, float]], probe: dict[str, float], seconds: float
) -> dict[str, float]:
    """Flat summary of a run: timing, reward movement, mean zero-gradient rates, probe."""
    import numpy as np

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
    extra = [row["ds/extra_rollouts"] for row in history if "ds/extra_rollouts" in row]
    if extra:
        summary["ds/extra_rollouts_total"] = float(sum(extra))
    summary.update(probe)
    return summary


def data_scaling_runs(seed: int | None) -> dict[str, float]:
    """The paper's data-scaling runs (section 5.5): each method x training-set multiple.

    Returns the flat ``{"<policy>/<metric>": value}`` of all runs. Not part of the default DAG
    (its cost grows with the multiples); evaluate each policy with ``stages.evaluate``.
    """
    params = stage_params("train")
    settings = params.get("data_scaling", {})
    seed = int(params["common"].get("seed", 0)) if seed is None else seed
    results: dict[str, float] = {}
    for method in settings.get("methods", []):
        for multiple in settings.get("multiples", []):
            argv = ["--method", method, "--data-multiple", str(float(multiple))]
            summary = main([*argv, "--seed", str(seed)])
            name = policy_name(method, seed, float(multiple))
            results.update({f"{name}/{key}": value for key, value in summary.items()})
    return results


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", default=None)
    parser.add_argument(
        "--data-scaling",
        action="store_true",
        help="train every (method, multiple) of train.data_scaling, one run each",
    )
    parser.add_argument("--seed", type=int, default=None, help="default: common.seed")
    parser.add_argument("--data-multiple", type=float, default=1.0)
    parser.add_argument("--policy", default=None, help="output name (default from the above)")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="train.backend verl: print the verl command instead of running it",
    )
    args = parser.parse_args(argv)
    if args.data_scaling:
        return data_scaling_runs(args.seed)
    if args.method is None:
        parser.error("--method is required (or --data-scaling)")

    import torch

    from tagrpo.algorithms import get_method
    from tagrpo.backends.base import SamplingParams
    from tagrpo.evaluation.grader import make_grade_fn
    from tagrpo.models import load_causal_lm
    from tagrpo.training.data import load_training_questions
    from tagrpo.training.outputs import write_history_csv
    from tagrpo.training.trainer import TrainConfig, Trainer, probe_success

    params = stage_params("train")
    common = params["common"]
    seed = int(common.get("seed", 0) if args.seed is None else args.seed)
    spec = get_method(args.method)
    policy = args.policy or policy_name(spec.name, seed, args.data_multiple)
    if policy == "base" or "/" in policy:
        raise ValueError(f"refusing policy name {policy!r}")
    if params.get("backend", "local") == "verl":
        from tagrpo.verl_ext.launcher import run_training

        return run_training(
            spec.name,
            seed,
            policy,
            params,
            data_multiple=args.data_multiple,
            dry_run=args.dry_run,
            summarize=run_summary,
        )
    if args.dry_run:
        parser.error("--dry-run applies to train.backend: verl (this run uses the local backend)")
    root = project_root()
    base_questions = params.get("questions")
    questions_limit = (
        None if base_questions is None else round(args.data_multiple * int(base_questions))
    )
    questions = load_training_questions(
        root / params["input"],
        int(params["n_neighbours"]),
        params.get("neighbours", "auto"),
        limit=questions_limit,
    )
    steps = params.get("steps") or math.ceil(
        float(params["epochs"]) * len(questions) / int(params["batch_questions"])
    )
    config = TrainConfig.from_params(
        params,
        method=spec.name,
        seed=seed,
        steps=int(steps),
        torch_threads=int(common.get("torch_threads", 2)),
    )
    out_dir = root / "models" / policy
    dump_dir = root / "rollouts" / policy
    for stale in (out_dir, dump_dir):  # a rerun must not leave older checkpoints behind
        shutil.rmtree(stale, ignore_errors=True)
    torch.set_num_threads(config.torch_threads)
    model, tokenizer = load_causal_lm(root / params["model"])
    reference, _ = load_causal_lm(root / params["model"])  # frozen copy for the KL loss
    probe = params.get("probe", {})
    probe_sampling = SamplingParams(
        n=1,
        temperature=config.temperature,
        top_p=config.top_p,
        max_new_tokens=config.max_new_tokens,
        seed=int(probe.get("seed", 12345)),
    )
    run_params: dict[str, Any] = {
        **params,
        "method": spec.name,
        "seed": seed,
        "data_multiple": args.data_multiple,
        "steps_run": config.steps,
        "questions_used": len(questions),
    }
    tags = {
        "method": spec.name,
        "seed": str(seed),
        "policy": policy,
        "data_multiple": f"{args.data_multiple:g}",
    }
    grading = common.get("grading", {})
    per_question = spec.responses_per_question(config.group_size, config.n_neighbours)
    print(
        f"[train:{policy}] {spec.description}; {len(questions)} questions, {config.steps} steps "
        f"of {config.batch_questions} questions, {per_question} responses each"
    )
    with (
        stage_run("train", run_params, run_name=f"train-{policy}", tags=tags),
        make_grade_fn(
            workers=int(grading.get("workers", 2)),
            item_timeout_s=float(grading.get("item_timeout_s", 5.0)),
        ) as grade,
    ):
        started = time.perf_counter()
        summary_probe: dict[str, float] = {}
        probe_args = (questions, int(probe.get("group_size", 8)), probe_sampling, grade)
        if probe.get("enabled", True):
            before = probe_success(model, tokenizer, *probe_args, config.max_batch_sequences)
            summary_probe.update({f"probe/before/{k}": v for k, v in before.items()})

        def on_step(step: int, metrics: dict[str, float]) -> None:
            log_metrics(metrics, step=step)
            if step == 1 or step % 5 == 0 or step == config.steps:
                reward = metrics.get("original/reward_mean", float("nan"))
                collapsed = metrics.get("train/zero_gradient_rate", float("nan"))
                print(
                    f"[train:{policy}] step {step}/{config.steps} reward(q0) {reward:.3f} "
                    f"zero-grad(train groups) {collapsed:.3f} "
                    f"kl {metrics.get('kl', float('nan')):.4f} {metrics['time/step_s']:.1f}s"
                )

        trainer = Trainer(
            config,
            model,
            tokenizer,
            questions,
            grade,
            ref_model=reference,
            out_dir=out_dir,
            dump_dir=dump_dir,
            on_step=on_step,
            save_checkpoints=bool(params.get("save_checkpoints", True)),
        )
        result = trainer.train()
        if probe.get("enabled", True):
            after = probe_success(model, tokenizer, *probe_args, config.max_batch_sequences)
            summary_probe.update({f"probe/after/{k}": v for k, v in after.items()})
            summary_probe["probe/success_gain"] = after["success"] - before["success"]
        summary = run_summary(result.history, summary_probe, time.perf_counter() - started)
        summary["train_seconds"] = result.seconds
        write_history_csv(result.history, root / "plots" / "train" / f"{policy}.csv")
        metrics_path = root / "metrics" / f"train_{policy}.json"
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        log_metrics({f"summary/{k}": v for k, v in summary.items()})
    print(
        f"[train:{policy}] done in {summary['seconds']:.0f}s: reward(q0) "
        f"{summary['reward_first_quarter']:.3f} -> {summary['reward_last_quarter']:.3f} "
        "(first/last quarter of steps)"
        + (
            f"; probe success {summary_probe['probe/before/success']:.3f} -> "
            f"{summary_probe['probe/after/success']:.3f}"
            if "probe/after/success" in summary_probe
            else ""
        )
    )
    return summary


if __name__ == "__main__":
    main()
