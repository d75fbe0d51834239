"""MLflow tracking: one run per stage execution, tagged with the git commit and the params.

The store is a SQLite file at an absolute path in the user's checkout (``dvc exp`` runs
stages in temporary copies, so a relative URI would scatter runs). When a Prefect flow
orchestrates ``dvc repro`` it opens a parent run and passes its id in
``TAGRPO_PARENT_RUN_ID``; stage runs then nest under it across processes.

A plain ``dvc repro`` gets a parent run too: the first stage opens one keyed by the dvc
process and later stages nest under it (:mod:`tagrpo.pipeline.parent_run`).

Each run carries what ties it to its DVC outputs (``tagrpo.dvc_stage``, the DVC name such as
``train@grpo-0``, and ``tagrpo.deps_hash``, a hash of the stage's dependencies and params) and
which process owns it (``tagrpo.host``, ``tagrpo.pid`` and ``tagrpo.pid_start``, the process's
start time, so a reused pid is not taken for it; on the parent runs too): a run left RUNNING by a
process that is gone (``kill -9``, a power cut) is ended KILLED, the reason in
``tagrpo.killed_reason``, by the next stage that starts, the next Prefect flow run and ``tagrpo
verify`` (:func:`dead_owner_runs`; another host's runs cannot be checked from here). Runs are
tagged ``stage``, ``profile``, ``model`` and ``backend`` (and ``method``/``seed``/``policy`` for
train and evaluate), so one filter such as ``tags.method = 'ta_grpo' and tags.stage =
'evaluate'`` finds a method's runs across seeds.

Only a short list of key params (:data:`KEY_PARAMS`) is logged as MLflow params, so the compare
view stays readable; every value of the stage's sections is in the run's ``params.json``
artifact. pass@k is one metric per benchmark or group, ``pass_at_k/<name>``, with step = k, so
MLflow draws it as a curve over k (one key per name, not one per name and k). A nested key
keeps one '/' (the rest become '.'), so MLflow's chart view, which makes a section of a name's
prefix up to its last '/', groups a run's charts in its few top-level sections. Key-shaped
values are never logged.

Several checkouts may share one store (``MLFLOW_TRACKING_URI``). Every run is tagged with its
checkout (``tagrpo.checkout``, host and path), and each checkout's artifacts stay in its own
``mlruns/``: the configured experiment belongs to the checkout that created it, another checkout
logs to ``<experiment> @ <checkout>`` (:func:`checkout_experiment`). Creating a fresh SQLite
store is serialised by a file lock (two stages creating its tables at once break MLflow's
migrations). Any other tracking failure ends the stage with a one-line cause
(:class:`TrackingError`): a stage missing from the store would let ``tagrpo compare`` show
stale results.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import socket
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from tagrpo.plumbing.config_model import looks_like_secret, mask_key_shapes
from tagrpo.plumbing.dvc_stages import pipeline_outputs
from tagrpo.plumbing.paths import checkout_root, home_root, resolve_path
from tagrpo.plumbing.procfs import pid_alive, proc_stat, process_alive

# mlflow, requests and sqlalchemy are imported inside the functions that use them: heavy, and a
# stage or ``tagrpo params check`` that logs nothing must not load them.

PARENT_RUN_ENV = "TAGRPO_PARENT_RUN_ID"
DEFAULT_EXPERIMENT = "tagrpo"
REDACTED = "***"
PARAMS_ARTIFACT = "params.json"
# The params shown as columns in MLflow (when the stage logs their section); the rest of the
# stage's sections goes to the params.json artifact. Dotted names as in params.yaml.
KEY_PARAMS: tuple[str, ...] = (
    "common.profile",
    "common.seed",
    "data.source",
    "base_model.kind",
    "rephrase.backend",
    "rephrase.n",
    "train.backend",
    "train.learning_rate",
    "train.epochs",
    "train.steps",
    "train.questions",
    "train.batch_questions",
    "train.group_size",
    "train.n_neighbours",
    "train.kl_coef",
    "train.max_new_tokens",
    "evaluate.backend",
    "evaluate.n",
    "evaluate.n_trained",
    "evaluate.ks",
    "evaluate.temperature",
    "evaluate.top_p",
    "evaluate.max_new_tokens",
    "diagnostics.backend",
    "diagnostics.questions",
    "diagnostics.group_size",
    "diagnostics.n_neighbours",
)
PASS_AT_K_PREFIX = "pass_at_k/"
CHECKOUT_TAG = "tagrpo.checkout"
# The process that owns a run (the stage, the Prefect flow, dvc for dvc's parent run): host,
# pid and its start time after boot in clock ticks; a run still RUNNING whose owner is gone is
# ended KILLED with the reason in KILLED_REASON_TAG.
HOST_TAG = "tagrpo.host"
PID_TAG = "tagrpo.pid"
PID_START_TAG = "tagrpo.pid_start"
KILLED_REASON_TAG = "tagrpo.killed_reason"
# On dvc's parent runs (tagrpo.pipeline.parent_run.PIPELINE_KEY_TAG): ended by that module.
DVC_PIPELINE_KEY_TAG = "tagrpo.pipeline_key"
# What the MLflow UI shows for the experiment: runs, charts and models, not the GenAI overview.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
# ``<benchmark or group>/pass@<k>`` (the metrics files' keys) -> ``pass_at_k/<name>`` at step k.
_PASS_AT_K = re.compile(r"^(?P<name>.+)/pass@(?P<k>\d+)$")
# Keys whose values are secrets whatever they look like.
_SECRET_KEY = re.compile(r"(api[_-]?key|secret|password|token)$", re.IGNORECASE)


def tracking_uri(configured: str | None = None) -> str:
    """``MLFLOW_TRACKING_URI`` if set, else a SQLite store at an absolute path in the checkout."""
    if os.environ.get("MLFLOW_TRACKING_URI"):
        return os.environ["MLFLOW_TRACKING_URI"]
    if configured and "://" in configured:
        return configured
    database = resolve_path(configured or "mlflow.db", base=home_root())
    return f"sqlite:///{database}"


class TrackingError(RuntimeError):
    """The tracking store failed; the message is one line naming the store and the operation."""


@contextlib.contextmanager
def tracking_errors(doing: str, uri: str | None = None) -> Iterator[None]:
    """Turn a failure of the store (MLflow, database, HTTP, artifact files) into a
    :class:`TrackingError` whose one-line message names ``doing`` and the store."""
    import mlflow
    import requests
    import sqlalchemy.exc
    from mlflow.exceptions import MlflowException

    failures = (MlflowException, sqlalchemy.exc.SQLAlchemyError, requests.RequestException, OSError)
    try:
        yield
    except failures as error:
        where = uri or mlflow.get_tracking_uri()
        raise TrackingError(
            f"MLflow tracking failed {doing} ({where}): {store_failure(error)}"
        ) from error


def store_failure(error: BaseException) -> str:
    """The one-line cause of a store failure: its first informative line (SQLAlchemy's
    "raised as a result of Query-invoked autoflush" preamble skipped) and, for a full disk and
    a store left half-migrated by one, what to do."""
    text = str(error)
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    informative = [line for line in lines if not line.startswith("(raised as a result of")]
    cause = f"{type(error).__name__}: {(informative or lines or [''])[0][:300]}"
    if "_alembic_tmp_" in text:
        cause += (
            "; an MLflow schema migration of this store was interrupted (a full disk?) and left "
            "its temporary table: drop it (sqlite3 <store> 'DROP TABLE _alembic_tmp_<name>') "
            "and rerun, or move the store aside to start a new one"
        )
    elif "disk is full" in text or "No space left" in text:
        cause += "; free space on the store's disk and rerun (the stage committed no output)"
    return cause


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///`` URI (None for any other store)."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(uri.removeprefix("sqlite:///").split("?", 1)[0])


def open_store(uri: str) -> Any:
    """An ``MlflowClient`` on ``uri`` whose store exists (tables created and migrated).

    MLflow creates a fresh SQLite store's tables without a lock: two stages of two pipelines
    doing it at once break its migrations (``CircularDependencyError``, ``duplicate column``,
    ``table _alembic_tmp_metrics already exists``). Here the first use of a SQLite store in a
    process holds an exclusive lock on ``<db>.lock`` beside it; a server creates its own.
    """
    from mlflow.tracking import MlflowClient

    database = sqlite_path(uri)
    with tracking_errors("opening the store", uri):
        if database is None:
            client = MlflowClient(tracking_uri=uri)
            client.search_experiments(max_results=1)
            return client
        database.parent.mkdir(parents=True, exist_ok=True)
        with open(database.with_name(database.name + ".lock"), "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                client = MlflowClient(tracking_uri=uri)  # creates the tracking tables
                client.search_experiments(max_results=1)
                client.search_registered_models(max_results=1)  # and the registry's
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    return client


def checkout_id(root: Path | None = None) -> str:
    """What ``tagrpo.checkout`` says: ``host:/abs/path`` of the checkout."""
    return f"{socket.gethostname()}:{root or checkout_root()}"


def checkout_label(root: Path | None = None) -> str:
    """A short readable name of a checkout: ``<folder>-<hash of host and path>``."""
    root = root or checkout_root()
    digest = hashlib.sha256(checkout_id(root).encode()).hexdigest()[:8]
    return f"{root.name}-{digest}"


def _artifact_root(root: Path, experiment: str) -> str:
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", experiment).strip("_") or "experiment"
    return (root / "mlruns" / safe).as_uri()


def _local_path(location: str) -> Path | None:
    if location.startswith("file://"):
        return Path(location.removeprefix("file://"))
    if location.startswith("/"):
        return Path(location)
    return None


def owned_by(experiment: Any, root: Path) -> bool:
    """Whether ``experiment`` keeps its artifacts in checkout ``root``: tagged so (experiments
    this module creates) or, for older ones, an artifact location inside ``root``."""
    tagged = experiment.tags.get(CHECKOUT_TAG)
    if tagged:
        return tagged == checkout_id(root)
    local = _local_path(experiment.artifact_location or "")
    return local is not None and local.is_relative_to(root)


def experiment_name_for(name: str, root: Path) -> str:
    """The experiment a checkout logs to when ``name`` belongs to another checkout."""
    return f"{name} @ {checkout_label(root)}"


def checkout_experiment(client: Any, name: str, root: Path | None = None) -> Any:
    """The experiment this checkout logs to: ``name`` if it created it (or it is new), else
    ``<name> @ <checkout>``; created with its artifacts under ``<checkout>/mlruns/``."""
    root = root or checkout_root()
    with tracking_errors("choosing the experiment", client.tracking_uri):
        found = client.get_experiment_by_name(name)
        if found is not None and owned_by(found, root):
            _set_kind(client, found)
            return found
        if found is not None:
            own = experiment_name_for(name, root)
            print(
                f"[tracking] experiment {name!r} keeps its artifacts in another checkout "
                f"({found.artifact_location}): this checkout logs to {own!r}"
            )
            name = own
            found = client.get_experiment_by_name(name)
            if found is not None:
                _set_kind(client, found)
                return found
        return _create_experiment(client, name, root)


def _create_experiment(client: Any, name: str, root: Path) -> Any:
    from mlflow.exceptions import MlflowException

    tags = {
        CHECKOUT_TAG: checkout_id(root),
        EXPERIMENT_KIND_TAG: EXPERIMENT_KIND,
        "mlflow.note.content": (
            f"tagrpo runs of the checkout {checkout_id(root)}; artifacts in {root / 'mlruns'}."
        ),
    }
    try:
        experiment_id = client.create_experiment(
            name, artifact_location=_artifact_root(root, name), tags=tags
        )
    except MlflowException as error:
        if error.error_code != "RESOURCE_ALREADY_EXISTS":
            raise
        # Another stage created it meanwhile: use it if it is this checkout's.
        found = client.get_experiment_by_name(name)
        if owned_by(found, root):
            return found
        return checkout_experiment(client, name, root)
    return client.get_experiment(experiment_id)


def _set_kind(client: Any, experiment: Any) -> None:
    if EXPERIMENT_KIND_TAG not in experiment.tags:  # a kind set by hand in the UI stays
        client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)


def git_state(cwd: Path | None = None) -> dict[str, str]:
    """Commit sha and whether the work tree differs from it ("unknown" outside git).

    Dirty means tracked code, params or data differ from the commit. What the pipeline itself
    writes (``dvc.lock`` and the outputs dvc.yaml declares, e.g. committed metrics) does not
    count: a stage runs while earlier stages of the same ``dvc repro`` are rewriting them.
    """
    where = cwd or home_root()
    try:
        outputs = pipeline_outputs(where)
    except KeyError:
        outputs = set()
    # DVC also lists each cached output in a .gitignore beside it (models/.gitignore, ...).
    ignores = {(Path(out).parent / ".gitignore").as_posix() for out in outputs}
    written = sorted({"dvc.lock", *outputs, *ignores})
    pathspec = [":/", *(f":(exclude){path}" for path in written)]
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=where, capture_output=True, text=True, check=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "--", *pathspec],
            cwd=where,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return {"git_commit": "unknown", "git_dirty": "unknown"}
    return {"git_commit": sha, "git_dirty": str(bool(dirty)).lower()}


def safe_tags(tags: Mapping[str, Any]) -> dict[str, str]:
    """MLflow tags as they may be stored: every value a string, key-shaped parts masked
    (a command line, a note or an error message can carry what a user typed)."""
    return {str(key): mask_key_shapes(str(value)) for key, value in tags.items()}


def redact(value: Any) -> Any:
    """A value as it may be logged: key-shaped strings replaced."""
    return REDACTED if looks_like_secret(value) else value


def redact_tree(value: Any, key: str = "") -> Any:
    """A nested params value as it may be logged: secrets masked at every depth."""
    if _SECRET_KEY.search(key) and not isinstance(value, Mapping):
        return REDACTED
    if isinstance(value, Mapping):
        return {k: redact_tree(v, str(k)) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [redact_tree(item) for item in value]
    return redact(value)


def log_params_artifact(client: Any, run_id: str, params: Mapping[str, Any], name: str) -> None:
    """Every value of ``params`` (redacted) as a JSON artifact of the run."""
    client.log_dict(run_id, redact_tree(params), name)


def model_label(config: Any) -> str:
    """What the ``model`` tag says: the base policy every method starts from."""
    settings = config.base_model
    if settings.kind == "warmstart":
        width = settings.warmstart.model
        return f"warmstart-llama-h{width.hidden_size}-l{width.num_layers}"
    if settings.kind == "gguf_package":
        return f"{settings.gguf_package.package}/{settings.gguf_package.gguf_file}"
    if settings.kind == "hub":
        return settings.hub.hub_id
    return settings.local.path


def metric_name(key: str) -> str:
    """The MLflow name of a metrics-file key: pass@k namespaced, '@' replaced (not allowed)."""
    return metric_point(key)[0]


def metric_point(key: str) -> tuple[str, int | None]:
    """A metrics-file key as an MLflow name and step: ``mini_chains/pass@8`` is
    ``("pass_at_k/mini_chains", 8)`` (a curve over k); other keys have no step of their own."""
    match = _PASS_AT_K.match(key)
    if match:
        return f"{PASS_AT_K_PREFIX}{_one_level(match['name'])}", int(match["k"])
    section, slash, rest = key.replace("@", "_at_").partition("/")
    return f"{section}{slash}{_one_level(rest)}", None


def _one_level(name: str) -> str:
    """``a/b/c`` as ``a.b.c``: MLflow's chart view makes a section of everything before a
    name's last '/', so a nested key (``grpo-s0/checkpoint-025/identical_rewards/joint``) made
    a section of its own holding one chart, mostly empty for the runs shown (diagnostics alone
    made 73). With one '/' at most, a run's charts fall into its few top-level sections."""
    return name.replace("/", ".")


def flatten_params(params: Mapping[str, Any], prefix: str = "") -> dict[str, str]:
    """Nested params as ``a.b.c`` keys; secrets masked; long values truncated for MLflow."""
    flat: dict[str, str] = {}
    for key, value in params.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_params(value, prefix=f"{name}."))
            continue
        if _SECRET_KEY.search(str(key)):
            flat[name] = REDACTED
            continue
        if isinstance(value, list | tuple):
            value = [redact(item) for item in value]
            text = json.dumps(value)
        else:
            text = str(redact(value))
        flat[name] = text if len(text) <= 5000 else text[:4997] + "..."
    return flat


def flatten_numbers(values: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """The numeric leaves of a nested mapping as ``a/b/c`` keys (for metrics)."""
    flat: dict[str, float] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_numbers(value, prefix=f"{name}/"))
        elif isinstance(value, int | float) and not isinstance(value, bool):
            flat[name] = float(value)
    return flat


def owner_tags(pid: int | None = None) -> dict[str, str]:
    """The tags naming the process that owns a run (default: this one): host, pid and the
    kernel's start time of the process (a reused pid is never taken for it)."""
    pid = os.getpid() if pid is None else pid
    stat = proc_stat(pid)
    return {
        HOST_TAG: socket.gethostname(),
        PID_TAG: str(pid),
        PID_START_TAG: str(stat.start_ticks) if stat is not None else "",
    }


def owner_gone(tags: Mapping[str, str]) -> str | None:
    """Why a run's owner is known to be gone (its process on this host no longer runs), or
    None: alive, another host's (it cannot be checked from here), or no pid tagged.

    A run tagged before the start time was (no ``tagrpo.pid_start``) is judged by its pid
    alone; such a run tagged with this process's pid is another, earlier process's (this one
    has not opened it)."""
    host = tags.get(HOST_TAG, "")
    pid_text = tags.get(PID_TAG, "")
    if host != socket.gethostname() or not pid_text.isdigit() or int(pid_text) <= 0:
        return None
    pid = int(pid_text)
    ticks = tags.get(PID_START_TAG, "")
    if ticks.isdigit():
        alive = process_alive(pid, int(ticks))
    else:
        alive = pid != os.getpid() and pid_alive(pid)
    return None if alive else f"the process {pid} on {host} that ran it is gone"


def mark_run_killed(client: Any, run_id: str, reason: str) -> None:
    """End a run KILLED, saying why in ``tagrpo.killed_reason``."""
    client.set_tag(run_id, KILLED_REASON_TAG, mask_key_shapes(reason)[:5000])
    client.set_terminated(run_id, status="KILLED")


def mark_dead_runs_killed(client: Any, runs: list[Any], found_by: str = "a later run") -> int:
    """Of ``runs``, those whose owner (tagged host and pid) is gone, set to KILLED with the
    reason; ``found_by`` says who found it (in the reason)."""
    stale = 0
    for run in runs:
        why = owner_gone(run.data.tags)
        if why is None:
            continue
        mark_run_killed(client, run.info.run_id, f"{why} (found by {found_by})")
        stale += 1
    return stale


def dead_owner_runs(client: Any, experiment_ids: list[str] | None = None) -> list[tuple[Any, str]]:
    """The RUNNING runs of this host whose owner is gone, with why, in ``experiment_ids``
    (default: every experiment of the store), except dvc's parent runs (ended from their
    stages' states by :mod:`tagrpo.pipeline.parent_run`, after their watcher's grace)."""
    if experiment_ids is None:
        experiment_ids = [e.experiment_id for e in client.search_experiments()]
    if not experiment_ids:
        return []
    runs = client.search_runs(
        experiment_ids,
        filter_string=(
            f"tags.`{HOST_TAG}` = '{socket.gethostname()}' and attributes.status = 'RUNNING'"
        ),
    )
    found = []
    for run in runs:
        why = owner_gone(run.data.tags)
        if why is not None and DVC_PIPELINE_KEY_TAG not in run.data.tags:
            found.append((run, why))
    return found


def metric_batch(
    metrics: Mapping[str, Any],
    step: int | None = None,
    timestamp: int | None = None,
    model_id: str | None = None,
) -> list[Any]:
    """The numeric metrics (nested mappings flattened) as MLflow ``Metric`` entries, named as
    :func:`metric_point` gives them: pass@k at step k, the rest at ``step`` (default 0). NaN is
    dropped. A pass@k key with an explicit ``step`` is refused: its step is k. With
    ``model_id`` each metric is also the logged model's (listed on its page)."""
    from mlflow.entities import Metric

    stamp = timestamp if timestamp is not None else int(time.time() * 1000)
    batch = []
    for key, value in flatten_numbers(metrics).items():
        if value != value:
            continue
        name, own_step = metric_point(key)
        if own_step is not None and step is not None:
            raise ValueError(f"metric {key!r}: pass@k is logged at step k, not at step {step}")
        point = own_step if own_step is not None else step or 0
        batch.append(Metric(name, value, stamp, point, model_id=model_id))
    return batch


def log_metrics(
    metrics: Mapping[str, Any], step: int | None = None, model_id: str | None = None
) -> None:
    """Log the numeric metrics (nested mappings flattened) to the active run, as
    :func:`metric_batch` names them (pass@k at step k), linked to logged model ``model_id``
    when given. No active run: nothing."""
    import mlflow
    from mlflow.tracking import MlflowClient

    run = mlflow.active_run()
    if run is None:
        return
    batch = metric_batch(metrics, step, model_id=model_id)
    with tracking_errors("logging metrics"):
        # MLflow takes at most 1000 metrics per request.
        for start in range(0, len(batch), 1000):
            MlflowClient().log_batch(run.info.run_id, metrics=batch[start : start + 1000])
