"""CPU sampling speed of the transformers backend against plain ``generate``, side by side.

    .venv/bin/python benchmarks/hf_sampling.py [--model models/base] [--prompts 8]
        [--n 64] [--prompt-tokens 45 200] [--max-new-tokens 48] [--threads 1] [--repeats 2]

For each prompt length, the same left-padded prompts are sampled ``n`` times each by (a)
``model.generate(num_return_sequences=n)`` with transformers' default cache, (b)
:class:`tagrpo.backends.hf.HFBackend` keeping finished rows (each prompt read once, cache
copied to the samples and grown in place) and (c) the backend as the stages run it (finished
rows leave the batch), alternating them ``--repeats`` times. Prints the median seconds of each,
the ratios (a)/(b) and (a)/(c), whether (a) and (b) drew the same tokens for the same seed (they
must), and the mean response length of (a) and (c) (the same distribution: close, not equal).
Without ``--model`` a randomly initialised policy of the mini world's size is used (it never
stops early, so every sequence runs to ``--max-new-tokens`` and (c) cannot gain).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.hf import HFBackend, left_padded


def tiny_random_policy():
    from tokenizers import Tokenizer, models
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    config = LlamaConfig(
        vocab_size=512,
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=2,
        pad_token_id=2,
    )
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    vocab = {f"t{i}": i for i in range(512)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")),
        eos_token="t2",
        pad_token="t2",
    )
    return model, tokenizer


def benchmark_policy(model: str | None):
    """``(model, tokenizer)``: the policy folder ``model``, or a random one of the mini world's
    shape."""
    if model:
        from tagrpo.backends.models import load_causal_lm

        return load_causal_lm(model)
    return tiny_random_policy()


def random_prompts(vocab: int, length: int, count: int) -> list[list[int]]:
    """``count`` random prompts of about ``length`` tokens (some shorter: left padding)."""
    generator = torch.Generator().manual_seed(length)
    return [
        torch.randint(3, vocab, (length - i % 3,), generator=generator).tolist()
        for i in range(count)
    ]


def plain_generate(model, tokenizer, prompts: list[list[int]], n: int, max_new: int) -> list:
    pad = tokenizer.pad_token_id
    input_ids, attention = left_padded(prompts, pad)
    width = input_ids.shape[1]
    output = model.generate(
        input_ids=input_ids,
        attention_mask=attention,
        do_sample=True,
        temperature=1.0,
        top_p=1.0,
        top_k=None,
        max_new_tokens=max_new,
        num_return_sequences=n,
        pad_token_id=pad,
        eos_token_id=tokenizer.eos_token_id,
    )
    return [[t for t in row if t != pad] for row in output[:, width:].tolist()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[45, 200])
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = benchmark_policy(args.model)
    batch = args.prompts * args.n
    keeping = HFBackend(model, tokenizer, max_batch_sequences=batch, compact_finished=False)
    backend = HFBackend(model, tokenizer, max_batch_sequences=batch)
    sampling = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens)
    vocab = min(len(tokenizer), model.config.vocab_size)
    same_everywhere = True
    print(
        f"{args.prompts} prompts x n={args.n}, {args.max_new_tokens} new tokens, "
        f"{args.threads} thread(s)"
    )
    for length in args.prompt_tokens:
        prompts = random_prompts(vocab, length, args.prompts)
        plain_times, kept_times, dropped_times = [], [], []
        with torch.no_grad():
            for _ in range(args.repeats):
                torch.manual_seed(1)
                started = time.perf_counter()
                reference = plain_generate(model, tokenizer, prompts, args.n, args.max_new_tokens)
                plain_times.append(time.perf_counter() - started)
                torch.manual_seed(1)
                started = time.perf_counter()
                ours = keeping._sample(prompts, args.n, sampling)
                kept_times.append(time.perf_counter() - started)
                torch.manual_seed(1)
                started = time.perf_counter()
                dropped = backend._sample(prompts, args.n, sampling)
                dropped_times.append(time.perf_counter() - started)
        pad = tokenizer.pad_token_id
        same = reference == [[t for t in c.token_ids if t != pad] for c in ours]
        same_everywhere &= same
        plain = statistics.median(plain_times)
        kept, fast = statistics.median(kept_times), statistics.median(dropped_times)
        length_plain = statistics.mean(c.num_tokens for c in ours)
        length_dropped = statistics.mean(c.num_tokens for c in dropped)
        print(
            f"prompt {length:4d} tokens: generate {plain:6.2f} s   tagrpo {kept:6.2f} s "
            f"({plain / kept:4.2f}x, same tokens: {same})   dropping finished {fast:6.2f} s "
            f"({plain / fast:4.2f}x)   mean length {length_plain:.1f} vs {length_dropped:.1f}"
        )
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
