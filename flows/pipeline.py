"""The pipeline as a Prefect flow with typed parameters: rerun the DAG with a profile, subsets of
methods and seeds, and validated ``key=value`` overrides, from the Prefect UI or a schedule.

DVC stays the owner of the DAG and the cache. The flow resolves the parameters into a complete
params file (:mod:`tagrpo.pipeline.rerun`; an invalid override stops the run before anything
runs) and never edits the checkout's params.yaml:

* ``mode: scratch`` (default): the DAG runs in a copy under ``.tagrpo/runs/<name>`` holding the
  checkout's outputs, so DVC reruns only what the new params change; one Prefect task per DVC
  stage (``dvc repro -s <stage>`` in ``dvc dag`` order, each waiting for its upstream stages:
  the flow-run graph is DVC's), each with its own logs (dvc's and the stage's output, progress
  included), duration, retries and state; "stage i of n done" and a progress artifact;
* ``mode: experiment``: ``dvc exp run --temp -S key=value ...`` for every changed key, one task;
  the experiment is listed by ``dvc exp show`` in the checkout;
* ``mode: workspace``: the checkout itself, per-stage tasks, only when nothing is changed
  (the scheduled "reproduce what params.yaml says").

One MLflow parent run per flow run (tags: profile, model, backend, the Prefect flow run; the
exact resolved params as the ``params.yaml`` artifact, also a Prefect artifact); every stage
run nests under it.

    python -m flows.pipeline run [--profile smoke] [--method M ...] [--seed S ...]
                                 [--set key=value ...] [--force] [--mode scratch]
    python -m flows.pipeline serve [--name rerun] [--cron "0 3 * * *"]   # needs a server:
        make prefect-server; PREFECT_API_URL=http://127.0.0.1:4200/api (make prefect-deploy)
"""

import argparse
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from prefect import flow, get_run_logger, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.runtime import flow_run
from pydantic import AfterValidator, Field, StringConstraints, WithJsonSchema

from flows.interrupts import (
    chain_sigterm,
    forget_child,
    install_handlers,
    interrupted,
    owner_tag,
    prefect_api,
    start_child,
)
from tagrpo.algorithms import METHODS
from tagrpo.config.params import ConfigError, validate_params
from tagrpo.pipeline.rerun import (
    RUNS_DIR,
    RerunRequest,
    changed_leaves,
    dvc_binary,
    prepare_scratch,
    profile_help,
    profile_names,
    read_yaml_mapping,
    resolve_params,
    set_param_arguments,
    stage_graph,
)
from tagrpo.plumbing.config_model import (
    KEY_SHAPE_PATTERN,
    mask_key_shapes,
    redact_secrets,
    secret_shaped_leaves,
)
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import (
    PARENT_RUN_ENV,
    checkout_experiment,
    open_store,
    owner_tags,
    redact_tree,
    safe_tags,
    tracking_uri,
)

# The UI form's choices, read when the deployment is created (redeploy to list a new profile);
# the docstring of `pipeline` names each delta profile with the base it is merged onto. The
# checkout is this file's (not the cwd's: a process that imports the flow from inside another
# project, a test's scratch copy, would otherwise offer that project's profiles).
CHECKOUT = project_root(Path(__file__).resolve().parent)
PROFILE_HELP = profile_help(CHECKOUT)
ProfileName = Literal[tuple(profile_names(CHECKOUT))]  # type: ignore[valid-type]
MethodName = Literal[tuple(METHODS)]  # type: ignore[valid-type]
Seed = Annotated[int, Field(ge=0)]
# key.path=value. A value shaped like an API key is refused by the form and by the server (the
# deployment enforces its parameter schema, whose pattern excludes key shapes) before a flow
# run holding it is stored; pydantic's own pattern engine has no look-ahead, so the flow's
# validation refuses it with a validator of its own.
_OVERRIDE_SHAPE = r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z0-9_]+)*="


def _no_key_shape(value: str) -> str:
    if re.search(KEY_SHAPE_PATTERN, value):
        raise ValueError("looks like an API key: keys belong in the environment, not a parameter")
    return value


Override = Annotated[
    str,
    StringConstraints(pattern=rf"^{_OVERRIDE_SHAPE}"),
    AfterValidator(_no_key_shape),
    WithJsonSchema(
        {"type": "string", "pattern": rf"^(?![\s\S]*{KEY_SHAPE_PATTERN}){_OVERRIDE_SHAPE}"}
    ),
]
Mode = Literal["scratch", "experiment", "workspace"]
# A progress bar redraws with carriage returns: log its latest state at most this often.
_PROGRESS_EVERY_S = 15.0
# A cancelled task's dvc gets this long after SIGTERM to stop its stage, then SIGKILL.
_STOP_GRACE_S = 60.0
_TAIL_LINES = 60
# Terminal control sequences (tqdm moves the cursor up, ESC [ A, to redraw nested bars) and the
# 8-bit CSI: meaningless in a log.
_ESCAPES = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b[@-Z\\-_]|\x9b[0-?]*[ -/]*[@-~]")
# Hints DVC prints after every stage it runs: logged once per flow run (the files its
# "git add ..." names vary from stage to stage: the first is shown).
_DVC_HINTS = (
    "To track the changes with git, run:",
    "git add",
    "To enable auto staging, run:",
    "dvc config core.autostage true",
    "Use `dvc push` to send your updates to remote storage.",
)
# The hints already logged, per flow run (the stage tasks run in the flow's process).
_HINTS_SHOWN: dict[str, set[str]] = {}


def _stage_env(parent_run_id: str | None) -> dict[str, str]:
    """The stages' environment: this interpreter first on PATH (stage commands call
    ``python``), the parent run, progress bars on (the output is a pipe, not a terminal)."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TAGRPO_PROGRESS"] = "1"
    if parent_run_id:
        env[PARENT_RUN_ENV] = parent_run_id
    return env


class OutputLogger:
    """Feeds a subprocess's output to a logger: every line as it completes, and a progress bar
    (redrawn with carriage returns) at most every ``every_s`` seconds; keeps the last lines.

    Terminal escape sequences are removed; DVC's hints are logged the first time only among
    the loggers that share ``hints_shown``."""

    def __init__(
        self, logger: Any, every_s: float = _PROGRESS_EVERY_S, hints_shown: set[str] | None = None
    ) -> None:
        self.logger = logger
        self.every_s = every_s
        self.pending = ""
        self.last_progress = -every_s
        self.tail: list[str] = []
        self.hints_shown = set() if hints_shown is None else hints_shown

    def feed(self, text: str) -> None:
        self.pending += _ESCAPES.sub("", text).replace("\r\n", "\n")
        while True:
            found = [i for i in (self.pending.find("\n"), self.pending.find("\r")) if i >= 0]
            cut = min(found, default=-1)
            if cut < 0:
                return
            piece, separator = self.pending[:cut].strip(), self.pending[cut]
            self.pending = self.pending[cut + 1 :]
            if not piece:
                continue
            if separator == "\n":
                self._emit(piece)
            elif time.monotonic() - self.last_progress >= self.every_s:
                self.last_progress = time.monotonic()
                self._emit(piece)

    def close(self) -> None:
        if self.pending.strip():
            self._emit(self.pending.strip())
        self.pending = ""

    def _emit(self, line: str) -> None:
        self.tail = [*self.tail[-_TAIL_LINES:], line]
        hint = "git add" if line.startswith("git add ") else line
        if hint in _DVC_HINTS:
            if hint in self.hints_shown:
                return
            self.hints_shown.add(hint)
        self.logger.info(line)


def _hints_shown() -> set[str]:
    return _HINTS_SHOWN.setdefault(str(flow_run.get_id() or ""), set())


def stream_command(command: list[str], cwd: Path, env: dict[str, str], logger: Any) -> list[str]:
    """Run ``command`` with its output streamed to ``logger``; the last lines, or RuntimeError
    with them if it fails."""
    output = OutputLogger(logger, hints_shown=_hints_shown())
    process = start_child(command, cwd, env)  # its own process group: see flows/interrupts.py
    assert process.stdout is not None
    try:
        while chunk := process.stdout.read1(65536):
            output.feed(chunk.decode(errors="replace"))
        code = process.wait()
    finally:
        if process.poll() is None:  # the task was cancelled: stop dvc (it stops its stage)
            process.terminate()  # the shim leading dvc's group sends the group SIGINT
            try:
                process.wait(timeout=_STOP_GRACE_S)  # from the SIGTERM
            except subprocess.TimeoutExpired:
                # A dvc left running would hold the stage's outputs and lock.
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        forget_child(process)
    output.close()
    if code != 0 and (signum := interrupted()) is not None:
        raise RuntimeError(
            f"{' '.join(command)} stopped (exit {code}): the flow was interrupted by "
            f"{signal.Signals(signum).name}:\n" + "\n".join(output.tail[-10:])
        )
    if code != 0:
        raise RuntimeError(f"{' '.join(command)} exited {code}:\n" + "\n".join(output.tail[-30:]))
    return output.tail


def _not_interrupted(task: Any, task_run: Any, state: Any) -> bool:
    """Retry a failed stage, unless the flow is stopping (Ctrl-C, SIGTERM)."""
    return interrupted() is None


@task(
    name="dvc-stage",
    task_run_name="{stage}",
    retries=1,
    retry_delay_seconds=10,
    retry_condition_fn=_not_interrupted,
)
def dvc_stage(stage: str, root: str, parent_run_id: str | None, force: bool = False) -> str:
    """``dvc repro -s <stage>``: "ran" or "unchanged" (DVC found nothing to redo)."""
    command = [dvc_binary(), "repro", "--single-item", *(["--force"] if force else []), stage]
    tail = stream_command(command, Path(root), _stage_env(parent_run_id), get_run_logger())
    text = "\n".join(tail)
    unchanged = "didn't change, skipping" in text or "is cached - skipping" in text
    return "unchanged" if unchanged and "Running stage" not in text else "ran"


@task(name="dvc-experiment", task_run_name="dvc exp run {name}")
def dvc_experiment(name: str, root: str, set_args: list[str], parent_run_id: str) -> str:
    """``dvc exp run --temp -n <name> -S ...`` in the checkout (its params.yaml untouched)."""
    command = [dvc_binary(), "exp", "run", "--temp", "-n", name, *set_args]
    stream_command(command, Path(root), _stage_env(parent_run_id), get_run_logger())
    return name


@task(name="scratch-copy")
def scratch_copy(source: str, target: str, resolved: dict[str, Any], message: str) -> str:
    commit = prepare_scratch(Path(source), Path(target), resolved, message)
    get_run_logger().info("scratch copy %s at commit %s", target, commit)
    return commit


def run_stages(root: Path, parent_run_id: str, force: bool) -> dict[str, str]:
    """One ``dvc-stage`` task per DVC stage, one at a time in ``dvc dag`` order (stages of one
    repo cannot run concurrently); each waits for its upstream stages, so the flow-run graph
    draws DVC's edges. Progress: a log line and the ``progress`` artifact after each stage."""
    logger = get_run_logger()
    order, edges = stage_graph(root)
    upstream: dict[str, list[str]] = {name: [] for name in order}
    for source, target in edges:
        upstream[target].append(source)
    logger.info("%d DVC stages to check, in this order: %s", len(order), ", ".join(order))
    progress = create_progress_artifact(
        0.0, key="progress", description=f"DVC stages done of {len(order)}"
    )
    futures: dict[str, Any] = {}
    outcomes: dict[str, str] = {}
    for done, name in enumerate(order, 1):
        # Futures, not states: Prefect would also walk a state's result, and the string "ran"
        # (one object for every task that ran) would link the stage to the last one that ran.
        futures[name] = dvc_stage.submit(
            name,
            str(root),
            parent_run_id,
            force,
            wait_for=[futures[source] for source in upstream[name]],
        )
        outcomes[name] = futures[name].result()  # one at a time; a stage's error fails the flow
        ran = sum(outcome == "ran" for outcome in outcomes.values())
        logger.info(
            "stage %d of %d done: %s (%s); %d ran, %d unchanged, %d left",
            done,
            len(order),
            name,
            outcomes[name],
            ran,
            done - ran,
            len(order) - done,
        )
        update_progress_artifact(progress, 100.0 * done / len(order))
    return outcomes


def _yaml(params: dict[str, Any]) -> str:
    return yaml.safe_dump(redact_tree(params), sort_keys=False, width=100)


def _open_parent_run(
    request: RerunRequest,
    mode: str,
    resolved: dict[str, Any],
    changes: dict[str, Any],
    log: Callable[[str], None],
) -> tuple[Any, str]:
    """The flow's MLflow parent run, with the request and the exact resolved params; first,
    runs left RUNNING by processes that are gone are ended (each said to ``log``)."""
    from tagrpo.pipeline.parent_run import pipeline_tags, reap_dead_runs

    config = validate_params(resolved, "resolved params")
    settings = config.common.tracking
    client = open_store(tracking_uri(settings.uri))
    # Runs an earlier flow or stage left RUNNING when it was killed outright (SIGKILL): KILLED,
    # as mark_orphans_crashed does for its Prefect flow run.
    for line in reap_dead_runs(client, "the next Prefect flow run"):
        log(f"MLflow: {line}")
    experiment_id = checkout_experiment(client, settings.experiment).experiment_id
    name = flow_run.get_name() or "pipeline"
    tags = {
        **pipeline_tags(config, "prefect"),
        **owner_tags(),  # this flow process: the next run ends this run KILLED if it is gone
        "prefect.flow_run_id": str(flow_run.get_id() or ""),
        "prefect.flow_run_name": name,
        "tagrpo.mode": mode,
        "mlflow.note.content": f"Prefect flow run `{name}` ({mode}): {request.describe()}",
    }
    run = client.create_run(
        experiment_id, run_name=mask_key_shapes(f"pipeline {name}"), tags=safe_tags(tags)
    )
    run_id = run.info.run_id
    for key, value in {
        "profile": request.profile,
        "methods": json.dumps(request.methods or []),
        "seeds": json.dumps(request.seeds if request.seeds is not None else []),
        "overrides": json.dumps(request.overrides),
        "force": str(request.force).lower(),
        "mode": mode,
    }.items():
        client.log_param(run_id, key, str(redact_tree(value))[:6000])
    client.log_text(run_id, _yaml(resolved), "params.yaml")
    client.log_dict(run_id, redact_tree(changes), "params_changed.json")
    return client, run_id


def _finish_parent(client: Any, run_id: str, root: Path, status: str) -> dict[str, float]:
    """Headline metrics, dvc.lock and the report on the parent run; then its end state."""
    from tagrpo.plumbing.tracking import flatten_numbers, metric_batch

    metrics: dict[str, float] = {}
    report_metrics = root / "metrics" / "report.json"
    if report_metrics.is_file():
        report = json.loads(report_metrics.read_text())
        metrics = {key: value for key, value in flatten_numbers(report).items() if value == value}
        client.log_batch(run_id, metrics=metric_batch(report))  # pass@k at step k
    for artifact in ("dvc.lock", "reports/report.md"):
        if (root / artifact).is_file():
            client.log_artifact(run_id, str(root / artifact))
    client.set_terminated(run_id, status=status)
    return metrics


def pipeline(
    profile: ProfileName = "current",
    methods: list[MethodName] = [],  # noqa: B006  (a plain list default: a list input in the UI)
    seeds: list[Seed] = [],  # noqa: B006
    overrides: list[Override] = [],  # noqa: B006
    force: bool = False,
    mode: Mode = "scratch",
) -> dict[str, Any]:
    """Run the DVC pipeline with the given params; the checkout's params.yaml is never edited.

    Args:
        profile: PROFILE_HELP.
        methods: train and evaluate only these methods (runs.methods); empty: as the profile.
        seeds: train and evaluate only these seeds (runs.seeds); empty: as the profile.
        overrides: params to change, one "key.path=value" each (value in YAML, e.g.
            "train.learning_rate=2e-4", "evaluate.ks=[1,4]"); only existing keys, validated.
        force: rerun every stage even if DVC finds it up to date (dvc repro --force).
        mode: "scratch": a copy under .tagrpo/runs/ (one task per stage); "experiment": dvc
            exp run --temp (one task, listed by dvc exp show); "workspace": the checkout
            itself, only with no param change.
    """
    logger = get_run_logger()
    chain_sigterm()  # a SIGTERM stops the dvc children before Prefect's engine handles it
    # A run created without the schema check (the API with enforcement off): refused before
    # the value reaches a log, MLflow or an artifact.
    refuse_key_shaped({"profile": profile, "overrides": list(overrides)})
    source = project_root()
    request = RerunRequest(
        profile=profile,
        methods=list(methods) or None,
        seeds=list(seeds) or None,
        overrides=list(overrides),
        force=force,
    )
    resolved = resolve_params(source, request)  # ConfigError: nothing has run yet
    changes = changed_leaves(read_yaml_mapping(source / "params.yaml"), resolved)
    if mode == "workspace" and changes:
        raise ValueError(
            f"mode workspace runs params.yaml as it is, but the request changes {sorted(changes)}:"
            " use mode scratch or experiment"
        )
    logger.info("resolved params: %s; changed keys: %s", request.describe(), sorted(changes))
    create_markdown_artifact(
        "## Resolved params\n\n"
        f"Request: {request.describe()}; mode {mode}.\n\n"
        f"Changed from the checkout's params.yaml: {', '.join(sorted(changes)) or 'none'}.\n\n"
        f"```yaml\n{_yaml(resolved)}```\n",
        key="params",
        description="The exact params this run used (secrets masked)",
    )
    client, parent = _open_parent_run(request, mode, resolved, changes, logger.warning)
    # Stages in a copy would otherwise open the copy's own store (the default is a SQLite file
    # in the checkout they run in): every run of this flow goes to the checkout's store. Put
    # back when the flow ends: a process that runs flows of several checkouts (tests, a served
    # deployment) must not send the next one's runs to this store.
    tracking_before = os.environ.get("MLFLOW_TRACKING_URI")
    os.environ["MLFLOW_TRACKING_URI"] = client.tracking_uri
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    name = f"{stamp}-{flow_run.get_name() or 'run'}"
    root = source
    outcome: dict[str, Any] = {"mode": mode, "mlflow_run_id": parent, "changes": changes}
    status = "FAILED"
    try:
        if mode == "experiment":
            args = set_param_arguments(source, resolved)
            outcome["experiment"] = dvc_experiment(name, str(source), args, parent)
        else:
            if mode == "scratch":
                root = source / RUNS_DIR / name
                outcome["commit"] = scratch_copy(
                    str(source), str(root), resolved, request.describe()
                )
            outcome["stages"] = run_stages(root, parent, force)
            create_table_artifact(
                [{"stage": s, "outcome": o} for s, o in outcome["stages"].items()],
                key="stages",
                description="What DVC did for each stage",
            )
        status = "FINISHED"
    except BaseException:  # Ctrl-C, SIGTERM: the parent run says KILLED, as its stages do
        if interrupted() is not None:
            status = "KILLED"
        raise
    finally:
        _HINTS_SHOWN.pop(str(flow_run.get_id() or ""), None)
        outcome["root"] = str(root)
        outcome["metrics"] = _finish_parent(client, parent, root, status)
        if tracking_before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = tracking_before
    report = root / "reports" / "report.md"
    if mode != "experiment" and report.is_file():
        create_markdown_artifact(report.read_text(), key="report", description=str(report))
    return outcome


def refuse_key_shaped(parameters: dict[str, Any]) -> None:
    """:class:`ConfigError` naming each parameter whose value is shaped like an API key (the
    value redacted): a secret goes in the environment, never in a parameter, which Prefect
    stores and shows to everyone with access."""
    found = secret_shaped_leaves(parameters)
    if found:
        raise ConfigError(
            "flow parameters",
            [
                f"{name}: looks like an API key; keys belong in the environment (the endpoint "
                "names the variable that holds it), never in a parameter"
                for name in found
            ],
        )


# The form's description of ``profile`` names each delta profile with its base (Prefect reads
# the docstring when the flow is made, so it is filled in first).
pipeline.__doc__ = (pipeline.__doc__ or "").replace("PROFILE_HELP", PROFILE_HELP)
pipeline = flow(name="tagrpo-pipeline", log_prints=True)(pipeline)


def _serve(name: str, cron: str | None) -> None:
    """Create (or update) the deployment and serve its runs; a schedule only with ``cron``."""
    if not os.environ.get("PREFECT_API_URL"):
        raise SystemExit(
            "serving needs a Prefect server: run `make prefect-server` and export "
            "PREFECT_API_URL=http://127.0.0.1:4200/api (make prefect-deploy does both)"
        )
    pipeline.serve(
        name=name,
        cron=cron or None,
        description="Rerun the tagrpo DVC pipeline with a profile, methods, seeds and overrides",
        tags=["tagrpo"],
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m flows.pipeline")
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the flow once (ephemeral server if none)")
    run.add_argument(
        "--profile", default="current", choices=profile_names(project_root()), help=PROFILE_HELP
    )
    run.add_argument("--method", action="append", default=[], choices=list(METHODS))
    run.add_argument("--seed", action="append", default=[], type=int)
    run.add_argument("--set", action="append", default=[], dest="overrides", metavar="KEY=VALUE")
    run.add_argument("--force", action="store_true")
    run.add_argument("--mode", default="scratch", choices=["scratch", "experiment", "workspace"])
    serve = commands.add_parser("serve", help="create the deployment and serve its runs")
    serve.add_argument("--name", default="rerun", help="deployment name (default rerun)")
    serve.add_argument(
        "--cron", default=None, help='a schedule, e.g. "0 3 * * *" (default: none, runs on demand)'
    )
    args = parser.parse_args(argv)
    if args.command == "serve":
        _serve(args.name, args.cron)
        return
    # Checked before the flow run exists: Prefect would store (and its UI show) the parameters
    # of a run, including a refused one.
    try:
        refuse_key_shaped({"profile": args.profile, "overrides": list(args.overrides)})
        resolve_params(
            project_root(),
            RerunRequest(
                profile=args.profile,
                methods=list(args.method) or None,
                seeds=list(args.seed) or None,
                overrides=list(args.overrides),
            ),
        )
    except ConfigError as error:
        print(f"python -m flows.pipeline run: {redact_secrets(str(error))}", file=sys.stderr)
        raise SystemExit(2) from None
    code = _run_once(args)
    if code:
        raise SystemExit(code)


def _run_once(args: argparse.Namespace) -> int:
    """The flow once, on the configured server or a temporary one this process owns; Ctrl-C,
    SIGTERM and SIGHUP end it promptly with its runs recorded (flows/interrupts.py). The exit
    status: 0, or 128 + the signal."""
    from prefect import tags
    from prefect.exceptions import TerminationSignal

    install_handlers()
    try:
        with prefect_api():
            with tags(owner_tag()):
                outcome = pipeline(
                    profile=args.profile,
                    methods=args.method,
                    seeds=args.seed,
                    overrides=args.overrides,
                    force=args.force,
                    mode=args.mode,
                )
            print(json.dumps(outcome, indent=1, sort_keys=True, default=str))
            return 0
    except (KeyboardInterrupt, TerminationSignal):
        signum = interrupted()
        if signum is None:
            raise
        print(
            f"tagrpo: the flow was stopped by {signal.Signals(signum).name}; its Prefect flow run"
            " is recorded as crashed and its MLflow parent run as KILLED",
            file=sys.stderr,
        )
        return 128 + signum


if __name__ == "__main__":
    main()
