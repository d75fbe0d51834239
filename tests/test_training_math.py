"""The Trainer's update against a hand-written loss: Eq. 2/4's per-question weights with unequal
question counts, verl's token-mean, and micro-batching (1, 2 and 64 sequences give the same
gradients and metrics). Plus the device choice (``resolve_device``, ``hf.device``) with a
patched ``torch.cuda.is_available``, and one Trainer step on CUDA against the CPU (skipped
without a GPU).

The hand loss is written from the paper's formulas, per response and unbatched (one forward
pass per sequence, no padding, no :func:`tagrpo.algorithms.policy_loss`); the Trainer's
gradients are read where its optimiser would step (after the clip, which these settings never
reach). Each check was run against a planted bug (see the docstrings) and fails on it.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from tiny_policy import boxed_grade, tiny_policy, tiny_questions

from tagrpo.backends.hf import HFBackend
from tagrpo.training.scoring import build_scoring_batch, score_log_probs
from tagrpo.training.trainer import TrainConfig, Trainer

pytestmark = pytest.mark.core

CLIP, KL_COEF = 0.2, 0.01
# Responses of two questions, three to q0 and one to q1 (unequal counts), of unequal lengths.
QUESTION = np.array([0, 0, 0, 1])
TEXTS = [
    "3 + 4 = 7. The answer is \\boxed{7}.",
    "3 + 4 = 8.",
    "7",
    "Ana has 2 coins and 5 more: 7 coins. The answer is \\boxed{7}.",
]
ADVANTAGES = np.array([1.5, -0.5, 0.8, -1.2])
# old log-prob = current - log(r): the ratios are known, one per response (1.3 and 0.7 clip).
RATIOS = [1.3, 0.9, 0.7, 0.7]
GRADIENT_RTOL, GRADIENT_ATOL = 1e-4, 1e-7


@pytest.fixture(scope="module")
def setup():
    model, tokenizer = tiny_policy(seed=1)
    reference, _ = tiny_policy(seed=2)  # a different network: the KL term is not zero
    backend = HFBackend(model, tokenizer)
    questions = tiny_questions()
    prompts = [backend.prompt_ids(questions[q].messages(0)) for q in QUESTION]
    responses = [tokenizer(text)["input_ids"] for text in TEXTS]
    batch = build_scoring_batch(prompts, responses, tokenizer.pad_token_id)
    current = score_log_probs(model, batch, micro_batch=64)
    shifts = torch.tensor([math.log(r) for r in RATIOS])[:, None]
    old = current - shifts
    ref = score_log_probs(reference, batch, micro_batch=64)
    return model, tokenizer, prompts, responses, batch, old, ref


def _clone(model):
    clone = type(model)(model.config)
    clone.load_state_dict(model.state_dict())
    clone.eval()
    return clone


def _config(**overrides) -> TrainConfig:
    values = dict(
        steps=1,
        batch_questions=2,
        mini_batches=1,
        learning_rate=1e-3,
        clip_low=CLIP,
        clip_high=CLIP,
        kl_coef=KL_COEF,
        grad_clip=1e9,  # never reached: the gradients compared are the loss's own
        temperature=1.0,
        micro_batch_sequences=64,
    )
    values.update(overrides)
    return TrainConfig.create("grpo", **values)


def trainer_update(setup, **overrides) -> tuple[dict[str, float], dict[str, torch.Tensor]]:
    """Trainer._update on a fresh copy of the policy: its metrics and the gradients its
    optimiser stepped with (the first mini-batch's)."""
    model, tokenizer, _, _, batch, old, ref = setup
    trainer = Trainer(_config(**overrides), _clone(model), tokenizer, tiny_questions(), boxed_grade)
    seen: list[dict[str, torch.Tensor]] = []
    stepped = trainer.optimizer.step

    def step(*args, **kwargs):
        if not seen:
            seen.append({n: p.grad.detach().clone() for n, p in trainer.model.named_parameters()})
        return stepped(*args, **kwargs)

    trainer.optimizer.step = step
    metrics = trainer._update(batch, old, ref, ADVANTAGES, QUESTION)
    return metrics, seen[0]


def hand_loss(setup, weighting: str) -> tuple[float, dict[str, torch.Tensor], dict[str, float]]:
    """The loss written out per response: the clipped surrogate and k3 KL per token, then

    * ``eq24``: token mean per response, mean over each question's responses, mean over the
      questions (Eq. 2/4; ``seq-mean-token-mean``);
    * ``token-mean``: every token of the batch alike (verl's ``token-mean``);
    * ``uniform``: token mean per response, then the plain mean over responses (a planted bug:
      it ignores the per-question counts);

    its value, its gradients, and the clip fraction and mean ratio over the batch's tokens."""
    model, _, prompts, responses, batch, old, ref = setup
    policy = _clone(model)
    policy.train()
    counts = np.bincount(QUESTION)
    per_response, token_terms, clipped, ratios = [], [], 0, []
    for row, (prompt, response) in enumerate(zip(prompts, responses, strict=True)):
        logits = policy(input_ids=torch.tensor([prompt + response])).logits[0]
        rows = logits[len(prompt) - 1 : len(prompt) + len(response) - 1]
        current = torch.log_softmax(rows, -1)[torch.arange(len(response)), torch.tensor(response)]
        old_row = old[row][batch.target_mask[row]]
        ref_row = ref[row][batch.target_mask[row]]
        advantage = float(ADVANTAGES[row])
        ratio = torch.exp(current - old_row)
        bounded = ratio.clamp(1 - CLIP, 1 + CLIP)
        surrogate = torch.maximum(-ratio * advantage, -bounded * advantage)
        delta = ref_row - current
        k3 = torch.exp(delta) - delta - 1
        terms = surrogate + KL_COEF * k3
        per_response.append(terms.mean())
        token_terms.append(terms)
        clipped += int(((-bounded * advantage) > (-ratio * advantage)).sum())
        ratios.append(ratio.detach())
    if weighting == "eq24":
        questions = len(counts)
        loss = sum(
            value / (questions * counts[QUESTION[row]]) for row, value in enumerate(per_response)
        )
    elif weighting == "token-mean":
        loss = torch.cat(token_terms).sum() / sum(len(r) for r in responses)
    else:
        loss = sum(per_response) / len(per_response)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in policy.named_parameters()}
    all_ratios = torch.cat(ratios)
    extras = {
        "clip_fraction": clipped / all_ratios.numel(),
        "ratio_mean": float(all_ratios.mean()),
    }
    return float(loss.detach()), grads, extras


def assert_same_gradients(got: dict[str, torch.Tensor], want: dict[str, torch.Tensor]) -> None:
    assert got.keys() == want.keys()
    for name in want:
        torch.testing.assert_close(
            got[name], want[name], rtol=GRADIENT_RTOL, atol=GRADIENT_ATOL, msg=name
        )


def max_difference(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    return max(float((a[n] - b[n]).abs().max()) for n in a)


def test_the_hand_loss_tells_the_weightings_apart(setup) -> None:
    """The power of the two tests below: with 3 responses to one question and 1 to the other,
    Eq. 2/4, plain response means and token-mean give different gradients, by far more than
    the tolerance the Trainer is held to."""
    _, eq24, _ = hand_loss(setup, "eq24")
    _, uniform, _ = hand_loss(setup, "uniform")
    _, token_mean, _ = hand_loss(setup, "token-mean")
    scale = max(float(g.abs().max()) for g in eq24.values())
    assert max_difference(eq24, uniform) > 100 * GRADIENT_RTOL * scale
    assert max_difference(eq24, token_mean) > 100 * GRADIENT_RTOL * scale


def test_eq24_question_weights_through_the_trainer(setup) -> None:
    """``seq-mean-token-mean``: the Trainer's loss, gradients, clip fraction and mean ratio
    equal the hand-written Eq. 2/4 (planted bug: weights ``1/responses`` instead of
    ``1/(questions x the question's responses)`` fails the gradients and the loss)."""
    metrics, grads = trainer_update(setup)
    value, want, extras = hand_loss(setup, "eq24")
    assert metrics["loss"] == pytest.approx(value, rel=1e-5)
    assert metrics["optimiser_updates"] == 1.0
    assert_same_gradients(grads, want)
    # By construction: the tokens of responses 0 (ratio 1.3, A > 0) and 3 (0.7, A < 0) clip,
    # and the mean ratio is the token-weighted mean of RATIOS.
    lengths = np.array([len(response) for response in setup[3]])
    clip_fraction = (lengths[0] + lengths[3]) / lengths.sum()
    assert extras["clip_fraction"] == pytest.approx(clip_fraction, abs=1e-12)
    assert metrics["clip_fraction"] == pytest.approx(clip_fraction, abs=1e-6)
    ratio_mean = float((lengths * np.array(RATIOS)).sum() / lengths.sum())
    assert metrics["ratio_mean"] == pytest.approx(ratio_mean, rel=1e-5)
    assert extras["ratio_mean"] == pytest.approx(ratio_mean, rel=1e-5)


def test_token_mean_through_the_trainer(setup) -> None:
    """``loss_agg_mode: token-mean``: every token of the mini-batch weighs alike (planted bug:
    the per-response mean kept in token-mean mode fails)."""
    metrics, grads = trainer_update(setup, loss_agg_mode="token-mean")
    value, want, _ = hand_loss(setup, "token-mean")
    assert metrics["loss"] == pytest.approx(value, rel=1e-5)
    assert_same_gradients(grads, want)


@pytest.mark.parametrize("agg", ["seq-mean-token-mean", "token-mean"])
@pytest.mark.parametrize("micro", [1, 2, 3])
def test_micro_batches_add_up_to_one_batch(setup, agg, micro) -> None:
    """Micro-batches of 1, 2 and 3 sequences (4 responses: 4, 2 and 2 passes of the
    accumulation loop, one of them short) give the gradients and the metrics of a single
    micro-batch of 64 (planted bugs: the weights sliced from 0 in every micro-batch, or the
    clip fraction and ratio averaged over micro-batches instead of weighted by their tokens,
    fail)."""
    whole, whole_grads = trainer_update(setup, loss_agg_mode=agg, micro_batch_sequences=64)
    split, split_grads = trainer_update(setup, loss_agg_mode=agg, micro_batch_sequences=micro)
    assert_same_gradients(split_grads, whole_grads)
    for key in ("loss", "pg_loss", "kl", "clip_fraction", "ratio_mean", "grad_norm"):
        assert split[key] == pytest.approx(whole[key], rel=1e-5, abs=1e-7), key


# -- devices -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("setting", "cuda", "expected"),
    [("auto", True, "cuda"), ("auto", False, "cpu"), ("cuda", True, "cuda"), ("cpu", True, "cpu")],
)
def test_resolve_device_follows_cuda_availability(monkeypatch, setting, cuda, expected) -> None:
    from tagrpo.backends.models import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    assert resolve_device(setting, "local.device") == torch.device(expected)


def test_resolve_device_refuses_cuda_without_a_device_and_unknown_names(monkeypatch) -> None:
    from tagrpo.backends.models import resolve_device

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(ValueError, match=r"local\.device = cuda, but torch .* no CUDA device"):
        resolve_device("cuda", "local.device")
    with pytest.raises(ValueError, match=r"hf\.device must be cpu, cuda or auto, got 'gpu'"):
        resolve_device("gpu", "hf.device")


@pytest.mark.parametrize(
    ("setting", "cuda", "expected"), [("auto", True, "cuda"), ("cpu", True, "cpu")]
)
def test_the_hf_evaluation_backend_loads_on_hf_device(
    monkeypatch, tmp_path, setting, cuda, expected
) -> None:
    """``evaluate.backend: hf`` puts the policy on ``hf.device`` (auto: the GPU when torch sees
    one). The model is a stand-in that records where it is moved (planted bug: the factory
    ignoring hf.device and keeping the CPU fails the auto case)."""
    import tagrpo.backends.models as models
    from tagrpo.backends.factory import make_backend
    from tagrpo.config.params import config_with

    class Model:
        device = None

        def to(self, device):
            self.device = device
            return self

    class Tokenizer:
        padding_side = "right"

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    monkeypatch.setattr(models, "load_causal_lm", lambda *_args, **_kw: (Model(), Tokenizer()))
    backend = make_backend("hf", config_with({"hf.device": setting}), tmp_path)
    assert backend.model.device == torch.device(expected)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device (runs where one is lent)")
def test_a_trainer_step_on_cuda_matches_the_cpu(setup) -> None:
    """``local.device: cuda``: the update's gradients and metrics equal the CPU's (fp32, and
    torch leaves TF32 matmuls off by default; tolerance 1e-4 relative), and a whole step
    (sampling, grading, scoring, update) runs with every tensor on the device."""
    cpu_metrics, cpu_grads = trainer_update(setup, device="cpu")
    gpu_metrics, gpu_grads = trainer_update(setup, device="cuda")
    assert_same_gradients({n: g.cpu() for n, g in gpu_grads.items()}, cpu_grads)
    for key in ("loss", "pg_loss", "kl", "clip_fraction", "ratio_mean"):
        assert gpu_metrics[key] == pytest.approx(cpu_metrics[key], rel=1e-4, abs=1e-6), key
    model, tokenizer, *_ = setup
    trainer = Trainer(
        _config(device="cuda", max_new_tokens=8, group_size=2),
        _clone(model),
        tokenizer,
        tiny_questions()[:2],
        boxed_grade,
    )
    result = trainer.step(1)
    assert result.updated and next(trainer.model.parameters()).is_cuda
    assert result.metrics["ratio_mean"] == pytest.approx(1.0, abs=0.05)
