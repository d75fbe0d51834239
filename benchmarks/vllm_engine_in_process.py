"""The offline vLLM worker with its engine core in its own process (vLLM's default) against the
engine core in the worker's process (``vllm.engine_in_process: true``), side by side.

    .venv/bin/python benchmarks/vllm_engine_in_process.py [--starts 3] [--calls 4]
        [--prompts 12] [--n 4] [--max-new-tokens 96]

Needs the engines environment (``make engines``: .venv-engines and the converted
SmolLM2-135M-Instruct; ``TAGRPO_ENGINES_PYTHON`` / ``TAGRPO_ENGINES_MODEL`` point elsewhere).
Alternating the two settings, each start opens a worker (:class:`VLLMWorker`) and makes
``--calls`` identical seeded calls (``--prompts`` prompts x ``--n`` samples). It prints, per
setting, the seconds to start and to sample, and how many samples of the first call each later
call reproduced. Then the ratios default / in-process.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from vllm_engine import ENGINES_MODEL, engines_missing, offline_config  # noqa: E402

from tagrpo.backends.base import SamplingParams  # noqa: E402
from tagrpo.backends.vllm_backend import make_vllm_backend  # noqa: E402
from tagrpo.data.prompts import chat_messages  # noqa: E402


def one_start(in_process: bool, args: argparse.Namespace) -> dict[str, object]:
    settings = offline_config(**{"vllm.engine_in_process": in_process}).vllm
    questions = [f"What is {a} + {b}? Explain step by step." for a in range(9) for b in range(9)]
    conversations = [chat_messages(q) for q in questions[: args.prompts]]
    sampling = SamplingParams(n=args.n, max_new_tokens=args.max_new_tokens, seed=0)
    started = time.monotonic()
    backend = make_vllm_backend(settings, ENGINES_MODEL, seed=0)
    start_s = time.monotonic() - started
    calls = []
    started = time.monotonic()
    for _ in range(args.calls):
        samples = backend.generate(conversations, sampling)
        calls.append([c.text for row in samples for c in row])
    sample_s = time.monotonic() - started
    backend.llm.close()
    same = [sum(a == b for a, b in zip(calls[0], call, strict=True)) for call in calls[1:]]
    return {"start_s": start_s, "sample_s": sample_s, "same": same, "of": len(calls[0])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--starts", type=int, default=3, help="engine starts per setting")
    parser.add_argument("--calls", type=int, default=4, help="identical calls per start")
    parser.add_argument("--prompts", type=int, default=12, help="prompts per call")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--max-new-tokens", type=int, default=96, help="tokens per sample")
    args = parser.parse_args()
    if missing := engines_missing():
        sys.exit(missing)
    os.environ.pop("VLLM_ENABLE_V1_MULTIPROCESSING", None)  # the setting decides, not the shell
    results: dict[bool, list[dict[str, object]]] = {False: [], True: []}
    for start in range(args.starts):
        for in_process in (False, True):
            result = one_start(in_process, args)
            results[in_process].append(result)
            label = "in-process" if in_process else "default"
            print(
                f"start {start + 1} {label:>10}: start {result['start_s']:.1f} s, "
                f"{args.calls} calls {result['sample_s']:.1f} s, reproduced {result['same']} "
                f"of {result['of']}",
                flush=True,
            )
    median = {
        key: {s: statistics.median(r[key] for r in results[s]) for s in results}
        for key in ("start_s", "sample_s")
    }
    for in_process, label in ((False, "default"), (True, "in-process")):
        reruns = [same for r in results[in_process] for same in r["same"]]
        exact = sum(same == results[in_process][0]["of"] for same in reruns)
        print(
            f"{label:>10}: median start {median['start_s'][in_process]:.1f} s, median sampling "
            f"{median['sample_s'][in_process]:.1f} s; reruns reproducing every sample: "
            f"{exact} of {len(reruns)} (fewest {min(reruns)} of {results[in_process][0]['of']})"
        )
    start_ratio = median["start_s"][False] / median["start_s"][True]
    sample_ratio = median["sample_s"][False] / median["sample_s"][True]
    print(f"ratio default / in-process: start {start_ratio:.2f}x, sampling {sample_ratio:.2f}x")


if __name__ == "__main__":
    main()
