"""One MLflow run per stage execution, nested under the pipeline's parent run.

:func:`stage_run` opens the run :func:`tagrpo.pipeline.runtime.running_stage` wraps a stage in:
tagged as :mod:`tagrpo.pipeline.tracking` describes, nested under the run of
:func:`tagrpo.pipeline.parent_run.parent_run_for_stage` (the Prefect flow's or dvc's), and
ended FINISHED, FAILED or KILLED with the stage. It lives apart from ``tracking`` so that the
parent run can use the store's helpers without the two modules importing each other.
"""

from __future__ import annotations

import contextlib
import os
import socket
from collections.abc import Iterator, Mapping
from typing import Any

from tagrpo.pipeline.dvc_stages import deps_hash
from tagrpo.pipeline.parent_run import parent_run_for_stage
from tagrpo.pipeline.tracking import (
    CHECKOUT_TAG,
    KEY_PARAMS,
    PARAMS_ARTIFACT,
    checkout_experiment,
    checkout_id,
    flatten_params,
    git_state,
    log_params_artifact,
    mark_stale_runs_killed,
    model_label,
    open_store,
    tracking_errors,
    tracking_uri,
)


@contextlib.contextmanager
def stage_run(
    stage: str,
    config: Any,
    *,
    key: str | None = None,
    run_name: str | None = None,
    tags: Mapping[str, str] | None = None,
    log_sections: tuple[str, ...] = (),
    run_params: Mapping[str, Any] | None = None,
    dvc_name: str | None = None,
) -> Iterator[Any]:
    """An MLflow run for one stage execution (nested under the orchestrator's run, if any).

    ``dvc_name`` is DVC's name of the stage (``train@grpo-0``; default ``stage@key``).

    ``config`` is the validated :class:`tagrpo.config.params.Params`; ``log_sections`` names
    the sections logged as params (``common`` always), ``run_params`` adds run-specific ones.
    With ``common.tracking.enabled: false`` the run is skipped with a message; a failing store
    raises :class:`TrackingError`. An interrupted stage (Ctrl-C, SIGTERM) ends its run KILLED.
    """
    import mlflow  # heavy: loaded when a run is opened, not when a stage imports this

    settings = config.common.tracking
    if not settings.enabled:
        print(f"[tracking] disabled in params: no MLflow run for stage {stage}")
        yield None
        return
    uri = tracking_uri(settings.uri)
    client = open_store(uri)
    mlflow.set_tracking_uri(uri)
    experiment = checkout_experiment(client, settings.experiment)
    dvc_key = dvc_name or (f"{stage}@{key}" if key else stage)
    with tracking_errors("starting the stage's run", uri):
        mlflow.set_experiment(experiment_id=experiment.experiment_id)
        stale = mark_stale_runs_killed(client, experiment.experiment_id, dvc_key)
        if stale:
            print(
                f"[tracking] marked {stale} run(s) of {dvc_key} left RUNNING by a dead process "
                "KILLED"
            )
        run_tags = {
            "stage": stage,
            "profile": config.common.profile,
            "model": model_label(config),
            "backend": _stage_backend(stage, config),
            "tagrpo.dvc_stage": dvc_key,
            "tagrpo.deps_hash": deps_hash(dvc_key),
            "tagrpo.host": socket.gethostname(),
            "tagrpo.pid": str(os.getpid()),
            CHECKOUT_TAG: checkout_id(),
            **git_state(),
            **(tags or {}),
        }
        parent = parent_run_for_stage(client, experiment.experiment_id, config)
        run = mlflow.start_run(run_name=run_name or dvc_key, parent_run_id=parent, tags=run_tags)
    try:
        with tracking_errors("logging the stage's params", uri):
            logged = {"common": config.common.model_dump(mode="json")}
            for section in log_sections:
                logged[section] = config.section(section).model_dump(mode="json")
            flat = flatten_params(logged)
            columns = {name: flat[name] for name in KEY_PARAMS if name in flat}
            # Run-specific values (a policy's step count...) are few: all of them are columns.
            columns.update(flatten_params(dict(run_params or {})))
            mlflow.log_params(columns)
            log_params_artifact(client, run.info.run_id, logged, PARAMS_ARTIFACT)
        yield run
    except (KeyboardInterrupt, SystemExit):
        _end_run("KILLED")
        raise
    except BaseException:
        _end_run("FAILED")
        raise
    else:
        with tracking_errors("ending the stage's run", uri):
            mlflow.end_run(status="FINISHED")


def _end_run(status: str) -> None:
    """End the active run after a failure; a store that fails too must not hide the failure."""
    import mlflow  # heavy: see stage_run

    try:
        mlflow.end_run(status=status)
    except Exception as error:  # the stage's own error is the one to report
        print(f"[tracking] could not mark the run {status}: {type(error).__name__}: {error}")


def _stage_backend(stage: str, config: Any) -> str:
    """The engine a stage's numbers come from: its section's ``backend`` where it has one
    (train: local | verl; evaluate, diagnostics: hf | vllm; rephrase), else ``local``."""
    if stage in ("train", "evaluate", "diagnostics", "rephrase"):
        return str(config.section(stage).backend)
    return "local"
