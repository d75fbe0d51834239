"""The ``base_model`` stage's work: build the starting policy, then probe it by phrasing.

``base_model.kind``: ``warmstart`` (a tiny Llama trained by SFT on the mini world, the embedded
default), ``gguf_package`` (a GGUF model shipped inside a Python package, dequantised to a HF
folder), ``hub`` / ``local`` (a Hugging Face id or folder, recorded as a pointer, no copy).

The probe samples G responses per training question in every phrasing of the mini world and
reports the signal figures the pipeline needs: success on the originals, the share of G-groups
with mixed rewards, success by phrasing (the paper's Assumption 5.3 in miniature). Its graded
samples are the "Base" point of the diagnostics (the paper's Figures 3 and 4).
"""

from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.models import ModelSource, load_causal_lm, materialise
from tagrpo.config.params import Params
from tagrpo.data.schema import read_questions
from tagrpo.evaluation.phrasing import (
    SAMPLE_COLUMNS,
    PhrasedQuestion,
    phrasing_summary,
    sample_phrasings,
)
from tagrpo.grading.grade_fn import grade_fn_for
from tagrpo.miniworld.dataset import problem_from_meta, problem_space, question_keys
from tagrpo.miniworld.tasks import PHRASING_FAMILIES, render

SFT_COLUMNS = ("step", "loss", "lr")


def reserved_keys(processed: Path) -> set[str]:
    """The arithmetic of every question the data stage wrote (training split, data-scaling
    pool, benchmarks): what the warm-start corpus must never show."""
    files = [processed / "train.parquet", *sorted((processed / "benchmarks").glob("*.parquet"))]
    if (processed / "extra.parquet").is_file():  # the data-scaling pool
        files.append(processed / "extra.parquet")
    missing = [str(path) for path in files if not path.is_file()]
    if missing or len(files) < 2:
        raise FileNotFoundError(
            f"{processed}: the data stage's splits are missing ({missing or 'no benchmark'}); "
            "the warm-start corpus must exclude them"
        )
    return set().union(*(question_keys(read_questions(str(path))) for path in files))


def warm_start_policy(
    config: Params,
    processed: Path,
    out_dir: Path,
    sft_plot: Path,
    log: Callable[[int, dict[str, float]], None] | None = None,
) -> dict[str, float]:
    """SFT of the tiny Llama on the warm-start corpus; the model folder and the loss curve.

    The corpus excludes every training, pool and benchmark problem of ``processed`` (the data
    stage's folder), so a benchmark problem is never seen before evaluation."""
    from tagrpo.training.warmstart import build_corpus, save_policy, warm_start

    settings = config.base_model.warmstart
    world = config.common.miniworld
    excluded = reserved_keys(processed)
    space = problem_space(world, settings.corpus.lengths)
    corpus = build_corpus(
        space, settings.corpus, excluded, big_from=world.big_from, seed=settings.seed
    )
    model, tokenizer, history = warm_start(
        corpus,
        settings.model,
        settings.training,
        seed=settings.seed,
        torch_threads=config.common.torch_threads,
        log=log,
    )
    save_policy(model, tokenizer, out_dir)
    with open(sft_plot, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(SFT_COLUMNS))
        writer.writeheader()
        writer.writerows({k: r[k] for k in SFT_COLUMNS} for r in history)
    return {
        "parameters": float(sum(p.numel() for p in model.parameters())),
        "vocab_size": float(len(tokenizer)),
        "sft_final_loss": history[-1]["loss"],
        "sft_seconds": history[-1]["seconds"],
        "sft_examples": float(len(corpus)),
        "sft_excluded_problems": float(len(excluded)),
    }


def external_policy(config: Params, out_dir: Path, sft_plot: Path) -> dict[str, float]:
    """A packaged, hub or local model as the base policy (no SFT: an empty loss curve)."""

    kind = config.base_model.kind
    settings = getattr(config.base_model, kind).model_dump()
    materialise(ModelSource.from_dict({"kind": kind, **settings}), out_dir)
    sft_plot.write_text(",".join(SFT_COLUMNS) + "\n")
    return {}


def probe_phrasings(
    config: Params,
    model_dir: Path,
    train_path: Path,
    phrasing_plot: Path,
    samples_path: Path,
) -> dict[str, float]:
    """Sample G responses per (training question, phrasing family); write and summarise them."""
    import torch  # heavy: loaded only when the probe runs

    from tagrpo.backends.hf import HFBackend

    probe = config.base_model.probe
    torch.set_num_threads(config.common.torch_threads)
    questions = read_questions(str(train_path))[: probe.questions]
    phrased = []
    for question in questions:
        if "family" not in question.meta:
            raise ValueError(
                f"{question.id}: the phrasing probe needs mini-world questions (meta.family); "
                "set base_model.probe.enabled: false for other sources"
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
    backend = HFBackend(model, tokenizer, probe.max_batch_sequences)
    sampling = SamplingParams(
        n=probe.group_size,
        temperature=probe.temperature,
        top_p=probe.top_p,
        max_new_tokens=probe.max_new_tokens,
        seed=config.common.seed,
    )
    # The probe measures the base policy for this project's checks: the project's grader.
    with grade_fn_for(config.common.grading, "tagrpo") as grade:
        samples = sample_phrasings(backend, phrased, sampling, grade)
    summary, by_phrasing = phrasing_summary(samples)
    samples.to_parquet(samples_path, index=False)
    by_phrasing.to_csv(phrasing_plot, index=False)
    return {f"probe/{key}": value for key, value in summary.items()}


def no_probe(phrasing_plot: Path, samples_path: Path) -> None:
    """Empty tables with the probe's columns keep the output contract without a probe."""

    phrasing_plot.write_text("phrasing,success,responses\n")
    pd.DataFrame(columns=list(SAMPLE_COLUMNS)).to_parquet(samples_path, index=False)
