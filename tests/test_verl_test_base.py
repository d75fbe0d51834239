"""The committed verl test base is what its recipe trains (tests/verl_test_base.py).

The retraining is not in ``make test`` (CI): it is the 1,500-step warm start the commit saves CI
from. Run it with ``make test-recipes`` after regenerating the fixture, or to check it on another
machine. In ``make test``: the fixture's recorded code is this tree's (a fast check, so that a
change to the stage's code fails in seconds, not only in the verl tests), and the verl tests
refuse a fixture whose params or data changed (tests/verl_test_base.py).
Weights are compared exactly: on the machine kind that trained them a rerun is bit for bit
(docs/performance.md, "Determinism"); on another CPU kind SFT numerics can differ from an early
step on, and this test says so rather than passing.
"""

from __future__ import annotations

import copy
import json
import platform

import pytest
import torch
from verl_test_base import (
    BASE_PROFILE,
    FIXTURE,
    RECIPE_FILE,
    build_data,
    code_digests,
    committed_recipe,
    recipe,
    recipe_changes,
    refuse_changes,
    train_base,
)

from tagrpo.backends.models import load_causal_lm


def test_the_committed_verl_test_base_was_trained_by_this_trees_code() -> None:
    committed = committed_recipe()
    refuse_changes(recipe_changes(committed, {**committed, "code": code_digests()}))


def test_a_changed_recipe_entry_is_named_and_refused() -> None:
    committed = committed_recipe()
    changed = copy.deepcopy(committed)
    changed["params"]["base_model"]["warmstart"]["training"]["steps"] = 10
    changed["code"]["stages/base_model.py"] = "0" * 64
    first_table = sorted(changed["data"])[0]
    del changed["data"][first_table]
    changes = recipe_changes(committed, changed)
    assert changes == ["params: base_model", "code: stages/base_model.py", f"data: {first_table}"]
    with pytest.raises(AssertionError, match=r"3 changed: params: base_model, code: stages"):
        refuse_changes(changes)
    assert recipe_changes(committed, copy.deepcopy(committed)) == []


@pytest.mark.slow
@pytest.mark.recipe
@pytest.mark.timeout(3600)
def test_the_committed_verl_test_base_is_what_its_recipe_trains(tmp_path) -> None:
    root = tmp_path / "project"
    env = build_data(root, BASE_PROFILE)
    committed = json.loads((FIXTURE / RECIPE_FILE).read_text())
    assert recipe_changes(committed, recipe(root)) == []
    trained, _ = load_causal_lm(train_base(root, env))
    expected, _ = load_causal_lm(FIXTURE)
    differing = [
        name
        for (name, a), b in zip(
            trained.state_dict().items(), expected.state_dict().values(), strict=True
        )
        if not torch.equal(a, b)
    ]
    assert not differing, (
        f"{len(differing)} tensors differ on this machine ({platform.processor() or 'cpu'}): "
        f"{differing[:5]}"
    )
    for name in ("tokenizer.json", "config.json"):
        assert (root / "models" / "base" / name).read_bytes() == (FIXTURE / name).read_bytes()
