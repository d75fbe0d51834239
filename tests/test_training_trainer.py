"""The local trainer end to end on a tiny policy: every method, DS refill, outputs, seeds."""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import torch
from tiny_policy import ScriptedGrade, boxed_grade, tiny_policy, tiny_questions

from tagrpo.algorithms import METHODS
from tagrpo.backends.models import load_causal_lm
from tagrpo.data.schema import QUESTION_SCHEMA, Question
from tagrpo.miniworld.dataset import problem_meta
from tagrpo.miniworld.tasks import MiniProblem, render
from tagrpo.splits.training_set import load_training_questions, miniworld_neighbours
from tagrpo.training.outputs import DUMP_COLUMNS, checkpoint_steps, write_history_csv
from tagrpo.training.schedule import warmup_cosine
from tagrpo.training.trainer import TrainConfig, Trainer


@pytest.fixture(scope="module")
def tiny_lm():
    """conftest's tiny policy with seed 3 (the scripted runs below were written against it)."""
    return tiny_policy(seed=3)


def _fresh(tiny_lm):
    model, tokenizer = tiny_lm
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    return clone, tokenizer


def _config(method: str, **overrides) -> TrainConfig:
    values = dict(
        steps=2,
        batch_questions=2,
        mini_batches=2,
        group_size=2,
        max_new_tokens=5,
        micro_batch_sequences=64,
        learning_rate=1e-3,
        seed=7,
    )
    values.update(overrides)
    return TrainConfig.create(method, **values)


def _avspo(**changes: Any) -> dict[str, Any]:
    """train.estimators with params.yaml's AVSPO settings, changed."""
    from tagrpo.config.params import repo_params

    given = repo_params().train.estimator_config("avspo").model_dump()
    return {"avspo": {**given, **changes}}


def test_schedule_and_checkpoint_steps() -> None:
    factors = [warmup_cosine(step, 20, 2, 0.0) for step in range(20)]
    assert factors[:2] == [0.5, 1.0]  # int(0.1 * 20) = 2 warm-up steps
    assert factors[2] == 1.0 and factors[11] == pytest.approx(0.5 * (1 + math.cos(math.pi / 2)))
    assert factors[-1] == pytest.approx(0.5 * (1 + math.cos(math.pi * 17 / 18)))
    assert checkpoint_steps(20, [0.25, 0.5, 0.75, 1.0]) == {5: 0.25, 10: 0.5, 15: 0.75, 20: 1.0}
    assert checkpoint_steps(2, [0.25, 0.5, 0.75, 1.0]) == {1: 0.5, 2: 1.0}


@pytest.mark.parametrize("method", sorted(METHODS))
def test_every_method_trains_and_writes_checkpoints_and_dumps(tiny_lm, method, tmp_path) -> None:
    model, tokenizer = _fresh(tiny_lm)
    start = [p.detach().clone() for p in model.parameters()]
    grade = ScriptedGrade({"7": [True, False], "6": [False, False, True, True]})
    config = _config(method, estimators=_avspo(trigger="always"))
    trainer = Trainer(
        config,
        model,
        tokenizer,
        tiny_questions()[:2],
        grade,
        out_dir=tmp_path / "policy",
        dump_dir=tmp_path / "rollouts",
    )
    result = trainer.train()
    spec = METHODS[method]
    per_question = spec.responses_per_question(2, 3)
    assert len(result.history) == 2
    first = result.history[0]
    if not spec.dynamic_sampling:
        assert first["responses_generated"] == 2 * per_question
    assert "original/zero_gradient_rate" in first and "train/zero_gradient_rate" in first
    assert ("joint/zero_gradient_rate" in first) and (
        ("neighbours/zero_gradient_rate" in first) == spec.use_neighbours
    )
    # The training groups are the method's own: joint (N+1)G groups for TA-GRPO (Eq. 3), the
    # q0 groups for GRPO (dynamic sampling's kept batch is filtered, so it is left out here).
    if spec.grouping == "joint":
        assert first["train/zero_gradient_rate"] == first["joint/zero_gradient_rate"]
    elif spec.grouping == "per_original" and not spec.dynamic_sampling:
        assert first["train/zero_gradient_rate"] == first["original/zero_gradient_rate"]
    assert first["ratio_mean"] == pytest.approx(1.0, abs=0.05)
    moved = any(
        not torch.equal(a, b.detach()) for a, b in zip(start, model.parameters(), strict=True)
    )
    assert moved
    # Checkpoints at 50% and 100% of 2 steps, the final folder reloads, dumps have the columns.
    assert sorted(result.checkpoints) == ["checkpoint-050", "checkpoint-100"]
    reloaded, _ = load_causal_lm(tmp_path / "policy")
    for a, b in zip(reloaded.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(a, b.detach())
    dump = pd.read_parquet(result.dumps["checkpoint-100"])
    assert tuple(dump.columns) == DUMP_COLUMNS
    assert set(dump["variant"]) == set(spec.variants(3))
    assert dump["prompt_used"].str.contains("<|im_start|>assistant", regex=False).all()
    if method == "ta_grpo":
        assert (
            dump["scored_under"] == dump.groupby("question_id")["prompt_used"].transform("first")
        ).all()
    write_history_csv(result.history, tmp_path / "history.csv")
    assert list(pd.read_csv(tmp_path / "history.csv")["step"]) == [1, 2]


def test_dynamic_sampling_drops_collapsed_groups_and_counts_extra_rollouts(tiny_lm) -> None:
    model, tokenizer = _fresh(tiny_lm)
    # Question q0 (answer 7) is always right: dropped every time. q1 and q2 are mixed.
    grade = ScriptedGrade({"7": [True], "6": [True, False], "9": [False, True]})
    trainer = Trainer(
        _config("grpo_ds", steps=1, batch_questions=2), model, tokenizer, tiny_questions(), grade
    )
    result = trainer.step(1)
    metrics, generated = result.metrics, result.generated
    kept_ids = [r.question.id for r in result.kept]
    assert len(kept_ids) == 2 and "q0" not in kept_ids
    dropped = [r for r in generated if r.question.id == "q0"]
    assert metrics["ds/dropped_all_correct"] == len(dropped) >= 1
    assert metrics["ds/extra_rollouts"] == 2 * len(dropped)  # G=2 responses per dropped group
    assert metrics["ds/filled"] == 1.0
    assert metrics["ds/rounds"] == 1 + (metrics["ds/questions_drawn"] > 2)
    assert metrics["train/zero_gradient_rate"] == 0.0  # the kept batch never collapses
    assert metrics["original/zero_gradient_rate"] == len(dropped) / len(generated)


def test_avspo_gives_collapsed_groups_a_gradient(tiny_lm) -> None:
    model, tokenizer = _fresh(tiny_lm)
    grade = ScriptedGrade({"7": [False], "6": [True]})  # both groups collapse
    grpo = Trainer(_config("grpo", steps=1), *_fresh(tiny_lm), tiny_questions()[:2], grade)
    result = grpo.step(1)
    assert result.metrics["train/effective_zero_gradient_rate"] == 1.0
    assert all(np.all(r.advantages == 0) for r in result.kept)
    config = _config("avspo", steps=1, estimators=_avspo(trigger="always"))
    avspo = Trainer(config, model, tokenizer, tiny_questions()[:2], grade)
    result = avspo.step(1)
    metrics = result.metrics
    assert metrics["avspo/acr"] == 1.0 and metrics["avspo/triggered"] == 1.0
    assert metrics["train/effective_zero_gradient_rate"] == 0.0
    signs = {r.question.answer: np.sign(r.advantages) for r in result.kept}
    assert np.all(signs["7"] < 0) and np.all(signs["6"] > 0)


def test_same_seed_same_run(tiny_lm) -> None:
    histories, weights = [], []
    for _ in range(2):
        model, tokenizer = _fresh(tiny_lm)
        result = Trainer(
            _config("ta_grpo"), model, tokenizer, tiny_questions(), boxed_grade
        ).train()
        histories.append(
            [{k: v for k, v in h.items() if not k.startswith("time/")} for h in result.history]
        )
        weights.append(torch.cat([p.detach().flatten() for p in model.parameters()]))
    assert histories[0] == histories[1]
    torch.testing.assert_close(weights[0], weights[1])


def test_training_set_from_rephrasings_column_or_miniworld(tmp_path) -> None:
    problem = MiniProblem(1, (2, 6), name="Sam", item="pens")
    question = Question(
        id="t-0",
        source="miniworld",
        split="train",
        problem=render(problem, "story"),
        answer="9",
        meta=problem_meta(problem, "story"),
    )
    assert miniworld_neighbours(question, 3) == [
        render(problem, family) for family in ("expr", "words", "imperative")
    ]
    assert miniworld_neighbours(question, 4)[3] == question.problem  # padded with q0
    record = question.to_record()
    plain = tmp_path / "processed.parquet"
    pq.write_table(pa.Table.from_pylist([record], schema=QUESTION_SCHEMA), plain)
    loaded = load_training_questions(plain, 3)
    assert loaded[0].neighbours == tuple(miniworld_neighbours(question, 3))
    schema = QUESTION_SCHEMA.append(pa.field("rephrasings", pa.list_(pa.string())))
    rephrased = tmp_path / "rephrased.parquet"
    row = {**record, "rephrasings": ["A?", "B?", "C?"]}
    pq.write_table(pa.Table.from_pylist([row], schema=schema), rephrased)
    assert load_training_questions(rephrased, 3)[0].neighbours == ("A?", "B?", "C?")
    assert load_training_questions(rephrased, 2, "miniworld")[0].neighbours[0] == render(
        problem, "expr"
    )
    with pytest.raises(ValueError, match="2 requested"):
        load_training_questions(rephrased, 3, limit=2)
    assert load_training_questions(rephrased, 3)[0].messages(2)[0]["content"].startswith("B?")
    assert json.loads(json.dumps(load_training_questions(plain, 3, "none")[0].neighbours)) == []
    with pytest.raises(ValueError, match="lack 3 neighbours"):
        Trainer(
            _config("ta_grpo"),
            *tiny_policy(seed=0),
            load_training_questions(plain, 3, "none"),
            boxed_grade,
        )
