"""Grading throughput: answers/s with 1 and 2 worker processes on the same 5,000 pairs.

    .venv/bin/python benchmarks/grading_throughput.py [--n 5000] [--seed 0] [--data-dir DIR]

Pairs are realistic and seeded: gold answers from MATH-500 (``math500/test.jsonl`` under the
shared data directory: ``--data-dir``, else ``TAGRPO_DATA_DIR``, else ``../shared/data`` next to
the checkout; a built-in list of typical MATH answers if that file is missing), 10 sampled
responses per question (grouped by question, as an evaluation produces them) with a few
sentences of reasoning, sometimes two boxes; about 40% give the gold verbatim, 20% an
equivalent form (``\\dfrac``, ``\\text{ cm}``, ``x =``, ``1,000``, a decimal), 40% a wrong
answer (mostly a near miss: one number off, an inverted fraction; one in ten is another
question's answer); one question in 50 is multiple choice.

Each run uses a fresh, started pool: start-up is reported separately and excluded from the
throughput (the first pool also starts this process's forkserver, which imports and warms up
the grader once; later pools fork from it). Runs alternate between 1 and 2 processes and the
medians are compared. Targets: >= 1.8x speed-up from the second process and >= 200 answers/s
with 2 processes (2 cores). Exit status 1 if a target is missed.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import time
from collections import Counter
from pathlib import Path

TARGET_SPEEDUP = 1.8
TARGET_RATE_2 = 200.0
SAMPLES_PER_QUESTION = 10
MC_EVERY = 50  # one question in 50 is multiple choice

# Typical MATH answers, used when MATH-500 is not available.
FALLBACK_ANSWERS = [
    "3", "12", "-4", "0", "100", "2024", "1000", "\\frac{1}{2}", "\\frac{3}{4}", "\\frac{5}{9}",
    "\\frac{\\sqrt{3}}{2}", "2\\sqrt{2}", "\\sqrt{51}", "6 - 5i", "(2, 3)", "(6,31,-1)",
    "[1, 3)", "(-\\infty, 2]", "(0,9) \\cup (9,36)", "x^2 + 2x + 1", "p - q", "\\pi", "288 \\pi",
    "\\text{Evelyn}", "0.35625", "3 \\pm 2 \\sqrt{2}", "\\begin{pmatrix} 1 \\\\ 2 \\end{pmatrix}",
    "45^\\circ", "25\\%", "\\$18.90", "1, 2, 3", "\\dfrac{17}{50}", "10", "36", "7", "64",
]  # fmt: skip

FILLER = [
    "First we rewrite the condition in a more convenient form.",
    "Substituting the known values gives a simpler equation.",
    "We can check the small cases by hand to see the pattern.",
    "By symmetry it is enough to consider the first quadrant.",
    "Expanding and collecting like terms, most of them cancel.",
    "Note that the constraint forces the variable to be positive.",
    "Using the formula for the sum of a geometric series,",
    "Let us set up a coordinate system with the origin at the centre.",
]

_INT = re.compile(r"-?\d+")
_FRAC = re.compile(r"\\d?frac\{(\d+)\}\{(\d+)\}")


def load_gold_answers(data_dir: Path | None) -> tuple[list[str], str]:
    """MATH-500 answers in file order, or the built-in list; and where they came from."""
    from tagrpo.paths import shared_data_dir

    directory = data_dir.expanduser().resolve() if data_dir else shared_data_dir()
    path = directory / "math500" / "test.jsonl"
    if not path.is_file():
        return list(
            FALLBACK_ANSWERS
        ), f"the built-in list of typical MATH answers ({path} is missing)"
    with path.open(encoding="utf-8") as handle:
        answers = [str(json.loads(line)["answer"]) for line in handle if line.strip()]
    return answers, str(path)


def equivalent_form(gold: str, rng: random.Random) -> str:
    """A different way of writing ``gold`` that a good grader must accept."""
    forms = [f"x = {gold}"] if "=" not in gold else [gold.replace(" ", "")]
    if _INT.fullmatch(gold):
        value = int(gold)
        forms += [f"{gold}\\text{{ cm}}", f"{gold}.0", f"\\frac{{{2 * value}}}{{2}}"]
        if abs(value) >= 1000:
            forms.append(f"{value:,}")
    if "\\frac" in gold and "\\dfrac" not in gold:
        forms.append(gold.replace("\\frac", "\\dfrac"))
    fraction = _FRAC.fullmatch(gold)
    if fraction:
        numerator, denominator = (int(part) for part in fraction.groups())
        if denominator and all(p in (2, 5) for p in _prime_factors(denominator)):
            forms.append(repr(numerator / denominator))
    if gold.startswith("(") and gold.endswith(")"):
        forms.append(f"\\left{gold[0]}{gold[1:-1]}\\right{gold[-1]}")
    return rng.choice(forms)


def wrong_form(gold: str, others: list[str], rng: random.Random) -> str:
    """A plausible wrong answer: mostly a near miss of this gold, sometimes a stray value."""
    roll = rng.random()
    if roll < 0.1:
        candidate = rng.choice(others)  # an answer that belongs to another question
        return candidate if candidate != gold else f"{gold} + 1"
    if _INT.fullmatch(gold):
        return str(int(gold) + rng.choice([-2, -1, 1, 2, 10]))
    fraction = _FRAC.fullmatch(gold)
    if fraction and roll < 0.5:
        numerator, denominator = fraction.groups()
        return f"\\frac{{{denominator}}}{{{numerator}}}" if numerator != denominator else "2"
    numbers = list(re.finditer(r"\d+", gold))
    if numbers:  # an arithmetic slip: one number in the answer is off
        match = rng.choice(numbers)
        changed = str(int(match.group()) + rng.choice([1, 2]))
        return gold[: match.start()] + changed + gold[match.end() :]
    return f"-{gold}" if not gold.startswith("-") else gold[1:]


def _prime_factors(number: int) -> list[int]:
    factors, divisor = [], 2
    while divisor * divisor <= number:
        while number % divisor == 0:
            factors.append(divisor)
            number //= divisor
        divisor += 1
    return [*factors, number] if number > 1 else factors


def response_text(final: str, rng: random.Random, distractor: str | None) -> str:
    sentences = rng.sample(FILLER, k=rng.randint(2, 4))
    if distractor is not None:  # an intermediate result boxed before the final one
        sentences.insert(1, f"For the first part we get $\\boxed{{{distractor}}}$.")
    ending = rng.choice(
        [
            f"Therefore the answer is $\\boxed{{{final}}}$.",
            f"So the final answer is \\[\\boxed{{{final}}}\\]",
            f"Hence $\\boxed{{{final}}}$ is the answer.",
        ]
    )
    return " ".join([*sentences, ending])


def build_pairs(answers: list[str], n: int, seed: int) -> list[tuple[str, str, str]]:
    """``n`` (response, gold, answer_kind) triples, ``SAMPLES_PER_QUESTION`` per question."""
    rng = random.Random(seed)
    pairs: list[tuple[str, str, str]] = []
    question = 0
    while len(pairs) < n:
        gold = answers[question % len(answers)]
        multiple_choice = question % MC_EVERY == MC_EVERY - 1
        letter = "ABCD"[question % 4]
        for _ in range(SAMPLES_PER_QUESTION):
            if len(pairs) == n:
                break
            roll = rng.random()
            if multiple_choice:
                said = letter if roll < 0.6 else rng.choice("ABCD")
                text = " ".join(rng.sample(FILLER, k=2))
                text += rng.choice([f" Answer: {said}", f" The answer is ({said}).",
                                    f" $\\boxed{{\\text{{({said})}}}}$"])  # fmt: skip
                pairs.append((text, letter, "multiple_choice"))
                continue
            if roll < 0.4:
                final = gold
            elif roll < 0.6:
                final = equivalent_form(gold, rng)
            else:
                final = wrong_form(gold, answers, rng)
            distractor = wrong_form(gold, answers, rng) if rng.random() < 0.15 else None
            pairs.append((response_text(final, rng, distractor), gold, "math"))
        question += 1
    return pairs


def measure(pairs: list[tuple[str, str, str]], workers: int) -> tuple[float, float, list]:
    """(start-up seconds, answers/s, results) with a fresh pool of ``workers`` processes."""
    from tagrpo.grading.pool import GradingPool

    pool = GradingPool(workers=workers, item_timeout_s=5.0)
    began = time.perf_counter()
    pool.start()
    startup = time.perf_counter() - began
    try:
        began = time.perf_counter()
        results = pool.grade(pairs)
        elapsed = time.perf_counter() - began
    finally:
        pool.close()
    return startup, len(pairs) / elapsed, results


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=5000, help="number of (response, answer) pairs")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=None, help="shared data directory")
    parser.add_argument(
        "--repeats", type=int, default=3, help="runs per worker count (median reported)"
    )
    args = parser.parse_args(argv)

    answers, origin = load_gold_answers(args.data_dir)
    pairs = build_pairs(answers, args.n, args.seed)
    print(f"gold answers: {len(answers)} from {origin}")
    kinds = Counter(kind for _, _, kind in pairs)
    print(f"pairs: {len(pairs)} ({kinds['math']} math, {kinds['multiple_choice']} multiple choice)")

    # Interleaved runs, each on a fresh pool, so that drift on the machine hits both alike.
    startups: list[float] = []
    rates: dict[int, list[float]] = {1: [], 2: []}
    results: dict[int, list] = {}
    for _ in range(args.repeats):
        for workers in (1, 2):
            startup, rate, results[workers] = measure(pairs, workers)
            startups.append(startup)
            rates[workers].append(rate)
    if results[1] != results[2]:
        print("WARNING: 1-process and 2-process results differ", file=sys.stderr)
    reasons = Counter(result.reason for result in results[2])
    accuracy = sum(result.correct for result in results[2]) / len(results[2])
    rate_1, rate_2 = statistics.median(rates[1]), statistics.median(rates[2])
    speedup = rate_2 / rate_1

    print(f"correct: {accuracy:.1%}; reasons: {dict(reasons.most_common())}")
    print(
        f"pool start-up (excluded below): first {startups[0]:.2f} s (forkserver: imports and "
        f"warm-up), later pools {statistics.median(startups[1:] or startups):.2f} s"
    )
    runs = ", ".join(f"{rate:.0f}" for rate in rates[1])
    print(f"1 process:   {rate_1:7.1f} answers/s  (median of {args.repeats}: {runs})")
    runs = ", ".join(f"{rate:.0f}" for rate in rates[2])
    print(f"2 processes: {rate_2:7.1f} answers/s  (median of {args.repeats}: {runs})")
    print(f"speed-up:    {speedup:7.2f}x")
    ok_speedup = speedup >= TARGET_SPEEDUP
    ok_rate = rate_2 >= TARGET_RATE_2
    print(f"{'PASS' if ok_speedup else 'FAIL'}: speed-up {speedup:.2f}x >= {TARGET_SPEEDUP}x")
    print(f"{'PASS' if ok_rate else 'FAIL'}: 2 processes {rate_2:.1f}/s >= {TARGET_RATE_2:.0f}/s")
    return 0 if ok_speedup and ok_rate else 1


if __name__ == "__main__":
    sys.exit(main())
