"""The ``data`` stage's work: load the configured sources, write the processed split and the
benchmarks in the normalised schema, and count every row (rows in = kept + rejected)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tagrpo.config.params import Params
from tagrpo.data.schema import LoadResult, Rejection, write_questions, write_rejections

if TYPE_CHECKING:
    from tagrpo.data.sources.manifests import FileCheck


@dataclass
class Sources:
    """What the data stage loaded: training splits, the data-scaling pool, benchmarks, and
    (``data.source: local``) each file read beside its manifest."""

    train: list[LoadResult]
    extra: list[LoadResult]
    benchmarks: dict[str, LoadResult]
    files: list[FileCheck] = field(default_factory=list)


def load_sources(config: Params) -> Sources:
    """Every configured source, loaded and normalised (rows counted, rejections kept)."""
    data = config.data
    if data.source == "synthetic":
        from tagrpo.miniworld.dataset import build_miniworld

        built = build_miniworld(data.synthetic, config.common.miniworld)
        train = built.pop("train")
        extra = built.pop("extra", None)
        return Sources([train], [extra] if extra is not None else [], built)
    settings = getattr(data, data.source)
    files: list[FileCheck] = []
    if data.source == "local":
        from tagrpo.data.sources.local import load_local
        from tagrpo.data.sources.manifests import check_source_files
        from tagrpo.plumbing.paths import shared_data_dir

        data_dir = shared_data_dir(config.common.data_dir)
        # Before any row is read: a truncated benchmark must not become a shorter result.
        names = [*settings.train, *settings.extra, *settings.benchmarks]
        files = check_source_files(names, data_dir, refuse_mismatch=data.verify_sources)

        def load(name: str) -> LoadResult:
            options = settings.options.get(name, {})
            return load_local(name, data_dir, max_problem_chars=data.max_problem_chars, **options)
    else:
        from tagrpo.data.sources.hub import load_hub

        def load(name: str) -> LoadResult:
            options = settings.options.get(name, {})
            return load_hub(name, max_problem_chars=data.max_problem_chars, **options)

    train = [load(name) for name in settings.train]
    seen = {q.problem: q.id for result in train for q in result.questions}
    extra = [without_training_questions(load(name), seen) for name in settings.extra]
    benchmarks = {name: load(name) for name in settings.benchmarks}
    return Sources(train, extra, benchmarks, files)


def without_training_questions(result: LoadResult, training: dict[str, str]) -> LoadResult:
    """The pool minus problems already in the training set (rejected ``in_training_set``)."""
    kept, rejected = [], list(result.rejections)
    for question in result.questions:
        if question.problem in training:
            rejected.append(
                Rejection(
                    source=result.source,
                    split=result.split,
                    row_index=-1,  # the loader's row is not kept on a question
                    reason="in_training_set",
                    upstream_id=question.id,
                    detail=f"same problem text as training question {training[question.problem]}",
                )
            )
        else:
            kept.append(question)
    return LoadResult(result.source, result.split, result.rows_in, kept, rejected)


def count_table(sources: Sources) -> dict[str, Any]:
    """Rows in = kept + rejected, per (source, split) and in total (an error if not)."""
    per_source: dict[str, dict[str, int]] = {}
    for key, result in (
        [(f"train/{r.source}", r) for r in sources.train]
        + [(f"extra/{r.source}", r) for r in sources.extra]
        + [(f"test/{name}", r) for name, r in sources.benchmarks.items()]
    ):
        per_source[key] = result.counts()
    totals = {
        field: sum(counts[field] for counts in per_source.values())
        for field in ("rows_in", "kept", "rejected")
    }
    if totals["rows_in"] != totals["kept"] + totals["rejected"]:
        raise AssertionError(f"counts do not reconcile: {totals}")
    return {"sources": per_source, "total": totals}


def write_processed(
    out_dir: Path,
    sources: Sources,
    extra_seed: int,
    provenance: Mapping[str, dict[str, Any]] | None = None,
) -> list[Any]:
    """``train.parquet``, ``train_verl.parquet``, ``extra.parquet`` (the data-scaling pool,
    in a seeded order: its chunks are fixed by the seed), ``benchmarks/<name>.parquet`` and
    ``rejections.parquet`` under ``out_dir``; returns the training questions. ``provenance``:
    per table (``"train"``, a benchmark's name) what it records of its making
    (:func:`tagrpo.config.data.table_provenance`)."""
    made = provenance or {}
    from tagrpo.data.verl_format import write_verl_parquet

    (out_dir / "benchmarks").mkdir(parents=True, exist_ok=True)
    train_questions = [q for result in sources.train for q in result.questions]
    if not train_questions:
        raise ValueError("no training question was kept: see the rejections by reason above")
    write_questions(train_questions, str(out_dir / "train.parquet"), made.get("train"))
    write_verl_parquet(train_questions, str(out_dir / "train_verl.parquet"))
    extra = [q for result in sources.extra for q in result.questions]
    order = np.random.default_rng(extra_seed).permutation(len(extra))
    write_questions([extra[i] for i in order], str(out_dir / "extra.parquet"))
    for name, result in sources.benchmarks.items():
        path = str(out_dir / "benchmarks" / f"{name}.parquet")
        write_questions(result.questions, path, made.get(name))
    results = [*sources.train, *sources.extra, *sources.benchmarks.values()]
    rejections = [r for result in results for r in result.rejections]
    write_rejections(rejections, str(out_dir / "rejections.parquet"))
    return train_questions
