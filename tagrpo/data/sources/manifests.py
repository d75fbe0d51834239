"""What each local source file must hold: its row count and SHA-256 (a file's manifest).

The values are those of the shared data's ``SOURCES.md`` (``../shared/data``; each checked
against the files themselves). The data stage checks every local file it reads against its
source's manifest before loading it (:func:`check_source_files`): a truncated or edited copy
is refused naming the file, the rows and digest expected and those found, instead of becoming
a shorter benchmark. ``data.verify_sources: false`` lets a user's own copy through; the data
stage's metrics record each file's rows, digest and whether it matched, so the report says so.
A source without a manifest (the user-supplied OpenR1-Math pool) is recorded, not checked.

Rows are counted as the loader counts them: one per line, a last line without a newline
included; a parquet copy (read when the jsonl file is absent) by its row count.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from tagrpo.data.sources.local import source_file
from tagrpo.plumbing.verify import OutputCorruptedError

_CHUNK = 1 << 20


@dataclass(frozen=True)
class FileManifest:
    """The expected content of a source's file under the data directory."""

    file: str  # relative to the data directory, as Source.file
    rows: int
    sha256: str


# From ../shared/data/SOURCES.md (its table's rows, its SHA-256 list); keyed by source name.
MANIFESTS: dict[str, FileManifest] = {
    "math": FileManifest(
        "math/train.jsonl", 7500, "c33696e0cca7faae5a8a1d6d90c60544184d8b867982f0fe299391f437d286b3"
    ),
    "math500": FileManifest(
        "math500/test.jsonl",
        500,
        "35dc41080a3680858b27fa7e0533d2d547825316fc5dafe5d316f4ccc5a06132",
    ),
    "aime24": FileManifest(
        "aime24/test.jsonl", 30, "af2b8bd2aa911b6333ad0df32f3ca05c7ae8ed10f1731f4372c8ae26990bf7ac"
    ),
    "aime25": FileManifest(
        "aime25/test.jsonl", 30, "5ee6e9fb9b8c0408c8e3591709b6927063abf73ed238c029167a7eff7376cca0"
    ),
    "amc23": FileManifest(
        "amc23/test.jsonl", 40, "43707e1ca784602d8479de24ee8ce36609dbebc46dd152b0b12a46611aa898a4"
    ),
    "olympiadbench": FileManifest(
        "olympiadbench/test.jsonl",
        675,
        "bb8c1e38a16ea9eacb77530315a674d883f267fbff79183effc53681b4fcc416",
    ),
    "minerva_math": FileManifest(
        "minerva_math/test.jsonl",
        272,
        "0e656b430d3a0a1dab6aa853f453ba3805e28e2cabe4fc72486a897cc09d8ba2",
    ),
    "gpqa_diamond": FileManifest(
        "gpqa_diamond/test.jsonl",
        198,
        "a783322254b5ab9c436a286e2cd964d9848c77eabeab8afb813edc7478ce1f51",
    ),
}

Status = Literal["matches", "differs", "no manifest"]


class SourceMismatchError(OutputCorruptedError):
    """A local source file differs from its manifest (rows or SHA-256)."""


@dataclass(frozen=True)
class FileCheck:
    """One source file as found, beside its manifest (None: the source has none)."""

    source: str
    file: str  # the file read, relative to the data directory
    rows: int
    sha256: str
    manifest: FileManifest | None

    @property
    def status(self) -> Status:
        if self.manifest is None:
            return "no manifest"
        same = (self.file, self.rows, self.sha256) == (
            self.manifest.file,
            self.manifest.rows,
            self.manifest.sha256,
        )
        return "matches" if same else "differs"

    def describe(self) -> str:
        """``file: found ... , manifest ...`` (rows and digest of both)."""
        found = f"{self.rows} rows, sha256 {self.sha256}"
        if self.manifest is None:
            return f"{self.file}: {found} (no manifest)"
        expected = f"{self.manifest.rows} rows, sha256 {self.manifest.sha256}"
        named = "" if self.file == self.manifest.file else f" of {self.manifest.file}"
        return f"{self.file}: found {found}; its manifest{named} has {expected}"

    def record(self) -> dict[str, Any]:
        """This check in the data stage's metrics."""
        entry: dict[str, Any] = {
            "source": self.source,
            "rows": self.rows,
            "sha256": self.sha256,
            "manifest": self.status,
        }
        if self.manifest is not None and self.status == "differs":
            entry["expected_rows"] = self.manifest.rows
            entry["expected_sha256"] = self.manifest.sha256
        return entry


def jsonl_rows_and_sha256(path: Path) -> tuple[int, str]:
    """Lines (a last one without a newline counted, as the loader counts rows) and SHA-256."""
    digest = hashlib.sha256()
    lines, last = 0, b"\n"
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
            lines += chunk.count(b"\n")
            last = chunk[-1:]
    return lines + (last != b"\n"), digest.hexdigest()


def rows_and_sha256(path: Path) -> tuple[int, str]:
    """A jsonl file's lines, a parquet copy's rows; the file's SHA-256."""
    if path.suffix != ".parquet":
        return jsonl_rows_and_sha256(path)
    import pyarrow.parquet as pq  # only a user-supplied parquet copy needs it

    digest = hashlib.sha256()
    with path.open("rb") as stream:
        while chunk := stream.read(_CHUNK):
            digest.update(chunk)
    return pq.ParquetFile(path).metadata.num_rows, digest.hexdigest()


def check_source_files(
    names: Iterable[str], data_dir: Path, *, refuse_mismatch: bool
) -> list[FileCheck]:
    """Each named source's file under ``data_dir`` (the one the loader reads) beside its
    manifest; with ``refuse_mismatch`` (``data.verify_sources``), any file that differs is
    refused: :class:`SourceMismatchError` naming every such file, its rows and digest."""
    checks = []
    for name in dict.fromkeys(names):
        path = source_file(name, data_dir)
        rows, sha256 = rows_and_sha256(path)
        relative = path.relative_to(data_dir).as_posix()
        checks.append(FileCheck(name, relative, rows, sha256, MANIFESTS.get(name)))
    differing = [check for check in checks if check.status == "differs"]
    if refuse_mismatch and differing:
        raise SourceMismatchError(
            f"source files under {data_dir} differ from their manifests "
            f"(tagrpo/data/sources/manifests.py): "
            + "; ".join(check.describe() for check in differing)
            + ". Restore the files from their origin (SOURCES.md), or set "
            "data.verify_sources: false to use your own copy (the report then says so)"
        )
    return checks


def files_record(checks: list[FileCheck], verified: bool) -> dict[str, Any]:
    """The data stage's metrics entry: whether files had to match, and each file's check."""
    return {
        "verify_sources": verified,
        "files": {check.file: check.record() for check in checks},
    }
