"""Load a source from its local copy under the data directory (``shared/data``, SOURCES.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tagrpo.data.schema import LoadResult
from tagrpo.data.sources.base import normalise_records, read_jsonl_records, read_parquet_records
from tagrpo.data.sources.registry import get_source
from tagrpo.plumbing.paths import shared_data_dir

DATA_DIR_HINT = (
    "set the TAGRPO_DATA_DIR environment variable (or the shared data directory in params.yaml, "
    "resolved by tagrpo.plumbing.paths.shared_data_dir) to the folder holding the benchmark files "
    "described in SOURCES.md"
)


def source_path(name: str, data_dir: Path) -> Path:
    """The upstream file of a source under ``data_dir``; FileNotFoundError with a hint if absent."""
    path = Path(data_dir) / get_source(name).file
    if not path.is_file():
        where = "the data directory does not exist" if not Path(data_dir).is_dir() else "no file"
        raise FileNotFoundError(
            f"{name}: upstream file {path} not found ({where}); {DATA_DIR_HINT}"
        )
    return path


def source_file(name: str, data_dir: Path) -> Path:
    """The file the loader reads for source ``name``: its jsonl file under ``data_dir``, or a
    parquet copy beside it when the jsonl file is absent; FileNotFoundError if neither is."""
    jsonl = Path(data_dir) / get_source(name).file
    parquet = jsonl.with_suffix(".parquet")
    if not jsonl.is_file() and parquet.is_file():
        return parquet
    return source_path(name, data_dir)


def load_local(
    name: str,
    data_dir: str | Path | None = None,
    max_problem_chars: int | None = None,
    **options: Any,
) -> LoadResult:
    """Load one source by name from ``data_dir`` (default:
    :func:`tagrpo.plumbing.paths.shared_data_dir`).

    ``options`` are its row builder's keyword options (``seed`` for GPQA-Diamond,
    ``keep_empty_boxed`` for MATH); a parquet copy is read when the jsonl file is absent.
    """
    source = get_source(name)
    directory = Path(data_dir) if data_dir is not None else shared_data_dir()
    unknown = sorted(set(options) - source.loader_options())
    if unknown:
        raise TypeError(f"{name}: unknown loader options {unknown}")
    path = source_file(name, directory)
    records: Any = (
        read_parquet_records(path) if path.suffix == ".parquet" else read_jsonl_records(path)
    )
    return normalise_records(source, records, max_problem_chars=max_problem_chars, **options)
