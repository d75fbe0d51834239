"""Optimiser updates per method (issue 22, point 2): ``batch_unit: rows`` gives TA methods N+1
times the updates of (N+1)xGRPO at equal responses; the count is logged by both backends,
summarised, shown beside every comparison of the report, and ``rows_matched_updates`` gives
(N+1)xGRPO TA-GRPO's steps and updates."""

from __future__ import annotations

import pytest
from tiny_policy import boxed_grade, tiny_policy, tiny_questions

from tagrpo.config.params import ConfigError, config_with
from tagrpo.config.train import rows_per_question
from tagrpo.report.claims import build_claims, claims_table
from tagrpo.report.training import training_section, updates_by_method
from tagrpo.training.train_stage import run_summary
from tagrpo.training.trainer import TrainConfig, Trainer


def test_rows_per_question_for_every_reading() -> None:
    assert rows_per_question("ta_grpo", 3, "questions") == 1
    assert rows_per_question("grpo_x4", 3, "questions", False) == 1
    assert rows_per_question("ta_grpo", 3, "rows") == 4
    assert rows_per_question("ta_grpo_star", 5, "rows") == 6
    assert rows_per_question("grpo_x4", 3, "rows") == 1
    assert rows_per_question("grpo_x4", 3, "rows", True) == 4
    assert rows_per_question("grpo_x4_ds", 3, "rows", True) == 4
    # only the matched-budget methods: plain GRPO keeps one row of G responses
    assert rows_per_question("grpo", 3, "rows", True) == 1
    assert rows_per_question("ta_grpo", 3, "rows", True) == 4
    with pytest.raises(ValueError, match="batch_unit must be questions or rows"):
        rows_per_question("grpo", 3, "prompts")


def test_matched_updates_only_with_rows() -> None:
    with pytest.raises(ConfigError, match="rows_matched_updates: true applies to batch_unit: rows"):
        config_with({"train.rows_matched_updates": True})


def test_plans_steps_updates_and_responses_per_reading(tmp_path) -> None:
    from tagrpo.config.common import MiniWorldSettings
    from tagrpo.config.data import SyntheticSettings
    from tagrpo.config.params import embedded
    from tagrpo.data.schema import write_questions
    from tagrpo.miniworld.dataset import build_miniworld
    from tagrpo.training.train_stage import plan_training

    train = build_miniworld(
        embedded(SyntheticSettings, train_size=64), embedded(MiniWorldSettings)
    )["train"].questions
    (tmp_path / "data").mkdir()
    write_questions(train, str(tmp_path / "data" / "train.parquet"))
    base = {
        "train.input": "data/train.parquet",
        "train.neighbours": "miniworld",
        "train.batch_questions": 16,
        "train.batch_unit": "rows",
        "train.epochs": 2,
    }
    rows = config_with(base)
    matched = config_with({**base, "train.rows_matched_updates": True})
    # 64 questions, 16 rows a step, 2 mini-batches, 2 epochs; (N+1)G = 32 responses a question
    # for all three: equal responses (2 x 64 x 32 = 4096), but not equal updates.
    for config, method, questions_per_step, steps in (
        (rows, "ta_grpo", 4, 32),
        (rows, "grpo_x4", 16, 8),
        (matched, "grpo_x4", 4, 32),
        (matched, "ta_grpo", 4, 32),
        (matched, "grpo", 16, 8),
    ):
        plan = plan_training(config, method, 0, root=tmp_path)
        assert plan.questions_per_step == questions_per_step, method
        assert plan.steps == steps, method
        assert plan.updates_per_epoch * 2 == 2 * steps, method  # 2 updates a step, 2 epochs
        per_question = plan.spec.responses_per_question(8, 3)
        if method != "grpo":
            assert steps * questions_per_step * per_question == 4096, method


def test_verl_batch_of_the_matched_updates_variant(tmp_path) -> None:
    from verl_helpers import paper_config, run_for

    from tagrpo.config.params import config_with
    from tagrpo.verl_ext.overrides import build_overrides

    params = paper_config()  # the paper's 256 rows, 2 mini-batches
    for method, matched, batch in (
        ("ta_grpo", False, 64),
        ("grpo_x4", False, 256),
        ("grpo_x4", True, 64),
    ):
        changes = {"train.batch_unit": "rows", "train.rows_matched_updates": matched}
        overrides = build_overrides(run_for(method, tmp_path), config_with(changes, base=params))
        assert f"data.train_batch_size={batch}" in overrides, (method, matched)
        assert f"actor_rollout_ref.actor.ppo_mini_batch_size={batch // 2}" in overrides


@pytest.mark.parametrize(("method", "mini_batches"), [("grpo", 2), ("ta_grpo", 1)])
def test_local_trainer_logs_its_updates_and_the_summary_adds_them(method, mini_batches) -> None:
    model, tokenizer = tiny_policy(seed=3)
    config = TrainConfig.create(
        method,
        steps=3,
        batch_questions=2,
        mini_batches=mini_batches,
        group_size=2,
        max_new_tokens=4,
        seed=7,
    )
    result = Trainer(config, model, tokenizer, tiny_questions(), boxed_grade).train()
    assert [h["optimiser_updates"] for h in result.history] == [float(mini_batches)] * 3
    assert run_summary(result.history, {}, 1.0)["optimiser_updates"] == 3.0 * mini_batches


def _summary(updates: float) -> dict[str, float]:
    return {
        "steps": 8,
        "optimiser_updates": updates,
        "responses_generated": 4096,
        "seconds": 10.0,
        "reward_first_quarter": 0.5,
        "reward_last_quarter": 0.5,
    }


def test_report_shows_the_updates_beside_every_comparison() -> None:
    from tagrpo.metrics.compare import Estimate
    from tagrpo.report.statistics_section import differences_markdown, scores_markdown

    summaries = {
        "ta_grpo-s0": _summary(64),
        "ta_grpo-s1": _summary(64),
        "grpo_x4-s0": _summary(16),
        "grpo_ds-s0": _summary(15),
        "grpo_ds-s1": _summary(16),
        "grpo_data2.0x-s0": _summary(999),  # data scaling: not a method of the comparisons
    }
    updates = updates_by_method(summaries)
    assert updates == {"ta_grpo": "64", "grpo_x4": "16", "grpo_ds": "15-16"}
    with pytest.raises(KeyError, match="grpo-s0 has no optimiser_updates"):
        updates_by_method({"grpo-s0": {"steps": 3}})

    table = training_section({"grpo_x4-s0": summaries["grpo_x4-s0"]})
    header = next(line for line in table.splitlines() if line.startswith("| policy | steps"))
    assert header.startswith("| policy | steps | optimiser updates | responses |")
    row = next(line for line in table.splitlines() if line.startswith("| grpo_x4-s0"))
    assert row.startswith("| grpo_x4-s0 | 8 | 16 | 4096 |")

    claims = build_claims({}, [], None, None, 32, updates=updates)
    lines = claims_table(claims).splitlines()
    assert lines[0].endswith("| optimiser updates (TA-GRPO / other) |")
    by_claim = {line.split(" | ")[0].lstrip("| "): line for line in lines[2:]}
    assert by_claim["TA-GRPO beats the matched budget (N+1)xGRPO at pass@32 (Fig. 6)"].endswith(
        "| not run |  |  |  | not run (not supported) | 64 / 16 |"
    )
    assert by_claim["TA-GRPO beats GRPO with dynamic sampling at pass@32"].endswith(
        "| 64 / 15-16 |"
    )
    assert by_claim["TA-GRPO beats GRPO at pass@32"].endswith("| 64 / not run |")
    assert by_claim["Fewer identical-reward groups than GRPO (Fig. 3)"].endswith(
        "| 64 (one policy) |"
    )
    assert Estimate  # the estimate's own formatting is tested with the claims elsewhere

    import pandas as pd

    scores = pd.DataFrame(
        [{"method": m, "group": "all", "seeds": 2, "k": k, "pass_at_k": 0.5, "ci_low": 0.4,
          "ci_high": 0.6} for m in ("ta_grpo", "grpo_x4") for k in (1, 32)]
    )  # fmt: skip
    lines = scores_markdown(scores, 32, {}, {"all": ["a"]}, updates).splitlines()
    assert lines[0].startswith("| method | group | seeds | updates | pass@1 |")
    assert lines[2].startswith("| ta_grpo | all | 2 | 64 |")
    assert lines[3].startswith("| grpo_x4 | all | 2 | 16 |")
    differences = pd.DataFrame(
        [{"baseline": "grpo_x4", "group": "all", "k": k, "difference": 0.1, "ci_low": 0.0,
          "ci_high": 0.2, "verdict": "supported", "seeds": "2 vs 1", "conditional": False}
         for k in (1, 32)]
    )  # fmt: skip
    lines = differences_markdown(differences, updates).splitlines()
    assert lines[0].startswith("| difference | group | seeds | updates TA / other | pass@1 |")
    assert lines[2].startswith("| TA-GRPO - grpo_x4 | all | 2 vs 1 | 64 / 16 |")
    with pytest.raises(KeyError, match="no training summary of grpo_x4"):
        differences_markdown(differences, {"ta_grpo": "64"})
