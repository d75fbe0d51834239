"""Does the tiny policy's computation depend on torch's CPU thread count (common.torch_threads)?

Each thread count runs in a fresh process (torch fixes its pools at start-up):

* SFT: the embedded default's warm-start (model, corpus settings, seed) on a smaller corpus for
  a few steps, then the weights' digest: the same digest means forward, backward and AdamW gave
  identical bits;
* sampling: one policy (the first thread count's) sampled by the evaluate stage's backend
  (``tagrpo/backends/hf.py``), the same prompts and seed: how many responses differ from the
  first thread count's, and the largest logit difference of one batched forward pass.

    python benchmarks/torch_threads_determinism.py [--threads 1 2 4] [--sft-steps 40]

It reports what differs; it has no target (docs/performance.md, "Determinism", says what the
project does about it: the same outputs promised per thread count, not across them).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SFT = r"""
import hashlib, json, sys
from tagrpo.config.params import load_config
from tagrpo.miniworld.dataset import problem_space
from tagrpo.training.warmstart import build_corpus, save_policy, warm_start
threads, steps, examples, out = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
config = load_config("params.yaml")
settings, world = config.base_model.warmstart, config.common.miniworld
corpus = build_corpus(
    problem_space(world, settings.corpus.lengths),
    settings.corpus.model_copy(update={"examples": examples}),
    set(),
    big_from=world.big_from,
    seed=settings.seed,
)
training = settings.training.model_copy(update={"steps": steps})
model, tokenizer, history = warm_start(
    corpus, settings.model, training, seed=settings.seed, torch_threads=threads
)
digest = hashlib.sha256()
for _, tensor in sorted(model.state_dict().items()):
    digest.update(tensor.detach().numpy().tobytes())
if out != "-":
    save_policy(model, tokenizer, out)
print(json.dumps({"weights": digest.hexdigest()[:16], "loss": history[-1]["loss"]}))
"""

SAMPLE = r"""
import json, random, sys, torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from tagrpo.backends.base import SamplingParams
from tagrpo.backends.hf import HFBackend
threads, policy, logits_out = int(sys.argv[1]), sys.argv[2], sys.argv[5]
prompts_n, n = int(sys.argv[3]), int(sys.argv[4])
torch.set_num_threads(threads)
model = AutoModelForCausalLM.from_pretrained(policy).eval()
tokenizer = AutoTokenizer.from_pretrained(policy)
rng = random.Random(0)
questions = []
for _ in range(prompts_n):
    a, b, c, d = (rng.randint(5, 25), rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 9))
    text = (f"What is {a} + {b} - {c} + {d}? Please provide step-by-step reasoning, "
            "and enclose your final answer in the box: \\boxed{}.")
    questions.append([{"role": "user", "content": text}])
backend = HFBackend(model, tokenizer, max_batch_sequences=512)
sampling = SamplingParams(n=n, temperature=1.0, max_new_tokens=64, seed=7)
results = backend.generate(questions, sampling)
prompts = [backend.prompt_text(q) for q in questions[:8]]
batch = tokenizer(prompts, return_tensors="pt", padding=True)
with torch.no_grad():
    torch.save(model(**batch).logits, logits_out)
print(json.dumps([c.text for r in results for c in r]))
"""


def _child(code: str, *args: object) -> str:
    done = subprocess.run(
        [sys.executable, "-c", code, *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout.strip().splitlines()[-1]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--sft-steps", type=int, default=40)
    parser.add_argument("--examples", type=int, default=2000, help="warm-start corpus size")
    parser.add_argument("--prompts", type=int, default=48)
    parser.add_argument("--n", type=int, default=64, help="samples per prompt")
    args = parser.parse_args(argv)

    import torch

    with tempfile.TemporaryDirectory() as work:
        policy = Path(work) / "policy"
        sft = {}
        for index, threads in enumerate(args.threads):
            out = policy if index == 0 else "-"
            sft[threads] = json.loads(_child(SFT, threads, args.sft_steps, args.examples, out))
            print(f"SFT, {threads} thread(s): weights {sft[threads]['weights']}", flush=True)
        texts, logits = {}, {}
        for threads in args.threads:
            path = Path(work) / f"logits-{threads}.pt"
            texts[threads] = json.loads(_child(SAMPLE, threads, policy, args.prompts, args.n, path))
            logits[threads] = torch.load(path)
        first = args.threads[0]
        same_weights = len({row["weights"] for row in sft.values()}) == 1
        print(f"SFT ({args.sft_steps} steps): weights identical across threads: {same_weights}")
        for threads in args.threads[1:]:
            differ = sum(a != b for a, b in zip(texts[first], texts[threads], strict=True))
            gap = float((logits[threads] - logits[first]).abs().max())
            print(
                f"sampling, {threads} vs {first} thread(s): {differ} of {len(texts[first])} "
                f"responses differ; largest logit difference {gap:.3g}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
