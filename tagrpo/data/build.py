"""The ``data`` stage's work: load the configured sources, write the processed split and the
benchmarks in the normalised schema, and count every row (rows in = kept + rejected)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tagrpo.config.params import Params
from tagrpo.data.schema import LoadResult, write_questions, write_rejections


def load_sources(config: Params) -> tuple[list[LoadResult], dict[str, LoadResult]]:
    """The training splits (concatenated downstream) and the benchmarks, by source."""
    data = config.data
    if data.source == "synthetic":
        from tagrpo.miniworld.dataset import build_miniworld

        built = build_miniworld(data.synthetic, config.common.miniworld)
        train = built.pop("train")
        return [train], built
    settings = getattr(data, data.source)
    if data.source == "local":
        from tagrpo.data.sources.local import load_local
        from tagrpo.paths import shared_data_dir

        data_dir = shared_data_dir(config.common.data_dir)

        def load(name: str) -> LoadResult:
            options = settings.options.get(name, {})
            return load_local(name, data_dir, max_problem_chars=data.max_problem_chars, **options)
    else:
        from tagrpo.data.sources.hub import load_hub

        def load(name: str) -> LoadResult:
            options = settings.options.get(name, {})
            return load_hub(name, max_problem_chars=data.max_problem_chars, **options)

    train = [load(name) for name in settings.train]
    benchmarks = {name: load(name) for name in settings.benchmarks}
    return train, benchmarks


def count_table(train: list[LoadResult], benchmarks: dict[str, LoadResult]) -> dict[str, Any]:
    """Rows in = kept + rejected, per (source, split) and in total (an error if not)."""
    per_source: dict[str, dict[str, int]] = {}
    for key, result in [(f"train/{r.source}", r) for r in train] + [
        (f"test/{name}", r) for name, r in benchmarks.items()
    ]:
        per_source[key] = result.counts()
    totals = {
        field: sum(counts[field] for counts in per_source.values())
        for field in ("rows_in", "kept", "rejected")
    }
    if totals["rows_in"] != totals["kept"] + totals["rejected"]:
        raise AssertionError(f"counts do not reconcile: {totals}")
    return {"sources": per_source, "total": totals}


def write_processed(
    out_dir: Path, train: list[LoadResult], benchmarks: dict[str, LoadResult]
) -> list[Any]:
    """``train.parquet``, ``train_verl.parquet``, ``benchmarks/<name>.parquet`` and
    ``rejections.parquet`` under ``out_dir``; returns the training questions."""
    from tagrpo.data.verl_format import write_verl_parquet

    (out_dir / "benchmarks").mkdir(parents=True, exist_ok=True)
    train_questions = [q for result in train for q in result.questions]
    if not train_questions:
        raise ValueError("no training question was kept: see the rejections by reason above")
    write_questions(train_questions, str(out_dir / "train.parquet"))
    write_verl_parquet(train_questions, str(out_dir / "train_verl.parquet"))
    for name, result in benchmarks.items():
        write_questions(result.questions, str(out_dir / "benchmarks" / f"{name}.parquet"))
    rejections = [r for result in [*train, *benchmarks.values()] for r in result.rejections]
    write_rejections(rejections, str(out_dir / "rejections.parquet"))
    return train_questions
