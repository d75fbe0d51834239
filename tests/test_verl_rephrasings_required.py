"""The launcher refuses TA training rows without rephrasings before verl starts.

Without N rephrasings per question, ``ta_grpo`` / ``ta_grpo_star`` would sample q0 for all
(N+1)G sessions: (N+1)xGRPO under another name. Each way a training set can lack them (an empty
list, no ``rephrasings`` column, ``train.neighbours: none``) is an error naming the question;
verl is never started. Methods sampling q0 only are not affected.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from test_verl_launcher import scratch  # noqa: F401  (the fixture)

from tagrpo.config.params import Params, validate_params
from tagrpo.data.schema import QUESTION_SCHEMA, Question
from tagrpo.verl_ext.launcher import run_training


def never_started(argv, env, cwd, check):
    raise AssertionError("verl was started")


def launcher_params(params: dict) -> Params:
    """The scratch project's params as the train stage hands them to the verl launcher."""
    return validate_params(params)


def without_neighbours(config: Params) -> Params:
    """``train.neighbours: none``, which the params check refuses when runs.methods sample
    rephrasings; the launcher must refuse it too (``--method`` need not be in runs.methods)."""
    train = config.train.model_copy(update={"neighbours": "none"})
    return config.model_copy(update={"train": train})


def write_input(root, rephrasings: list[list[str]] | None) -> None:
    questions = [
        Question(f"q{i}", "math", "train", f"What is {i} + 4?", str(i + 4)) for i in range(3)
    ]
    table = pa.Table.from_pylist([q.to_record() for q in questions], schema=QUESTION_SCHEMA)
    if rephrasings is not None:
        table = table.append_column("rephrasings", pa.array(rephrasings, pa.list_(pa.string())))
    pq.write_table(table, root / "data" / "rephrased" / "train.parquet")


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star"])
def test_empty_rephrasing_lists_are_refused(scratch, method) -> None:  # noqa: F811
    root, params, _ = scratch
    params = launcher_params(params)
    write_input(root, [["a", "b", "c"], [], ["a", "b", "c"]])
    with pytest.raises(ValueError, match="q1: 0 rephrasings, N=3 needed"):
        run_training(method, 0, f"{method}-s0", params, runner=never_started)


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star"])
def test_a_missing_rephrasings_column_is_refused(scratch, method) -> None:  # noqa: F811
    root, params, _ = scratch
    params = launcher_params(params)
    write_input(root, None)  # not mini-world questions: `auto` finds no neighbours
    with pytest.raises(ValueError, match=r"question 'q0' has 0 \(3 of 3 training rows"):
        run_training(method, 0, f"{method}-s0", params, runner=never_started)


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star"])
def test_neighbours_none_is_refused(scratch, method) -> None:  # noqa: F811
    _, params, _ = scratch
    params = without_neighbours(launcher_params(params))
    with pytest.raises(ValueError, match=rf"{method} samples N=3 rephrasings.*question 'q0'"):
        run_training(method, 0, f"{method}-s0", params, runner=never_started)


def test_methods_sampling_q0_train_without_rephrasings(scratch) -> None:  # noqa: F811
    _, params, _ = scratch
    params = without_neighbours(launcher_params(params))
    started = []

    def fake_verl(argv, env, cwd, check):
        started.append(argv)
        raise RuntimeError("stop after the start")

    with pytest.raises(RuntimeError, match="stop after the start"):
        run_training("grpo", 0, "grpo-s0", params, runner=fake_verl)
    assert len(started) == 1
