"""One MLflow run per stage execution, nested under the pipeline's parent run.

:func:`stage_run` opens the run :func:`tagrpo.pipeline.runtime.running_stage` wraps a stage in:
tagged as :mod:`tagrpo.plumbing.tracking` describes, nested under the run of
:func:`tagrpo.pipeline.parent_run.parent_run_for_stage` (the Prefect flow's or dvc's), and
ended FINISHED, FAILED or KILLED with the stage. It lives apart from ``tracking`` so that the
parent run can use the store's helpers without the two modules importing each other.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from tagrpo.pipeline.parent_run import ERROR_TAG, EXIT_CODE_TAG, parent_run_for_stage
from tagrpo.plumbing.config_model import mask_key_shapes
from tagrpo.plumbing.dvc_stages import deps_hash
from tagrpo.plumbing.tracking import (
    CHECKOUT_TAG,
    KEY_PARAMS,
    PARAMS_ARTIFACT,
    checkout_experiment,
    checkout_id,
    dead_owner_runs,
    flatten_params,
    git_state,
    log_params_artifact,
    mark_run_killed,
    model_label,
    open_store,
    owner_tags,
    safe_tags,
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
    _ENDED_RUN.clear()
    with tracking_errors("starting the stage's run", uri):
        mlflow.set_experiment(experiment_id=experiment.experiment_id)
        # Any run of this host left RUNNING by a process that is gone (a SIGKILLed stage or
        # flow); dvc's orphaned parent runs are ended by parent_run_for_stage below.
        for dead, why in dead_owner_runs(client):
            mark_run_killed(client, dead.info.run_id, f"{why} (found by stage {dvc_key})")
            print(f"[tracking] run {dead.info.run_name!r} ({dead.info.run_id}) KILLED: {why}")
        run_tags = {
            "stage": stage,
            "profile": config.common.profile,
            "model": model_label(config),
            "backend": _stage_backend(stage, config),
            "tagrpo.dvc_stage": dvc_key,
            "tagrpo.deps_hash": deps_hash(dvc_key),
            **owner_tags(),
            CHECKOUT_TAG: checkout_id(),
            **git_state(),
            **(tags or {}),
        }
        parent = parent_run_for_stage(client, experiment.experiment_id, config)
        run = mlflow.start_run(
            run_name=mask_key_shapes(run_name or dvc_key),
            parent_run_id=parent,
            tags=safe_tags(run_tags),
        )
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
    except (KeyboardInterrupt, SystemExit) as error:
        _end_run("KILLED", run.info.run_id, uri, error)
        raise
    except BaseException as error:
        _end_run("FAILED", run.info.run_id, uri, error)
        raise
    else:
        with tracking_errors("ending the stage's run", uri):
            mlflow.end_run(status="FINISHED")


# The run this process ended FAILED or KILLED, if any: (tracking URI, run id). The stage's
# entry point (tagrpo.pipeline.runtime.run_main) then tags it with the exit status; a stage that
# fails before its run starts gets a FAILED run of its own (record_stage_failure).
_ENDED_RUN: dict[str, str] = {}


def error_line(error: BaseException) -> str:
    """One line naming an error, key-shaped parts redacted (for tags, notes and messages)."""
    if isinstance(error, SystemExit):
        text = error.code if isinstance(error.code, str) else f"exit status {error.code}"
    else:
        text = f"{type(error).__name__}: {error}"
    first = next((line.strip() for line in str(text).splitlines() if line.strip()), "")
    return mask_key_shapes(first)[:1000]


def _end_run(status: str, run_id: str, uri: str, error: BaseException) -> None:
    """End the active run after a failure, tagged with the error; a store that fails too must
    not hide the failure."""
    import mlflow  # heavy: see stage_run

    try:
        mlflow.set_tag(ERROR_TAG, error_line(error))
        mlflow.end_run(status=status)
        _ENDED_RUN.update(uri=uri, run_id=run_id)
    except Exception as failure:  # the stage's own error is the one to report
        print(f"[tracking] could not mark the run {status}: {type(failure).__name__}: {failure}")


def record_stage_failure(
    stage: str, exit_code: int, error: BaseException, status: str = "FAILED"
) -> str | None:
    """Make a stage's failure visible in MLflow; returns the run id (None: not recorded).

    A run this process already ended FAILED or KILLED is tagged with the exit status. A stage
    that failed before its run started (invalid params, its lock held, an input that differs
    from dvc.lock, an argument error) gets a run of its own, ended ``status``, nested under the
    pipeline's parent run as any stage run (which this opens if it is the invocation's first),
    so the parent ends FAILED naming it. Never raises: the stage's own error is the one to
    report.
    """
    try:
        if _ENDED_RUN:
            client = open_store(_ENDED_RUN["uri"])
            client.set_tag(_ENDED_RUN["run_id"], EXIT_CODE_TAG, str(exit_code))
            return _ENDED_RUN["run_id"]
        return _failed_run(stage, exit_code, error, status)
    except Exception as failure:
        print(
            f"[tracking] could not record the failure of stage {stage} in MLflow: "
            f"{type(failure).__name__}: {mask_key_shapes(str(failure))[:300]}"
        )
        return None


def _tracking_settings() -> tuple[Any, bool, str | None, str]:
    """(the validated params or None, tracking enabled, store, experiment): from params.yaml,
    or as far as a file that does not validate tells them (else the defaults)."""
    from tagrpo.config.params import load_config, read_yaml_mapping
    from tagrpo.plumbing.paths import project_root

    try:
        config = load_config()
        settings = config.common.tracking
        return config, settings.enabled, settings.uri, settings.experiment
    except Exception:  # invalid params: what they say about tracking, if anything
        try:
            raw = read_yaml_mapping(project_root() / "params.yaml")
            tracking = (raw.get("common") or {}).get("tracking") or {}
        except Exception:
            tracking = {}
        tracking = tracking if isinstance(tracking, Mapping) else {}
        experiment = tracking.get("experiment")
        return (
            None,
            tracking.get("enabled", True) is not False,
            tracking.get("uri") if isinstance(tracking.get("uri"), str) else None,
            experiment if isinstance(experiment, str) and experiment else "tagrpo",
        )


def _failed_run(stage: str, exit_code: int, error: BaseException, status: str) -> str | None:
    config, enabled, configured, experiment_name = _tracking_settings()
    if not enabled:
        return None
    uri = tracking_uri(configured)
    client = open_store(uri)
    experiment = checkout_experiment(client, experiment_name)
    dvc_key = os.environ.get("DVC_STAGE") or stage
    parent = parent_run_for_stage(client, experiment.experiment_id, config)
    line = error_line(error)
    tags = {
        "stage": stage,
        "profile": config.common.profile if config is not None else "unknown",
        "tagrpo.dvc_stage": dvc_key,
        **owner_tags(),
        CHECKOUT_TAG: checkout_id(),
        **git_state(),
        EXIT_CODE_TAG: str(exit_code),
        ERROR_TAG: line,
        "mlflow.note.content": (
            f"Stage {dvc_key} stopped (exit status {exit_code}) before its run started: {line}"
        ),
    }
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = client.create_run(
        experiment.experiment_id,
        run_name=mask_key_shapes(f"{dvc_key} · {status.lower()}"),
        tags=safe_tags(tags),
    )
    client.set_terminated(run.info.run_id, status=status)
    return run.info.run_id


def _stage_backend(stage: str, config: Any) -> str:
    """The engine a stage's numbers come from: its section's ``backend`` where it has one
    (train: local | verl; evaluate, diagnostics: hf | vllm; rephrase), else ``local``."""
    if stage in ("train", "evaluate", "diagnostics", "rephrase"):
        return str(config.section(stage).backend)
    return "local"
