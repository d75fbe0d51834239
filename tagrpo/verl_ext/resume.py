"""A verl run's work area: what survives a failed or killed train stage, and when it is resumed.

A stage replaces its outputs only when it succeeds, and it writes into a staging folder
removed when it fails (:mod:`tagrpo.pipeline.runtime`): anything a run wrote there is lost with
the run. So a verl run writes everything into a work area of its own,
``<runtime.verl.checkpoint_dir>/<policy>/``, which no stage declares as an output::

    run.json                the run's identity (fingerprint) and its attempts
    data/                   the training and validation parquets verl reads
    metrics.jsonl           verl's file logger of the current attempt (verl truncates it)
    metrics-resumed.jsonl   earlier attempts' steps, up to the checkpoint resumed from
    model/                  Hugging Face exports: checkpoints/checkpoint-XXX and the final policy
    rollouts/               the rollout dumps (checkpoint-XXX.parquet)
    global_step_N/          verl's resumable checkpoint (actor shards, optimizer, dataloader,
                            the tagrpo_sync trainer's state), latest_checkpointed_iteration.txt
    finished.json           verl exited 0 with the final policy exported

A rerun resumes only **the same run**: the fingerprint is the stage's DVC dependency hash (code,
data and params files the stage declares, :func:`tagrpo.plumbing.dvc_stages.deps_hash`), the
prepared training parquet's bytes and the overrides that decide the run's results
(``build_overrides(execution=False)``: not checkpoints, worker counts, logging or Ray's temp
dir). Anything else, or ``runtime.verl.resume: false``, empties the work area first. A finished
run is not trained again: its exports are promoted as they are. The stage promotes the exports
and dumps into its outputs (hard links: no second copy on disk) and removes the work area once
its outputs are committed (:func:`release`).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

RUN_FILE = "run.json"
FINISHED_FILE = "finished.json"
METRICS_LOG = "metrics.jsonl"
RESUMED_LOG = "metrics-resumed.jsonl"
# verl's atomic tracker of the last complete checkpoint (trainer_base._save_checkpoint).
LATEST_CHECKPOINT = "latest_checkpointed_iteration.txt"


@dataclass(frozen=True)
class WorkArea:
    """The folder of one run (see the module docstring)."""

    root: Path

    @property
    def data(self) -> Path:
        return self.root / "data"

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def rollouts(self) -> Path:
        return self.root / "rollouts"

    @property
    def metrics_log(self) -> Path:
        return self.root / METRICS_LOG

    @property
    def resumed_log(self) -> Path:
        return self.root / RESUMED_LOG

    @property
    def hydra(self) -> Path:
        return self.root / "hydra"


@dataclass(frozen=True)
class Resumption:
    """What a start found in the work area."""

    step: int  # the checkpoint step resumed from (0: from the start)
    finished: bool  # the run is complete: nothing to train
    reason: str  # one line for the log


def fingerprint(deps_hash: str, train_file: Path, overrides: Iterable[str]) -> str:
    """The identity of a run's results (see the module docstring)."""
    digest = hashlib.sha256()
    digest.update(f"deps={deps_hash}\n".encode())
    digest.update(hashlib.sha256(Path(train_file).read_bytes()).hexdigest().encode())
    for override in overrides:
        digest.update(b"\n" + override.encode())
    return digest.hexdigest()[:24]


def latest_checkpoint(area: WorkArea) -> int:
    """The step of verl's last complete checkpoint in the work area (0: none)."""
    tracker = area.root / LATEST_CHECKPOINT
    if not tracker.is_file():
        return 0
    step = int(tracker.read_text().strip())
    return step if (area.root / f"global_step_{step}").is_dir() else 0


def _read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return {}


def _write_json(path: Path, value: dict[str, Any]) -> None:
    temporary = path.with_name(f".{path.name}.{os.getpid()}")
    temporary.write_text(json.dumps(value, indent=1, sort_keys=True) + "\n")
    os.replace(temporary, path)


def open_work_area(area: WorkArea, identity: str, resume: bool) -> Resumption:
    """Keep the work area for a resume of the same run, or empty it; then record ``identity``.

    Resuming from checkpoint step ``k`` keeps the metrics of steps <= k (moved to the resumed
    log: verl truncates its own) and drops those of later steps, which the run repeats.
    """
    recorded = _read_json(area.root / RUN_FILE)
    if not area.root.exists():
        reason = "no earlier run in the work area"
    elif not resume:
        reason = "runtime.verl.resume is false"
    elif recorded.get("fingerprint") != identity:
        reason = "the earlier run had other code, data or params (its fingerprint differs)"
    else:
        finished = (area.root / FINISHED_FILE).is_file()
        step = latest_checkpoint(area)
        if finished:
            return Resumption(step, True, f"the run finished earlier (step {step}): not retrained")
        if step == 0:
            reason = "the earlier run of the same settings left no checkpoint"
        else:
            keep_steps(area, step)
            _write_json(area.root / RUN_FILE, recorded)
            return Resumption(step, False, f"resuming the same run from its step-{step} checkpoint")
    shutil.rmtree(area.root, ignore_errors=True)
    area.root.mkdir(parents=True)
    _write_json(area.root / RUN_FILE, {"fingerprint": identity, "attempts": []})
    return Resumption(0, False, f"starting afresh: {reason}")


def _log_lines(path: Path) -> list[tuple[int, str]]:
    if not path.is_file():
        return []
    lines = []
    for line in path.read_text().splitlines():
        if line.strip():
            lines.append((int(json.loads(line)["step"]), line))
    return lines


def keep_steps(area: WorkArea, step: int) -> None:
    """Earlier attempts' metric lines of steps <= ``step`` into the resumed log, the rest gone."""
    lines = [
        line
        for path in (area.resumed_log, area.metrics_log)
        for logged, line in _log_lines(path)
        if logged <= step
    ]
    temporary = area.resumed_log.with_name(f".{RESUMED_LOG}.{os.getpid()}")
    temporary.write_text("".join(f"{line}\n" for line in lines))
    os.replace(temporary, area.resumed_log)
    area.metrics_log.unlink(missing_ok=True)


def record_attempt(area: WorkArea, started_step: int, seconds: float, returncode: int) -> float:
    """Add one attempt to ``run.json``; returns the seconds of all attempts of the run."""
    recorded = _read_json(area.root / RUN_FILE)
    attempts = [
        *recorded.get("attempts", []),
        {
            "from_step": started_step,
            "seconds": round(seconds, 3),
            "returncode": returncode,
            "ended": time.strftime("%Y-%m-%dT%H:%M:%S"),
        },
    ]
    _write_json(area.root / RUN_FILE, {**recorded, "attempts": attempts})
    return float(sum(attempt["seconds"] for attempt in attempts))


def attempts(area: WorkArea) -> list[dict[str, Any]]:
    return list(_read_json(area.root / RUN_FILE).get("attempts", []))


def mark_finished(area: WorkArea, steps: int) -> None:
    _write_json(area.root / FINISHED_FILE, {"steps": steps})


def link_tree(source: Path, target: Path) -> None:
    """``target`` as a copy of ``source`` made of hard links (a plain copy across devices)."""

    def link(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.rmtree(target, ignore_errors=True)
    if source.is_dir():
        shutil.copytree(source, target, copy_function=link)
    else:
        target.mkdir(parents=True)


def release(area: WorkArea) -> None:
    """Remove the work area (once the stage's outputs are committed: nothing to resume)."""
    shutil.rmtree(area.root, ignore_errors=True)
