"""Anchoring (Eq. 4): what token ids the model is given when it scores each response.

TA-GRPO scores a neighbour's response as q0's prompt followed by the response; TA-GRPO* (and
every other method) as the prompt it was sampled from followed by the response (each distinct
prompt read once and shared through the KV cache; the response's last token is only
predicted). Checked by
recording the model's inputs, during scoring and during a full training step, and by
comparing log-probabilities with single-sequence forward passes.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from tiny_policy import boxed_grade, tiny_questions
from transformers import DynamicCache

from tagrpo.algorithms import get_method
from tagrpo.backends.hf import HFBackend
from tagrpo.training.scoring import (
    build_scoring_batch,
    score_log_probs,
    scoring_prompts,
)
from tagrpo.training.trainer import TrainConfig, Trainer


def _record_inputs(model) -> tuple[list[list[int]], Callable[[], None]]:
    """Every scored row (padding stripped) as the model received it: the prompt prefix it was
    given through the KV cache (the prefix pass, then the cache's row selection) followed by the
    tokens of the row's own pass. Sampling (``HFBackend.generate``) is not recorded."""
    seen: list[list[int]] = []
    state: dict = {"generating": False, "prefixes": None, "select": None}

    def kept(ids, mask) -> list[list[int]]:
        return [
            [token for token, flag in zip(row, keep, strict=True) if flag]
            for row, keep in zip(ids.tolist(), mask.tolist(), strict=True)
        ]

    def hook(module, args, kwargs):
        if state["generating"]:
            return
        ids, mask = kwargs["input_ids"], kwargs["attention_mask"]
        cache = kwargs.get("past_key_values")
        if cache is not None and cache.get_seq_length() == 0:  # the prefix pass
            state["prefixes"], state["select"] = kept(ids, mask), None
            return
        prefixes = state["prefixes"] if cache is not None else None
        if prefixes is None:
            seen.extend(kept(ids, mask))  # no cache: the whole row in one pass
            return
        own = kept(ids, mask[:, -ids.shape[1] :])
        select = state["select"] if state["select"] is not None else range(len(own))
        seen.extend(prefixes[i] + row for i, row in zip(select, own, strict=True))
        state["prefixes"] = None

    original_select = DynamicCache.batch_select_indices

    def batch_select_indices(cache, indices):
        state["select"] = indices.tolist()
        return original_select(cache, indices)

    original_generate = HFBackend.generate

    def generate(self, *args, **kwargs):
        state["generating"] = True
        try:
            return original_generate(self, *args, **kwargs)
        finally:
            state["generating"] = False

    handle = model.register_forward_pre_hook(hook, with_kwargs=True)
    DynamicCache.batch_select_indices = batch_select_indices
    HFBackend.generate = generate

    def undo() -> None:
        handle.remove()
        DynamicCache.batch_select_indices = original_select
        HFBackend.generate = original_generate

    return seen, undo


def _single_log_probs(model, prompt: list[int], response: list[int]) -> torch.Tensor:
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([prompt + response])).logits[0]
    log_probs = torch.log_softmax(logits.float(), -1)
    positions = range(len(prompt) - 1, len(prompt) + len(response) - 1)
    return torch.stack([log_probs[t, token] for t, token in zip(positions, response, strict=True)])


def test_scoring_inputs_and_log_probs_follow_the_anchor(tiny_lm) -> None:
    model, tokenizer = tiny_lm
    backend = HFBackend(model, tokenizer)
    question = tiny_questions()[1]
    response = tokenizer("5 + 2 = 7. 7 - 1 = 6. The answer is \\boxed{6}.")["input_ids"]
    response = [*response, tokenizer.eos_token_id]
    q0 = backend.prompt_ids(question.messages(0))
    q2 = backend.prompt_ids(question.messages(2))
    assert q0 != q2

    owners, variants = [question, question], [0, 2]  # a response to q0 and one to q2
    # The model reads the anchor prompt and the response but its last token, which is only
    # predicted (the logits after it are never used).
    read = response[:-1]
    expected = {
        "ta_grpo": [q0 + read, q0 + read],
        "ta_grpo_star": [q0 + read, q2 + read],
    }
    values = {}
    for method, rows in expected.items():
        prompts = scoring_prompts(get_method(method), owners, variants, backend.prompt_ids)
        batch = build_scoring_batch(prompts, [response, response], tokenizer.pad_token_id)
        seen, undo = _record_inputs(model)
        try:
            values[method] = score_log_probs(model, batch, micro_batch=8)
        finally:
            undo()
        assert seen == rows  # exactly what the model received
        # The scored positions hold log p(response | anchor prompt), token by token.
        for row, prompt in enumerate(prompts):
            scored = values[method][row][batch.target_mask[row]]
            torch.testing.assert_close(
                scored, _single_log_probs(model, prompt, response), atol=1e-5, rtol=1e-5
            )
    # TA-GRPO scores q2's response under q0: the same values as the response to q0 itself...
    ta = values["ta_grpo"]
    torch.testing.assert_close(ta[1], ta[0])
    # ... and different ones from TA-GRPO*, which scores it under q2.
    star = values["ta_grpo_star"]
    mask = build_scoring_batch([q2], [response], tokenizer.pad_token_id).target_mask[0]
    under_q2 = star[1][: mask.numel()][mask]
    under_q0 = ta[1][build_scoring_batch([q0], [response], 0).target_mask[0]]
    assert not torch.allclose(under_q2, under_q0, atol=1e-4)


def one_step_trainer(tiny_lm, method: str, **settings) -> Trainer:
    """A one-step trainer of ``method`` on two questions, on fresh copies of the tiny policy
    (the test trains them)."""
    model, tokenizer = tiny_lm
    model = type(model)(model.config)
    model.load_state_dict(tiny_lm[0].state_dict())
    reference = type(model)(model.config)
    reference.load_state_dict(tiny_lm[0].state_dict())
    config = TrainConfig.create(
        method,
        steps=1,
        batch_questions=2,
        mini_batches=2,
        group_size=2,
        max_new_tokens=6,
        micro_batch_sequences=64,
        **{"anchoring_diagnostic": True, **settings},  # the default's is off (v3's drop 2)
    )
    questions = tiny_questions()[:2]
    return Trainer(config, model, tokenizer, questions, boxed_grade, ref_model=reference)


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star", "ta_grpo_unanchored"])
def test_a_training_step_feeds_the_anchor_prompt_to_policy_and_reference(tiny_lm, method) -> None:
    trainer = one_step_trainer(tiny_lm, method)
    questions = tiny_questions()[:2]  # the trainer's
    seen_policy, undo_policy = _record_inputs(trainer.model)
    seen_reference, undo_reference = _record_inputs(trainer.ref_model)
    try:
        result = trainer.step(1)
    finally:
        undo_policy()
        undo_reference()
    generated = result.generated
    backend = trainer.backend
    expected, counterpart = [], []
    for rollout in generated:
        for completion, variant in zip(
            rollout.completions, rollout.variant_of_response, strict=True
        ):
            anchor = 0 if method == "ta_grpo" else int(variant)
            prompt = backend.prompt_ids(rollout.question.messages(anchor))
            expected.append(prompt + list(completion.token_ids)[:-1])
            if variant > 0:  # the anchoring pass: the prompt the method does not score with
                other = int(variant) if method == "ta_grpo" else 0
                other_prompt = backend.prompt_ids(rollout.question.messages(other))
                counterpart.append(other_prompt + list(completion.token_ids)[:-1])
    assert len(expected) == 2 * 4 * 2  # 2 questions x (q0 + 3 neighbours) x G=2
    assert len(counterpart) == 2 * 3 * 2
    assert any(rollout.variant_of_response.max() == 3 for rollout in generated)
    # Reference: one scoring pass. Policy: the old-log-prob pass, the anchoring pass of the
    # neighbour responses (diagnostic only, anchoring/*) and one pass per mini-batch.
    assert sorted(seen_reference) == sorted(expected)
    assert sorted(seen_policy) == sorted(expected + counterpart + expected)
    if method == "ta_grpo":
        training = [row for row in seen_policy]
        for row in counterpart:
            training.remove(row)
        q0_prompts = [backend.prompt_ids(q.messages(0)) for q in questions]
        assert all(any(row[: len(p)] == p for p in q0_prompts) for row in training)
    # The dump records what was used for generation and what for scoring.
    scored = result.scored_under
    for rollout in generated:
        own = backend.prompt_text(rollout.question.messages(2))
        q0_text = backend.prompt_text(rollout.question.messages(0))
        assert rollout.generation_prompts[2] == own
        assert scored[(rollout.question.id, 2)] == (q0_text if method == "ta_grpo" else own)


def test_the_anchoring_diagnostic_switched_off_costs_no_pass(tiny_lm) -> None:
    """``train.anchoring_diagnostic: false``: the policy sees the old-log-prob pass and the
    update only (no second scoring of the neighbour responses), and no anchoring/ metric."""
    trainer = one_step_trainer(tiny_lm, "ta_grpo", anchoring_diagnostic=False)
    seen_policy, undo_policy = _record_inputs(trainer.model)
    try:
        result = trainer.step(1)
    finally:
        undo_policy()
    responses = sum(len(rollout.completions) for rollout in result.generated)
    assert responses == 2 * 4 * 2
    assert len(seen_policy) == 2 * responses  # old log-probs + the update, nothing more
    assert not any(key.startswith("anchoring/") for key in result.metrics)
