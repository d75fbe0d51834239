"""Sampled responses saved the moment each generation call completes, reused after a failure.

Sampling is the expensive part of evaluation (79,680 responses per policy at paper scale);
grading, metrics and logging are cheap. :class:`StoredSampler` wraps a generation backend:
each ``generate`` call is one *chunk* (one benchmark of the evaluate stage, one phrasing of
a diagnostics checkpoint, one batch of the consistency solver), written to the store as soon
as the engine returns it. A rerun whose chunk has the same fingerprint loads it instead of
sampling (the engine is not even loaded when every chunk is saved); a different fingerprint
samples again and says why.

The fingerprint is everything that determines the responses: a digest of every file of the
model folder (weights, config, tokenizer and its chat template), the conversations, the
sampling settings and seed, and the engine with its settings (batch size, threads,
library versions). A chunk is exactly one ``generate`` call with the same arguments as an
uninterrupted run, and the engines seed per batch or per problem from the call's arguments
(never from earlier calls), so a resampled chunk is byte for byte what an uninterrupted run
draws, and wrapping changes no random stream.

Writes are atomic (a temporary file, fsync, then a rename): a run killed mid-write leaves no
file under a chunk's name, and a chunk that does not parse or does not match its fingerprint
is resampled, never trusted. The store is a recovery journal outside DVC's outputs (a stage
replaces those whole, and only when it succeeds): default ``.cache/samples/`` in the user's
checkout (``TAGRPO_SAMPLE_STORE`` overrides), and a stage :meth:`SampleStore.discard`\\ s its
chunks once its outputs are committed, so a later forced rerun samples afresh.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from tagrpo.backends.base import Completion, GenerationBackend, Messages, SamplingParams

STORE_VERSION = 1
STORE_ENV = "TAGRPO_SAMPLE_STORE"
DEFAULT_DIR = ".cache/samples"


def default_store_dir() -> Path:
    """``$TAGRPO_SAMPLE_STORE`` or ``.cache/samples`` in the user's checkout (not a dvc exp
    temporary copy, which is deleted with the failed experiment)."""
    from tagrpo.plumbing.paths import home_root, resolve_path

    configured = os.environ.get(STORE_ENV)
    return resolve_path(configured or DEFAULT_DIR, base=home_root())


def canonical_digest(value: Any) -> str:
    """sha256 of the canonical JSON of ``value``."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_atomic(path: Path, payload: bytes) -> None:
    """Write ``payload`` to ``path`` so that a kill at any moment leaves the old file or the
    new one, never a part of it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with temporary.open("wb") as handle:
        handle.write(payload)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


class SampleStore:
    """A folder of saved chunks, and the counts of one stage run (reused and resampled).

    ``log`` receives one line per chunk (reused, sampled, or resampled and why).
    """

    def __init__(self, directory: str | Path, log: Callable[[str], None] = print) -> None:
        self.directory = Path(directory)
        self.log = log
        self.samples_reused = 0
        self.samples_resampled = 0
        self.chunks_reused = 0
        self.chunks_sampled = 0
        self._touched: set[Path] = set()

    # --- fingerprints -------------------------------------------------------------------------

    def model_digest(self, model_dir: str | Path) -> str:
        """A digest of the files of ``model_dir`` (names and contents; HF model folders are
        flat: subfolders such as a policy's ``checkpoints/`` are other models).

        Hashing a 7B model's 15 GB takes a while, so each file's sha256 is remembered by
        (path, size, mtime, inode): a changed file is hashed again.
        """
        root = Path(model_dir).resolve()
        if not root.is_dir():
            raise FileNotFoundError(f"{root} is not a model folder")
        memo_path = self.directory / "file_digests.json"
        try:
            memo = json.loads(memo_path.read_text())
        except (OSError, ValueError):
            memo = {}
        parts, changed = [], False
        for path in sorted(p for p in root.iterdir() if p.is_file()):
            stat = path.stat()
            key = f"{path}|{stat.st_size}|{stat.st_mtime_ns}|{stat.st_ino}"
            if key not in memo:
                memo[key] = _file_sha256(path)
                changed = True
            parts.append([path.relative_to(root).as_posix(), memo[key]])
        if changed:
            _write_atomic(memo_path, json.dumps(memo, indent=0).encode())
        return canonical_digest(parts)

    # --- chunks -------------------------------------------------------------------------------

    def _chunk_path(self, key: str) -> Path:
        return self.directory / "chunks" / key[:2] / f"{key}.json.gz"

    def _label_path(self, label: str) -> Path:
        return self.directory / "labels" / f"{canonical_digest(label)}.json"

    def load(self, fingerprint: Mapping[str, Any], label: str) -> list[list[Completion]] | None:
        """The saved chunk of ``fingerprint``; None (and the reason logged) if there is none or
        it cannot be trusted."""
        key = canonical_digest(dict(fingerprint))
        path = self._chunk_path(key)
        if not path.exists():
            self._log_miss(fingerprint, label)
            return None
        try:
            saved = json.loads(gzip.decompress(path.read_bytes()))
            if saved["fingerprint"] != json.loads(json.dumps(dict(fingerprint))):
                raise ValueError("its fingerprint differs from its name")
            chunk = [
                [
                    Completion(
                        text=str(c["text"]),
                        num_tokens=int(c["num_tokens"]),
                        finished=bool(c["finished"]),
                        token_ids=tuple(int(t) for t in c["token_ids"]),
                    )
                    for c in samples
                ]
                for samples in saved["completions"]
            ]
            expected = (fingerprint["prompts"]["count"], fingerprint["sampling"]["n"])
            if len(chunk) != expected[0] or any(len(s) != expected[1] for s in chunk):
                raise ValueError(
                    f"it does not hold {expected[1]} samples for {expected[0]} prompts"
                )
        except (OSError, ValueError, KeyError, TypeError, EOFError, gzip.BadGzipFile) as error:
            self.log(
                f"[samples] {label}: the saved chunk {path} is unreadable ({error}): resampling"
            )
            return None
        self._touched.update({path, self._label_path(label)})
        return chunk

    def _log_miss(self, fingerprint: Mapping[str, Any], label: str) -> None:
        try:
            previous = json.loads(self._label_path(label).read_text())
        except (OSError, ValueError):
            return
        current = json.loads(json.dumps(dict(fingerprint)))
        differing = sorted(k for k in {*previous, *current} if previous.get(k) != current.get(k))
        if differing:
            self.log(
                f"[samples] {label}: saved samples were drawn with a different "
                f"{', '.join(differing)}: resampling"
            )

    def save(
        self, fingerprint: Mapping[str, Any], label: str, chunk: Sequence[Sequence[Completion]]
    ) -> None:
        key = canonical_digest(dict(fingerprint))
        payload = {
            "fingerprint": dict(fingerprint),
            "label": label,
            "completions": [
                [
                    {
                        "text": c.text,
                        "num_tokens": c.num_tokens,
                        "finished": c.finished,
                        "token_ids": list(c.token_ids),
                    }
                    for c in samples
                ]
                for samples in chunk
            ],
        }
        path = self._chunk_path(key)
        _write_atomic(path, gzip.compress(json.dumps(payload).encode("utf-8"), compresslevel=5))
        label_path = self._label_path(label)
        _write_atomic(label_path, json.dumps(dict(fingerprint), sort_keys=True).encode())
        self._touched.update({path, label_path})

    def counts(self) -> dict[str, float]:
        """``samples_reused`` (loaded from the store) and ``samples_resampled`` (drawn by the
        engine in this run), for the stage's metrics."""
        return {
            "samples_reused": float(self.samples_reused),
            "samples_resampled": float(self.samples_resampled),
        }

    def discard(self) -> None:
        """Delete the chunks this run used: call once the stage's outputs hold its samples."""
        for path in sorted(self._touched):
            path.unlink(missing_ok=True)
        self._touched.clear()

    def sampler(
        self,
        open_backend: Callable[[], GenerationBackend],
        *,
        model_dir: str | Path,
        engine: Mapping[str, Any],
        scope: str,
        prompt_format: str = "chat",
    ) -> StoredSampler:
        """A backend that serves saved chunks and opens ``open_backend()`` only when a chunk
        must be sampled; ``prompt_format`` is the opened backend's (checked by the runner)."""
        return StoredSampler(
            self, open_backend, self.model_digest(model_dir), engine, scope, prompt_format
        )


class StoredSampler:
    """A :class:`~tagrpo.backends.base.GenerationBackend` over a store: ``generate`` call
    number ``i`` of ``scope`` is chunk ``scope#i``."""

    def __init__(
        self,
        store: SampleStore,
        open_backend: Callable[[], GenerationBackend],
        model_digest: str,
        engine: Mapping[str, Any],
        scope: str,
        prompt_format: str = "chat",
    ) -> None:
        self.store = store
        self.scope = scope
        self.prompt_format = prompt_format
        self._open_backend = open_backend
        self._backend: GenerationBackend | None = None
        self._model_digest = model_digest
        self._engine = json.loads(json.dumps(dict(engine)))
        self._calls = 0

    @property
    def backend(self) -> GenerationBackend:
        if self._backend is None:
            self._backend = self._open_backend()
        return self._backend

    def prompt_text(self, messages: Messages) -> str:
        return self.backend.prompt_text(messages)

    def fingerprint(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> dict[str, Any]:
        return {
            "version": STORE_VERSION,
            "model": self._model_digest,
            "engine": self._engine,
            "prompts": {
                "count": len(conversations),
                "sha256": canonical_digest([list(m) for m in conversations]),
            },
            "sampling": asdict(sampling),
        }

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        label = f"{self.scope}#{self._calls}"
        self._calls += 1
        fingerprint = self.fingerprint(conversations, sampling)
        saved = self.store.load(fingerprint, label)
        count = len(conversations) * sampling.n
        if saved is not None:
            self.store.samples_reused += count
            self.store.chunks_reused += 1
            self.store.log(f"[samples] {label}: {count} saved samples reused")
            return saved
        chunk = self.backend.generate(conversations, sampling)
        self.store.save(fingerprint, label, chunk)
        self.store.samples_resampled += count
        self.store.chunks_sampled += 1
        return chunk
