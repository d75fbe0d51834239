"""What a stage run logs besides params and metrics: the trained policy as an MLflow model, the
data splits as MLflow datasets, pass@k intervals, and which trained policy an evaluation used.

Every function logs to the active run and does nothing without one (tracking disabled).
Dataset digests are the md5 of the parquet file, the hash DVC records for it, so a run's
input can be matched to a ``dvc.lock`` entry (MLflow's own digest samples only the first rows).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import time
import warnings
from collections.abc import Iterable
from importlib.metadata import version
from pathlib import Path
from typing import Any

from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import tracking_errors

# mlflow, pandas and huggingface_hub are imported inside the functions that use them (heavy).

# Above this size a policy is linked (an external logged model pointing at its DVC output)
# instead of copied into the artifact store: the paper's 1.7B-4B policies are 3-8 GB each.
MODEL_COPY_MAX_BYTES = 512 * 1024**2
# A policy folder also holds checkpoints/ (the diagnostics stage reads them); the MLflow model
# is the final policy only.
_MODEL_SKIP = {"checkpoints"}
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model")
CI_PREFIX = "pass_at_k_ci/"


def _active() -> Any:
    import mlflow

    return mlflow.active_run()


def file_md5(path: Path) -> str:
    digest = hashlib.md5(usedforsecurity=False)
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def log_datasets(
    paths: Iterable[Path], context: str, final_paths: Iterable[Path] | None = None
) -> int:
    """Each parquet file as an MLflow dataset input (``context``: training, evaluation...).

    ``final_paths``: where the files will live, when they are still in a stage's staging
    folder (the dataset's name and source are taken from them).
    """
    import mlflow
    import pandas as pd

    if _active() is None:
        return 0
    paths = list(paths)
    finals = list(final_paths) if final_paths is not None else paths
    for path, final in zip(paths, finals, strict=True):
        frame = pd.read_parquet(path)
        with warnings.catch_warnings(), tracking_errors(f"logging the dataset {final}"):
            # A local path matches MLflow's local-artifact source twice (same class): noise.
            warnings.filterwarnings("ignore", message="The specified dataset source")
            # Schema inference's advice about integer columns: these files have no missing ids.
            warnings.filterwarnings("ignore", message="Hint: Inferred schema contains integer")
            dataset = mlflow.data.from_pandas(
                frame,
                source=str(Path(final).resolve()),
                name=_dataset_name(Path(final)),
                digest=file_md5(path),
            )
            mlflow.log_input(dataset, context=context)  # infers the schema: inside the filter
    return len(paths)


def _dataset_name(path: Path) -> str:
    """``data/processed/benchmarks/mini_chains.parquet`` -> ``processed/benchmarks/mini_chains``."""
    path = Path(path)
    try:
        relative = path.resolve().relative_to(project_root())
    except ValueError:
        return path.stem
    parts = relative.with_suffix("").parts
    return "/".join(parts[1:] if parts[0] == "data" and len(parts) > 1 else parts)


WEIGHTS_TAG = "weights_md5"
EVALUATED_RUN_TAG = "tagrpo.evaluated_run_id"
EVALUATED_MODEL_TAG = "tagrpo.evaluated_model_id"
EVALUATED_URI_TAG = "tagrpo.evaluated_model_uri"


def weights_fingerprint(model_dir: Path) -> str:
    """md5 over the final policy's files (names and contents; ``checkpoints/`` left out): the
    same weights give the same fingerprint wherever DVC checked them out."""
    digest = hashlib.md5(usedforsecurity=False)
    for item in sorted(Path(model_dir).iterdir()):
        if item.is_file() and item.name not in _MODEL_SKIP:
            digest.update(f"{item.name}\0{file_md5(item)}\n".encode())
    return digest.hexdigest()


def link_evaluated_policy(model_dir: Path, policy: str) -> dict[str, str]:
    """Tag the active (evaluate) run with the training run and logged model whose weights it
    evaluates, and log that model as the run's input; matched by :func:`weights_fingerprint`,
    and by policy name, so a policy DVC restored from its cache still finds the run that trained
    it. Returns the tags set (only the fingerprint when no logged model of that policy in the
    experiment has those weights: the base policy, a policy trained with tracking off)."""
    import mlflow
    from mlflow.entities import LoggedModelInput

    run = _active()
    if run is None:
        return {}
    fingerprint = weights_fingerprint(model_dir)
    client = mlflow.tracking.MlflowClient()
    with tracking_errors(f"linking the evaluated policy {policy}"):
        models = client.search_logged_models(
            [run.info.experiment_id],
            # The policy too: two policies can have the same weights (a method whose groups
            # all had zero gradient never moved), and each evaluation names its own.
            filter_string=f"tags.{WEIGHTS_TAG} = '{fingerprint}' and tags.policy = '{policy}'",
            order_by=[{"field_name": "creation_time", "ascending": False}],
            max_results=1,
        )
        tags = {WEIGHTS_TAG: fingerprint}
        if models:
            model = models[0]
            tags |= {
                EVALUATED_RUN_TAG: model.source_run_id or "",
                EVALUATED_MODEL_TAG: model.model_id,
                EVALUATED_URI_TAG: model.model_uri,
            }
            client.log_inputs(run.info.run_id, models=[LoggedModelInput(model.model_id)])
        else:
            print(
                f"[tracking] no logged model with the weights of {policy} (md5 {fingerprint}) in "
                "this experiment: the evaluation is not linked to a training run"
            )
        mlflow.set_tags(tags)
    return tags


def _folder_bytes(folder: Path) -> int:
    return sum(
        f.stat().st_size for f in folder.iterdir() if f.is_file() and f.name not in _MODEL_SKIP
    )


# Characters MLflow refuses in a logged model's name (a data-scaling policy has a dot:
# ``grpo_data1.5x-s0``).
_MODEL_NAME_FORBIDDEN = str.maketrans({c: "_" for c in "/:.%\"'"})


def model_name(policy: str) -> str:
    """The policy's MLflow model name: ``grpo_data1.5x-s0`` -> ``grpo_data1_5x-s0`` (the
    policy itself is in the model's ``policy`` tag)."""
    return policy.translate(_MODEL_NAME_FORBIDDEN)


def log_policy_model(
    model_dir: Path,
    policy: str,
    final_dir: Path | None = None,
    base_model: str = "",
    license_id: str = "other",
) -> str:
    """The trained policy as an MLflow model of the transformers flavour (copied), or, above
    :data:`MODEL_COPY_MAX_BYTES`, an external logged model linked to its DVC output folder.

    ``model_dir`` is where the folder is now (the stage's staging area), ``final_dir`` where it
    will live (the link recorded); ``base_model`` and ``license_id`` (an SPDX-style id, "other"
    when the base model's own license applies) go into the model card. Returns the logged
    model's id ("" without an active run).
    """
    run = _active()
    if run is None:
        return ""
    with tracking_errors(f"logging the policy {policy} as a model"):
        return _log_policy_model(model_dir, policy, run, final_dir, base_model, license_id)


def _log_policy_model(
    model_dir: Path,
    policy: str,
    run: Any,
    final_dir: Path | None,
    base_model: str,
    license_id: str,
) -> str:
    import mlflow

    final = Path(final_dir or model_dir).resolve()
    size = _folder_bytes(model_dir)
    tags = {"policy": policy, "dvc_output": str(final), WEIGHTS_TAG: weights_fingerprint(model_dir)}
    linked_because = ""
    if size > MODEL_COPY_MAX_BYTES:
        linked_because = f"{size / 1024**2:.0f} MB (copies stop at {MODEL_COPY_MAX_BYTES >> 20} MB)"
    elif not any((Path(model_dir) / name).is_file() for name in _TOKENIZER_FILES):
        # The transformers flavour needs the tokenizer beside the weights.
        linked_because = "no tokenizer files in the folder"
    if linked_because:
        model = mlflow.create_external_model(
            name=model_name(policy),
            source_run_id=run.info.run_id,
            model_type="transformers",
            tags={**tags, "bytes": str(size), "linked_because": linked_because},
        )
        mlflow.set_tag("tagrpo.model_link", str(final))
        print(f"[tracking] policy {policy} linked to {final}, not copied: {linked_because}")
        return model.model_id
    with tempfile.TemporaryDirectory(prefix="tagrpo-model-") as scratch:
        # The final policy only: top-level files, linked (MLflow copies them).
        checkpoint = Path(scratch) / model_name(policy)
        checkpoint.mkdir()
        for item in Path(model_dir).iterdir():
            if item.is_file() and item.name not in _MODEL_SKIP:
                os.symlink(item.resolve(), checkpoint / item.name)
        info = mlflow.transformers.log_model(
            transformers_model=str(checkpoint),
            name=model_name(policy),
            task="text-generation",
            tags=tags,
            model_card=_model_card(policy, base_model, license_id),
            # MLflow's default list names torchvision, which this stack does not install.
            pip_requirements=_model_requirements(),
        )
    mlflow.set_tag("tagrpo.model_link", str(final))
    return info.model_id


def _model_card(policy: str, base_model: str, license_id: str) -> Any:
    """A card of our own: MLflow otherwise asks the Hugging Face hub for one (offline: a
    warning per policy)."""
    from huggingface_hub import ModelCard

    origin = f"fine-tuned from {base_model}" if base_model else "trained by tagrpo"
    note = "" if license_id != "other" else "\nThe base model's license applies.\n"
    return ModelCard(
        f"---\nlicense: {license_id}\nlibrary_name: transformers\n---\n# {policy}\n\n"
        f"A tagrpo policy ({origin}); its DVC output is models/{policy}.\n{note}"
    )


def _model_requirements() -> list[str]:
    """The packages that load the policy, pinned to the versions that trained it."""
    return [
        f"torch=={version('torch').split('+')[0]}",  # the local label (+cpu) is not on PyPI
        f"transformers=={version('transformers')}",
        f"tokenizers=={version('tokenizers')}",
        f"safetensors=={version('safetensors')}",
    ]


def log_passk_intervals(passk: Any) -> None:
    """Bootstrap CI bounds of each pass@k as ``pass_at_k_ci/<name>/{low,high}`` at step k.

    pass@k itself is in the stage's metrics (``pass_at_k/<name>`` at step k); group rows have
    no CI.
    """
    import mlflow
    from mlflow.entities import Metric

    run = _active()
    if run is None:
        return
    stamp = int(time.time() * 1000)
    batch = [
        Metric(f"{CI_PREFIX}{row.name}/{bound}", float(value), stamp, int(row.k))
        for row in passk.itertuples()
        for bound, value in (("low", row.ci_low), ("high", row.ci_high))
        if value == value  # NaN: no interval (benchmark groups)
    ]
    with tracking_errors("logging pass@k intervals"):
        for start in range(0, len(batch), 1000):
            mlflow.tracking.MlflowClient().log_batch(
                run.info.run_id, metrics=batch[start : start + 1000]
            )
