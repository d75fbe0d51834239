"""A persistent, content-addressed store of model replies (SQLite, WAL).

The key of an entry is the sha256 of everything that determines the reply's distribution:
backend, model, template version, sampling parameters, the question text, the variant index
and the regeneration round (see :func:`cache_key`). A rerun therefore sends no request whose
answer is stored, and a change to any of these sends new ones.

Each reply is committed the moment it arrives. SQLite in WAL mode makes every commit durable
against a killed process (SIGKILL included: the WAL is replayed on the next open), so a killed
run loses at most the requests that were in flight. Only successful replies are stored: a
failure (429 to the end of the retries, a timeout) is retried by the next run.

The store lives outside DVC outputs (default ``.cache/rephrase/`` in the user's checkout)
because a stage replaces its outputs whole, and only when it succeeds (a failed run's staging
folder is removed, :mod:`tagrpo.pipeline.commit`).
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
import time
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
# How long one statement waits for SQLite's write lock (another process, a second stage or a
# dvc exp, may hold it briefly); SQLite measures it from the statement's own start.
LOCK_TIMEOUT_S = 60.0


def cache_key(parts: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON of ``parts`` (sorted keys, no whitespace)."""
    canonical = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


class ReplyCache:
    """``key -> payload`` (a JSON object) in one SQLite file; safe across processes.

    Use as a context manager, or call :meth:`close`. One connection serves the threads of
    one process (writes are serialised by a lock); other processes may use the same file.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, timeout=LOCK_TIMEOUT_S, check_same_thread=False)
        self._conn.execute("PRAGMA journal_mode=WAL")
        # NORMAL in WAL mode: a commit survives a process kill (not necessarily a power cut),
        # and costs no fsync, so one commit per reply stays cheap.
        self._conn.execute("PRAGMA synchronous=NORMAL")
        self._conn.execute(
            "CREATE TABLE IF NOT EXISTS replies ("
            " key TEXT PRIMARY KEY, namespace TEXT NOT NULL, payload TEXT NOT NULL,"
            " created REAL NOT NULL)"
        )
        self._conn.execute("CREATE TABLE IF NOT EXISTS info (name TEXT PRIMARY KEY, value TEXT)")
        self._conn.execute(
            "INSERT OR IGNORE INTO info VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),)
        )
        self._conn.commit()

    def __enter__(self) -> ReplyCache:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    def get(self, key: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._conn.execute("SELECT payload FROM replies WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else None

    def get_many(self, keys: Iterable[str]) -> dict[str, dict[str, Any]]:
        """The stored payloads among ``keys`` (missing keys are absent from the result)."""
        wanted = list(dict.fromkeys(keys))
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for start in range(0, len(wanted), 500):  # SQLite's bound-parameter limit
                chunk = wanted[start : start + 500]
                marks = ",".join("?" * len(chunk))
                rows = self._conn.execute(
                    f"SELECT key, payload FROM replies WHERE key IN ({marks})", chunk
                ).fetchall()
                found.update({key: json.loads(payload) for key, payload in rows})
        return found

    def put(self, key: str, namespace: str, payload: Mapping[str, Any]) -> None:
        """Store one reply and commit at once (durable before the next request completes)."""
        text = json.dumps(payload, sort_keys=True, ensure_ascii=False)
        with self._lock:
            self._conn.execute(
                "INSERT OR REPLACE INTO replies (key, namespace, payload, created) "
                "VALUES (?, ?, ?, ?)",
                (key, namespace, text, time.time()),
            )
            self._conn.commit()

    def count(self, namespace: str | None = None) -> int:
        with self._lock:
            if namespace is None:
                return self._conn.execute("SELECT COUNT(*) FROM replies").fetchone()[0]
            return self._conn.execute(
                "SELECT COUNT(*) FROM replies WHERE namespace = ?", (namespace,)
            ).fetchone()[0]
