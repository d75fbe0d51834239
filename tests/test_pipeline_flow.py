"""The pipeline flow against a real Prefect server, on the small DVC project of test_plan.py
(stages are shell one-liners, so this takes a minute or two, not the smoke run's many):

* `python -m flows.pipeline serve` creates the deployment without a schedule unless --cron;
* one task per DVC stage whose wait_for inputs are DVC's edges (the flow-run graph draws them;
  they all used to come from one `dvc-dag` task);
* "stage i of n done" log lines and a progress artifact;
* the stage output in the logs without terminal escapes, and DVC's per-stage hints once.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
from prefect_server import prefect_server
from processes import stop_process
from scratch_project import run_checked
from test_plan import DVC_YAML, small_project

from tagrpo.plumbing.paths import project_root

ROOT = project_root()

# The data stage draws a tqdm-like bar that moves the cursor up (ESC [ A) and colours a word.
NOISY_DVC_YAML = DVC_YAML.replace(
    "    cmd: echo data > data.txt\n",
    "    cmd: printf 'drawing 1/2\\033[A\\rdrawing 2/2\\n\\033[1mbold\\033[0m\\n' && "
    "echo data > data.txt\n",
)
EDGES = {
    ("data", "train@grpo-0"),
    ("data", "train@grpo_flipped-0"),
    ("train@grpo-0", "evaluate@grpo-0"),
    ("train@grpo_flipped-0", "evaluate@grpo_flipped-0"),
    ("evaluate@grpo-0", "report"),
    ("evaluate@grpo_flipped-0", "report"),
}


def _serve(project: Path, env: dict[str, str], log: Path, *args: str) -> subprocess.Popen:
    command = [sys.executable, "-m", "flows.pipeline", "serve", *args]
    stream = log.open("wb")
    return subprocess.Popen(command, cwd=project, env=env, stdout=stream, stderr=subprocess.STDOUT)


def _deployment(api, name: str, serve: subprocess.Popen, log: Path, timeout: float = 300):
    deadline = time.monotonic() + timeout
    while (deployment := api.deployment("tagrpo-pipeline", name)) is None:
        if serve.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no deployment:\n{log.read_text(errors='replace')[-3000:]}")
        time.sleep(2)
    return deployment


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_flow_graph_progress_logs_and_schedules(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    env = {**small_project(project, NOISY_DVC_YAML), "PYTHONPATH": str(ROOT)}
    home = tmp_path / "prefect"
    home.mkdir()
    with prefect_server(home) as (api, settings):
        run_env = {**env, **settings}
        for name, args, expected in (
            ("rerun", [], []),
            ("daily", ["--name", "daily", "--cron", "0 3 * * *"], ["0 3 * * *"]),
        ):
            log = tmp_path / f"serve-{name}.log"
            serve = _serve(project, run_env, log, *args)
            try:
                deployment = _deployment(api, name, serve, log)
            finally:
                stop_process(serve)
            crons = [entry["schedule"].get("cron") for entry in deployment["schedules"]]
            assert crons == expected, name

        run_checked(
            [sys.executable, "-m", "flows.pipeline", "run", "--mode", "workspace"],
            project,
            run_env,
        )
        # The run started here (the daily deployment's scheduler adds scheduled ones).
        body = {"flow_runs": {"deployment_id": {"is_null_": True}}, "limit": 10}
        (flow_run,) = api.call("POST", "/flow_runs/filter", body)
        assert flow_run["state_type"] == "COMPLETED"
        tasks = api.task_runs(flow_run["id"])
        messages = [line["message"] for line in api.logs(flow_run["id"])]
        artifacts = {a["key"]: a for a in api.artifacts(flow_run["id"])}

    name_of = {task["id"]: task["name"] for task in tasks}
    order = [task["name"] for task in sorted(tasks, key=lambda t: t["expected_start_time"])]
    assert order == [
        "data",
        "train@grpo-0",
        "train@grpo_flipped-0",
        "evaluate@grpo-0",
        "evaluate@grpo_flipped-0",
        "report",
    ]
    drawn = {
        (name_of[parent["id"]], task["name"])
        for task in tasks
        for inputs in task["task_inputs"].values()
        for parent in inputs
        if parent.get("input_type") == "task_run"
    }
    assert drawn == EDGES
    assert all(task["task_inputs"]["stage"] == [] for task in tasks)  # no arrow from a dag task

    done = [m for m in messages if m.startswith("stage ") and " done: " in m]
    assert done[0] == "stage 1 of 6 done: data (ran); 1 ran, 0 unchanged, 5 left"
    assert done[-1] == "stage 6 of 6 done: report (ran); 6 ran, 0 unchanged, 0 left"
    assert artifacts["progress"]["data"] == 100.0
    assert not [m for m in messages if "\x1b" in m or "\x9b" in m]
    assert "drawing 2/2" in messages and "bold" in messages
    assert messages.count("Use `dvc push` to send your updates to remote storage.") == 1
    assert len([m for m in messages if m.startswith("git add ")]) == 1
