"""CPU sampling speed with tagrpo's grouped-query attention against transformers' sdpa.

    .venv/bin/python benchmarks/gqa_attention.py [--model models/base] [--prompts 8]
        [--n 64] [--prompt-tokens 45 120 200] [--max-new-tokens 48] [--threads 2] [--repeats 2]

The same left-padded prompts are sampled ``n`` times each by
:class:`tagrpo.backends.hf.HFBackend` with the model on (a) transformers' ``sdpa`` (which copies
the KV cache once per query head when a mask is given) and (b)
:data:`tagrpo.backends.attention.ATTENTION` (``enable_gqa``, no copy), alternating (a) and (b)
``--repeats`` times. Prints the median seconds of each, the ratio (a)/(b), and whether both drew
the same tokens for the same seed (they must). Without ``--model`` a randomly initialised policy
of the mini world's shape (4 query heads, 2 key/value heads) is used.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from hf_sampling import benchmark_policy, random_prompts

from tagrpo.backends.attention import ATTENTION
from tagrpo.backends.base import SamplingParams
from tagrpo.backends.hf import HFBackend


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", default=None)
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--n", type=int, default=64)
    parser.add_argument("--prompt-tokens", type=int, nargs="+", default=[45, 120, 200])
    parser.add_argument("--max-new-tokens", type=int, default=48)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    model, tokenizer = benchmark_policy(args.model)
    backend = HFBackend(model, tokenizer, max_batch_sequences=args.prompts * args.n)
    sampling = SamplingParams(n=args.n, temperature=1.0, max_new_tokens=args.max_new_tokens)
    vocab = min(len(tokenizer), model.config.vocab_size)
    same_everywhere = True
    print(
        f"{args.prompts} prompts x n={args.n}, {args.max_new_tokens} new tokens, "
        f"{args.threads} thread(s), {model.config.num_attention_heads} query heads / "
        f"{model.config.num_key_value_heads} key-value heads"
    )
    for length in args.prompt_tokens:
        prompts = random_prompts(vocab, length, args.prompts)  # every batch has a mask
        times: dict[str, list[float]] = {"sdpa": [], ATTENTION: []}
        tokens: dict[str, list] = {}
        with torch.no_grad():
            for _ in range(args.repeats):
                for implementation in times:
                    model.set_attn_implementation(implementation)
                    torch.manual_seed(1)
                    started = time.perf_counter()
                    completions = backend._sample(prompts, args.n, sampling)
                    times[implementation].append(time.perf_counter() - started)
                    tokens[implementation] = [c.token_ids for c in completions]
        same = tokens["sdpa"] == tokens[ATTENTION]
        same_everywhere &= same
        stock, ours = statistics.median(times["sdpa"]), statistics.median(times[ATTENTION])
        print(
            f"prompt {length:4d} tokens: sdpa {stock:7.2f} s   {ATTENTION} {ours:7.2f} s   "
            f"ratio {stock / ours:5.2f}x   same tokens: {same}"
        )
    return 0 if same_everywhere else 1


if __name__ == "__main__":
    sys.exit(main())
