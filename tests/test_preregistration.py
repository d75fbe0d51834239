"""The pre-registration (preregistration/world-v2.yaml) and the code that runs it agree, value
by value: the world in params.yaml, the calibration and base-draw profiles, the default's runs,
the report's settings."""

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


def test_the_calibration_profile_is_the_registered_draw():
    calibration = PREREGISTRATION["calibration"]
    profile = read_yaml_mapping(ROOT / calibration["profile"])
    merged = validate_params(deep_merge(PARAMS, profile), calibration["profile"])
    assert merged.data.synthetic.seed == calibration["world_seed"]
    assert calibration["world_seed"] != PREREGISTRATION["confirmatory"]["world_seed"]
    lengths = sorted(
        length
        for name, spec in merged.data.synthetic.benchmarks.items()
        if name.startswith("mini_long")
        for length in spec.lengths
    )
    assert lengths == calibration["competition_lengths"]


def test_the_base_draws_profile_runs_grpo_and_the_control_with_the_registered_seeds():
    profile = read_yaml_mapping(ROOT / "profiles/base-draws.yaml")
    merged = validate_params(deep_merge(PARAMS, profile), "base-draws")
    acceptance = PREREGISTRATION["acceptance"]
    assert merged.runs.seeds_of("grpo") == list(range(acceptance["V1"]["grpo_seeds"]))
    assert merged.runs.seeds_of("grpo_flipped") == list(range(acceptance["V4"]["control_seeds"]))
    assert merged.data.synthetic.seed == PREREGISTRATION["confirmatory"]["world_seed"]
