"""AVSPO: virtual rewards only in collapsed groups' statistics; triggers; adaptive threshold."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tagrpo.algorithms import (
    EPSILON,
    AdaptiveThreshold,
    AVSPOConfig,
    advantages_and_diagnostics,
    avspo_advantages,
    get_method,
    grpo_advantages,
    num_virtual_samples,
    rollout_layout,
    virtual_rewards,
)

pytestmark = pytest.mark.core


def _reference(real: np.ndarray, virtual: np.ndarray, epsilon: float = EPSILON) -> np.ndarray:
    """Advantages of the real rewards normalised with statistics over real + virtual."""
    pooled = np.concatenate([real, virtual])
    return (real - pooled.mean()) / (pooled.std(ddof=1) + epsilon)


def test_number_and_values_of_virtual_samples() -> None:
    assert num_virtual_samples(0.0, 8) == 1  # minimal intervention
    assert num_virtual_samples(1.0, 8) == 2  # ceil(0.5 * sqrt(8)) = ceil(1.41)
    assert num_virtual_samples(1.0, 32) == 3  # ceil(0.5 * sqrt(32)) = ceil(2.83)
    assert num_virtual_samples(0.5, 8) == 1  # ceil(0.5 * 2) = 1
    assert num_virtual_samples(1.0, 8, alpha=10.0) == 8  # never more than G
    assert virtual_rewards(0.0, 1).tolist() == [1.0]  # all wrong, K=1: the public code's 1.0
    assert virtual_rewards(1.0, 1).tolist() == [0.0]  # all correct, K=1: the public code's 0.0
    assert virtual_rewards(0.0, 2).tolist() == pytest.approx([0.55, 1.0])
    assert virtual_rewards(1.0, 2).tolist() == pytest.approx([0.45, 0.0])
    assert virtual_rewards(0.0, 3, anchor_reward=0.4).tolist() == pytest.approx([0.6, 0.8, 1.0])


def test_all_wrong_and_all_correct_groups_get_signed_advantages() -> None:
    # Group 0 all wrong, group 1 all correct, group 2 mixed; ACR = 2/3 -> K = ceil(0.5*sqrt(8*2/3)).
    rewards = np.array([0.0] * 8 + [1.0] * 8 + [1, 0, 0, 1, 0, 0, 0, 0], dtype=float)
    ids = np.repeat(np.arange(3), 8)
    result = avspo_advantages(rewards, ids, config=AVSPOConfig(trigger="always"))
    k = math.ceil(0.5 * math.sqrt(8 * 2 / 3))
    assert k == 2
    assert result.acr == pytest.approx(2 / 3)
    assert result.triggered
    assert result.collapsed.tolist() == [True, True, False]
    assert result.virtual_counts.tolist() == [2, 2, 0]
    wrong = _reference(np.zeros(8), virtual_rewards(0.0, 2))
    right = _reference(np.ones(8), virtual_rewards(1.0, 2))
    np.testing.assert_allclose(result.advantages[:8], wrong, atol=1e-12)
    np.testing.assert_allclose(result.advantages[8:16], right, atol=1e-12)
    assert np.all(result.advantages[:8] < 0)  # all wrong: push the sampled responses down
    assert np.all(result.advantages[8:16] > 0)  # all correct: push them up
    # Virtual rewards never touch a mixed group: plain GRPO there.
    np.testing.assert_array_equal(result.advantages[16:], grpo_advantages(rewards, ids)[16:])
    assert result.advantages.shape == rewards.shape  # only real responses get advantages


def test_adaptive_trigger_respects_the_threshold() -> None:
    rewards = np.array([0.0] * 4 + [1, 0, 1, 0] + [1, 1, 0, 1], dtype=float)
    ids = np.repeat(np.arange(3), 4)
    config = AVSPOConfig(trigger="adaptive")
    below = avspo_advantages(rewards, ids, config=config, tau=0.5)  # ACR 1/3 <= 0.5
    assert not below.triggered
    np.testing.assert_array_equal(below.advantages, grpo_advantages(rewards, ids))
    above = avspo_advantages(rewards, ids, config=config, tau=0.2)
    assert above.triggered and above.virtual_counts.tolist() == [1, 0, 0]
    np.testing.assert_allclose(above.advantages[:4], _reference(np.zeros(4), np.ones(1)))


def test_batch_trigger_reproduces_the_public_code() -> None:
    config = AVSPOConfig(trigger="batch", epsilon=1e-4)
    ids = np.repeat(np.arange(2), 4)
    mixed_batch = np.array([0, 0, 0, 0, 1, 0, 0, 0], dtype=float)
    untouched = avspo_advantages(mixed_batch, ids, config=config)
    assert not untouched.triggered  # a collapsed group in a mixed batch is left alone
    assert untouched.advantages[:4].tolist() == [0.0] * 4
    all_wrong = avspo_advantages(np.zeros(8), ids, config=config)
    assert all_wrong.triggered and all_wrong.virtual_counts.tolist() == [1, 1]
    # One virtual 1.0 per group: mean 1/5, std over 5 values; eps 1e-4 as in hexixiang/ACR.
    expected = (0.0 - 0.2) / (np.std([0, 0, 0, 0, 1], ddof=1) + 1e-4)
    assert all_wrong.advantages.tolist() == pytest.approx([expected] * 8)
    all_right = avspo_advantages(np.ones(8), ids, config=config)
    assert all_right.advantages.tolist() == pytest.approx([-expected] * 8)


def test_adaptive_threshold_update_rule() -> None:
    threshold = AdaptiveThreshold(AVSPOConfig(tau_init=0.5, tau_lr=0.1))
    assert threshold.update(acr=0.3, mean_reward=0.4) == pytest.approx(
        0.5 - 0.1 * 0.3
    )  # no history
    assert threshold.update(acr=0.3, mean_reward=0.5) == pytest.approx(0.47 + 0.1 * (0.3 - 0.47))
    assert threshold.update(acr=0.9, mean_reward=0.5) == pytest.approx(0.453 - 0.09)  # stagnation
    low = AdaptiveThreshold(AVSPOConfig(tau_init=0.1, tau_min=0.1, tau_lr=0.5))
    assert low.update(acr=1.0, mean_reward=0.0) == 0.1  # clipped at the lower bound


def test_avspo_method_reports_acr_and_effective_rate() -> None:
    layout = rollout_layout(4, (0,), 4)
    rewards = np.array([0, 0, 0, 0, 1, 1, 1, 1, 1, 0, 0, 0, 1, 1, 0, 0], dtype=float)
    config = AVSPOConfig(trigger="always")
    step = advantages_and_diagnostics(
        get_method("avspo"), rewards, layout.question, layout.variant, config
    )
    assert step.diagnostics["avspo/acr"] == 0.5
    assert step.diagnostics["train/zero_gradient_rate"] == 0.5
    assert step.diagnostics["train/effective_zero_gradient_rate"] == 0.0
    plain = advantages_and_diagnostics(get_method("grpo"), rewards, layout.question, layout.variant)
    assert plain.diagnostics["train/effective_zero_gradient_rate"] == 0.5


def test_estimators_are_registered_beside_the_registry_not_on_import() -> None:
    """The AVSPO module registers nothing itself: importing it leaves the registry unloaded,
    and the registry lists every estimator, in its order, as soon as it is imported."""
    import json
    import subprocess
    import sys

    from tagrpo.plumbing.paths import project_root

    code = (
        "import json, sys\n"
        "import tagrpo.algorithms.avspo\n"
        "before = 'tagrpo.algorithms.estimators' in sys.modules\n"
        "from tagrpo.algorithms.estimators import ESTIMATORS\n"
        "print(json.dumps([before, list(ESTIMATORS)]))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=project_root(),
        capture_output=True,
        text=True,
        check=True,
    )
    assert json.loads(result.stdout) == [False, ["grpo", "avspo", "grpo_flipped"]]
