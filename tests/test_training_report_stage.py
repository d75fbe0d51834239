"""Train-stage helpers (policy names, run summary) and the report's training section."""

from __future__ import annotations

import json

import pytest

from tagrpo.plumbing.layout import policy_name
from tagrpo.report.training import load_training_summaries, training_section
from tagrpo.training.train_stage import run_summary


def test_policy_names() -> None:
    assert policy_name("ta_grpo", 0) == "ta_grpo-s0"
    assert policy_name("grpo", 2, 2.5) == "grpo_data2.5x-s2"
    assert policy_name("grpo_ds", 0, 2.0) == "grpo_ds_data2.0x-s0"


def test_run_summary_means_and_quarters() -> None:
    history = [
        {
            "original/reward_mean": reward,
            "original/zero_gradient_rate": rate,
            "joint/zero_gradient_rate": 0.0,
            "train/zero_gradient_rate": rate,
            "ds/extra_rollouts": 8.0,
            "responses_generated": 64.0 * (step + 1),
            "kl": 0.01 * step,
        }
        for step, (reward, rate) in enumerate(
            zip([0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9], [0.25] * 4 + [0.0] * 4, strict=True)
        )
    ]
    summary = run_summary(history, {"probe/after/success": 0.5}, seconds=16.0)
    assert summary["steps"] == 8 and summary["seconds_per_step"] == 2.0
    assert summary["reward_first_quarter"] == pytest.approx(0.25)  # steps 1-2
    assert summary["reward_last_quarter"] == pytest.approx(0.85)  # steps 7-8
    assert summary["original/zero_gradient_rate_mean"] == pytest.approx(0.125)
    assert summary["joint/zero_gradient_rate_mean"] == 0.0
    assert summary["ds/extra_rollouts_total"] == 64.0
    assert summary["responses_generated"] == 512.0
    assert summary["kl_last"] == pytest.approx(0.07)
    assert summary["probe/after/success"] == 0.5
    assert "neighbours/zero_gradient_rate_mean" not in summary


def test_training_section_table(tmp_path) -> None:
    assert "No training runs" in training_section({})
    (tmp_path / "metrics" / "train").mkdir(parents=True)
    (tmp_path / "metrics" / "train" / "ta_grpo-s0.json").write_text(
        json.dumps(
            {
                "steps": 20,
                "responses_generated": 5120,
                "seconds": 46.2,
                "reward_first_quarter": 0.409,
                "reward_last_quarter": 0.372,
                "probe/before/success": 0.378125,
                "probe/after/success": 0.45625,
                "original/zero_gradient_rate_mean": 0.13125,
                "joint/zero_gradient_rate_mean": 0.0,
                "train/zero_gradient_rate_mean": 0.0,
                "train/effective_zero_gradient_rate_mean": 0.0,
                "optimiser_updates": 40,
                "anchoring/log_ratio_mean_mean": -0.0123,
                "anchoring/log_ratio_p1_mean": -0.5,
                "anchoring/log_ratio_p99_mean": 0.25,
                "anchoring/ess_fraction_mean": 0.9,
                "anchoring/ess_fraction_group_mean_mean": 0.95,
            }
        )
    )
    summaries = load_training_summaries(tmp_path, ["ta_grpo-s0"])
    assert list(summaries) == ["ta_grpo-s0"]
    with pytest.raises(FileNotFoundError, match="grpo-s0"):
        load_training_summaries(tmp_path, ["grpo-s0"])
    table = training_section(summaries)
    row = next(line for line in table.splitlines() if line.startswith("| ta_grpo-s0"))
    assert row == (
        "| ta_grpo-s0 | 20 | 40 | 5120 | 46 | 40.9 → 37.2 | 37.8 → 45.6 | 8/32/32 | 13.1 | 0.0 "
        "| 0.0 | 0.0 |  |"
    )
    row = next(line for line in table.splitlines() if line.startswith("| ta_grpo-s0 | -0"))
    assert row == "| ta_grpo-s0 | -0.012 | -0.500 | 0.250 | 0.900 | 0.950 |"
    grpo = training_section({"grpo-s0": {"optimiser_updates": 40}}, anchoring_figure="f.png")
    assert "| grpo-s0 | n/a (samples no rephrasings) |  |  |  |  |" in grpo
    assert grpo.endswith("![The ratio under q0](f.png)")
    with pytest.raises(
        KeyError, match="summary of ta_grpo-s0 has no anchoring/log_ratio_mean_mean"
    ):
        training_section({"ta_grpo-s0": {"optimiser_updates": 40}})


def test_group_sizes_and_method_labels() -> None:
    from tagrpo.algorithms.avspo import AVSPOConfig
    from tagrpo.report.training import group_sizes, method_label

    assert group_sizes("grpo", 8, 3) == (8, 8, 8)
    assert group_sizes("grpo_x4", 8, 3) == (32, 32, 32)
    assert group_sizes("ta_grpo_star", 8, 3) == (8, 32, 8)
    assert group_sizes("ta_grpo", 8, 3) == (8, 32, 32)
    assert method_label("avspo", {"avspo": AVSPOConfig(trigger="always")}) == "avspo (always)"
    assert method_label("grpo", {"avspo": AVSPOConfig()}) == "grpo"


def test_batch_units_and_updates_per_epoch() -> None:
    """The two readings of "batch size 256": updates per epoch for each method."""
    from tagrpo.config.params import config_with

    questions = config_with({"train.batch_questions": 8})
    rows = config_with({"train.batch_unit": "rows", "train.batch_questions": 8})
    assert questions.train.questions_per_step("ta_grpo") == 8
    assert rows.train.questions_per_step("ta_grpo") == 2  # 8 rows of (question, variant)
    assert rows.train.questions_per_step("grpo") == 8
    assert rows.train.questions_per_step("grpo_x4") == 8  # one prompt variant: one row
    with pytest.raises(ValueError, match="do not hold whole questions"):
        config_with(
            {"train.batch_unit": "rows", "train.batch_questions": 6}
        ).train.questions_per_step("ta_grpo")


def test_plan_counts_optimiser_updates_per_epoch_for_both_batch_units(tmp_path) -> None:
    from tagrpo.config.common import MiniWorldSettings
    from tagrpo.config.data import SyntheticSettings
    from tagrpo.config.params import config_with, embedded
    from tagrpo.data.schema import write_questions
    from tagrpo.miniworld.dataset import build_miniworld
    from tagrpo.training.train_stage import plan_training

    train = build_miniworld(
        embedded(SyntheticSettings, train_size=80), embedded(MiniWorldSettings)
    )["train"].questions
    (tmp_path / "data").mkdir()
    write_questions(train, str(tmp_path / "data" / "train.parquet"))
    base = {
        "train.input": "data/train.parquet",
        "train.neighbours": "miniworld",
        "train.batch_questions": 8,
        "train.epochs": 2,
    }
    questions = config_with(base)
    rows = config_with({**base, "train.batch_unit": "rows"})
    # 80 questions, batch 8, 2 mini-batches, 2 epochs.
    for method, expected_questions, expected_rows in (
        ("grpo", 20, 20),
        ("grpo_x4", 20, 20),
        ("ta_grpo", 20, 80),  # rows: 8 rows = 2 questions x 4 variants per step
        ("ta_grpo_star", 20, 80),
    ):
        plan_q = plan_training(questions, method, 0, root=tmp_path)
        plan_r = plan_training(rows, method, 0, root=tmp_path)
        assert plan_q.updates_per_epoch == expected_questions, method
        assert plan_r.updates_per_epoch == expected_rows, method
        assert plan_r.steps == expected_rows  # 2 epochs x updates / 2 mini-batches
    # Data scaling: the 1x set plus chunks of the data stage's pool, in its seeded order.
    with pytest.raises(ValueError, match=r"needs 120 questions beyond the 80 .* holds 0"):
        plan_training(questions, "grpo", 0, data_multiple=2.5, root=tmp_path)
    built = build_miniworld(
        embedded(SyntheticSettings, train_size=80, extra_size=100), embedded(MiniWorldSettings)
    )
    (tmp_path / "data" / "processed").mkdir()
    write_questions(built["extra"].questions, str(tmp_path / "data/processed/extra.parquet"))
    scaled = plan_training(questions, "grpo", 0, data_multiple=1.5, root=tmp_path)
    assert len(scaled.questions) == 120 and scaled.policy == "grpo_data1.5x-s0"
    assert [q.id for q in scaled.questions[80:]] == [q.id for q in built["extra"].questions[:40]]
    assert scaled.steps == 30  # same 2 epochs over 120 questions
    with pytest.raises(ValueError, match=r"needs 120 .* holds 100"):
        plan_training(questions, "grpo", 0, data_multiple=2.5, root=tmp_path)
    with pytest.raises(ValueError, match="the data-scaling runs are the baselines"):
        plan_training(questions, "ta_grpo", 0, data_multiple=1.5, root=tmp_path)


def test_the_ratio_under_q0_says_not_measured_when_switched_off(tmp_path, saved) -> None:
    """``train.anchoring_diagnostic: false``: the TA rows say so (no KeyError for the missing
    anchoring means), and the figure is a "not run" one."""
    from tagrpo.report.anchoring import anchoring_figure

    section = training_section(
        {"ta_grpo-s0": {"optimiser_updates": 40}, "grpo-s0": {"optimiser_updates": 40}},
        anchoring_measured=False,
    )
    assert "| ta_grpo-s0 | not measured (train.anchoring_diagnostic: false) |  |  |  |  |" in (
        section
    )
    assert "| grpo-s0 | n/a (samples no rephrasings) |  |  |  |  |" in section
    anchoring_figure({}, tmp_path / "a.png", measured=False)
    (figure,) = saved  # a "not run" figure: no data axis, the title and why
    (axis,) = figure.axes
    assert not axis.axison and len(axis.get_lines()) == len(axis.collections) == 0
    assert axis.get_title() == "The ratio under q0 (Eq. 4)"
    (text,) = axis.texts
    assert text.get_text() == "The shift was not measured (train.anchoring_diagnostic: false)."
