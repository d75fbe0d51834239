"""The loss on a tiny model against a hand computation, and the direction of one update."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_policy import boxed_grade, tiny_policy, tiny_questions

from tagrpo.algorithms import policy_loss
from tagrpo.backends.hf import HFBackend
from tagrpo.training.scoring import build_scoring_batch, forward_log_probs, score_log_probs
from tagrpo.training.trainer import TrainConfig, Trainer

pytestmark = pytest.mark.core


def _copy(model):
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    clone.eval()
    return clone


@pytest.fixture(scope="module")
def setup():
    model, tokenizer = tiny_policy(seed=1)
    reference, _ = tiny_policy(seed=2)  # a different network: non-zero KL
    backend = HFBackend(model, tokenizer)
    question = tiny_questions()[0]
    prompts = [backend.prompt_ids(question.messages(0)), backend.prompt_ids(question.messages(1))]
    texts = ["3 + 4 = 7. The answer is \\boxed{7}.", "3 + 4 = 8."]
    responses = [
        [*tokenizer(texts[0])["input_ids"], tokenizer.eos_token_id],
        tokenizer(texts[1])["input_ids"],  # unfinished: no EOS
    ]
    return model, reference, tokenizer, prompts, responses


def _token_log_probs(model, prompt: list[int], response: list[int]) -> list[float]:
    """log pi(o_t | q, o_<t) for one sequence, by an unbatched forward pass."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0].double()
    values = []
    for t, token in enumerate(response):
        row = logits[len(prompt) + t - 1]
        values.append(float(row[token] - torch.logsumexp(row, 0)))
    return values


def test_loss_on_a_tiny_model_equals_a_hand_computation(setup) -> None:
    model, reference, tokenizer, prompts, responses = setup
    batch = build_scoring_batch(prompts, responses, tokenizer.pad_token_id)
    logp = forward_log_probs(model, batch)
    ref = score_log_probs(reference, batch, micro_batch=8)
    # Old log-probs shifted so that ratios are known: 1.3 (clipped at 1.2) and 0.9 per token.
    shifts = torch.tensor([math.log(1.3), math.log(0.9)])[:, None]
    old = logp.detach() - shifts
    advantages = torch.tensor([1.5, -0.5])
    out = policy_loss(logp, old, advantages, batch.target_mask, None, ref, 0.2, 0.2, 0.001)

    hand_policy, hand_kl = 0.0, 0.0
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        current = _token_log_probs(model, prompt, response)
        reference_values = _token_log_probs(reference, prompt, response)
        ratio = [1.3, 0.9][row]
        advantage = float(advantages[row])
        surrogate = [min(ratio * advantage, min(max(ratio, 0.8), 1.2) * advantage) for _ in current]
        k3 = [
            math.exp(r - c) - (r - c) - 1.0 for c, r in zip(current, reference_values, strict=True)
        ]
        hand_policy += -sum(surrogate) / len(current) / 2  # token mean, then over 2 responses
        hand_kl += sum(k3) / len(current) / 2
    assert out.policy_loss.item() == pytest.approx(hand_policy, rel=1e-5)
    assert out.kl.item() == pytest.approx(hand_kl, rel=1e-4)
    assert out.loss.item() == pytest.approx(hand_policy + 0.001 * hand_kl, rel=1e-5)
    assert hand_kl > 0.01  # the reference really differs


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_one_update_moves_the_response_log_prob_with_the_advantage(setup, sign) -> None:
    base, _, tokenizer, prompts, responses = setup
    model = _copy(base)
    config = TrainConfig.create(
        "grpo", steps=1, batch_questions=1, mini_batches=1, learning_rate=1e-3
    )
    trainer = Trainer(config, model, tokenizer, tiny_questions()[:1], boxed_grade)
    batch = build_scoring_batch(prompts[:1], responses[:1], tokenizer.pad_token_id)
    old = score_log_probs(model, batch, micro_batch=8)
    before = old[0][batch.target_mask[0]].sum().item()
    # The gradient of the response's log-likelihood, for the direction check.
    model.zero_grad()
    forward_log_probs(model, batch)[0][batch.target_mask[0]].sum().backward()
    likelihood_grad = {n: p.grad.detach().clone() for n, p in model.named_parameters()}
    start = {n: p.detach().clone() for n, p in model.named_parameters()}

    metrics = trainer._update(batch, old, old.clone(), np.array([sign]), np.array([0]))

    after = score_log_probs(model, batch, micro_batch=8)[0][batch.target_mask[0]].sum().item()
    alignment = sum(
        float(((p.detach() - start[n]) * likelihood_grad[n]).sum())
        for n, p in model.named_parameters()
    )
    assert metrics["ratio_mean"] == pytest.approx(1.0)  # first update: ratio exactly 1
    assert metrics["kl"] == pytest.approx(0.0, abs=1e-7)  # reference == current policy
    if sign > 0:  # positive advantage: parameters move up the response's log-likelihood
        assert alignment > 0 and after > before
    else:
        assert alignment < 0 and after < before
