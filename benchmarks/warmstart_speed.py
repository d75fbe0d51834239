"""The warm-start SFT's data preparation: one tokenizer call per example against two batched calls.

    .venv/bin/python benchmarks/warmstart_speed.py [--examples 20000] [--repeats 3]

Builds the embedded default's warm-start corpus (``params.yaml``'s ``base_model.warmstart``, on
a problem space without exclusions: the data stage is not needed), trains its tokenizer, then
encodes every example (a) one at a time, ``encode_example`` (chat template and tokenizer call
per prompt and per response: what the stage did) and (b) with ``encode_examples`` (the same ids
from one batched call for the prompts and one for the responses), alternating ``--repeats``
times. Prints the median seconds of each, the ratio (a)/(b), the load average, and whether both
gave the same token ids and labels (they must: exit status 1 otherwise).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from tagrpo.config.params import load_config
from tagrpo.miniworld.dataset import problem_space
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.training.warmstart import build_corpus, chat_text, encode_example, encode_examples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--examples", type=int, default=None, help="default: params.yaml's")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args(argv)
    config = load_config()
    settings, world = config.base_model.warmstart, config.common.miniworld
    corpus_settings = settings.corpus
    if args.examples is not None:
        corpus_settings = corpus_settings.model_copy(update={"examples": args.examples})
    space = problem_space(world, corpus_settings.lengths)
    corpus = build_corpus(space, corpus_settings, set(), big_from=world.big_from, seed=0)
    tokenizer = train_tokenizer(
        (chat_text(example) for example in corpus), vocab_size=settings.model.vocab_size
    )
    times: dict[str, list[float]] = {"one call per example": [], "batched": []}
    results = {}
    for _ in range(args.repeats):
        started = time.perf_counter()
        results["one call per example"] = [encode_example(tokenizer, e) for e in corpus]
        times["one call per example"].append(time.perf_counter() - started)
        started = time.perf_counter()
        results["batched"] = encode_examples(tokenizer, corpus)
        times["batched"].append(time.perf_counter() - started)
    same = results["one call per example"] == results["batched"]
    before, after = (statistics.median(times[key]) for key in times)
    print(
        f"{len(corpus)} examples, load average {os.getloadavg()[0]:.2f}: one call per example "
        f"{before:.2f} s, batched {after:.2f} s, ratio {before / after:.2f}x; same ids and "
        f"labels: {same}"
    )
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
