"""Warm-starting the mini world's base policy: a tiny Llama trained by SFT on CPU.

The base policy must be *partly* competent (the RL signal needs mixed rewards) and its
competence must depend on phrasing (the paper's Assumption 5.3). Both come from the warm-start
corpus: phrasing families appear with unequal weights, and training stops well before the
model has mastered the arithmetic. The saved folder is an ordinary Hugging Face model
(``LlamaForCausalLM`` + fast tokenizer), so evaluation and training load it like a hub model.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from tagrpo.backends.attention import use_gqa_attention
from tagrpo.config.base_model import (
    TinyModelConfig,
    WarmStartCorpus,
    WarmStartTraining,
)
from tagrpo.data.prompts import CHOICE_LETTERS, chat_messages
from tagrpo.miniworld.tasks import (
    PHRASING_FAMILIES,
    STRATEGIES,
    MiniProblem,
    ProblemSpace,
    choice_options,
    misread_result,
    misread_steps,
    reference_response,
    render,
)
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.plumbing.progress import track
from tagrpo.training.schedule import warmup_cosine


@dataclass(frozen=True)
class SftExample:
    messages: list[dict[str, str]]
    response: str
    problem: MiniProblem
    misread: tuple[int, ...] = ()  # the steps the worked answer reads with the wrong sign
    choices: tuple[str, ...] = ()  # the options of a multiple-choice example
    strategy: str = "forward"


def build_corpus(
    space: ProblemSpace,
    config: WarmStartCorpus,
    exclude_keys: set[str],
    big_from: int,
    seed: int = 0,
) -> list[SftExample]:
    """Warm-start examples, never using arithmetic whose key is in ``exclude_keys``.

    Each example is a problem (chain lengths ``config.lengths``), a phrasing family and a
    path, drawn by their weights; each step of the path that the (family, path) habit
    misreads (:func:`tagrpo.miniworld.tasks.misread_steps`) is misread with probability
    ``config.misread_rate``.
    """
    families = [f for f in PHRASING_FAMILIES if config.family_weights.get(f, 0) > 0]
    weights = [config.family_weights[f] for f in families]
    strategies = [s for s in STRATEGIES if config.strategies.get(s, 0) > 0]
    strategy_weights = [config.strategies[s] for s in strategies]
    habits = {f: {p: set(c) for p, c in paths.items()} for f, paths in config.habits.items()}
    # Problems are drawn i.i.d. (repeats allowed), but never with arithmetic reserved for RL
    # training or evaluation.
    rng = random.Random(seed + 202)
    corpus = []
    for index in range(config.examples):
        problem = space.sample(rng)
        while problem.key() in exclude_keys:
            problem = space.sample(rng)
        family = rng.choices(families, weights=weights)[0]
        strategy = rng.choices(strategies, weights=strategy_weights)[0]
        misread = tuple(
            step
            for step in misread_steps(problem, family, strategy, habits, big_from)
            if rng.random() < config.misread_rate
        )
        as_choice = rng.random() < config.choice_fraction
        corpus.append(
            make_example(
                problem, family, as_choice, index, misread, config.choice_options, strategy
            )
        )
    return corpus


def make_example(
    problem: MiniProblem,
    family: str,
    as_choice: bool,
    seed: int,
    misread: tuple[int, ...] = (),
    choice_count: int = 4,
    strategy: str = "forward",
) -> SftExample:
    text = render(problem, family)
    if not as_choice:
        response = reference_response(problem, strategy=strategy, misread=misread)
        return SftExample(chat_messages(text), response, problem, misread, strategy=strategy)
    options, letter = choice_options(problem, seed, choice_count)
    if misread:  # the wrong result if it is an option, else the first distractor
        lettered = list(zip(CHOICE_LETTERS, options, strict=False))
        wrong = str(misread_result(problem, misread))
        candidates = [x for x, option in lettered if option == wrong] or [
            x for x, option in lettered if option != str(problem.answer)
        ]
        letter = candidates[0]
    return SftExample(
        chat_messages(text, options),
        reference_response(problem, letter, strategy=strategy, misread=misread),
        problem,
        misread,
        tuple(options),
        strategy=strategy,
    )


def chat_text(example: SftExample) -> str:
    """The example as the tokenizer will see it: ChatML turns around prompt and response."""
    turns = [*example.messages, {"role": "assistant", "content": example.response}]
    return "".join(f"<|im_start|>{t['role']}\n{t['content']}<|im_end|>\n" for t in turns)


def build_model(tokenizer: PreTrainedTokenizerFast, config: TinyModelConfig) -> LlamaForCausalLM:
    model_config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=config.hidden_size,
        intermediate_size=config.intermediate_size,
        num_hidden_layers=config.num_layers,
        num_attention_heads=config.num_heads,
        num_key_value_heads=config.num_kv_heads,
        max_position_embeddings=config.max_positions,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    return use_gqa_attention(LlamaForCausalLM(model_config))


def encode_example(
    tokenizer: PreTrainedTokenizerFast, example: SftExample
) -> tuple[list[int], list[int]]:
    """Token ids of prompt + response and the labels (-100 on the prompt: loss on the answer)."""
    prompt_ids = tokenizer.apply_chat_template(
        example.messages, add_generation_prompt=True, tokenize=True, return_dict=False
    )
    response_ids = tokenizer(example.response + tokenizer.eos_token, add_special_tokens=False)[
        "input_ids"
    ]
    return prompt_ids + response_ids, [-100] * len(prompt_ids) + response_ids


def encode_examples(
    tokenizer: PreTrainedTokenizerFast, examples: Sequence[SftExample]
) -> list[tuple[list[int], list[int]]]:
    """:func:`encode_example` of every example, the same ids, in two batched tokenizer calls.

    A fast tokenizer encodes each text of a batch on its own, so the ids are those of one call
    per example; calling it 40,000 times (prompt and response of 20,000 examples) cost more
    Python overhead than the encoding itself (``benchmarks/warmstart_speed.py``).
    """
    if not examples:
        return []
    prompts = tokenizer.apply_chat_template(
        [example.messages for example in examples],
        add_generation_prompt=True,
        tokenize=True,
        return_dict=False,
    )
    responses = tokenizer(
        [example.response + tokenizer.eos_token for example in examples],
        add_special_tokens=False,
    )["input_ids"]
    return [
        (prompt_ids + response_ids, [-100] * len(prompt_ids) + response_ids)
        for prompt_ids, response_ids in zip(prompts, responses, strict=True)
    ]


def _collate(batch: Sequence[tuple[list[int], list[int]]], pad_id: int) -> dict[str, torch.Tensor]:
    width = max(len(ids) for ids, _ in batch)
    input_ids = torch.full((len(batch), width), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), width), -100, dtype=torch.long)
    attention = torch.zeros((len(batch), width), dtype=torch.long)
    for row, (ids, row_labels) in enumerate(batch):  # right padding for training
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, : len(ids)] = torch.tensor(row_labels)
        attention[row, : len(ids)] = 1
    return {"input_ids": input_ids, "labels": labels, "attention_mask": attention}


def warm_start(
    corpus: Sequence[SftExample],
    model_config: TinyModelConfig,
    config: WarmStartTraining,
    seed: int = 0,
    torch_threads: int = 2,
    log: Callable[[int, dict[str, float]], None] | None = None,
) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast, list[dict[str, float]]]:
    """Train tokenizer and model on the corpus; returns them and the per-step history."""
    torch.manual_seed(seed)
    torch.set_num_threads(torch_threads)
    tokenizer = train_tokenizer(
        (chat_text(example) for example in corpus), vocab_size=model_config.vocab_size
    )
    model = build_model(tokenizer, model_config)
    # Batches hold one kind of example: one chain length, open or multiple choice (whose
    # prompt lists its options). Padding a mixed batch to its longest member nearly doubled
    # the tokens of every step.
    kinds = sorted({(bool(e.choices), e.problem.length) for e in corpus})
    encoded = encode_examples(tokenizer, corpus)
    pools = [
        [
            ids
            for e, ids in zip(corpus, encoded, strict=True)
            if (bool(e.choices), e.problem.length) == kind
        ]
        for kind in kinds
    ]
    pool_weights = [len(pool) for pool in pools]

    optimizer = torch.optim.AdamW(
        model.parameters(), lr=config.learning_rate, weight_decay=config.weight_decay
    )

    scheduler = torch.optim.lr_scheduler.LambdaLR(  # warm-up, then cosine down to 10%
        optimizer, lambda step: warmup_cosine(step, config.steps, config.warmup_steps, 0.1)
    )
    rng = random.Random(seed + 303)
    history: list[dict[str, float]] = []
    model.train()
    started = time.perf_counter()
    for step in track(range(config.steps), "base_model: SFT", unit="step"):
        pool = rng.choices(pools, weights=pool_weights)[0]
        batch = _collate(
            rng.sample(pool, min(config.batch_size, len(pool))), tokenizer.pad_token_id
        )
        loss = model(**batch).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        record = {
            "step": step,
            "loss": loss.item(),
            "lr": scheduler.get_last_lr()[0],
            "seconds": time.perf_counter() - started,
        }
        history.append(record)
        if log is not None:
            log(step, record)
    model.eval()
    return model, tokenizer, history


def save_policy(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, directory: str | Path
) -> None:
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(directory, safe_serialization=True)
    tokenizer.save_pretrained(directory)
