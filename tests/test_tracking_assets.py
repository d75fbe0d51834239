"""The trained policy as an MLflow model (copied with its tokenizer, or linked), data splits as
MLflow datasets whose digest is DVC's md5, pass@k intervals; a real SQLite store."""

from __future__ import annotations

import hashlib
from pathlib import Path

import mlflow
import pandas as pd
import pytest
from tiny_policy import tiny_policy

from tagrpo.plumbing.tracking_assets import (
    link_evaluated_policy,
    log_datasets,
    log_passk_intervals,
    log_policy_model,
    weights_fingerprint,
)


@pytest.fixture
def active_run(tmp_path: Path):
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.set_experiment("assets")
    with mlflow.start_run() as run:
        yield run, experiment.experiment_id
    mlflow.set_tracking_uri(None)


def _policy_folder(folder: Path, with_tokenizer: bool = True) -> Path:
    model, tokenizer = tiny_policy(hidden_size=16)
    model.save_pretrained(folder)
    if with_tokenizer:
        tokenizer.save_pretrained(folder)
    (folder / "checkpoints" / "checkpoint-050").mkdir(parents=True)
    (folder / "checkpoints" / "checkpoint-050" / "big.bin").write_bytes(b"\0" * 1000)
    return folder


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_policy_is_an_mlflow_transformers_model(tmp_path: Path, active_run) -> None:
    run, experiment = active_run
    folder = _policy_folder(tmp_path / "ta_grpo-s0")
    model_id = log_policy_model(folder, "ta_grpo-s0", base_model="tiny", license_id="apache-2.0")
    (model,) = mlflow.search_logged_models(experiment_ids=[experiment], output_format="list")
    assert model.model_id == model_id and model.name == "ta_grpo-s0"
    assert model.source_run_id == run.info.run_id
    assert model.tags["dvc_output"] == str(folder.resolve())
    components = mlflow.transformers.load_model(model.model_uri, return_type="components")
    assert {"model", "tokenizer"} <= set(components)
    local = Path(mlflow.artifacts.download_artifacts(model.model_uri, dst_path=str(tmp_path / "d")))
    assert not list(local.rglob("big.bin"))  # the final policy only, not its checkpoints
    assert "apache-2.0" in (local / "model_card_data.yaml").read_text()


def test_a_policy_without_tokenizer_is_linked_not_copied(
    tmp_path: Path, active_run, capsys
) -> None:
    _, experiment = active_run
    folder = tmp_path / "grpo-s0"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    log_policy_model(folder, "grpo-s0", final_dir=tmp_path / "models" / "grpo-s0")
    (model,) = mlflow.search_logged_models(experiment_ids=[experiment], output_format="list")
    assert model.tags["linked_because"] == "no tokenizer files in the folder"
    assert model.tags["dvc_output"] == str((tmp_path / "models" / "grpo-s0").resolve())
    assert "linked to" in capsys.readouterr().out


def test_a_data_scaling_policy_gets_a_model_name_mlflow_accepts(tmp_path: Path, active_run) -> None:
    _, experiment = active_run
    folder = tmp_path / "grpo_data1.5x-s0"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    log_policy_model(folder, "grpo_data1.5x-s0")  # MLflow refuses "." in a model name
    (model,) = mlflow.search_logged_models(experiment_ids=[experiment], output_format="list")
    assert model.name == "grpo_data1_5x-s0" and model.tags["policy"] == "grpo_data1.5x-s0"


def test_splits_are_datasets_with_dvcs_md5_and_intervals_are_metrics(
    tmp_path: Path, active_run
) -> None:
    run, _ = active_run
    staged = tmp_path / "staging" / "benchmarks" / "mini_chains.parquet"
    staged.parent.mkdir(parents=True)
    pd.DataFrame({"id": ["a", "b"], "problem": ["1+1", "2+2"], "answer": ["2", "4"]}).to_parquet(
        staged
    )
    final = tmp_path / "data" / "processed" / "benchmarks" / "mini_chains.parquet"
    assert log_datasets([staged], "evaluation", [final]) == 1
    log_passk_intervals(
        pd.DataFrame(
            {
                "name": ["mini_chains", "competition"],
                "k": [4, 4],
                "ci_low": [0.2, float("nan")],
                "ci_high": [0.6, float("nan")],
            }
        )
    )
    stored = mlflow.tracking.MlflowClient().get_run(run.info.run_id)
    (entry,) = stored.inputs.dataset_inputs
    assert entry.dataset.digest == hashlib.md5(staged.read_bytes()).hexdigest()
    assert entry.dataset.source.endswith(str(final)) or str(final) in entry.dataset.source
    assert [tag.value for tag in entry.tags] == ["evaluation"]
    # Bounds are curves over k, as pass@k itself.
    assert stored.data.metrics == {
        "pass_at_k_ci/mini_chains/low": 0.2,
        "pass_at_k_ci/mini_chains/high": 0.6,
    }
    client = mlflow.tracking.MlflowClient()
    history = client.get_metric_history(run.info.run_id, "pass_at_k_ci/mini_chains/low")
    assert [(m.step, m.value) for m in history] == [(4, 0.2)]


def test_nothing_is_logged_without_an_active_run(tmp_path: Path) -> None:
    assert log_policy_model(tmp_path, "p") == ""
    assert log_datasets([tmp_path / "missing.parquet"], "training") == 0


def test_an_evaluation_is_linked_to_the_run_and_model_it_evaluated(tmp_path: Path) -> None:
    """Matched by the weights, wherever DVC put them (staged when trained, final when
    evaluated); another policy's weights are not linked."""
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    experiment = mlflow.set_experiment("links")
    staged, final = tmp_path / "staging" / "grpo-s0", tmp_path / "models" / "grpo-s0"
    for folder in (staged, final):
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"hidden_size": 16}')
        (folder / "model.safetensors").write_bytes(b"weights")
    (final / "checkpoints").mkdir()  # not part of the final policy
    (final / "checkpoints" / "step.bin").write_bytes(b"other")
    with mlflow.start_run(run_name="train-grpo-s0") as train:
        model_id = log_policy_model(staged, "grpo-s0", final_dir=final)
    # Trained later with the same weights (a method that never moved): not grpo-s0's model.
    with mlflow.start_run(run_name="train-grpo_ds-s0"):
        log_policy_model(staged, "grpo_ds-s0", final_dir=tmp_path / "models" / "grpo_ds-s0")
    other = tmp_path / "models" / "ta_grpo-s0"
    other.mkdir()
    (other / "config.json").write_text('{"hidden_size": 16}')
    (other / "model.safetensors").write_bytes(b"different weights")
    try:
        with mlflow.start_run(run_name="evaluate-grpo-s0") as evaluation:
            tags = link_evaluated_policy(final, "grpo-s0")
        with mlflow.start_run(run_name="evaluate-ta_grpo-s0") as unlinked:
            assert set(link_evaluated_policy(other, "ta_grpo-s0")) == {"weights_md5"}
        client = mlflow.tracking.MlflowClient()
        stored = client.get_run(evaluation.info.run_id)
        assert tags == {
            "weights_md5": weights_fingerprint(staged),
            "tagrpo.evaluated_run_id": train.info.run_id,
            "tagrpo.evaluated_model_id": model_id,
            "tagrpo.evaluated_model_uri": f"models:/{model_id}",
        }
        assert {k: stored.data.tags[k] for k in tags} == tags
        # The model is the run's input: the run page lists it, the model page lists the run.
        assert [m.model_id for m in stored.inputs.model_inputs] == [model_id]
        assert "tagrpo.evaluated_run_id" not in client.get_run(unlinked.info.run_id).data.tags
        models = mlflow.search_logged_models(
            experiment_ids=[experiment.experiment_id], output_format="list"
        )
        assert {m.tags["weights_md5"] for m in models} == {weights_fingerprint(final)}
    finally:
        mlflow.set_tracking_uri(None)
