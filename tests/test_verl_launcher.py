"""The verl train path end to end in a scratch project, verl's process replaced by a fake.

The train stage runs as DVC runs it (``stages.train.main``); only the process it starts is a
fake, which does what verl's process does to the outside world: reads the training parquet,
logs metrics to the MLflow run named by ``MLFLOW_RUN_ID`` and to the file logger, and leaves
the exported policy where it was told to. Checked: data preparation, the environment handed
to verl, the MLflow run (name, tags, verl's metrics in the same run) and the stage outputs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import mlflow
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

import stages.train as train_stage
from tagrpo.config.params import embedded
from tagrpo.config.profiles import merged_with_profile
from tagrpo.data.schema import QUESTION_SCHEMA, Question
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.plumbing.device import describe_device
from tagrpo.plumbing.paths import project_root
from tagrpo.training.warmstart import TinyModelConfig, build_model
from tagrpo.verl_ext import launcher
from tagrpo.verl_ext.checkpoint import exported_checkpoints
from tagrpo.verl_ext.launcher import read_metrics_log
from tagrpo.verl_ext.overrides import hydra_value
from tagrpo.verl_ext.process import RUN_MARKER

SOURCE = project_root()
real_run = subprocess.run


def argv_value(argv: list[str], key: str) -> str:
    """The value of override ``key`` in a verl command line (unquoted)."""
    return next(a for a in argv if a.startswith(f"{key}=")).split("=", 1)[1].strip("'")


@pytest.fixture
def scratch(tmp_path, monkeypatch):
    """A checkout with the paper profile, a tiny tokenizer as the model and small data."""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    monkeypatch.delenv("TAGRPO_PARENT_RUN_ID", raising=False)
    tokenizer = train_tokenizer(["What is 3 + 4?", "Add three and four."] * 20, vocab_size=280)
    tokenizer.save_pretrained(tmp_path / "tiny")
    params = merged_with_profile(SOURCE / "profiles" / "paper.yaml", SOURCE / "params.yaml")
    params["verl"]["model"] = str(tmp_path / "tiny")
    params["verl"]["max_prompt_length"] = 200
    # 1 of the 9 rephrasings below is over the limit (11%): allowed here, refused by the
    # default cap (test_too_many_replaced_rephrasings_stop_a_ta_run_before_verl).
    params["verl"]["max_replaced_rephrasing_share"] = 0.2
    params["common"]["tracking"] = {"enabled": True, "uri": "mlflow.db", "experiment": "t"}
    (tmp_path / "params.yaml").write_text(yaml.safe_dump(params))
    (tmp_path / "dvc.yaml").write_text("stages: {}\n")
    questions = [
        Question(f"q{i}", "math", "train", f"What is {i} + 4?", str(i + 4), meta={"i": i})
        for i in range(3)
    ]
    rephrasings = [
        ["Add four to 0.", "Sum 0 and 4.", "long " * 300],
        ["Add four to 1.", "Sum 1 and 4.", "Four plus 1?"],
        ["Add four to 2.", "Sum 2 and 4.", "Four plus 2?"],
    ]
    table = pa.Table.from_pylist([q.to_record() for q in questions], schema=QUESTION_SCHEMA)
    (tmp_path / "data" / "rephrased").mkdir(parents=True)
    pq.write_table(
        table.append_column("rephrasings", pa.array(rephrasings)),
        tmp_path / "data" / "rephrased" / "train.parquet",
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    return tmp_path, params, tokenizer


def test_verl_run_leaves_the_local_backends_outputs_in_one_mlflow_run(scratch, monkeypatch) -> None:
    root, _, tokenizer = scratch
    seen = {}

    def fake_verl(argv, env=None, cwd=None, check=False, **kwargs):
        if "verl.trainer.main_ppo" not in argv:  # git and others: the real thing
            return real_run(argv, env=env, cwd=cwd, check=check, **kwargs)
        seen.update(argv=argv, env=env, cwd=cwd)
        export_dir = argv_value(argv, "++trainer.tagrpo.export_dir")
        rows = pq.read_table(argv_value(argv, "data.train_files"))
        assert rows.num_rows == 3
        seen["train_rows"] = rows.to_pylist()
        client = MlflowClient(tracking_uri=env["MLFLOW_TRACKING_URI"])
        log = []
        for step in (1, 2):
            data = {
                "original/reward_mean": 0.25 * step,
                "train/zero_gradient_rate": 0.0,
                "original/zero_gradient_rate": 1.0 / step,
                "responses_generated": 96.0 * step,
                "actor/pg_loss": -0.1 * step,
                "actor/kl_loss": 0.001 * step,
            }
            client.log_metric(
                env["MLFLOW_RUN_ID"], "actor/pg_loss", data["actor/pg_loss"], step=step
            )
            log.append(json.dumps({"step": step, "data": data}))
        with open(env["VERL_FILE_LOGGER_PATH"], "w") as handle:
            handle.write("\n".join(log) + "\n")
        torch.manual_seed(0)
        model = build_model(
            tokenizer, embedded(TinyModelConfig, hidden_size=16, intermediate_size=32)
        )
        model.save_pretrained(export_dir)

    monkeypatch.setattr(launcher, "run_isolated", fake_verl)
    summary = train_stage.main(["--method", "ta_grpo", "--seed", "0"])

    env = seen["env"]
    assert seen["cwd"] == str(root)
    assert env["VERL_USE_EXTERNAL_MODULES"] == "tagrpo.verl_ext.plugin"
    # The run's private temp dir (Ray's sessions, every process's TMPDIR) is gone afterwards.
    assert Path(env["TMPDIR"]).name.startswith("tagrpo-verl-")
    assert env[RUN_MARKER] == env["TMPDIR"]
    assert not Path(env["TMPDIR"]).exists()
    # Its work area too, once the stage committed its outputs.
    assert not (root / "checkpoints" / "verl" / "ta_grpo-s0").exists()
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{root / 'mlflow.db'}"
    assert "actor_rollout_ref.rollout.n=32" in seen["argv"]
    run_id = hydra_value(env["MLFLOW_RUN_ID"])  # quoted when it could read as a number
    assert f"++ray_kwargs.ray_init.runtime_env.env_vars.MLFLOW_RUN_ID={run_id}" in seen["argv"]
    # The third rephrasing of q0 is longer than 200 prompt tokens: replaced by q0's text.
    assert summary["verl_data/rephrasings_too_long"] == 1.0
    assert summary["verl_data/questions_written"] == 3.0
    assert summary["steps"] == 2.0 and summary["responses_generated"] == 192.0
    assert summary["reward_first_quarter"] == 0.25 and summary["reward_last_quarter"] == 0.5
    assert summary["original/zero_gradient_rate_mean"] == 0.75
    assert summary["kl_last"] == 0.002
    written = json.loads((root / "metrics" / "train" / "ta_grpo-s0.json").read_text())
    assert written == {**summary, "device": describe_device()}  # which device made the run
    assert (root / "models" / "ta_grpo-s0" / "config.json").exists()  # moved into place
    plot = pd.read_csv(root / "plots" / "train" / "ta_grpo-s0.csv")
    assert plot["step"].tolist() == [1, 2] and plot["actor/pg_loss"].tolist() == [-0.1, -0.2]
    train_rows = seen["train_rows"]
    assert [
        m[0]["content"].split("\n")[0] for m in train_rows[0]["extra_info"]["rephrased_prompts"]
    ] == [
        "Add four to 0.",
        "Sum 0 and 4.",
        "What is 0 + 4?",
    ]

    mlflow.set_tracking_uri(env["MLFLOW_TRACKING_URI"])
    runs = mlflow.search_runs(experiment_names=["t"], output_format="list")
    assert len(runs) == 1
    run = runs[0]
    assert run.info.run_id == env["MLFLOW_RUN_ID"]
    assert run.info.run_name == "ta_grpo-s0 · train"
    tags = run.data.tags
    assert (tags["method"], tags["seed"], tags["policy"], tags["backend"]) == (
        "ta_grpo",
        "0",
        "ta_grpo-s0",
        "verl",
    )
    assert tags["stage"] == "train" and tags["profile"] == "paper"
    assert tags["device"] == describe_device()
    assert run.data.metrics["actor/pg_loss"] == -0.2  # logged by "verl" into the same run
    assert run.data.metrics["summary/steps"] == 2.0
    assert run.data.metrics["verl_data/rephrasings_too_long"] == 1.0


def test_too_many_replaced_rephrasings_stop_a_ta_run_before_verl(scratch, monkeypatch) -> None:
    root, params, _ = scratch
    params["verl"]["max_replaced_rephrasing_share"] = 0.05  # the default: 1 of 9 is 11%
    (root / "params.yaml").write_text(yaml.safe_dump(params))
    started = []

    def failing_verl(argv, env=None, cwd=None, check=False, **kwargs):
        if "verl.trainer.main_ppo" not in argv:
            return real_run(argv, env=env, cwd=cwd, check=check, **kwargs)
        started.append(argv)
        raise subprocess.CalledProcessError(1, argv)

    monkeypatch.setattr(launcher, "run_isolated", failing_verl)
    with pytest.raises(RuntimeError, match=r"1 of 9 rephrasings .* \(11\.1%\) exceeds .* 5\.0%"):
        train_stage.main(["--method", "ta_grpo", "--seed", "0"])
    assert started == []  # refused before verl started
    # grpo samples q0 only: the same data is no reason to refuse it (verl starts).
    with pytest.raises(subprocess.CalledProcessError):
        train_stage.main(["--method", "grpo", "--seed", "0"])
    assert len(started) == 1


def test_a_run_that_exports_no_policy_fails(scratch, monkeypatch) -> None:
    root, _, _ = scratch

    def silent_verl(argv, env=None, cwd=None, check=False, **kwargs):
        if "verl.trainer.main_ppo" not in argv:
            return real_run(argv, env=env, cwd=cwd, check=check, **kwargs)
        with open(env["VERL_FILE_LOGGER_PATH"], "w") as handle:
            handle.write(json.dumps({"step": 1, "data": {"x": 1.0}}) + "\n")

    monkeypatch.setattr(launcher, "run_isolated", silent_verl)
    with pytest.raises(RuntimeError, match="exported no policy"):
        train_stage.main(["--method", "grpo", "--seed", "0"])
    assert not (root / "metrics" / "train" / "grpo-s0.json").exists()  # nothing half-done


def test_metrics_log_keeps_numbers_and_merges_lines_of_a_step(tmp_path) -> None:
    path = tmp_path / "log.jsonl"
    lines = [
        {"step": 2, "data": {"a": 1, "flag": True, "text": "x"}},
        {"step": 1, "data": {"a": 0.5}},
        {"step": 2, "data": {"b": 3.0, "actor/kl_loss": 0.5}},
    ]
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n\n")
    assert read_metrics_log(path) == [
        {"step": 1.0, "a": 0.5},
        {"step": 2.0, "a": 1.0, "b": 3.0, "actor/kl_loss": 0.5, "kl": 0.5},
    ]


# -- resuming: the work area survives a failed stage; a rerun of the same run continues ------


class FakeVerlRun:
    """What verl and the tagrpo_sync trainer leave in the work area, step by step: a metrics
    line per step, a checkpoint (verl's tracker) every ``checkpoint_every`` steps, the
    checkpoint fractions' dumps and exports (the final policy last). ``crash_after``: the step
    after which the process fails (None: it finishes). Resumes like verl: from the tracker."""

    STEPS = 4

    def __init__(self, tokenizer, crash_after: int | None = None) -> None:
        self.tokenizer = tokenizer
        self.crash_after = crash_after
        self.calls: list[dict] = []

    def __call__(self, argv, env=None, cwd=None, check=False, **kwargs):
        if "verl.trainer.main_ppo" not in argv:
            return real_run(argv, env=env, cwd=cwd, check=check, **kwargs)
        area = Path(argv_value(argv, "trainer.default_local_dir"))
        export = Path(argv_value(argv, "++trainer.tagrpo.export_dir"))
        dumps = Path(argv_value(argv, "trainer.rollout_data_dir"))
        every = int(argv_value(argv, "++trainer.tagrpo.checkpoint_every"))
        tracker = area / "latest_checkpointed_iteration.txt"
        start = int(tracker.read_text()) if tracker.exists() else 0
        log = Path(env["VERL_FILE_LOGGER_PATH"])
        self.calls.append(
            {
                "start": start,
                "log_existed": log.exists(),
                "resume": argv_value(argv, "trainer.resume_mode"),
            }
        )
        with open(log, "w") as handle:  # verl's file logger truncates
            for step in range(start + 1, self.STEPS + 1):
                data = {"loss": float(step), "responses_generated": 16.0 * step}
                handle.write(json.dumps({"step": step, "data": data}) + "\n")
                handle.flush()
                fraction = {2: "checkpoint-050", 4: "checkpoint-100"}.get(step)
                if fraction:
                    dumps.mkdir(parents=True, exist_ok=True)
                    pd.DataFrame({"step": [step]}).to_parquet(dumps / f"{fraction}.parquet")
                if step % every == 0 or fraction:
                    (area / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
                    tracker.write_text(str(step))
                    if fraction:
                        torch.manual_seed(step)
                        model = build_model(
                            self.tokenizer,
                            embedded(TinyModelConfig, hidden_size=16, intermediate_size=32),
                        )
                        model.save_pretrained(export / "checkpoints" / fraction)
                        if step == self.STEPS:
                            model.save_pretrained(export)
                if step == self.crash_after:
                    raise subprocess.CalledProcessError(1, argv)


def set_params(root: Path, params: dict, **changes) -> None:
    for dotted, value in changes.items():
        node = params
        *parents, last = dotted.split(".")
        for part in parents:
            node = node[part]
        node[last] = value
    (root / "params.yaml").write_text(yaml.safe_dump(params))


def killed_after_step_3(scratch, monkeypatch, checkpoint_every: int):
    """A grpo run (4 steps, exports at 50% and 100%) whose process fails after step 3."""
    root, params, tokenizer = scratch
    set_params(
        root,
        params,
        **{"train.checkpoints": [0.5, 1.0], "runtime.verl.checkpoint_every": checkpoint_every},
    )
    fake = FakeVerlRun(tokenizer, crash_after=3)
    monkeypatch.setattr(launcher, "run_isolated", fake)
    with pytest.raises(subprocess.CalledProcessError):
        train_stage.main(["--method", "grpo", "--seed", "0"])
    return root, params, root / "checkpoints" / "verl" / "grpo-s0", fake


def test_a_killed_run_resumes_from_its_checkpoint_and_keeps_its_exports(
    scratch, monkeypatch
) -> None:
    """Attempt 1 fails after step 3 (checkpoint and export of step 2 made); the rerun continues
    from step 2 (not from zero: verl's tracker), keeps checkpoint-050 and the steps logged up to
    the checkpoint, repeats step 3, and the outputs are those of one 4-step run."""
    root, params, area, fake = killed_after_step_3(scratch, monkeypatch, checkpoint_every=2)
    assert not (root / "models" / "grpo-s0").exists()  # nothing committed
    assert (area / "model" / "checkpoints" / "checkpoint-050" / "config.json").exists()
    # A worker count is not the run's identity: the rerun still resumes.
    set_params(root, params, **{"runtime.verl.grading_workers": 7})
    fake.crash_after = None
    summary = train_stage.main(["--method", "grpo", "--seed", "0"])
    assert [(c["start"], c["log_existed"], c["resume"]) for c in fake.calls] == [
        (0, False, "auto"),
        (2, False, "auto"),  # the metrics of steps <= 2 were moved aside before verl truncates
    ]
    models = root / "models" / "grpo-s0"
    assert exported_checkpoints(models) == ["checkpoint-050", "checkpoint-100"]
    assert sorted(p.name for p in (root / "rollouts" / "grpo-s0").iterdir()) == [
        "checkpoint-050.parquet",
        "checkpoint-100.parquet",
    ]
    plot = pd.read_csv(root / "plots" / "train" / "grpo-s0.csv")
    assert plot["step"].tolist() == [1, 2, 3, 4] and plot["loss"].tolist() == [1, 2, 3, 4]
    assert summary["steps"] == 4.0 and summary["attempts"] == 2.0
    assert summary["resumed_from_step"] == 2.0
    assert not area.exists()  # released once the outputs were committed
    # The MLflow run of the rerun holds the steps of the first attempt too.
    client = MlflowClient(tracking_uri=f"sqlite:///{root / 'mlflow.db'}")
    run = client.get_run(
        mlflow.search_runs(experiment_names=["t"], output_format="list")[0].info.run_id
    )
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1, 2]


def test_a_run_with_other_results_starts_afresh_and_a_finished_one_is_not_retrained(
    scratch, monkeypatch
) -> None:
    root, params, area, fake = killed_after_step_3(scratch, monkeypatch, checkpoint_every=1)
    # Another learning rate: the checkpoint of step 3 is another run's.
    set_params(root, params, **{"train.learning_rate": 2.0e-6})
    fake.crash_after = None
    real_log_policy_model = train_stage.log_policy_model

    def failing_log(*args, **kwargs):  # the stage fails after verl finished
        raise RuntimeError("tracking store gone")

    monkeypatch.setattr(train_stage, "log_policy_model", failing_log)
    with pytest.raises(RuntimeError, match="tracking store gone"):
        train_stage.main(["--method", "grpo", "--seed", "0"])
    assert [call["start"] for call in fake.calls] == [0, 0]
    assert (area / "finished.json").exists()
    # The rerun promotes the finished run's exports: verl does not start again.
    monkeypatch.setattr(train_stage, "log_policy_model", real_log_policy_model)
    summary = train_stage.main(["--method", "grpo", "--seed", "0"])
    assert len(fake.calls) == 2 and summary["steps"] == 4.0
    assert exported_checkpoints(root / "models" / "grpo-s0") == ["checkpoint-050", "checkpoint-100"]
    # resume: false starts afresh whatever the work area holds.
    with pytest.raises(subprocess.CalledProcessError):
        fake.crash_after = 1
        train_stage.main(["--method", "grpo", "--seed", "0"])
    set_params(root, params, **{"runtime.verl.resume": False})
    fake.crash_after = None
    train_stage.main(["--method", "grpo", "--seed", "0"])
    assert [call["start"] for call in fake.calls] == [0, 0, 0, 0]
