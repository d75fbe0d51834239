"""The pre-registrations and the code that runs them agree, value by value. World v3
(preregistration/world-v3.yaml): params.yaml is its embedded default (the frozen candidate on
the confirmatory world, the registered runs and endpoint), the calibration profile is the
candidate in force on the calibration world, the confirmatory profile the frozen candidate on
the confirmatory seed. World v2 (preregistration/world-v2.yaml): its base-draw profile still
runs v2's world, budget and report settings on top of v3's params.yaml."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tagrpo.config.params import deep_merge, read_yaml_mapping, validate_params

ROOT = Path(__file__).resolve().parents[1]
PREREGISTRATION = yaml.safe_load((ROOT / "preregistration/world-v2.yaml").read_text())
PARAMS = read_yaml_mapping(ROOT / "params.yaml")
V2_PROFILE = deep_merge(PARAMS, read_yaml_mapping(ROOT / "profiles/base-draws.yaml"))


def _at(mapping: dict, dotted: str):
    for part in dotted.split("."):
        mapping = mapping[part]
    return mapping


@pytest.mark.parametrize(
    "dotted",
    [
        "common.miniworld",
        "base_model.warmstart.corpus",
        "base_model.warmstart.model",
        "base_model.warmstart.training",
    ],
)
def test_the_v2_base_draws_profile_runs_v2s_world(dotted):
    assert _at(V2_PROFILE, dotted) == PREREGISTRATION["world"][dotted]


def test_the_v2_profile_has_v2s_benchmarks_draw_budget_and_report():
    world = PREREGISTRATION["world"]
    profile = V2_PROFILE
    assert profile["data"]["synthetic"]["benchmarks"] == world["benchmarks"]
    assert profile["evaluate"]["groups"] == world["groups"]
    assert profile["data"]["synthetic"]["seed"] == PREREGISTRATION["confirmatory"]["world_seed"]
    assert profile["report"]["preregistration"] == "preregistration/world-v2.yaml"
    assert profile["report"]["primary_group"] == "in_distribution"
    assert profile["report"]["primary_k"] is None  # v2's endpoint: pass@32, the largest k
    assert profile["report"]["in_distribution"] == "in_distribution"
    assert profile["report"]["equivalence_margin"] == PREREGISTRATION["study"]["tost_margin"]
    # v2's default budget: one epoch at 3e-4, the cosine to zero
    assert (profile["train"]["epochs"], profile["train"]["learning_rate"]) == (1, 3.0e-4)
    assert profile["train"]["min_lr_ratio"] == 0.0


def test_the_base_draws_profile_runs_grpo_and_the_control_with_the_registered_seeds():
    merged = validate_params(V2_PROFILE, "base-draws")
    acceptance = PREREGISTRATION["acceptance"]
    assert merged.runs.seeds_of("grpo") == list(range(acceptance["V1"]["grpo_seeds"]))
    assert merged.runs.seeds_of("grpo_flipped") == list(range(acceptance["V4"]["control_seeds"]))
    assert merged.data.synthetic.seed == PREREGISTRATION["confirmatory"]["world_seed"]


V3 = yaml.safe_load((ROOT / "preregistration/world-v3.yaml").read_text())


def _candidate_values(candidate: dict) -> dict[str, object]:
    """The dotted params keys (and values) a v3 candidate fixes: its world and its RL budget."""
    world = dict(candidate["world"])
    values: dict[str, object] = {
        "data.synthetic.benchmarks": world.pop("benchmarks"),
        "evaluate.groups": world.pop("groups"),
    }
    values.update(world)
    budget = {k: v for k, v in candidate["rl_budget"].items() if k != "name"}
    values.update({f"train.{key}": value for key, value in budget.items()})
    return values


def test_the_v3_calibration_profile_is_the_candidate_in_force():
    calibration = V3["calibration"]
    candidate = V3["candidates"][-1]
    # The last candidate tried: no outcome yet, or its calibration's outcome (a failed one stays
    # the profile's until the next candidate is registered; a frozen one awaits its draws).
    outcome = candidate["outcome"]
    assert outcome is None or outcome["calibration"] in ("failed", "passed"), outcome
    if outcome is not None:
        assert outcome["frozen"] == (outcome["calibration"] == "passed")
        assert (ROOT / outcome["table"]).is_file()
    assert len(V3["candidates"]) <= V3["acceptance"]["max_candidates"]
    profile = read_yaml_mapping(ROOT / calibration["profile"])
    merged = deep_merge(PARAMS, profile)
    validate_params(merged, calibration["profile"])
    for dotted, value in _candidate_values(candidate).items():
        actual = _at(merged, dotted)
        if dotted == "data.synthetic.benchmarks":  # plus the other competition length
            actual = {k: v for k, v in actual.items() if k != "mini_long5"}
        if dotted == "evaluate.groups":
            actual = {k: v for k, v in actual.items() if k != "competition5"}
        assert actual == value, dotted
    assert _at(merged, "data.synthetic.seed") == calibration["world_seed"]
    assert calibration["world_seed"] in V3["confirmatory"]["used_world_seeds"]
    assert _at(merged, "report.preregistration") == "preregistration/world-v3.yaml"
    runs = validate_params(merged, "calibration").runs
    assert {m: runs.seeds_of(m) for m in runs.all_methods()} == calibration["runs"]
    lengths = sorted(
        length
        for name, spec in _at(merged, "data.synthetic.benchmarks").items()
        if name.startswith("mini_long")
        for length in spec["lengths"]
    )
    assert lengths == calibration["competition_lengths"]


def test_v3_runs_no_rephrasing_or_matched_budget_method_before_the_freeze():
    """Blindness: before the freeze a v3 candidate is judged on base, GRPO and the negative
    control alone (world-v3.md, "What a candidate is")."""
    assert set(V3["calibration"]["runs"]) == {"grpo", "grpo_flipped"}
    assert set(V3["confirmatory"]["runs"]) == {"grpo", "grpo_flipped"}
    assert V3["acceptance"]["V4"]["control_seeds"] == len(V3["calibration"]["runs"]["grpo_flipped"])
    assert V3["acceptance"]["V1"]["grpo_seeds"] == len(V3["calibration"]["runs"]["grpo"])


def test_the_v3_confirmatory_profile_is_the_frozen_candidate_on_the_confirmatory_seed():
    """Rule 7: the frozen candidate's world and budget, L_c's benchmark alone, the registered
    runs, on the seed drawn after the freeze."""
    frozen = [c for c in V3["candidates"] if (c["outcome"] or {}).get("frozen")]
    assert len(frozen) == 1, "one frozen candidate"
    (candidate,) = frozen
    assert candidate is V3["candidates"][-1]
    assert candidate["outcome"]["competition_length"] == 4
    merged = deep_merge(PARAMS, read_yaml_mapping(ROOT / "profiles/confirmatory.yaml"))
    validate_params(merged, "profiles/confirmatory.yaml")
    for dotted, value in _candidate_values(candidate).items():
        assert _at(merged, dotted) == value, dotted  # mini_long at chains of 4 only
    seed = V3["confirmatory"]["world_seed"]
    assert _at(merged, "data.synthetic.seed") == seed
    assert seed not in V3["confirmatory"]["used_world_seeds"]
    assert _at(merged, "report.preregistration") == "preregistration/world-v3.yaml"
    runs = validate_params(merged, "confirmatory").runs
    assert {m: runs.seeds_of(m) for m in runs.all_methods()} == V3["confirmatory"]["runs"]


APPLIED_DROPS = 5  # world-v3-candidates.md, "The embedded default"


def test_params_yaml_is_the_registered_v3_default():
    """World-v3.md, "The embedded default": the frozen candidate's world and budget on draw 0
    of the confirmatory world; GRPO x 3 and the negative control x 2, every other method the
    paper names once but for the registered drops; the primary endpoint rule 4 chose; the
    report hashes world-v3.yaml."""
    default = V3["default"]
    (candidate,) = [c for c in V3["candidates"] if (c["outcome"] or {}).get("frozen")]
    for dotted, value in _candidate_values(candidate).items():
        assert _at(PARAMS, dotted) == value, dotted
    assert default["world"] == "confirmatory"
    assert _at(PARAMS, "data.synthetic.seed") == V3["confirmatory"]["world_seed"]
    assert _at(PARAMS, "base_model.warmstart.seed") == default["base_draw"]
    params = validate_params(PARAMS, "params.yaml")
    runs = params.runs
    # The registered drops, in order, as far as the cold default needed them
    # (world-v3-candidates.md, "The embedded default": all five, each timed).
    assert len(default["drop_order"]) == APPLIED_DROPS == 5
    assert params.diagnostics.questions == 40
    assert params.diagnostics.checkpoints == ["checkpoint-050", "checkpoint-100"]
    assert params.train.anchoring_diagnostic is False
    assert params.evaluate.n_trained == 32
    one_seed = [m for m in default["methods_one_seed"] if m not in ("ta_grpo_star", "grpo_ds")]
    assert {m: runs.seeds_of(m) for m in runs.all_methods()} == {
        **default["methods_seeds"],
        **{method: [0] for method in one_seed},
    }
    assert runs.data_scaling.multiples == []
    endpoint = candidate["outcome"]["primary_endpoint"]
    assert _at(PARAMS, "report.primary_group") == endpoint["group"]
    assert _at(PARAMS, "report.primary_k") == endpoint["k"]
    assert _at(PARAMS, "report.preregistration") == "preregistration/world-v3.yaml"
    assert _at(PARAMS, "evaluate.n") == 64  # the base's n is never dropped
