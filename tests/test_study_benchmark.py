"""The study's competition benchmark (preregistration/study-v3.md, "The study's competition
benchmark"): fresh chains of 4 from world v3's generator, disjoint by key from every other split,
and adding it leaves the training split, the data-scaling pool and every other benchmark
exactly as they were (so the study stays on world v3). Both study profiles carry the registered
spec and groups."""

from __future__ import annotations

import pytest
import yaml

from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.data import SyntheticSettings
from tagrpo.config.params import embedded
from tagrpo.miniworld.dataset import build_miniworld
from tagrpo.plumbing.paths import project_root

pytestmark = pytest.mark.core

ROOT = project_root()
REGISTRATION = yaml.safe_load((ROOT / "preregistration/study-v3.yaml").read_text())


def _built(with_study: bool) -> dict:
    default = embedded(SyntheticSettings)
    benchmarks = default.model_dump()["benchmarks"]
    if with_study:
        spec = REGISTRATION["benchmark"]
        benchmarks[spec["name"]] = spec["spec"]
    settings = embedded(SyntheticSettings, seed=REGISTRATION["world_seed"], benchmarks=benchmarks)
    return build_miniworld(settings, embedded(MiniWorldSettings))


def _ids_and_keys(result) -> list[tuple[str, str, str]]:
    return [(q.id, q.meta["key"], q.problem) for q in result.questions]


def test_the_study_benchmark_is_fresh_and_leaves_the_world_unchanged() -> None:
    name = REGISTRATION["benchmark"]["name"]
    before, after = _built(False), _built(True)
    assert set(after) == set(before) | {name}
    for split in before:
        assert _ids_and_keys(after[split]) == _ids_and_keys(before[split]), split
    study = after[name]
    assert study.counts() == {"rows_in": 1024, "kept": 1024, "rejected": 0}
    assert {q.subject for q in study.questions} == {"chain4"}
    study_keys = {q.meta["key"] for q in study.questions}
    assert len(study_keys) == 1024
    for split, result in before.items():
        assert not study_keys & {q.meta["key"] for q in result.questions}, split


@pytest.mark.parametrize("profile", ["study-pilot", "study-main"])
def test_the_study_profiles_carry_the_registered_benchmark_and_groups(profile: str) -> None:
    document = yaml.safe_load((ROOT / f"profiles/{profile}.yaml").read_text())
    spec = REGISTRATION["benchmark"]
    assert document["data"]["synthetic"]["benchmarks"] == {spec["name"]: spec["spec"]}
    assert document["data"]["synthetic"]["seed"] == REGISTRATION["world_seed"]
    assert document["evaluate"]["groups"] == REGISTRATION["groups"]
    assert document["evaluate"]["n_trained"] is None  # n = 64 for every policy
    assert document["train"]["anchoring_diagnostic"] is True
    assert document["common"]["torch_threads"] == REGISTRATION["execution"]["torch_threads"]
