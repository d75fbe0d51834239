"""The ``train.backend: verl`` path of the train stage: build and run verl's trainer.

    python -m stages.train --method ta_grpo --dry-run    # print the command, run nothing
    python -m stages.train --method ta_grpo              # prepare data, train, export

A run (policy ``P``) works in a folder of its own that survives a failed or killed stage,
``<runtime.verl.checkpoint_dir>/P`` (:mod:`tagrpo.verl_ext.resume`): it prepares the training
parquet there (length-filtered with the policy's tokenizer, :mod:`tagrpo.verl_ext.data`; a
method sampling rephrasings refuses rows without N of them), keeps it for a rerun of the same
run (same code, data and params) or empties it, and runs ``python -m verl.trainer.main_ppo``
with the generated overrides (:mod:`tagrpo.verl_ext.overrides`) in a session of its own
(:mod:`tagrpo.verl_ext.process`), resuming from the last checkpoint there. verl's MLflow logger
is attached through ``MLFLOW_RUN_ID`` to the run ``train-P`` that the train stage opened. The
exports and dumps are then linked into the stage's staging area, the local backend's layout:
``models/P`` (HF folder, ``checkpoints/checkpoint-025..100`` inside, exported by the trainer),
``rollouts/P/checkpoint-*.parquet`` and ``plots/train/P.csv`` (every logged metric per step);
the stage writes ``metrics/train/P.json`` and, once committed, removes the work area
(:func:`release_work_area`).

With ``verl.nnodes > 1`` or ``RAY_ADDRESS`` set, verl joins the Ray cluster that ``ray start``
runs (:func:`ray_cluster`; docs/paper-scale.md, "Several nodes"); otherwise it starts a private
one in the run's temp dir.
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
from tagrpo.config.runtime import VerlRuntimeSettings
from tagrpo.plumbing.dvc_stages import deps_hash
from tagrpo.plumbing.paths import project_root
from tagrpo.verl_ext.device import device_env, run_device
from tagrpo.verl_ext.overrides import RunPaths, VerlRun, build_overrides
from tagrpo.verl_ext.process import RUN_MARKER, private_temp_dir, remove_temp_dir, run_isolated
from tagrpo.verl_ext.resume import (
    WorkArea,
    attempts,
    fingerprint,
    link_tree,
    mark_finished,
    open_work_area,
    record_attempt,
    release,
)

Summarize = Callable[[list[dict[str, float]], dict[str, float], float], dict[str, float]]
# Telemetry stays off in every Ray worker too (the variables are forwarded to them).
FORWARDED_DEFAULTS = {"DO_NOT_TRACK": "true", "MLFLOW_DISABLE_TELEMETRY": "true"}
# verl's validation set (it builds one even when it never validates: trainer.test_freq=-1).
VAL_QUESTIONS = 4


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


def work_area(root: Path, policy: str, runtime: VerlRuntimeSettings) -> WorkArea:
    """The run's folder (absolute: verl workers do not share our cwd)."""
    return WorkArea(Path(root).resolve() / runtime.checkpoint_dir / policy)


def run_paths(
    root: Path, policy: str, runtime: VerlRuntimeSettings, temp_dir: Path | None = None
) -> RunPaths:
    """Where one run reads and writes: its work area (:mod:`tagrpo.verl_ext.resume`)."""
    area = work_area(root, policy, runtime)
    return RunPaths(
        train_file=area.data / "train.parquet",
        val_file=area.data / "val.parquet",
        checkpoint_dir=area.root,
        export_dir=area.model,
        rollout_dir=area.rollouts,
        metrics_log=area.metrics_log,
        temp_dir=temp_dir,
    )


def ray_cluster(verl: VerlSettings, environ: Mapping[str, str]) -> str | None:
    """The Ray cluster a run joins: ``auto`` (what ``ray start`` runs, or ``RAY_ADDRESS``)
    with ``verl.nnodes > 1`` or ``RAY_ADDRESS`` set; None: a private single-node cluster.

    A private cluster lives in the run's temp dir (Ray's ``_temp_dir``, every process's
    ``TMPDIR``), where ``ray.init`` cannot find a cluster started with ``ray start``; and Ray
    refuses logical CPU/GPU counts when it joins one, which a CPU run needs: refused.
    """
    if verl.nnodes == 1 and not environ.get("RAY_ADDRESS"):
        return None
    if verl.device == "cpu":
        raise ValueError(
            "verl.device: cpu runs on one machine in a Ray cluster of its own: set verl.nnodes "
            "to 1 and unset RAY_ADDRESS"
        )
    return "auto"


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
    from tagrpo.plumbing.tracking import tracking_uri

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
    environ: Mapping[str, str] | None = None,
) -> VerlCommand:
    """``python -m verl.trainer.main_ppo`` with the run's overrides and environment.

    ``temp_dir`` (the run's private temp dir) marks every process of the run
    (``TAGRPO_VERL_RUN``, :mod:`tagrpo.verl_ext.process`); on a private cluster it also becomes
    Ray's temp dir and every process's ``TMPDIR``, so that the run writes nothing else under
    the system's temp dir. ``environ`` (default: this process's) decides the cluster
    (:func:`ray_cluster`).
    """
    root = Path(root or project_root())
    paths = paths or run_paths(root, policy, config.runtime.verl)
    if temp_dir is not None:
        paths = dataclasses.replace(paths, temp_dir=temp_dir)
    cluster = ray_cluster(config.verl, os.environ if environ is None else environ)
    enabled, uri, experiment = tracking_settings(config.common.tracking)
    env = {
        **device_env(run_device(config.verl), config.common.torch_threads),
        "VERL_FILE_LOGGER_PATH": str(paths.metrics_log),
        **FORWARDED_DEFAULTS,
    }
    if temp_dir is not None:
        env[RUN_MARKER] = str(temp_dir)
        if cluster is None:
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
        cluster=cluster,
    )
    argv = [sys.executable, "-m", "verl.trainer.main_ppo", *build_overrides(run, config)]
    return VerlCommand(argv=argv, env={**env, "PYTHONUNBUFFERED": "1"})


def read_metrics_log(*paths: str | Path) -> list[dict[str, float]]:
    """verl's file-logger JSONL (one file or several, in order; a missing one is empty) as one
    flat record per step (numbers only; a later line of a step adds to or replaces an earlier).

    ``kl`` repeats ``actor/kl_loss`` under the local backend's name.
    """
    history: dict[int, dict[str, float]] = {}
    lines = [
        line
        for path in paths
        if Path(path).is_file()
        for line in Path(path).read_text().splitlines()
    ]
    for line in lines:
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


def run_identity(
    method: str,
    config: Params,
    seed: int,
    policy: str,
    root: Path,
    model: str,
    train_file: Path,
    data_multiple: float = 1.0,
) -> str:
    """The fingerprint of a run's results (:func:`tagrpo.verl_ext.resume.fingerprint`): the
    train stage's DVC dependency hash, the prepared training parquet ``train_file`` and the
    overrides that decide what verl computes (``build_overrides(execution=False)``)."""
    from tagrpo.plumbing.layout import dvc_stage_name

    dvc_name = dvc_stage_name(
        "train", method, seed, data_multiple, config.runs.one_seed_methods,
        config.runs.control_methods,
    )  # fmt: skip
    paths = run_paths(root, policy, config.runtime.verl)
    run = VerlRun(method=method, seed=seed, policy=policy, model=model, paths=paths)
    overrides = build_overrides(run, config, execution=False)
    return fingerprint(deps_hash(dvc_name, root), train_file, overrides)


def release_work_area(config: Params, policy: str, root: Path | None = None) -> None:
    """Remove a run's work area once the stage has committed its outputs."""
    release(work_area(root or project_root(), policy, config.runtime.verl))


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
    paths = run_paths(root, policy, config.runtime.verl)
    run_device(verl)  # refuses an engine that does not fit the device, before any work
    ray_cluster(verl, os.environ)  # refuses a CPU run asked to join a cluster
    if outputs is None:
        outputs = {
            "model": root / "models" / policy,
            "rollouts": root / "rollouts" / policy,
            "history": root / "plots" / "train" / f"{policy}.csv",
        }
    if dry_run:
        command = build_command(method, config, seed, policy, root, model=model, paths=paths)
        print(command.shell())
        return {}
    from tagrpo.algorithms import get_method
    from tagrpo.plumbing.tracking import log_metrics
    from tagrpo.training.outputs import write_history_csv
    from tagrpo.verl_ext.cost import check_fits
    from tagrpo.verl_ext.data import (
        chat_template_counter,
        check_replaced_share,
        prepare_training_parquet,
        prepare_validation_parquet,
        require_rephrasings,
    )

    model = resolve_model(config, root)
    check_fits(config, model)  # memory per card, refused before any GPU work (naming the key)
    area = work_area(root, policy, config.runtime.verl)
    # The data is prepared beside the work area, which is kept only for the same run.
    prepared = area.root.with_name(f".{area.root.name}.prepared")
    shutil.rmtree(prepared, ignore_errors=True)
    prepared.mkdir(parents=True)

    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model)
    base = train.questions
    stats = prepare_training_parquet(
        root / train.input,
        prepared / paths.train_file.name,
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
        require_rephrasings(prepared / paths.train_file.name, train.n_neighbours, method)
    # verl builds a validation set even when it never validates (trainer.test_freq=-1):
    # a few training questions, q0 only (evaluation is the evaluate stage's).
    prepare_validation_parquet(root / train.input, prepared / paths.val_file.name, VAL_QUESTIONS)

    identity = run_identity(
        method, config, seed, policy, root, model, prepared / paths.train_file.name, data_multiple
    )
    resumption = open_work_area(area, identity, config.runtime.verl.resume)
    print(f"[train:{policy}] verl work area {area.root}: {resumption.reason}")
    shutil.rmtree(area.data, ignore_errors=True)
    os.replace(prepared, area.data)
    log_metrics(stats.as_metrics())

    if not resumption.finished:
        import mlflow

        # The train stage opened the MLflow run (tagged like the local backend's); verl's own
        # logger writes into it through MLFLOW_RUN_ID. Steps of earlier attempts go in too.
        mlflow_run = mlflow.active_run()
        run_id = mlflow_run.info.run_id if mlflow_run is not None else None
        for record in read_metrics_log(area.resumed_log):
            step = int(record["step"])
            log_metrics({k: v for k, v in record.items() if k != "step"}, step=step)
        # Ray's sessions and every verl process's TMPDIR in a private temp dir, removed at the
        # end whatever happens (tagrpo/verl_ext/process.py).
        temp_dir = private_temp_dir()
        started, returncode = time.perf_counter(), 1
        try:
            command = build_command(
                method, config, seed, policy, root, model, run_id, paths, temp_dir
            )
            print(command.shell())
            run = runner or run_isolated
            run(command.argv, env={**os.environ, **command.env}, cwd=str(root), check=True)
            returncode = 0
        finally:
            record_attempt(area, resumption.step, time.perf_counter() - started, returncode)
            remove_temp_dir(temp_dir)
        if not (area.model / "config.json").exists():
            raise RuntimeError(f"verl finished but exported no policy to {area.model}")
    history = read_metrics_log(area.resumed_log, area.metrics_log)
    if not resumption.finished:
        mark_finished(area, len(history))
    link_tree(area.model, Path(outputs["model"]))
    link_tree(area.rollouts, Path(outputs["rollouts"]))  # dumps only at checkpoint steps
    done = attempts(area)
    seconds = float(sum(attempt["seconds"] for attempt in done))
    summary = summarize(history, {}, seconds) if summarize else {"steps": len(history)}
    summary.update(
        {
            "train_seconds": seconds,
            "attempts": float(len(done)),
            "resumed_from_step": float(resumption.step),
            **stats.as_metrics(),
        }
    )
    write_history_csv(history, Path(outputs["history"]))
    return summary
