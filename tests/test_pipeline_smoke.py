"""The real DAG, end to end, at smoke scale: `dvc repro` in a copy of this working tree as a
fresh clone has it (the committed dvc.lock and outputs), after `tagrpo params apply`.

This is the only test that runs the stages as DVC runs them (separate processes, params from
params.yaml, outputs checked against dvc.yaml). It uses ``profiles/smoke.yaml``: every stage of
the DAG (24 stages; 38 took 12 min idle, 37 min on 2 cores busy with other jobs); its
numbers mean nothing, their bookkeeping does.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import time
import urllib.error
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from prefect_server import prefect_server
from scratch_project import ROOT, SmokeRun, run_checked
from test_plots import check_rendered, vega_libraries

from tagrpo.pipeline.compare import method_order
from tagrpo.pipeline.rerun import stage_order
from tagrpo.plumbing.dvc_stages import load_stages
from tagrpo.plumbing.tracking_assets import file_md5

# Time limit: the cold smoke `dvc repro`: 12 min idle, 37 min on 2 busy cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]


def test_dvc_repro_runs_every_stage_and_reconciles(smoke_run: SmokeRun) -> None:
    # The README's path on a fresh clone: `tagrpo params apply profiles/smoke.yaml && dvc
    # repro`, with the committed dvc.lock of the default's DAG (issue 40.1: its entries of
    # stages the smoke DAG lacks named the same outputs, and a stage refused a model it had
    # just trained).
    checkout, env, log = smoke_run.checkout, smoke_run.env, smoke_run.log
    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    for name in stages:
        assert f"'{name}" in log, f"stage {name} did not run"
    lock = yaml.safe_load((checkout / "dvc.lock").read_text())["stages"]
    assert set(lock) == set(load_stages(checkout))  # every stage's entry, and no other
    verified = run_checked([sys.executable, "-m", "tagrpo.pipeline.cli", "verify"], checkout, env)
    assert "checked by content: 0 differ" in verified and "not checked" not in verified

    data = json.loads((checkout / "metrics" / "data.json").read_text())
    for counts in [*data["sources"].values(), data["total"]]:
        assert counts["rows_in"] == counts["kept"] + counts["rejected"]
    assert data["sources"]["train/miniworld"]["kept"] == 8
    assert data["sources"]["extra/miniworld"]["kept"] == 12  # the data-scaling pool

    base = json.loads((checkout / "metrics" / "base_model.json").read_text())
    assert base["probe/questions"] == 6.0
    assert 0.0 <= base["probe/success_original"] <= 1.0

    evaluation = json.loads((checkout / "metrics" / "eval" / "base.json").read_text())
    assert evaluation["responses"] == (6 + 4 + 4 + 4) * 4
    assert {"mini_chains/pass@4", "competition/pass@1", "ood/pass@2"} <= set(evaluation)
    assert "mini_chains/pass@8" not in evaluation  # k > n is never reported

    report = (checkout / "reports" / "report.md").read_text()
    assert "pass@4" in report and "train/miniworld" in report
    assert "## Rephrasings and their equivalence checks" in report
    assert "## Diagnostics: gradient vanishing and response diversity" in report
    assert report.count("| ta_grpo-s0 |") >= 3  # base, 50%, 100% (2 training steps)
    diagnostics = json.loads((checkout / "metrics" / "diagnostics.json").read_text())
    assert diagnostics["questions"] == 4.0
    assert 0.0 <= diagnostics["ta_grpo-s0/checkpoint-100/joint/zero_gradient_rate"] <= 1.0
    assert (checkout / "reports" / "diagnostics.png").stat().st_size > 1000
    assert (checkout / "reports" / "figures" / "passk_curves.png").stat().st_size > 1000
    # The claims table, the statistics and every figure/table of the paper, generated.
    assert "## The paper's claims, as this run measures them" in report
    claims = (checkout / "reports" / "claims.md").read_text()
    assert claims.splitlines()[0].startswith("| claim (paper) |") and claims.strip() in report
    # Issue 21: the validity table first (V1, the positive control, is its row under world
    # v3's family), the negative control and the A/A null open the claims (the smoke profile
    # trains the negative control and the 2.5x data-scaling run, so neither row is "not run").
    assert report.index("## Testbed validity") < report.index("## The paper's claims")
    rows = claims.splitlines()[2:]
    assert rows[0].startswith("| Negative control") and rows[1].startswith("| A/A null")
    assert "grpo_flipped" in rows[0] and not rows[0].endswith("| not run |")
    assert "section 5.5" in rows[-1] and not rows[-1].endswith("| not run |")
    for figure in ("training_reward", "passk_intervals"):
        assert (checkout / "reports" / "figures" / f"{figure}.png").stat().st_size > 1000
        assert f"figures/{figure}.png" in report
    for figure in (
        "figure5_passk",
        "figure6_matched_budget",
        "figure7_data_scaling",
        "figure8_ablation",
    ):
        assert (checkout / "reports" / "figures" / f"{figure}.png").stat().st_size > 1000
        assert f"figures/{figure}.png" in report
    scaling = pd.read_csv(checkout / "reports" / "tables" / "data_scaling.csv")
    assert sorted(set(scaling["data_multiple"])) == [1.0, 2.5]
    scaled = json.loads((checkout / "metrics" / "train" / "grpo_data2.5x-s0.json").read_text())
    one_x = json.loads((checkout / "metrics" / "train" / "grpo-s0.json").read_text())
    assert scaled["steps"] > one_x["steps"]  # same epochs over 2.5x the questions

    # Every stage run is in the project's MLflow store, tagged with stage and commit.
    head = run_checked(["git", "rev-parse", "HEAD"], checkout, env).strip()
    with sqlite3.connect(checkout / "mlflow.db") as db:
        tags = db.execute(
            "SELECT r.run_uuid, t.key, t.value FROM runs r JOIN tags t ON r.run_uuid = t.run_uuid"
        ).fetchall()
    by_run: dict[str, dict[str, str]] = {}
    for run, key, value in tags:
        by_run.setdefault(run, {})[key] = value
    stage_tags = {tags.get("stage") for tags in by_run.values()}
    assert {"data", "base_model", "train", "evaluate", "diagnostics", "report"} <= stage_tags
    assert {tags.get("git_commit") for tags in by_run.values()} == {head}

    # One parent run for that `dvc repro`, every stage run nested under it, ended FINISHED by
    # its watcher once dvc exited; runs of a method across seeds found by one filter.
    client = MlflowClient(f"sqlite:///{checkout / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tagrpo").experiment_id
    parents = client.search_runs([experiment], "tags.`tagrpo.origin` = 'dvc'")
    assert len(parents) == 1
    parent = parents[0]
    assert parent.data.tags["tagrpo.command"] == "dvc repro"
    assert parent.data.tags["profile"] == "smoke" and parent.data.tags["model"]
    children = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == len(by_run) - 1  # every stage run
    assert _ended(client, parent.info.run_id) == "FINISHED"
    evaluations = client.search_runs(
        [experiment], "tags.method = 'ta_grpo' and tags.stage = 'evaluate'"
    )
    assert [run.data.tags["seed"] for run in evaluations] == ["0"]
    evaluation = evaluations[0]
    assert evaluation.data.tags["backend"] == "hf" and evaluation.data.tags["model"]
    # pass@k: one curve per benchmark or group over k (step = k)
    ks = yaml.safe_load((checkout / "params.yaml").read_text())["evaluate"]["ks"]
    for key in ("pass_at_k/mini_chains", "pass_at_k/competition", "pass_at_k_ci/mini_chains/low"):
        history = client.get_metric_history(evaluation.info.run_id, key)
        assert sorted(m.step for m in history) == sorted(ks), key
    assert len(evaluation.data.params) < 20  # key params only; the rest in params.json
    assert "params.json" in {a.path for a in client.list_artifacts(evaluation.info.run_id)}
    inputs = {d.dataset.name: d for d in evaluation.inputs.dataset_inputs}
    assert "processed/benchmarks/mini_chains" in inputs
    benchmark = checkout / "data" / "processed" / "benchmarks" / "mini_chains.parquet"
    assert inputs["processed/benchmarks/mini_chains"].dataset.digest == file_md5(benchmark)
    training = client.search_runs([experiment], "tags.method = 'ta_grpo' and tags.stage = 'train'")[
        0
    ]
    models = client.search_logged_models(
        [experiment], filter_string=f"source_run_id = '{training.info.run_id}'"
    )
    assert [m.name for m in models] == ["ta_grpo-s0"]
    # The evaluation names the training run and the model it evaluated.
    assert evaluation.data.tags["tagrpo.evaluated_run_id"] == training.info.run_id
    assert evaluation.data.tags["tagrpo.evaluated_model_id"] == models[0].model_id
    assert {"rephrased/train"} == {d.dataset.name for d in training.inputs.dataset_inputs}

    # tagrpo compare reads that store: every method's pass@k with its interval.
    compared = run_checked(
        [sys.executable, "-m", "tagrpo.pipeline.cli", "compare", "--k", "4"], checkout, env
    )
    header = next(line for line in compared.splitlines() if line.startswith("benchmark"))
    runs = yaml.safe_load((checkout / "params.yaml").read_text())["runs"]
    scaling = runs["data_scaling"]
    columns = [
        "base",
        *runs["methods"],
        *runs["control_methods"],
        *runs["one_seed_methods"],
        *(f"{m}_data{float(x)}x" for m in scaling["methods"] for x in scaling["multiples"]),
    ]
    assert header.split()[2:] == method_order(columns)  # scaled policies: columns of their own
    assert re.search(r"mini_chains\s+4\s+\d+\.\d \[\d+\.\d, \d+\.\d\]", compared)

    # Nothing changed: the second repro reruns nothing but the preflight check (always run: it
    # validates params.yaml and hashes the data inputs), and opens no parent run.
    again = run_checked(["dvc", "repro"], checkout, env)
    assert re.findall(r"Running stage '([^']+)'", again) == ["preflight"]
    assert "Stage 'report' didn't change, skipping" in again
    assert len(client.search_runs([experiment], "tags.`tagrpo.origin` = 'dvc'")) == 1


def _ended(client, run_id: str, timeout: float = 180) -> str:
    deadline = time.monotonic() + timeout
    while (status := client.get_run(run_id).info.status) == "RUNNING":
        assert time.monotonic() < deadline, f"run {run_id} still RUNNING"
        time.sleep(1)
    return status


def test_dvc_plots_page_of_the_run_renders_offline(smoke_run: SmokeRun) -> None:
    """`tagrpo plots show` on the run's outputs: one self-contained page, every plot drawn."""
    checkout, env = smoke_run.checkout, smoke_run.env
    vega_libraries()
    run_checked([sys.executable, "-m", "tagrpo.pipeline.cli", "plots", "show"], checkout, env)
    plots = len(yaml.safe_load((checkout / "dvc.yaml").read_text())["plots"])
    shots = os.environ.get("TAGRPO_SCREENSHOTS")
    shot = Path(shots) / "dvc-plots-smoke.png" if shots else None
    check_rendered(checkout / "dvc_plots" / "index.html", plots, shot)
    passk = (checkout / "plots" / "passk.csv").read_text()
    assert "ta_grpo-s0,ta_grpo,0" in passk


def test_prefect_deployment_reruns_with_parameters(smoke_run: SmokeRun, tmp_path: Path) -> None:
    """A real server on loopback; the deployment `python -m flows.pipeline serve` creates;
    a parameterised run of the smoke profile triggered through the API, as the UI does."""
    checkout, env = smoke_run.checkout, smoke_run.env
    params_before = (checkout / "params.yaml").read_bytes()
    with prefect_server(tmp_path) as (api, prefect_settings):
        run_env = {**env, **prefect_settings}
        log = open(tmp_path / "serve.log", "wb")  # noqa: SIM115
        serve = subprocess.Popen(
            [sys.executable, "-m", "flows.pipeline", "serve", "--cron", ""],
            cwd=checkout,
            env=run_env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            deployment = _wait_for_deployment(api, serve, tmp_path / "serve.log")
            _check_form(deployment["parameter_openapi_schema"])
            # The server refuses a profile that is not one of profiles/ (the form's choices),
            # and a key-shaped override before the run (whose parameters it stores) exists.
            with pytest.raises(urllib.error.HTTPError) as refused_profile:
                api.run_deployment(deployment["id"], {"profile": "nope"})
            assert refused_profile.value.code == 409
            key = "sk-proj" + "1234567890abcdef"
            with pytest.raises(urllib.error.HTTPError) as refused_key:
                api.run_deployment(
                    deployment["id"], {"overrides": [f"rephrase.openai.model={key}"]}
                )
            assert refused_key.value.code == 409
            assert key not in json.dumps(api.call("POST", "/flow_runs/filter", {}))
            refused = api.run_deployment(
                deployment["id"], {"profile": "smoke", "overrides": ["train.no_such_key=1"]}
            )
            assert api.wait(refused["id"], 600)["state_type"] == "FAILED"
            expected = "train.no_such_key: not a params key"
            lines = api.logs_containing(refused["id"], expected)
            logged = "\n".join(line["message"] for line in lines)
            assert expected in logged
            assert [t["name"] for t in api.task_runs(refused["id"])] == []  # nothing ran

            parameters = {
                "profile": "smoke",
                "methods": ["grpo", "ta_grpo"],
                "seeds": [0],
                "overrides": ["evaluate.bootstrap_resamples=20", "report.title=Rerun"],
            }
            started = time.monotonic()
            flow_run = api.run_deployment(deployment["id"], parameters)
            finished = api.wait(flow_run["id"], 1800)
            seconds = time.monotonic() - started
            logs = "\n".join(line["message"] for line in api.logs(flow_run["id"]))
            assert finished["state_type"] == "COMPLETED", logs[-4000:]
        finally:
            serve.terminate()
            serve.wait(timeout=60)
            log.close()
        tasks = {t["name"]: t for t in api.task_runs(flow_run["id"])}
        artifacts = {a["key"]: a for a in api.artifacts(flow_run["id"])}
    print(f"parameterised deployment run: {seconds:.0f} s")

    # One task per DVC stage of the resolved DAG (main's matrices: the subset restricts the
    # data-scaling runs to grpo and drops the one-seed methods), each with its state.
    (copy,) = (checkout / ".tagrpo" / "runs").iterdir()
    stages = [n for n in tasks if not n.startswith(("scratch-copy", "dvc-dag"))]
    scaled = [f"{s}_scaling@grpo-2.5-0" for s in ("train", "evaluate")]
    expected = {
        "preflight",
        "data",
        "base_model",
        "rephrase",
        "check_equivalence",
        "train@grpo-0",
        "train@ta_grpo-0",
        "evaluate_base",
        "evaluate@grpo-0",
        "evaluate@ta_grpo-0",
        *scaled,
        "diagnostics",
        "report",
    }
    assert set(stages) == expected, set(stages) ^ expected
    assert set(stage_order(copy)) == expected
    assert all(tasks[n]["state_type"] == "COMPLETED" for n in stages)
    assert all(tasks[n]["total_run_time"] > 0 for n in stages)
    outcome = {row["stage"]: row["outcome"] for row in json.loads(artifacts["stages"]["data"])}
    assert outcome["evaluate@ta_grpo-0"] == "ran" and outcome["report"] == "ran"
    assert outcome["train@ta_grpo-0"] == "unchanged" and outcome["data"] == "unchanged"
    assert outcome["preflight"] == "ran"  # always_changed: it checks what DVC cannot see
    assert "bootstrap_resamples: 20" in artifacts["params"]["data"]
    assert "[sampling" in logs or "it/s" in logs  # progress of long stages reaches the UI

    # The checkout's params.yaml untouched; the copy has the resolved params and the report.
    assert (checkout / "params.yaml").read_bytes() == params_before
    resolved = yaml.safe_load((copy / "params.yaml").read_text())
    assert resolved["runs"]["methods"] == ["grpo", "ta_grpo"]
    assert resolved["evaluate"]["bootstrap_resamples"] == 20
    assert (copy / "reports" / "report.md").read_text().startswith("# Rerun")

    # MLflow: the flow's parent run with the exact params; the stages that ran nest under it.
    client = MlflowClient(f"sqlite:///{checkout / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("tagrpo").experiment_id
    (parent,) = client.search_runs([experiment], f"tags.`prefect.flow_run_id` = '{flow_run['id']}'")
    assert parent.info.status == "FINISHED" and parent.data.tags["tagrpo.origin"] == "prefect"
    assert json.loads(parent.data.params["methods"]) == ["grpo", "ta_grpo"]
    params_artifact = client.download_artifacts(parent.info.run_id, "params.yaml", str(tmp_path))
    assert yaml.safe_load(Path(params_artifact).read_text()) == resolved
    nested = client.search_runs([experiment], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    ran = sorted(run.data.tags["tagrpo.dvc_stage"] for run in nested)
    # preflight, a one-second check run by every repro, opens no MLflow run (its metrics are
    # DVC's metrics/preflight.json); every other stage that ran nests its run here.
    assert ran == sorted(
        name for name, result in outcome.items() if result == "ran" and name != "preflight"
    )


def _wait_for_deployment(api, serve: subprocess.Popen, log: Path, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while (deployment := api.deployment("tagrpo-pipeline", "rerun")) is None:
        if serve.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no deployment:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(2)
    return deployment


def _check_form(schema: dict) -> None:
    """The run form: typed parameters with choices, defaults and help."""
    from tagrpo.algorithms import METHODS

    fields = schema["properties"]
    assert list(fields) == ["profile", "methods", "seeds", "overrides", "force", "mode"]
    assert {"current", "smoke", "local", "paper"} <= set(fields["profile"]["enum"])
    assert fields["methods"]["items"]["enum"] == list(METHODS)
    assert fields["seeds"]["items"] == {"type": "integer", "minimum": 0}
    # An override's shape (key=value), key shapes excluded by a look-ahead (issue 40.4).
    pattern = fields["overrides"]["items"]["pattern"]
    assert pattern.startswith("^(?!")
    assert pattern.endswith("[A-Za-z_][A-Za-z0-9_]*(\\.[A-Za-z0-9_]+)*=")
    assert fields["force"]["type"] == "boolean" and fields["force"]["default"] is False
    assert fields["mode"]["enum"] == ["scratch", "experiment", "workspace"]
    assert all(field.get("description") for field in fields.values())


# Same commit + params + seed -> identical outputs: a stage run again, by itself, in a copy of
# the smoke checkout gives byte for byte the weights and metrics (timing fields aside) that its
# `dvc repro` wrote. Before the experiment test (which changes the workspace's params); the copy
# keeps the checkout's files and MLflow store untouched for the other tests.
TIMING = ("seconds", "_s", "time/", "sft_seconds", "probe_seconds", "build_seconds")


def _digest(path: Path) -> str:
    files = sorted(p for p in path.rglob("*") if p.is_file()) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def _without_timing(value):
    if isinstance(value, dict):
        return {
            k: _without_timing(v) for k, v in value.items() if not any(mark in k for mark in TIMING)
        }
    return value


def _snapshot(root: Path, weights: list[str], metrics: str) -> tuple[dict[str, str], dict]:
    hashes = {name: _digest(root / name) for name in weights}
    return hashes, _without_timing(json.loads((root / metrics).read_text()))


@pytest.fixture(scope="module")
def repro_copy(
    smoke_run: SmokeRun, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, dict[str, str]]:
    """A copy of the smoke checkout (its outputs, DVC cache and MLflow store)."""
    target = tmp_path_factory.mktemp("determinism") / "checkout"
    shutil.copytree(smoke_run.checkout, target, symlinks=True)
    return target, smoke_run.env


@pytest.mark.parametrize(
    ("command", "weights", "metrics"),
    [
        (["stages.base_model"], ["models/base/model.safetensors"], "metrics/base_model.json"),
        (
            ["stages.train", "--method", "ta_grpo", "--seed", "0"],
            ["models/ta_grpo-s0/model.safetensors", "rollouts/ta_grpo-s0"],
            "metrics/train/ta_grpo-s0.json",
        ),
        (
            ["stages.train", "--method", "grpo_ds", "--seed", "0"],
            ["models/grpo_ds-s0/model.safetensors"],
            "metrics/train/grpo_ds-s0.json",
        ),
    ],
    ids=["base_model", "train-ta_grpo", "train-grpo_ds"],
)
def test_a_stage_run_again_gives_the_outputs_dvc_repro_wrote(
    repro_copy, command, weights, metrics
) -> None:
    root, env = repro_copy
    by_repro = _snapshot(root, weights, metrics)
    run_checked([sys.executable, "-m", *command], root, env)
    again = _snapshot(root, weights, metrics)
    assert by_repro[0] == again[0], "weights differ between two identical runs"
    assert by_repro[1] == again[1], "metrics differ between two identical runs"


def test_dvc_exp_run_with_documented_overrides_and_exp_show(smoke_run: SmokeRun) -> None:
    """README's experiment commands on the smoke run: `dvc exp run -S` then `make exp-show`
    (the key columns only). Last in this module: it leaves the experiment in the workspace."""
    checkout, env = smoke_run.checkout, smoke_run.env
    output = run_checked(
        [
            "dvc",
            "exp",
            "run",
            "-n",
            "lr-2e-4",
            "-S",
            "train.learning_rate=2e-4",
            # The user guide's restriction to fewer runs, narrower: each stage it keeps costs
            # CI about 50 s of start-up.
            "-S",
            "runs.methods=[grpo]",
            "-S",
            "diagnostics.policies=[grpo-s0]",  # of the policies the experiment trains
            "-S",
            "runs.one_seed_methods=[]",
            "-S",
            "runs.data_scaling.methods=[]",
        ],
        checkout,
        env,
    )
    assert "Running stage 'train@grpo-0'" in output  # lr changed: retrained
    assert "Running stage 'train_control@grpo_flipped-0'" in output
    assert "train@ta_grpo-0" not in output  # not in the experiment's runs
    assert "train_one_seed@grpo_ds-0" not in output
    assert "train_scaling@" not in output
    shown = run_checked(["make", "-s", "exp-show", "EXP_SHOW_ARGS=--csv"], checkout, env)
    rows = list(csv.DictReader(io.StringIO(shown)))
    experiment = next(row for row in rows if row["Experiment"] == "lr-2e-4")
    baseline = next(row for row in rows if row["rev"] not in ("workspace", experiment["rev"]))
    assert float(experiment["train.learning_rate"]) == pytest.approx(2e-4)
    # The baseline keeps the checkout's learning rate (the smoke profile does not set one).
    checkout_lr = yaml.safe_load((ROOT / "params.yaml").read_text())["train"]["learning_rate"]
    assert float(baseline["train.learning_rate"]) == pytest.approx(float(checkout_lr))
    key = [column for column in experiment if column.endswith("competition.grpo.pass@4")]
    # (The baseline row holds what the checkout's commit holds: a fresh clone's committed
    # metrics are the default's, which has no such column value.)
    assert key and 0.0 <= float(experiment[key[0]]) <= 1.0
    # The key columns, not every metric of every stage.
    kept = re.compile(r"Experiment|rev|Created|runs\..*|train\.learning_rate|.*\.pass@\d+")
    assert all(kept.fullmatch(column) for column in experiment), list(experiment)


def test_every_dvc_stage_has_a_prefect_flow() -> None:
    from flows.stages import STAGE_FLOWS

    stages = yaml.safe_load((ROOT / "dvc.yaml").read_text())["stages"]
    assert set(stages) == set(STAGE_FLOWS)
