"""What MLflow's UI shows of a stage run (issue 33.12): run names that differ where the run list
cuts them, and an evaluation's metrics listed on the page of the logged model it evaluated.
A real SQLite store in tmp_path."""

from __future__ import annotations

from pathlib import Path

import mlflow

from tagrpo.pipeline.runtime import StageContext, stage_run_name

# MLflow's run list shows about this many characters of a name before cutting it.
_SHOWN = 16


def test_run_names_put_the_policy_first() -> None:
    # main named them "evaluate-grpo_x4-s0", "evaluate-grpo_x4-s1", ...: cut at 16 characters
    # every evaluation of every grpo variant read "evaluate-grpo_x4" or "evaluate-grpo_fl".
    policies = ["grpo-s0", "grpo_x4-s0", "grpo_x4-s1", "grpo_flipped-s0", "ta_grpo-s2"]
    names = [stage_run_name("evaluate", policy) for policy in policies]
    assert names[1] == "grpo_x4-s0 · evaluate"
    assert len({name[:_SHOWN] for name in names}) == len(policies)
    assert stage_run_name("report", None) == "report"


def test_an_evaluations_metrics_are_the_evaluated_models(tmp_path: Path) -> None:
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    try:
        mlflow.set_experiment("ui")
        with mlflow.start_run():
            model = mlflow.create_external_model(name="grpo-s0")
        with mlflow.start_run():
            context = StageContext("evaluate@grpo-s0", None, tmp_path, None, tmp_path)
            context.model_id = model.model_id  # what the evaluate stage sets once linked
            context.log({"mini_chains/pass@1": 0.25, "mini_chains/pass@4": 0.5, "seconds": 3.0})
        logged = mlflow.get_logged_model(model.model_id)
        # main logged them to the run only: the model page read "Metrics (0)".
        points = {(m.key, m.step): m.value for m in logged.metrics or []}
        assert points[("pass_at_k/mini_chains", 1)] == 0.25
        assert points[("pass_at_k/mini_chains", 4)] == 0.5
        assert points[("seconds", 0)] == 3.0
    finally:
        mlflow.set_tracking_uri(None)


def _sections(names: set[str]) -> set[str]:
    # MLflow's chart view: a section per name prefix up to the last '/'.
    return {name.rsplit("/", 1)[0] if "/" in name else "" for name in names}


def test_a_stages_metrics_fall_into_few_chart_sections() -> None:
    """main logged the committed diagnostics metrics as 113 names in 73 chart sections (one
    per nested path, most holding one chart), 141 sections over all stages; now 4 and 29."""
    import json

    from tagrpo.plumbing.tracking import flatten_numbers, metric_name

    root = Path(__file__).resolve().parents[1]
    diagnostics = json.loads((root / "metrics" / "diagnostics.json").read_text())
    names = {metric_name(key) for key in flatten_numbers(diagnostics)}
    assert len(names) == len(flatten_numbers(diagnostics))  # no two keys merged
    assert len(_sections(names)) <= 5
    assert metric_name("grpo-s0/checkpoint-025/identical_rewards/joint") == (
        "grpo-s0/checkpoint-025.identical_rewards.joint"
    )
    assert metric_name("mini_chains/pass@4") == "pass_at_k/mini_chains"  # compare reads it
    assert metric_name("probe/success_original") == "probe/success_original"
