"""Method specs, grouping and group-relative advantages on hand-made reward patterns."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tagrpo.algorithms import (
    EPSILON,
    METHODS,
    advantages_and_diagnostics,
    get_method,
    group_ids,
    group_moments,
    grpo_advantages,
    rollout_layout,
)

pytestmark = pytest.mark.core

# One question, G=4, q0..q3: the original is all correct, the neighbours are mixed.
ORIGINAL_ALL_CORRECT = np.array(
    [*[1, 1, 1, 1], *[1, 0, 1, 0], *[0, 0, 0, 0], *[1, 1, 0, 0]], dtype=float
)


def test_method_table_matches_the_paper() -> None:
    assert set(METHODS) == {
        "grpo",
        "grpo_ds",
        "grpo_x4",
        "grpo_x4_ds",
        "ta_grpo_star",
        "ta_grpo",
        "ta_grpo_unanchored",
        "avspo",
        "grpo_flipped",
    }
    g, n = 8, 3
    budgets = {name: spec.responses_per_question(g, n) for name, spec in METHODS.items()}
    assert budgets == {
        "grpo": 8,
        "grpo_ds": 8,
        "grpo_x4": 32,
        "grpo_x4_ds": 32,
        "ta_grpo_star": 32,
        "ta_grpo": 32,
        "ta_grpo_unanchored": 32,
        "avspo": 8,
        "grpo_flipped": 8,
    }
    assert get_method("grpo_x4").variants(n) == (0,)
    assert get_method("grpo_x4").responses_per_variant(g, n) == 32
    assert get_method("ta_grpo").variants(n) == (0, 1, 2, 3)
    assert get_method("ta_grpo").anchor == "original"
    assert get_method("ta_grpo_star").anchor == "own"
    assert get_method("ta_grpo").grouping == "joint"
    assert get_method("ta_grpo_star").grouping == "per_variant"
    # The authors' public code: pooled groups, ratios under each response's own prompt.
    unanchored = get_method("ta_grpo_unanchored")
    assert (unanchored.grouping, unanchored.anchor) == ("joint", "own")
    assert [name for name, s in METHODS.items() if s.dynamic_sampling] == ["grpo_ds", "grpo_x4_ds"]
    assert [name for name, s in METHODS.items() if s.avspo] == ["avspo"]
    assert [name for name, s in METHODS.items() if s.negative_control] == ["grpo_flipped"]
    with pytest.raises(ValueError, match="unknown method 'dapo'"):
        get_method("dapo")


def test_invalid_specs_are_rejected() -> None:
    from tagrpo.algorithms.methods import MethodSpec

    with pytest.raises(ValueError, match="samples no neighbours"):
        MethodSpec(
            name="x",
            use_neighbours=True,
            matched_budget=False,
            grouping="per_original",
            anchor="own",
        )
    with pytest.raises(ValueError, match="needs neighbours"):
        MethodSpec(
            name="x",
            use_neighbours=False,
            matched_budget=False,
            grouping="joint",
            anchor="original",
        )
    with pytest.raises(ValueError, match="matched budget"):
        MethodSpec(
            name="x", use_neighbours=True, matched_budget=True, grouping="joint", anchor="original"
        )
    with pytest.raises(TypeError):  # keyword fields only: a row of booleans cannot be misread
        MethodSpec("x", False, False, "per_original", "own")  # type: ignore[misc]
    with pytest.raises(ValueError, match="grouping must be"):
        MethodSpec(
            name="x", use_neighbours=False, matched_budget=False, grouping="per_batch", anchor="own"
        )  # type: ignore[arg-type]


def test_layout_and_group_ids() -> None:
    layout = rollout_layout(2, (0, 1, 2), 2)
    assert layout.question.tolist() == [0] * 6 + [1] * 6
    assert layout.variant.tolist() == [0, 0, 1, 1, 2, 2] * 2
    assert layout.sample.tolist() == [0, 1] * 6
    joint, k = group_ids(layout.question, layout.variant, "joint")
    assert (joint.tolist(), k) == ([0] * 6 + [1] * 6, 2)
    per_variant, k = group_ids(layout.question, layout.variant, "per_variant")
    assert (per_variant.tolist(), k) == ([0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5], 6)
    with pytest.raises(ValueError, match="only responses to q0"):
        group_ids(layout.question, layout.variant, "per_original")
    # Arbitrary order and sparse question ids: dense ids by first appearance.
    ids, k = group_ids(np.array([7, 3, 7, 3, 9]), np.zeros(5, dtype=int), "per_original")
    assert (ids.tolist(), k) == ([0, 1, 0, 1, 2], 3)


def test_group_moments_use_the_sample_std() -> None:
    count, mean, std = group_moments(np.array([1.0, 0.0, 1.0, 1.0, 5.0]), np.array([0] * 4 + [1]))
    assert count.tolist() == [4.0, 1.0]
    assert mean.tolist() == [0.75, 5.0]
    assert std[0] == pytest.approx(math.sqrt(0.75 / 3))  # Bessel: sum of squares / (n - 1)
    assert std[1] == 0.0


def test_joint_gives_the_all_correct_original_nonzero_advantages_per_variant_does_not() -> None:
    layout = rollout_layout(1, (0, 1, 2, 3), 4)
    joint = advantages_and_diagnostics(
        get_method("ta_grpo"), ORIGINAL_ALL_CORRECT, layout.question, layout.variant
    ).advantages
    star = advantages_and_diagnostics(
        get_method("ta_grpo_star"), ORIGINAL_ALL_CORRECT, layout.question, layout.variant
    ).advantages
    # Joint (Eq. 3): 8 of 16 correct, mean 1/2, sample std sqrt(16 * 1/4 / 15).
    scale = math.sqrt(4.0 / 15.0) + EPSILON
    expected_joint = (ORIGINAL_ALL_CORRECT - 0.5) / scale
    np.testing.assert_allclose(joint, expected_joint, rtol=0, atol=1e-12)
    assert joint[:4].tolist() == pytest.approx([0.5 / scale] * 4)
    # Per rephrasing (Eq. 1 per q^n): the original's and q2's groups are collapsed -> exactly 0.
    assert star[:4].tolist() == [0.0, 0.0, 0.0, 0.0]
    assert star[8:12].tolist() == [0.0, 0.0, 0.0, 0.0]
    half = 0.5 / (math.sqrt(1.0 / 3.0) + EPSILON)  # [1,0,1,0]: mean 1/2, std sqrt(1/3)
    assert star[4:8].tolist() == pytest.approx([half, -half, half, -half])
    assert star[12:16].tolist() == pytest.approx([half, half, -half, -half])


def test_grpo_advantages_known_values_and_collapse() -> None:
    rewards = np.array([1, 0, 0, 0, 1, 1, 1, 1], dtype=float)
    ids = np.array([0] * 4 + [1] * 4)
    advantages = grpo_advantages(rewards, ids)
    std = math.sqrt(0.75 / 3)
    expected = [0.75 / (std + EPSILON)] + [-0.25 / (std + EPSILON)] * 3 + [0.0] * 4
    assert advantages.tolist() == pytest.approx(expected, abs=1e-12)
    assert advantages[4:].tolist() == [0.0, 0.0, 0.0, 0.0]  # exactly zero, not just small
    # Singleton groups follow verl: mean 0, std 1, so A = R / (1 + eps).
    singles = grpo_advantages(np.array([1.0, 0.0]), np.array([0, 1]))
    assert singles.tolist() == [1.0 / (1.0 + EPSILON), 0.0]
    # Mean-centred only (scale_by_std=False).
    centred = grpo_advantages(rewards, ids, scale_by_std=False)
    assert centred.tolist() == [0.75, -0.25, -0.25, -0.25, 0.0, 0.0, 0.0, 0.0]


def test_matches_verls_reference_estimator() -> None:
    """The epsilon convention is verl's: the same numbers as compute_grpo_outcome_advantage."""
    core_algos = pytest.importorskip("verl.trainer.ppo.core_algos")
    import torch

    rng = np.random.default_rng(0)
    rewards = (rng.random(48) < 0.4).astype(float)
    rewards[:8] = 1.0  # one collapsed group
    index = np.repeat(np.arange(6), 8)
    scores = torch.zeros(48, 5)
    scores[:, -1] = torch.tensor(rewards, dtype=torch.float32)
    mask = torch.ones(48, 5)
    reference, _ = core_algos.compute_grpo_outcome_advantage(
        scores, mask, np.array([str(i) for i in index], dtype=object)
    )
    ours = grpo_advantages(rewards, index)
    np.testing.assert_allclose(reference[:, 0].numpy(), ours, rtol=1e-5, atol=1e-5)


def test_negative_control_flips_every_grpo_advantage_and_keeps_collapsed_groups_at_zero() -> None:
    # One mixed group (1 of 4 correct) and one all-correct group, through the method's step.
    rewards = np.array([1, 0, 0, 0, 1, 1, 1, 1], dtype=float)
    layout = rollout_layout(2, (0,), 4)
    step = advantages_and_diagnostics(
        get_method("grpo_flipped"), rewards, layout.question, layout.variant
    )
    scale = math.sqrt(0.75 / 3) + EPSILON
    assert step.advantages.tolist() == pytest.approx(
        [-0.75 / scale, 0.25 / scale, 0.25 / scale, 0.25 / scale, 0.0, 0.0, 0.0, 0.0], abs=1e-12
    )
    # The correct response of the mixed group is pushed down, the wrong ones up.
    assert step.advantages[0] < 0 < step.advantages[1]
    grpo = advantages_and_diagnostics(get_method("grpo"), rewards, layout.question, layout.variant)
    assert (step.advantages == -grpo.advantages).all()
    assert step.diagnostics["train/zero_gradient_rate"] == 0.5
