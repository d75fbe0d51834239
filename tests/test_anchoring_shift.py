"""The ratio under q0 made visible (issue 22, point 6): the neighbour responses' log-ratio
log pi_old(o|q0) - log pi_old(o|q^n) per token and the ESS of the implied importance weights.

Exact values on hand-made log-probabilities; the local trainer's metrics against single-sequence
forward passes of the old policy; the extra scoring pass changes nothing else of a run.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_policy import boxed_grade, tiny_policy, tiny_questions

from tagrpo.algorithms import METHODS
from tagrpo.algorithms.anchoring import anchoring_shift, kish_ess_fraction
from tagrpo.training.trainer import TrainConfig, Trainer

LN2 = math.log(2)


def test_exact_values_on_hand_made_log_probs() -> None:
    # Three neighbour responses; per-token log-ratios [ln2, 0], [-ln2], [0, 0, 0]:
    # weights w = 2, 1/2, 1 (responses 0 and 1 share a (question, rephrasing) group).
    under_q0 = [np.log([0.5, 0.5]), np.log([0.25]), np.log([0.125, 0.5, 1.0])]
    under_qn = [np.log([0.25, 0.5]), np.log([0.5]), np.log([0.125, 0.5, 1.0])]
    metrics = anchoring_shift(under_q0, under_qn, [4, 4, 9])
    expected = {
        "anchoring/log_ratio_mean": 0.0,
        # sorted tokens [-ln2, 0, 0, 0, 0, ln2]; numpy's linear interpolation at q/100 * 5
        "anchoring/log_ratio_p1": -0.95 * LN2,
        "anchoring/log_ratio_p5": -0.75 * LN2,
        "anchoring/log_ratio_p50": 0.0,
        "anchoring/log_ratio_p95": 0.75 * LN2,
        "anchoring/log_ratio_p99": 0.95 * LN2,
        "anchoring/seq_log_weight_mean": 0.0,
        # (2 + 1/2 + 1)^2 / (4 + 1/4 + 1) / 3 = (49/4) / (21/4) / 3 = 7/9
        "anchoring/ess_fraction": 7 / 9,
        # group {2, 1/2}: (5/2)^2 / (17/4) / 2 = 25/34; group {1}: 1; their mean 59/68
        "anchoring/ess_fraction_group_mean": 59 / 68,
        "anchoring/neighbour_responses": 3.0,
        "anchoring/neighbour_tokens": 6.0,
    }
    assert metrics.keys() == expected.keys()
    for key, value in expected.items():
        assert metrics[key] == pytest.approx(value, abs=1e-12), key


def test_kish_ess_is_stable_and_bounded() -> None:
    assert kish_ess_fraction(np.zeros(5)) == 1.0
    # one weight e^1000 times the others: overflows without the log-space shift
    assert kish_ess_fraction(np.array([1000.0, 0.0, 0.0, 0.0])) == pytest.approx(0.25)
    with pytest.raises(ValueError, match="non-finite"):
        kish_ess_fraction(np.array([0.0, np.inf]))


def test_bad_input_is_refused_naming_the_response() -> None:
    with pytest.raises(ValueError, match="neighbour response 1"):
        anchoring_shift([np.zeros(2), np.zeros(3)], [np.zeros(2), np.zeros(2)], [0, 0])
    with pytest.raises(ValueError, match="one of each"):
        anchoring_shift([np.zeros(2)], [np.zeros(2)], [0, 1])
    with pytest.raises(ValueError, match="at least one"):
        anchoring_shift([], [], [])


@pytest.fixture(scope="module")
def policy():
    return tiny_policy(seed=3)


def _fresh(policy):
    model, tokenizer = policy
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    return clone, tokenizer


def _config(method: str) -> TrainConfig:
    return TrainConfig.create(
        method,
        steps=2,
        batch_questions=2,
        mini_batches=2,
        group_size=2,
        max_new_tokens=5,
        micro_batch_sequences=64,
        learning_rate=1e-3,
        seed=7,
        anchoring_diagnostic=True,  # the default switches it off (world v3's drop 2)
    )


def _single_log_probs(model, prompt: list[int], response: list[int]) -> np.ndarray:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([list(prompt) + list(response)])).logits[0]
    log_probs = torch.log_softmax(logits.float(), -1)
    positions = range(len(prompt) - 1, len(prompt) + len(response) - 1)
    return np.array(
        [float(log_probs[t, token]) for t, token in zip(positions, response, strict=True)]
    )


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star", "ta_grpo_unanchored"])
def test_local_trainer_logs_the_shift_of_the_old_policy(policy, method) -> None:
    model, tokenizer = _fresh(policy)
    trainer = Trainer(_config(method), model, tokenizer, tiny_questions(), boxed_grade)
    old_policy = type(model)(model.config)
    old_policy.load_state_dict(model.state_dict())
    old_policy.eval()
    result = trainer.step(1)
    under_q0, under_qn, groups = [], [], []
    for index, rollout in enumerate(result.kept):
        for completion, variant in zip(
            rollout.completions, rollout.variant_of_response, strict=True
        ):
            if variant == 0:
                continue
            q0 = trainer.backend.prompt_ids(rollout.question.messages(0))
            qn = trainer.backend.prompt_ids(rollout.question.messages(int(variant)))
            under_q0.append(_single_log_probs(old_policy, list(q0), completion.token_ids))
            under_qn.append(_single_log_probs(old_policy, list(qn), completion.token_ids))
            groups.append(index * 10 + int(variant))
    expected = anchoring_shift(under_q0, under_qn, groups)
    assert expected["anchoring/neighbour_responses"] == 2 * 3 * 2  # questions x N x G
    logged = {k: v for k, v in result.metrics.items() if k.startswith("anchoring/")}
    assert logged.keys() == expected.keys()
    for key, value in expected.items():
        assert logged[key] == pytest.approx(value, abs=1e-5), key
    assert expected["anchoring/log_ratio_p1"] < 0 < expected["anchoring/log_ratio_p99"]


@pytest.mark.parametrize("method", sorted(m for m, s in METHODS.items() if not s.use_neighbours))
def test_methods_without_neighbours_log_no_shift(policy, method) -> None:
    model, tokenizer = _fresh(policy)
    metrics = Trainer(_config(method), model, tokenizer, tiny_questions(), boxed_grade).step(1)
    assert not [k for k in metrics.metrics if k.startswith("anchoring/")]
    assert "time/anchoring_s" not in metrics.metrics


def test_the_extra_pass_leaves_the_run_bit_identical(policy, monkeypatch) -> None:
    runs = []
    for measured in (True, False):
        if not measured:
            monkeypatch.setattr(Trainer, "_anchoring_shift", lambda self, *args: {})
        model, tokenizer = _fresh(policy)
        result = Trainer(
            _config("ta_grpo"), model, tokenizer, tiny_questions(), boxed_grade
        ).train()
        history = [
            {k: v for k, v in h.items() if not k.startswith(("time/", "anchoring/"))}
            for h in result.history
        ]
        runs.append((history, torch.cat([p.detach().flatten() for p in model.parameters()])))
    assert runs[0][0] == runs[1][0]
    assert torch.equal(runs[0][1], runs[1][1])
