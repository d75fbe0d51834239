"""The pre-registrations and the code that runs them agree, value by value. World v2
(preregistration/world-v2.yaml): the world in params.yaml, the base-draw profile, the default's
runs, the report's settings (the committed default still runs v2's last candidate). World v3
(preregistration/world-v3.yaml): the calibration profile is the candidate in force, on the
registered calibration world, with the registered runs and competition lengths."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tagrpo.config.params import deep_merge, read_yaml_mapping, validate_params

ROOT = Path(__file__).resolve().parents[1]
PREREGISTRATION = yaml.safe_load((ROOT / "preregistration/world-v2.yaml").read_text())
PARAMS = read_yaml_mapping(ROOT / "params.yaml")


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
def test_the_world_in_params_is_the_registered_one(dotted):
    assert _at(PARAMS, dotted) == PREREGISTRATION["world"][dotted]


def test_benchmarks_groups_and_the_confirmatory_draw():
    world = PREREGISTRATION["world"]
    assert PARAMS["data"]["synthetic"]["benchmarks"] == world["benchmarks"]
    assert PARAMS["evaluate"]["groups"] == world["groups"]
    assert PARAMS["data"]["synthetic"]["seed"] == PREREGISTRATION["confirmatory"]["world_seed"]
    assert PARAMS["report"]["preregistration"] == "preregistration/world-v2.yaml"
    assert PARAMS["report"]["primary_group"] == "in_distribution"
    assert PARAMS["report"]["in_distribution"] == "in_distribution"
    assert PARAMS["report"]["equivalence_margin"] == PREREGISTRATION["study"]["tost_margin"]


def test_the_default_trains_what_was_registered():
    default = PREREGISTRATION["default"]
    runs = PARAMS["runs"]
    assert runs["methods"] == default["methods_three_seeds"] and runs["seeds"] == [0, 1, 2]
    assert runs["one_seed_methods"] == default["methods_one_seed"]


def test_the_base_draws_profile_runs_grpo_and_the_control_with_the_registered_seeds():
    profile = read_yaml_mapping(ROOT / "profiles/base-draws.yaml")
    merged = validate_params(deep_merge(PARAMS, profile), "base-draws")
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
