"""Genuine verl 0.9.1 training steps of every TA method on the CPU (slow; in CI).

A scratch copy of this project (``profiles/verl-cpu.yaml`` plus the small sizes below) runs the
project's data stage and starts from the committed warm-started mini-world policy (the
``base_model`` stage's output for this recipe; refused when the recipe changed:
tests/verl_test_base.py), then each method trains for 2 steps through the real DVC stage command
``python -m stages.train --method M``: stock ``python -m verl.trainer.main_ppo`` with the
project's CPU platform, ``hf`` rollout engine and ``tagrpo_sync`` trainer. One run per method
is shared by that method's assertions (module-scoped fixtures); grpo's run is killed after its
first checkpoint and resumed.

Everything is asserted from what verl itself wrote: the rollout dumps (token ids, the old /
reference log-probs and advantages verl computed, rewards), its metrics log, its checkpoints and
their Hugging Face exports, and the MLflow store. Nothing is mocked.

The training set is four mini-world questions with their rephrasings, one of them with a gold
answer no response can reach ("unreachable"): its groups are all-wrong whenever it is sampled,
so dynamic sampling must evict it and refill (deterministically, whatever is sampled).

Tolerances: log-probs, 1e-4 nats (fp32 on both sides; measured ~2e-6: verl's FSDP2 forward
without remove-padding vs :mod:`tagrpo.training.scoring`); advantages, 1e-5 (verl's float32
estimator vs the float64 core; measured ~2e-7).
"""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from scratch_project import run_checked
from verl_test_base import BASE_PROFILE, build_data, install_committed_base

from tagrpo.algorithms import AVSPOConfig, avspo_advantages, group_ids, grpo_advantages
from tagrpo.algorithms.anchoring import anchoring_shift
from tagrpo.backends.models import load_causal_lm
from tagrpo.data.schema import QUESTION_SCHEMA, read_questions
from tagrpo.splits.training_set import load_training_questions, miniworld_neighbours
from tagrpo.training.scoring import build_scoring_batch, score_log_probs
from tagrpo.verl_ext.process import processes_marked

# Time limit: a test's set-up includes its method's run (and the first, the project): measured 843 s
# for all eleven tests beside another test module on 2 cores, the longest set-up 270 s.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

G, N, BATCH, STEPS = 4, 3, 2, 2
UNREACHABLE = "miniworld-unreachable"
LOG_PROB_TOLERANCE = 1e-4
ADVANTAGE_TOLERANCE = 1e-5

# The committed warm-started policy's recipe (tests/verl_test_base.py), then the verl runs' sizes.
TEST_PROFILE = {
    **BASE_PROFILE,
    "train": {
        "input": "data/verl-test/train.parquet",
        "neighbours": "column",
        "questions": 4,
        "epochs": 1,
        "steps": STEPS,
        "batch_questions": BATCH,
        "mini_batches": 1,
        "group_size": G,
        "n_neighbours": N,
        "max_new_tokens": 48,  # a worked chain of 2 is about 30 tokens with its end token
        "checkpoints": [0.5, 1.0],
    },
    "verl": {
        "micro_batch_size_per_gpu": 8,
        "log_prob_micro_batch_size_per_gpu": 8,
    },
}


@dataclass(frozen=True)
class Project:
    root: Path
    env: dict[str, str]
    seconds: float  # to build it: the data stage and the committed base


@dataclass(frozen=True)
class VerlRun:
    """One method's finished run: its dumps (by step), metrics log and summary."""

    method: str
    policy: str
    root: Path
    dumps: dict[int, pd.DataFrame]
    metrics: list[dict[str, float]]
    summary: dict[str, float]
    seconds: float

    def metric(self, key: str) -> list[float]:
        return [record[key] for record in self.metrics if key in record]


def success_rates(root: Path, questions) -> dict[str, float]:
    """Each question's share of correct responses from the base policy (16 samples of its q0
    at temperature 1, the training length and seed 0): the project's hf backend and grader."""
    from tagrpo.backends.base import SamplingParams
    from tagrpo.backends.hf import HFBackend
    from tagrpo.data.prompts import chat_messages
    from tagrpo.grading.verify import grade_response

    torch.set_num_threads(1)
    model, tokenizer = load_causal_lm(root / "models" / "base")
    backend = HFBackend(model, tokenizer, 2048)
    params = SamplingParams(
        n=16, temperature=1.0, top_p=1.0, max_new_tokens=TEST_PROFILE["train"]["max_new_tokens"],
        seed=0,
    )  # fmt: skip
    outputs = backend.generate([chat_messages(q.problem, q.choices) for q in questions], params)
    return {
        q.id: float(np.mean([grade_response(c.text, q.answer, q.answer_kind).correct for c in out]))
        for q, out in zip(questions, outputs, strict=True)
    }


def write_training_input(root: Path) -> dict[str, float]:
    """The three training questions the base solves closest to half the time, and one with an
    unreachable gold answer, with rephrasings; returns the chosen questions' success rates.

    Mixed groups are what the grouping checks compare and what dynamic sampling keeps: three
    questions the base almost always solved or failed (the first three of the expression
    family) cost grpo_ds 375 s and 1,440 refill responses to fill step 1's two groups."""
    questions = read_questions(str(root / "data" / "processed" / "train.parquet"))
    rates = success_rates(root, questions)
    questions = sorted(questions, key=lambda q: (abs(rates[q.id] - 0.5), q.id))[:3]
    unreachable = replace(questions[0], id=UNREACHABLE, answer="-987654")
    rows = [*questions, unreachable]
    table = pa.Table.from_pylist([q.to_record() for q in rows], schema=QUESTION_SCHEMA)
    rephrasings = [miniworld_neighbours(q, N) for q in rows]
    table = table.append_column("rephrasings", pa.array(rephrasings, pa.list_(pa.string())))
    (root / "data" / "verl-test").mkdir(parents=True, exist_ok=True)
    pq.write_table(table, root / "data" / "verl-test" / "train.parquet")
    return {q.id: rates[q.id] for q in questions}


@pytest.fixture(scope="module")
def verl_project(tmp_path_factory: pytest.TempPathFactory, wall_seconds) -> Project:
    """The scratch project with the committed warm-started policy (refused if its recipe
    changed: tests/verl_test_base.py) and the training input."""
    started = time.perf_counter()
    root = tmp_path_factory.mktemp("verl-cpu")
    env = build_data(root, TEST_PROFILE)
    install_committed_base(root)
    rates = write_training_input(root)
    seconds = time.perf_counter() - started
    print(f"\n[verl-cpu] training questions' base success rates (16 samples): {rates}")
    wall_seconds("verl-cpu project (data, committed base)", seconds)
    return Project(root, env, seconds)


def train(verl_project: Project, method: str) -> VerlRun:
    """``python -m stages.train --method M`` (the DVC stage command) and what it left."""
    started = time.perf_counter()
    run_checked(
        [sys.executable, "-m", "stages.train", "--method", method],
        verl_project.root,
        verl_project.env,
    )
    return finished_run(verl_project, method, time.perf_counter() - started)


def finished_run(verl_project: Project, method: str, seconds: float) -> VerlRun:
    """What a finished ``stages.train --method M`` left."""
    policy = f"{method}-s0"
    # Every process of the run (Ray's daemons and workers carry the run's environment, which
    # names this policy's work area) is gone once the stage has returned.
    assert processes_marked(str(verl_project.root / "checkpoints" / "verl" / policy)) == []
    dumps = {}
    for path in sorted((verl_project.root / "rollouts" / policy).glob("checkpoint-*.parquet")):
        frame = pd.read_parquet(path)
        dumps[int(frame["step"].iloc[0])] = frame
    metrics = read_history(verl_project.root / "plots" / "train" / f"{policy}.csv")
    summary = json.loads((verl_project.root / "metrics" / "train" / f"{policy}.json").read_text())
    return VerlRun(method, policy, verl_project.root, dumps, metrics, summary, seconds)


def read_history(path: Path) -> list[dict[str, float]]:
    """The per-step metrics the stage wrote (every number verl logged; the work area with its
    metrics log is gone once the stage committed)."""
    frame = pd.read_csv(path)
    return [
        {key: float(value) for key, value in row.items() if pd.notna(value)}
        for row in frame.to_dict("records")
    ]


@pytest.fixture(scope="module")
def ta_grpo(verl_project: Project, wall_seconds) -> VerlRun:
    run = train(verl_project, "ta_grpo")
    wall_seconds(f"verl-cpu {run.method}: 2 steps", run.seconds)
    return run


@pytest.fixture(scope="module")
def ta_grpo_star(verl_project: Project, wall_seconds) -> VerlRun:
    run = train(verl_project, "ta_grpo_star")
    wall_seconds(f"verl-cpu {run.method}: 2 steps", run.seconds)
    return run


@pytest.fixture(scope="module")
def grpo_ds(verl_project: Project, wall_seconds) -> VerlRun:
    run = train(verl_project, "grpo_ds")
    wall_seconds(f"verl-cpu {run.method}: 2 steps", run.seconds)
    return run


@pytest.fixture(scope="module")
def avspo(verl_project: Project, wall_seconds) -> VerlRun:
    run = train(verl_project, "avspo")
    wall_seconds(f"verl-cpu {run.method}: 2 steps", run.seconds)
    return run


# -- helpers: the project's own code, applied to what verl dumped --


def prompt_ids_of(tokenizer, messages) -> list[int]:
    """Chat template + encode: what the rollout sends, what the local backend scores."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def training_questions(root: Path):
    questions = load_training_questions(root / "data" / "verl-test" / "train.parquet", N, "column")
    return {q.id: q for q in questions}


def scored_old_log_probs(model_dir: Path, frame: pd.DataFrame) -> list[np.ndarray]:
    """``tagrpo.training`` scoring of stored prompt + response with the weights of a folder."""
    model, tokenizer = load_causal_lm(model_dir)
    prompts = [list(ids) for ids in frame["prompt_ids"]]
    responses = [list(ids) for ids in frame["response_ids"]]
    batch = build_scoring_batch(prompts, responses, tokenizer.pad_token_id)
    scores = score_log_probs(model, batch, micro_batch=64)
    return [scores[row][batch.target_mask[row]].numpy() for row in range(len(frame))]


def max_log_prob_difference(model_dir: Path, frame: pd.DataFrame) -> float:
    expected = scored_old_log_probs(model_dir, frame)
    return max(
        float(np.abs(np.asarray(list(got)) - want).max())
        for got, want in zip(frame["old_log_probs"], expected, strict=True)
    )


def dumped_advantages(frame: pd.DataFrame) -> np.ndarray:
    """The advantage verl trained each response with (constant over its tokens)."""
    values = []
    for tokens in frame["token_advantages"]:
        tokens = np.asarray(list(tokens))
        assert np.all(tokens == tokens[0])
        values.append(tokens[0])
    return np.asarray(values)


def prompt_uids(frame: pd.DataFrame) -> pd.Series:
    """verl's prompt uid of each trajectory (its key is ``{uid}_{session}_{index}``).

    A question can be drawn twice in one step (dynamic sampling refills from the next pass over
    the data): groups are per uid, not per question id.
    """
    return frame["key"].str.rsplit("_", n=2).str[0]


def recomputed_advantages(frame: pd.DataFrame, grouping: str) -> np.ndarray:
    """``tagrpo.algorithms`` on the dumped rewards with the method's groups."""
    question, _ = pd.factorize(prompt_uids(frame))
    ids, count = group_ids(question, frame["variant"].to_numpy(), grouping)
    return grpo_advantages(frame["reward"].to_numpy(), ids, count)


def check_checkpoints(run: VerlRun) -> None:
    """HF exports at each checkpoint; the final policy is the last one; weights moved."""
    export = run.root / "models" / run.policy
    names = sorted(p.name for p in (export / "checkpoints").iterdir())
    assert names == ["checkpoint-050", "checkpoint-100"]
    final, _ = load_causal_lm(export)
    last, _ = load_causal_lm(export / "checkpoints" / "checkpoint-100")
    base, _ = load_causal_lm(run.root / "models" / "base")
    moved = 0.0
    for (name, a), b, c in zip(
        final.state_dict().items(),
        last.state_dict().values(),
        base.state_dict().values(),
        strict=True,
    ):
        assert torch.equal(a, b), name
        moved = max(moved, float((a - c).abs().max()))
    assert moved > 0.0, "training did not change the weights"


def check_log_prob_parity(run: VerlRun) -> dict[int, float]:
    """verl's old log-probs at step s = scoring with the weights after step s-1."""
    weights = {1: run.root / "models" / "base"}
    weights[2] = run.root / "models" / run.policy / "checkpoints" / "checkpoint-050"
    differences = {step: max_log_prob_difference(weights[step], run.dumps[step]) for step in (1, 2)}
    for step, difference in differences.items():
        assert difference < LOG_PROB_TOLERANCE, (step, difference)
    return differences


def mlflow_runs(root: Path, name: str) -> list[tuple[str, set[str]]]:
    with sqlite3.connect(root / "mlflow.db") as db:
        runs = db.execute("SELECT run_uuid FROM runs WHERE name = ?", (name,)).fetchall()
        return [
            (
                run,
                {k for (k,) in db.execute("SELECT key FROM metrics WHERE run_uuid = ?", (run,))},
            )
            for (run,) in runs
        ]


def report(run: VerlRun, **figures: float) -> None:
    steps = run.metric("timing_s/step")
    line = ", ".join(f"{key} {value:.3g}" for key, value in figures.items())
    print(
        f"\n[verl-cpu] {run.method}: {len(run.metrics)} steps, wall {run.seconds:.0f} s, "
        f"seconds per step {', '.join(f'{s:.1f}' for s in steps)}; {line}"
    )


# -- ta_grpo --


def test_ta_grpo_trains_every_neighbour_response_under_q0(ta_grpo: VerlRun) -> None:
    run = ta_grpo
    assert sorted(run.dumps) == [1, 2] and len(run.metrics) == STEPS
    questions = training_questions(run.root)
    _, tokenizer = load_causal_lm(run.root / "models" / "base")
    for frame in run.dumps.values():
        assert len(frame) == BATCH * (N + 1) * G
        assert frame.groupby(prompt_uids(frame))["variant"].apply(sorted).map(tuple).nunique() == 1
        assert sorted(frame["variant"].unique()) == [0, 1, 2, 3]
        for row in frame.itertuples():
            question = questions[row.question_id]
            q0 = prompt_ids_of(tokenizer, question.messages(0))
            generated = prompt_ids_of(tokenizer, question.messages(row.variant))
            # Generated from its rephrasing, stored (and so scored, Eq. 4) with q0's ids.
            assert list(row.generation_prompt_ids) == generated
            assert list(row.prompt_ids) == q0
            assert row.session // G == row.variant
        neighbours = frame[frame["variant"] > 0]
        assert (
            neighbours["generation_prompt_ids"].map(list) != neighbours["prompt_ids"].map(list)
        ).all()


def test_ta_grpo_old_log_probs_equal_scoring_under_q0(ta_grpo: VerlRun) -> None:
    differences = check_log_prob_parity(ta_grpo)
    report(ta_grpo, **{f"logprob_maxdiff_step{k}": v for k, v in differences.items()})


def check_anchoring_shift(run: VerlRun) -> float:
    """verl's anchoring pass: each neighbour response scored by the actor under the prompt the
    method does not store; its metrics equal the project's scoring of the dumps under q0 and
    under the generation prompt with the weights of that step. Returns the last ESS/n."""
    questions = training_questions(run.root)
    _, tokenizer = load_causal_lm(run.root / "models" / "base")
    weights = {1: run.root / "models" / "base"}
    weights[2] = run.root / "models" / run.policy / "checkpoints" / "checkpoint-050"
    logged = {int(record["step"]): record for record in run.metrics}
    for step, frame in run.dumps.items():
        neighbours = frame[frame["variant"] > 0].reset_index(drop=True)
        q0 = [prompt_ids_of(tokenizer, questions[q].messages(0)) for q in neighbours["question_id"]]
        under_q0 = scored_old_log_probs(weights[step], neighbours.assign(prompt_ids=q0))
        under_qn = scored_old_log_probs(
            weights[step], neighbours.assign(prompt_ids=neighbours["generation_prompt_ids"])
        )
        groups = (prompt_uids(neighbours) + "/" + neighbours["variant"].astype(str)).tolist()
        expected = anchoring_shift(under_q0, under_qn, [hash(g) for g in groups])
        assert expected["anchoring/neighbour_responses"] == BATCH * N * G
        for key, value in expected.items():
            assert logged[step][key] == pytest.approx(value, abs=LOG_PROB_TOLERANCE), (step, key)
    return run.metric("anchoring/ess_fraction")[-1]


def test_ta_grpo_logs_the_anchoring_shift_of_its_old_policy(ta_grpo: VerlRun) -> None:
    report(ta_grpo, anchoring_ess_fraction=check_anchoring_shift(ta_grpo))


def test_ta_grpo_star_logs_the_anchoring_shift_of_its_old_policy(ta_grpo_star: VerlRun) -> None:
    report(ta_grpo_star, anchoring_ess_fraction=check_anchoring_shift(ta_grpo_star))


def test_ta_grpo_advantages_are_the_joint_group_advantages(ta_grpo: VerlRun) -> None:
    worst = 0.0
    for frame in ta_grpo.dumps.values():
        used = dumped_advantages(frame)
        expected = recomputed_advantages(frame, "joint")  # (N+1)G responses per group, Eq. 3
        assert frame.groupby(prompt_uids(frame)).size().eq((N + 1) * G).all()
        worst = max(worst, float(np.abs(used - expected).max()))
        assert np.allclose(used, expected, atol=ADVANTAGE_TOLERANCE, rtol=0)
    assert any((np.abs(dumped_advantages(f)) > 0.1).any() for f in ta_grpo.dumps.values())
    report(ta_grpo, advantage_maxdiff=worst)


def test_ta_grpo_weights_moved_exports_and_one_mlflow_run(ta_grpo: VerlRun) -> None:
    check_checkpoints(ta_grpo)
    runs = mlflow_runs(ta_grpo.root, f"{ta_grpo.policy} · train")
    assert len(runs) == 1
    _, metrics = runs[0]
    expected = {
        "joint/zero_gradient_rate",
        "original/zero_gradient_rate",
        "neighbours/zero_gradient_rate",
        "train/effective_zero_gradient_rate",
        "responses_generated",
        "actor/pg_loss",
        "actor/kl_loss",
        "summary/steps",
    }
    assert expected <= metrics, expected - metrics
    assert ta_grpo.summary["steps"] == STEPS
    # The rollout engine sampled step 2 with the weights verl synced after step 1.
    assert ta_grpo.dumps[1]["weights_step"].eq(0).all()
    assert ta_grpo.dumps[2]["weights_step"].eq(1).all()


# -- ta_grpo_star --


def test_ta_grpo_star_groups_per_rephrasing_and_keeps_each_prompt(ta_grpo_star: VerlRun) -> None:
    run = ta_grpo_star
    questions = training_questions(run.root)
    _, tokenizer = load_causal_lm(run.root / "models" / "base")
    worst, grouping_matters = 0.0, False
    for frame in run.dumps.values():
        for row in frame.itertuples():
            own = prompt_ids_of(tokenizer, questions[row.question_id].messages(row.variant))
            assert list(row.prompt_ids) == own == list(row.generation_prompt_ids)
        used = dumped_advantages(frame)
        expected = recomputed_advantages(frame, "per_variant")  # G responses per group
        worst = max(worst, float(np.abs(used - expected).max()))
        assert np.allclose(used, expected, atol=ADVANTAGE_TOLERANCE, rtol=0)
        joint = recomputed_advantages(frame, "joint")
        grouping_matters |= not np.allclose(joint, expected, atol=1e-3)
    assert grouping_matters  # joint groups would have trained with other advantages
    differences = check_log_prob_parity(run)
    check_checkpoints(run)
    report(
        run,
        advantage_maxdiff=worst,
        **{f"logprob_maxdiff_step{k}": v for k, v in differences.items()},
    )


# -- grpo_ds --


def test_grpo_ds_filter_groups_dropped_all_equal_groups_and_refilled(grpo_ds: VerlRun) -> None:
    run = grpo_ds
    evicted = sum(run.metric("training/filter_groups/evicted_samples"))
    assert evicted >= 1  # at least the unreachable question's all-wrong group
    assert sum(run.metric("ds/dropped_groups")) == evicted
    for frame in run.dumps.values():
        uids = prompt_uids(frame)
        assert uids.nunique() == BATCH and len(frame) == BATCH * G  # refilled to full size
        assert (frame["variant"] == 0).all()
        rewards = frame.groupby(uids)["reward"]
        assert (rewards.max() > rewards.min()).all()  # only informative groups were trained
        assert UNREACHABLE not in set(frame["question_id"])
        used = dumped_advantages(frame)
        assert np.allclose(
            used, recomputed_advantages(frame, "per_original"), atol=ADVANTAGE_TOLERANCE, rtol=0
        )
    generated = run.metrics[-1]["responses_generated"]
    assert generated > STEPS * BATCH * G  # the refills were sampled too
    report(
        run,
        evicted_groups=evicted,
        responses_generated=generated,
        refill_responses=generated - STEPS * BATCH * G,
    )


# -- grpo --


def test_grpo_trains_on_q0_and_the_engine_samples_with_synced_weights(grpo: VerlRun) -> None:
    run = grpo
    differences = check_log_prob_parity(run)
    for frame in run.dumps.values():
        assert (frame["variant"] == 0).all() and len(frame) == BATCH * G
        used = dumped_advantages(frame)
        assert np.allclose(
            used, recomputed_advantages(frame, "per_original"), atol=ADVANTAGE_TOLERANCE, rtol=0
        )
    # The hf engine's own log-probs equal verl's old log-probs on the same weights at step 2:
    # the weights trained in step 1 reached the rollout server through verl's weight sync.
    frame = run.dumps[2]
    rollout = max(
        float(np.abs(np.asarray(list(a)) - np.asarray(list(b))).max())
        for a, b in zip(frame["rollout_log_probs"], frame["old_log_probs"], strict=True)
    )
    assert rollout < LOG_PROB_TOLERANCE
    assert frame["weights_step"].eq(1).all()
    check_checkpoints(run)
    report(
        run,
        rollout_vs_old_logprob_maxdiff=rollout,
        **{f"logprob_maxdiff_step{k}": v for k, v in differences.items()},
    )


# -- avspo --


def test_avspo_ran_the_registered_estimator(avspo: VerlRun) -> None:
    run = avspo
    config = AVSPOConfig(**avspo_settings(run.root))
    assert len(run.metric("avspo/acr")) == STEPS and len(run.metric("avspo/tau")) == STEPS
    worst = 0.0
    for step, frame in run.dumps.items():
        tau = run.metrics[step - 1]["avspo/tau"]
        question, _ = pd.factorize(prompt_uids(frame))
        ids, count = group_ids(question, frame["variant"].to_numpy(), "per_original")
        expected = avspo_advantages(frame["reward"].to_numpy(), ids, count, config, tau)
        used = dumped_advantages(frame)
        worst = max(worst, float(np.abs(used - expected.advantages).max()))
        assert np.allclose(used, expected.advantages, atol=ADVANTAGE_TOLERANCE, rtol=0)
        assert run.metrics[step - 1]["avspo/acr"] == pytest.approx(expected.acr)
    # The unreachable question's all-wrong group got virtual rewards: non-zero advantages
    # where GRPO's would all be 0 (the params' trigger is `always`).
    assert sum(run.metric("avspo/virtual_samples")) >= 1
    report(run, advantage_maxdiff=worst)


def avspo_settings(root: Path) -> dict:
    """``train.estimators.avspo`` of the scratch project (the embedded default's: trigger
    ``always``)."""
    params = yaml.safe_load((root / "params.yaml").read_text())
    return dict(params["train"]["estimators"]["avspo"])


# -- resume: grpo's run is killed after its first checkpoint and resumed; every grpo check reads
# the resumed run (an uninterrupted grpo run as well cost CI about 300 s of its budget).


@dataclass(frozen=True)
class ResumedRun:
    run: VerlRun  # what the resumed attempt committed; its seconds: both attempts, the kill's wait
    killed_after: int  # the checkpoint step the kill came after
    killed_committed_nothing: bool  # no export, metrics or dumps of the policy after the kill
    kept_export_unchanged: bool  # checkpoint-050 of the killed attempt is the one committed


def folder_digest(folder: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()


@pytest.fixture(scope="module")
def grpo_resumed(verl_project: Project, wall_seconds) -> ResumedRun:
    """The DVC stage command of ``grpo`` killed (SIGTERM, as a stopped ``dvc repro``) once verl
    has written the checkpoint of step 1, then run again to the end."""
    import signal
    import subprocess

    root, policy = verl_project.root, "grpo-s0"
    area = root / "checkpoints" / "verl" / policy
    tracker = area / "latest_checkpointed_iteration.txt"
    started = time.perf_counter()
    command = [sys.executable, "-m", "stages.train", "--method", "grpo"]
    stage = subprocess.Popen(command, cwd=root, env=verl_project.env, stdout=subprocess.DEVNULL)
    try:
        while stage.poll() is None and not (tracker.exists() and tracker.read_text().strip()):
            time.sleep(0.2)
        killed_after = int(tracker.read_text())
        stage.send_signal(signal.SIGTERM)
        assert stage.wait(timeout=300) != 0, "the stage finished before it could be killed"
    finally:
        if stage.poll() is None:
            stage.kill()
    assert processes_marked(str(area)) == []  # the killed run's processes are gone
    # A stage commits its outputs at its end only (issue 40.3): the killed one left none.
    committed = [
        root / "models" / policy,
        root / "metrics" / "train" / f"{policy}.json",
        root / "rollouts" / policy,
    ]
    killed_committed_nothing = not any(path.exists() for path in committed)
    kept = area / "model" / "checkpoints"
    assert sorted(p.name for p in kept.iterdir()) == ["checkpoint-050"]  # survives the kill
    kept_digest = folder_digest(kept / "checkpoint-050")
    run_checked(command, root, verl_project.env)
    run = finished_run(verl_project, "grpo", time.perf_counter() - started)
    unchanged = folder_digest(root / "models" / policy / "checkpoints" / "checkpoint-050")
    wall_seconds("verl-cpu grpo: 2 steps, killed after 1 and resumed", run.seconds)
    return ResumedRun(run, killed_after, killed_committed_nothing, unchanged == kept_digest)


@pytest.fixture(scope="module")
def grpo(grpo_resumed: ResumedRun) -> VerlRun:
    return grpo_resumed.run


def test_a_killed_run_resumes_from_its_checkpoint(
    grpo_resumed: ResumedRun, ta_grpo: VerlRun
) -> None:
    """Killed after its step-1 checkpoint, the rerun resumes from it: it trains step 2 only, on
    the two questions step 1 did not draw (verl's dataloader position: one epoch of four
    questions in two steps of two; a restarted loader draws step 1's again), starting from the
    checkpoint's weights (its old log-probs equal scoring with them, 1e-4), with the trainer's
    state restored (the cumulative response count; the learning-rate schedule's step 2, as the
    uninterrupted ta_grpo run of the same schedule logged it), and commits the killed attempt's
    step-1 export and dump."""
    resumed = grpo_resumed
    run = resumed.run
    assert resumed.killed_after == 1
    assert resumed.killed_committed_nothing
    assert run.summary["attempts"] == 2.0 and run.summary["resumed_from_step"] == 1.0
    assert run.summary["steps"] == STEPS
    assert run.summary["responses_generated"] == STEPS * BATCH * G  # step 1's counted once
    assert resumed.kept_export_unchanged
    assert sorted(run.dumps) == [1, 2]
    drawn = [set(run.dumps[step]["question_id"]) for step in (1, 2)]
    assert len(drawn[0]) == len(drawn[1]) == BATCH and not drawn[0] & drawn[1]
    # Step 1's dump is the killed attempt's (the same run's), step 2 the rerun's.
    assert run.dumps[1]["weights_step"].eq(0).all() and run.dumps[2]["weights_step"].eq(1).all()
    step_1 = run.root / "models" / run.policy / "checkpoints" / "checkpoint-050"
    assert max_log_prob_difference(step_1, run.dumps[2]) < LOG_PROB_TOLERANCE
    assert run.metric("actor/lr") == ta_grpo.metric("actor/lr")
    plot = pd.read_csv(run.root / "plots" / "train" / f"{run.policy}.csv")
    assert plot["step"].tolist() == [1, 2]
    assert not (run.root / "checkpoints" / "verl" / run.policy).exists()  # released
    report(run, resume_wall_s=run.seconds)
