"""Shared helpers for training tests: a tiny random policy and scripted graders (no pools)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch

from tagrpo.config.params import embedded
from tagrpo.data.prompts import chat_messages
from tagrpo.miniworld.tasks import MiniProblem, reference_response, render
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.splits.training_set import TrainQuestion
from tagrpo.training.warmstart import TinyModelConfig, build_model, save_policy

PROBLEMS = [
    MiniProblem(3, (5, -1)),
    MiniProblem(5, (2, -1), name="Ana", item="coins"),
    MiniProblem(1, (2, 6), name="Sam", item="pens"),
]
FAMILIES = ("expr", "words", "imperative", "story")


def tiny_questions() -> list[TrainQuestion]:
    """Mini-world questions with their three other phrasings as neighbours."""
    return [
        TrainQuestion(
            id=f"q{index}",
            problem=render(problem, FAMILIES[index % 4]),
            answer=str(problem.answer),
            neighbours=tuple(
                render(problem, family) for family in FAMILIES if family != FAMILIES[index % 4]
            ),
        )
        for index, problem in enumerate(PROBLEMS)
    ]


def tiny_policy(seed: int = 0, hidden_size: int = 32):
    """``(model, tokenizer)``: a random 2-layer Llama over a BPE trained on mini-world text."""
    corpus = []
    for problem in PROBLEMS:
        for family in FAMILIES:
            messages = chat_messages(render(problem, family))
            corpus.append(
                f"<|im_start|>user\n{messages[0]['content']}<|im_end|>\n"
                f"<|im_start|>assistant\n{reference_response(problem)}<|im_end|>\n"
            )
    tokenizer = train_tokenizer(corpus * 5, vocab_size=300)
    torch.manual_seed(seed)
    model = build_model(
        tokenizer,
        embedded(TinyModelConfig, hidden_size=hidden_size, intermediate_size=2 * hidden_size),
    )
    model.eval()
    return model, tokenizer


def save_chat_policy(
    directory: Path,
    problems: Sequence[str],
    seed: int = 0,
    weight_scale: float | None = None,
    **shape: int,
) -> Path:
    """A random tiny Llama and a BPE trained on ``problems`` as user turns, saved as an
    ordinary HF folder. ``weight_scale`` redraws every matrix with std ``scale/sqrt(fan_in)``:
    the initialiser's weights make greedy text one token repeated."""
    torch.manual_seed(seed)
    corpus = [f"<|im_start|>user\n{p}<|im_end|>\n" for p in problems] * 20
    tokenizer = train_tokenizer(corpus, vocab_size=300)
    model = build_model(
        tokenizer,
        embedded(TinyModelConfig, **{"hidden_size": 32, "intermediate_size": 64, **shape}),
    )
    if weight_scale is not None:
        generator = torch.Generator().manual_seed(seed)
        with torch.no_grad():
            for weight in model.parameters():
                if weight.dim() == 2:
                    fan_in = weight.shape[1]
                    noise = torch.randn(weight.shape, generator=generator)
                    weight.copy_(noise * weight_scale / fan_in**0.5)
    save_policy(model, tokenizer, directory)
    return directory


def boxed_grade(
    responses: Sequence[str], answers: Sequence[str], kinds: Sequence[str]
) -> list[tuple[bool, str, str]]:
    """Correct iff the response contains ``\\boxed{answer}`` (random models never do)."""
    return [
        (f"\\boxed{{{answer}}}" in response, "", "scripted")
        for response, answer in zip(responses, answers, strict=True)
    ]


class ScriptedGrade:
    """Rewards by gold answer: ``patterns[answer]`` is cycled over that answer's responses."""

    def __init__(self, patterns: dict[str, Sequence[bool]]) -> None:
        self.patterns = patterns
        self.position = dict.fromkeys(patterns, 0)

    def __call__(
        self, responses: Sequence[str], answers: Sequence[str], kinds: Sequence[str]
    ) -> list[tuple[bool, str, str]]:
        verdicts = []
        for answer in answers:
            pattern = self.patterns[answer]
            verdicts.append((bool(pattern[self.position[answer] % len(pattern)]), "", "scripted"))
            self.position[answer] += 1
        return verdicts
