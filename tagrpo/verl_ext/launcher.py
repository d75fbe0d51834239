"""The ``train.backend: verl`` path of the train stage: build and run verl's trainer.

    python -m stages.train --method ta_grpo --dry-run    # print the command, run nothing
    python -m stages.train --method ta_grpo              # prepare data, train, export

A run (policy ``P``) prepares ``data/verl/P/{train,val}.parquet`` (length-filtered with the
policy's tokenizer, :mod:`tagrpo.verl_ext.data`; a method sampling rephrasings refuses rows
without N of them), runs ``python -m verl.trainer.main_ppo`` with the generated overrides
(:mod:`tagrpo.verl_ext.overrides`) in a session and private temp dir of its own
(:mod:`tagrpo.verl_ext.process`: nothing of the run survives it), verl's own MLflow logger
attached through ``MLFLOW_RUN_ID`` to the run ``train-P`` that the train stage opened, and
leaves the local backend's outputs in the stage's staging area: ``models/P`` (HF folder,
``checkpoints/checkpoint-025..100`` inside, exported by the trainer),
``rollouts/P/checkpoint-*.parquet`` and ``plots/train/P.csv`` (every logged metric per step);
the stage writes ``metrics/train/P.json``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tagrpo.config.common import TrackingSettings
from tagrpo.config.engines import VerlSettings
from tagrpo.config.params import Params
from tagrpo.pipeline.paths import project_root
from tagrpo.verl_ext.device import device_env, run_device
from tagrpo.verl_ext.overrides import RunPaths, VerlRun, build_overrides
from tagrpo.verl_ext.process import private_temp_dir, remove_temp_dir, run_isolated

Summarize = Callable[[list[dict[str, float]], dict[str, float], float], dict[str, float]]
# Telemetry stays off in every Ray worker too (the variables are forwarded to them).
FORWARDED_DEFAULTS = {"DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true"}


@dataclass(frozen=True)
class VerlCommand:
    """The process to start: argv and the environment variables it adds."""

    argv: list[str]
    env: dict[str, str] = field(default_factory=dict)

    def shell(self) -> str:
        """A copy-pasteable shell command (one override per line)."""
        assignments = [f"{key}={shlex.quote(value)}" for key, value in sorted(self.env.items())]
        words = [shlex.quote(word) for word in self.argv]
        return " \\\n  ".join([*assignments, " ".join(words[:3]), *words[3:]])


def run_paths(
    root: Path, policy: str, verl: VerlSettings, temp_dir: Path | None = None
) -> RunPaths:
    """Where one run reads and writes (absolute: verl workers do not share our cwd)."""
    data = root / "data" / "verl" / policy
    return RunPaths(
        train_file=data / "train.parquet",
        val_file=data / "val.parquet",
        checkpoint_dir=root / verl.checkpoint_dir / policy,
        export_dir=root / "models" / policy,
        rollout_dir=root / "rollouts" / policy,
        metrics_log=data / "metrics.jsonl",
        temp_dir=temp_dir,
    )


def resolve_model(config: Params, root: Path) -> str:
    """The policy verl starts from: ``verl.model``, else ``train.model`` (a folder with
    weights, or the hub id its ``pointer.json`` names)."""
    if config.verl.model:
        return config.verl.model
    from tagrpo.backends.models import resolve

    source = resolve(root / config.train.model)
    if source.kind == "hub":
        return str(source.hub_id)
    if source.kind == "local":
        return str(Path(source.path).resolve())
    raise ValueError(
        f"verl cannot load a {source.kind} model directly: set verl.model to a HF folder"
    )


def planned_model(config: Params, root: Path) -> str | None:
    """The starting policy as :func:`resolve_model` will find it once ``train.model`` is built,
    for a dry run before that: None when it is built (or ``verl.model`` names it).

    The ``base_model`` stage makes ``models/base`` a pointer to the hub id or the local folder,
    or a folder of weights (warm start, GGUF). ValueError names the stage to run first for any
    other ``train.model``.
    """
    from tagrpo.backends.models import resolve

    if config.verl.model:
        return None
    folder = root / config.train.model
    try:
        resolve(folder)
        return None
    except FileNotFoundError:
        pass
    if Path(config.train.model) != Path("models/base"):
        raise ValueError(
            f"{config.train.model} (train.model) is not built yet, and no stage writes it"
        )
    base = config.base_model
    if base.kind == "hub":
        return base.hub.hub_id
    if base.kind == "local":
        return str((root / base.local.path).resolve())
    return str(folder.resolve())  # warm start, GGUF: the base_model stage writes weights there


def tracking_settings(tracking: TrackingSettings) -> tuple[bool, str, str]:
    """(enabled, absolute tracking URI, experiment) from ``common.tracking``."""
    from tagrpo.pipeline.tracking import tracking_uri

    return tracking.enabled, tracking_uri(tracking.uri), tracking.experiment


def build_command(
    method: str,
    config: Params,
    seed: int,
    policy: str,
    root: Path | None = None,
    model: str | None = None,
    mlflow_run_id: str | None = None,
    paths: RunPaths | None = None,
    temp_dir: Path | None = None,
) -> VerlCommand:
    """``python -m verl.trainer.main_ppo`` with the run's overrides and environment.

    ``temp_dir`` (the run's private temp dir) becomes Ray's temp dir and every process's
    ``TMPDIR``, so that the run writes nothing else under the system's temp dir.
    """
    root = Path(root or project_root())
    paths = paths or run_paths(root, policy, config.verl)
    if temp_dir is not None:
        paths = dataclasses.replace(paths, temp_dir=temp_dir)
    enabled, uri, experiment = tracking_settings(config.common.tracking)
    env = {
        **device_env(run_device(config.verl), config.common.torch_threads),
        "VERL_FILE_LOGGER_PATH": str(paths.metrics_log),
        **FORWARDED_DEFAULTS,
    }
    if temp_dir is not None:
        env["TMPDIR"] = str(temp_dir)
    if enabled:
        env["MLFLOW_TRACKING_URI"] = uri
        if mlflow_run_id:
            env["MLFLOW_RUN_ID"] = mlflow_run_id
    run = VerlRun(
        method=method,
        seed=seed,
        policy=policy,
        model=model or resolve_model(config, root),
        paths=paths,
        experiment=experiment,
        tracking=enabled,
        env=env,
    )
    argv = [sys.executable, "-m", "verl.trainer.main_ppo", *build_overrides(run, config)]
    return VerlCommand(argv=argv, env={**env, "PYTHONUNBUFFERED": "1"})


def read_metrics_log(path: str | Path) -> list[dict[str, float]]:
    """verl's file-logger JSONL as one flat record per step (numbers only).

    ``kl`` repeats ``actor/kl_loss`` under the local backend's name.
    """
    history: dict[int, dict[str, float]] = {}
    for line in Path(path).read_text().splitlines():
        if not line.strip():
            continue
        entry = json.loads(line)
        step = int(entry["step"])
        record = history.setdefault(step, {"step": float(step)})
        for key, value in (entry.get("data") or {}).items():
            if isinstance(value, int | float) and not isinstance(value, bool):
                record[key] = float(value)
    for record in history.values():
        # The local backend's name for the per-token KL of the update (its summary reads it).
        if "actor/kl_loss" in record:
            record.setdefault("kl", record["actor/kl_loss"])
    return [history[step] for step in sorted(history)]


def run_training(
    method: str,
    seed: int,
    policy: str,
    config: Params,
    data_multiple: float = 1.0,
    dry_run: bool = False,
    summarize: Summarize | None = None,
    runner: Callable[..., Any] | None = None,
    outputs: Mapping[str, Path] | None = None,
    model: str | None = None,
) -> dict[str, float]:
    """Train ``policy`` with verl (see the module docstring); returns the run summary.

    ``summarize(history, probe, seconds)`` is the train stage's summary function, so both
    backends report the same keys; ``runner`` starts the process (tests pass a fake).
    ``outputs`` (``model``, ``rollouts``, ``history``): where the stage wants the policy, the
    dumps and the per-step table (its staging area); then the caller writes the metrics and
    owns the MLflow run. ``model`` (dry runs only): the starting policy to print when it is not
    built yet (:func:`planned_model`).
    """
    root = project_root()
    train, verl = config.train, config.verl
    paths = run_paths(root, policy, verl)
    run_device(verl)  # refuses an engine that does not fit the device, before any work
    if outputs is None:
        outputs = {
            "model": paths.export_dir,
            "rollouts": paths.rollout_dir,
            "history": root / "plots" / "train" / f"{policy}.csv",
        }
    paths = dataclasses.replace(
        paths, export_dir=Path(outputs["model"]), rollout_dir=Path(outputs["rollouts"])
    )
    if dry_run:
        command = build_command(method, config, seed, policy, root, model=model, paths=paths)
        print(command.shell())
        return {}
    from tagrpo.algorithms import get_method
    from tagrpo.pipeline.tracking import log_metrics
    from tagrpo.training.outputs import write_history_csv
    from tagrpo.verl_ext.data import (
        chat_template_counter,
        check_replaced_share,
        prepare_training_parquet,
        prepare_validation_parquet,
        require_rephrasings,
    )

    model = resolve_model(config, root)
    for stale in (paths.export_dir, paths.rollout_dir, paths.train_file.parent):
        shutil.rmtree(stale, ignore_errors=True)
    if not verl.resume:  # a rerun must not resume a finished run's checkpoints
        shutil.rmtree(paths.checkpoint_dir, ignore_errors=True)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    base = train.questions
    stats = prepare_training_parquet(
        root / train.input,
        paths.train_file,
        chat_template_counter(tokenizer, config.common.chat_template_kwargs),
        verl.max_prompt_length,
        train.n_neighbours,
        train.neighbours,
        limit=None if base is None else round(data_multiple * base),
    )
    if stats.questions_written == 0:
        raise ValueError(
            f"no training question fits in {verl.max_prompt_length} prompt tokens "
            f"({stats.questions_in} read from {train.input})"
        )
    print(
        f"[train:{policy}] verl data: {stats.questions_written}/{stats.questions_in} questions "
        f"({stats.questions_dropped_too_long} over {verl.max_prompt_length} tokens dropped), "
        f"{stats.rephrasings_too_long}/{stats.rephrasings_in} rephrasings over the limit "
        "replaced by the original"
    )
    check_replaced_share(stats, verl.max_replaced_rephrasing_share, method)
    if get_method(method).use_neighbours:
        # Without N rephrasings per row the method would sample q0 for every session: a
        # different experiment under this method's name.
        require_rephrasings(paths.train_file, train.n_neighbours, method)
    benchmark = root / "data" / "processed" / "benchmarks" / f"{verl.val_benchmark}.parquet"
    prepare_validation_parquet(benchmark, paths.val_file, verl.val_questions)
    import mlflow

    # The train stage opened the MLflow run (tagged like the local backend's); verl's own
    # logger writes into it through MLFLOW_RUN_ID.
    mlflow_run = mlflow.active_run()
    run_id = mlflow_run.info.run_id if mlflow_run is not None else None
    # Ray's sessions and every verl process's TMPDIR in a private temp dir, removed at the end
    # whatever happens (tagrpo/verl_ext/process.py).
    temp_dir = private_temp_dir()
    try:
        command = build_command(method, config, seed, policy, root, model, run_id, paths, temp_dir)
        log_metrics(stats.as_metrics())
        print(command.shell())
        started = time.perf_counter()
        run = runner or run_isolated
        run(command.argv, env={**os.environ, **command.env}, cwd=str(root), check=True)
        seconds = time.perf_counter() - started
    finally:
        remove_temp_dir(temp_dir)
    history = read_metrics_log(paths.metrics_log)
    if not (paths.export_dir / "config.json").exists():
        raise RuntimeError(f"verl finished but exported no policy to {paths.export_dir}")
    paths.rollout_dir.mkdir(parents=True, exist_ok=True)  # dumps only at checkpoint steps
    summary = summarize(history, {}, seconds) if summarize else {"steps": len(history)}
    summary.update({"train_seconds": seconds, **stats.as_metrics()})
    write_history_csv(history, Path(outputs["history"]))
    return summary
