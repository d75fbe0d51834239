"""Grading on real pairs, side by side: tagrpo (1 and 2 processes), math-verify and verl.

    .venv/bin/python benchmarks/grading_throughput.py [--quick | --per-source N] [--seed 0]
        [--data-dir DIR] [--no-peers] [--no-stall] [--show 10]

Pairs (all real, built from the shared data directory: ``--data-dir``, else
``TAGRPO_DATA_DIR``, else ``../shared/data``, read with the project's own loaders in
:mod:`tagrpo.data.sources.local`):

* positives: every reference solution of MATH test (5,000), MATH-500 (500), Minerva-Math (272)
  and OlympiadBench (675), as the response, against the loader's gold answer. OlympiadBench
  solutions state their answer in prose, so the upstream ``final_answer`` (and its ``unit``,
  when the record has one) is appended in a box, the way a model ends its response;
* cross-problem negatives: each solution against the gold of another problem of the same source
  whose gold differs (value for plain numbers, else the whitespace-free string);
* perturbed negatives: each solution with its final box changed, twice: one number of the
  answer off by one in its last digit, and the answer x replaced by ``2 (x) + 1``.

A negative is "expected wrong" by construction; a few constructions can still be right (a
perturbed exponent of 1, say), so the script lists each grader's false positives for review.

Every grader gets the same pairs. Printed per grader: answers/s (wall clock) and answers per
CPU-second (all processes doing the grading: the parent and its workers), accuracy on the
positives and false-positive rate on the negatives. tagrpo runs on a fresh pool per worker count
(start-up excluded, reported apart); plain math-verify is ``verify(parse("$gold$"),
parse(response))`` in this process; verl's ``math_verify.compute_score`` is called item by item,
as verl's reward manager does (it grades in its own process pool; the CPU of those processes is
counted). A stall set of hostile responses (unclosed boxes, long runs of newlines, spaces and
``*``) is graded by tagrpo alone: peers would stall on them.

Targets (exit status 1 if one is missed): tagrpo >= 1.5x plain math-verify's answers per
CPU-second; 2 processes >= 1.8x one process in answers/s (meaningful on an idle machine only:
the load average is printed); no item over its CPU limit plus the watchdog's grace; tagrpo at
100% on the positives.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path

from tagrpo.plumbing.procfs import proc_stat

TARGET_CPU_RATIO = 1.5  # tagrpo (1 process) vs plain math-verify, answers per CPU-second
TARGET_SPEEDUP = 1.8  # 2 processes vs 1, answers/s
ITEM_LIMIT_S = 5.0  # tagrpo's per-item limit in this benchmark (the project default)
QUICK_PER_SOURCE = 12
SOURCES = ("math_test", "math500", "minerva_math", "olympiadbench")


@dataclass(frozen=True)
class Pair:
    source: str
    kind: str  # positive | cross | perturbed_digit | perturbed_affine
    response: str
    gold: str

    @property
    def expected(self) -> bool:
        return self.kind == "positive"


@dataclass
class Run:
    name: str
    wall_s: float
    cpu_s: float | None
    verdicts: list[bool]
    reasons: Counter = field(default_factory=Counter)
    startup_s: float | None = None
    note: str = ""


# --- pairs -----------------------------------------------------------------------------------


def _math_test_questions(data_dir: Path) -> list:
    """MATH test through the MATH loader's row normaliser (gold = last box of the solution).

    The test file has ``idx`` where the loader expects MATH's ``unique_id``; the id is made up in
    the same scheme (``test/<subject>/<idx>.json``) and only serves to tell rows apart.
    """
    from tagrpo.data.sources.base import read_jsonl_records
    from tagrpo.data.sources.hendrycks_math import SOURCE as MATH

    questions = []
    for row_index, record in read_jsonl_records(data_dir / "math" / "test.jsonl"):
        if isinstance(record, tuple):
            raise ValueError(f"math/test.jsonl row {row_index}: {record[0]}")
        subject = str(record.get("type", "unknown")).lower().replace(" ", "_")
        with_id = {**record, "unique_id": f"test/{subject}/{record.get('idx', row_index)}.json"}
        outcome = MATH.normalise(with_id, row_index)
        if hasattr(outcome, "answer"):
            questions.append(outcome)
    return questions


def _olympiad_response(question, record: dict) -> str:
    """The solution, then the upstream final answer (and unit) boxed as a model would."""
    from tagrpo.data.sources.base import literal_list, strip_math_delimiters

    answers = [
        strip_math_delimiters(str(item)) for item in literal_list(record["final_answer"], "")
    ]
    boxed = ", ".join(item for item in answers if item)
    unit = (record.get("unit") or "").strip()
    if unit:
        unit = strip_math_delimiters(unit)
        boxed += unit if unit.startswith(("^", "\\%", "%")) else f" \\text{{ {unit}}}"
    return f"{question.solution or ''}\n\nThe final answer is $\\boxed{{{boxed}}}$."


def load_positives(data_dir: Path, per_source: int | None) -> list[Pair]:
    from tagrpo.data.sources.local import load_local

    pairs: list[Pair] = []
    for source in SOURCES:
        if source == "math_test":
            rows = [(q, q.solution) for q in _math_test_questions(data_dir)]
        elif source == "olympiadbench":
            raw = [
                json.loads(line)
                for line in (data_dir / "olympiadbench" / "test.jsonl").open(encoding="utf-8")
                if line.strip()
            ]
            by_id = {f"olympiadbench-{record['id']}": record for record in raw}
            loaded = load_local(source, data_dir).questions
            rows = [(q, _olympiad_response(q, by_id[q.id])) for q in loaded]
        else:
            rows = [(q, q.solution) for q in load_local(source, data_dir).questions]
        rows = [(q, text) for q, text in rows if text and q.answer]
        if per_source is not None:
            rows = rows[:per_source]
        pairs += [Pair(source, "positive", text, q.answer) for q, text in rows]
    return pairs


_PLAIN_NUMBER = re.compile(r"-?\d+(?:\.\d+)?|-?\.\d+|-?\\frac\{\d+\}\{\d+\}")
_TEXT_GROUP = re.compile(r"\\(?:text|mbox|mathrm)\s*\{[^{}]*\}")


def _label_key(gold: str) -> object:
    """What makes two golds "the same" for labelling cross pairs.

    Deliberately cruder than any grader and independent of them: text groups, degrees, percent
    signs and spacing go, ``\\sqrt5`` is ``\\sqrt{5}``, plain numbers compare by value. Two
    golds with one key never form a cross pair; a few more exclusions cost nothing.
    """
    text = _TEXT_GROUP.sub("", gold.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac"))
    text = re.sub(r"\^\s*\{?\\circ\}?|\\%|%|\$|\\[,!;: ]|\s+", "", text).rstrip(".")
    text = re.sub(r"\\(sqrt|frac)(\d)", r"\\\1{\2}", text)
    text = re.sub(r"\\frac\{(\d+)\}(\d)", r"\\frac{\1}{\2}", text)
    if _PLAIN_NUMBER.fullmatch(text):
        match = re.fullmatch(r"(-?)\\frac\{(\d+)\}\{(\d+)\}", text)
        if match:
            sign = -1 if match.group(1) else 1
            return sign * Fraction(int(match.group(2)), max(int(match.group(3)), 1))
        return Fraction(text)
    return text


def _replace_last_box(response: str, new_content: str) -> str | None:
    from tagrpo.grading.extract import iter_boxed

    last = None
    for start, end, _ in iter_boxed(response):
        if last is None or start >= last[1]:
            last = (start, end)
    if last is None:
        return None
    start, end = last
    head = response[start:end]
    open_index = head.index("{")
    return f"{response[: start + open_index + 1]}{new_content}}}{response[end:]}"


def _digit_off_by_one(answer: str, rng: random.Random) -> str | None:
    """One number of the answer with its last digit changed; None if it has none.

    Numbers inside text groups and powers right after one (the unit of ``45 \\text{ units}^2``)
    are left alone: changing them changes the unit, not the value.
    """
    protected = [(m.start(), m.end()) for m in _TEXT_GROUP.finditer(answer)]
    protected += [(m.start(), m.end()) for m in re.finditer(r"\}\^\{?\d+", answer)]
    numbers = [
        match
        for match in re.finditer(r"\d+(?:\.\d+)?", answer)
        if not any(start <= match.start() < end for start, end in protected)
    ]
    if not numbers:
        return None
    match = rng.choice(numbers)
    token = match.group()
    last = int(token[-1])
    changed = token[:-1] + str((last + 1) % 10 if last != 9 else 8)
    return answer[: match.start()] + changed + answer[match.end() :]


def build_pairs(positives: list[Pair], seed: int) -> list[Pair]:
    """The positives, then per positive one cross and two perturbed negatives (seeded)."""
    from tagrpo.grading.extract import last_boxed

    rng = random.Random(seed)
    pairs = list(positives)
    by_source: dict[str, list[Pair]] = {}
    for pair in positives:
        by_source.setdefault(pair.source, []).append(pair)
    for source, group in by_source.items():
        keys = [_label_key(pair.gold) for pair in group]
        for index, pair in enumerate(group):
            for _ in range(20):  # another problem whose gold differs
                other = rng.randrange(len(group))
                if keys[other] != keys[index]:
                    pairs.append(Pair(source, "cross", pair.response, group[other].gold))
                    break
            boxed = last_boxed(pair.response) or ""
            changed = _digit_off_by_one(boxed, rng)
            if changed is not None:
                text = _replace_last_box(pair.response, changed)
                if text is not None:
                    pairs.append(Pair(source, "perturbed_digit", text, pair.gold))
            # 2x + 1 differs from x at any tolerance (unless x = -1): unlike x + 1, which a
            # gold of 4.5e33 (two digits shown) rightly accepts.
            if boxed and _label_key(pair.gold) != -1:
                text = _replace_last_box(pair.response, f"2 ({boxed}) + 1")
                if text is not None:
                    pairs.append(Pair(source, "perturbed_affine", text, pair.gold))
    return pairs


# --- CPU accounting --------------------------------------------------------------------------


def process_cpu_s(pid: int) -> float | None:
    """User + system CPU seconds of a live process (Linux /proc), None if unreadable."""
    stat = proc_stat(pid)
    return None if stat is None else stat.cpu_seconds


def _cpu_of(pids: Sequence[int]) -> dict[int, float]:
    return {pid: cpu for pid in pids if (cpu := process_cpu_s(pid)) is not None}


# --- graders ---------------------------------------------------------------------------------


def run_tagrpo(pairs: list[Pair], workers: int) -> Run:
    from tagrpo.grading.pool import GradingPool

    items = [(pair.response, pair.gold, "math") for pair in pairs]
    pool = GradingPool(workers=workers, item_timeout_s=ITEM_LIMIT_S)
    began = time.perf_counter()
    pool.start()
    startup = time.perf_counter() - began
    try:
        before = _cpu_of(pool.worker_pids)
        parent_before = time.process_time()
        began = time.perf_counter()
        results = pool.grade(items)
        wall = time.perf_counter() - began
        parent_cpu = time.process_time() - parent_before
        worker_cpu = getattr(pool, "worker_cpu_s", None)
        if worker_cpu is None:  # older pools: read the workers' clocks from /proc
            after = _cpu_of(pool.worker_pids)
            worker_cpu = sum(after[pid] - before.get(pid, 0.0) for pid in after)
        timings = list(getattr(pool, "last_timings", []) or [])
        restarts = pool.restarts
    finally:
        pool.close()
    run = Run(
        f"tagrpo, {workers} process{'es' if workers > 1 else ''}",
        wall,
        parent_cpu + worker_cpu,
        [result.correct for result in results],
        Counter(result.reason for result in results),
        startup,
    )
    if timings:
        run.note = (
            f"slowest item {max(cpu for _, cpu in timings):.2f} CPU-s, "
            f"{max(wall for wall, _ in timings):.2f} s wall; restarts {restarts}"
        )
    run.timings = timings  # type: ignore[attr-defined]
    return run


def run_math_verify(pairs: list[Pair]) -> Run:
    from math_verify import parse, verify

    for pair in pairs[:3]:  # imports and first-use caches, outside the measurement
        verify(parse(f"${pair.gold}$"), parse(pair.response))
    verdicts, reasons = [], Counter()
    cpu_before, began = time.process_time(), time.perf_counter()
    for pair in pairs:
        try:
            verdicts.append(bool(verify(parse(f"${pair.gold}$"), parse(pair.response))))
            reasons["ok"] += 1
        except Exception as error:  # timeouts included: a wrong answer, as in a reward loop
            verdicts.append(False)
            reasons[type(error).__name__] += 1
    wall = time.perf_counter() - began
    return Run("math-verify (plain)", wall, time.process_time() - cpu_before, verdicts, reasons)


def run_verl(pairs: list[Pair]) -> Run:
    from concurrent.futures import ThreadPoolExecutor

    from verl.utils.reward_score import math_verify as verl_math_verify

    # Start verl's own pool (spawned processes import math-verify) outside the measurement.
    with ThreadPoolExecutor(8) as threads:
        list(threads.map(lambda p: verl_math_verify.compute_score(p.response, p.gold), pairs[:8]))
    pool = verl_math_verify._get_pool()
    pids = list(pool._processes)
    before = _cpu_of(pids)
    cpu_before, began = time.process_time(), time.perf_counter()
    verdicts = [verl_math_verify.compute_score(p.response, p.gold) >= 1.0 for p in pairs]
    wall = time.perf_counter() - began
    parent_cpu = time.process_time() - cpu_before
    pids = list(pool._processes)
    after = _cpu_of(pids)
    worker_cpu = sum(after[pid] - before.get(pid, 0.0) for pid in after)
    pool.shutdown(wait=True, cancel_futures=True)
    verl_math_verify._pool = None
    return Run(
        "verl math_verify.compute_score",
        wall,
        parent_cpu + worker_cpu,
        verdicts,
        note="called item by item, as verl's reward manager does",
    )


# --- stall set -------------------------------------------------------------------------------


def hostile_responses() -> dict[str, tuple[str, str, str]]:
    """Responses that stalled the grader before (issue 10): (response, gold, answer_kind)."""
    kilobytes = 100_000
    return {
        "40 KB of unclosed \\boxed{": ("\\boxed{" * (40_000 // 7), "3", "math"),
        "100 KB of unclosed \\boxed{": ("\\boxed{" * (kilobytes // 7), "3", "math"),
        '"The answer" + 2,000 newlines (GPQA)': (
            "The answer" + "\n" * 2000,
            "B",
            "multiple_choice",
        ),
        '"The answer" + 100 KB of spaces (GPQA)': (
            "The answer" + " " * kilobytes,
            "B",
            "multiple_choice",
        ),
        "100 KB of * after answer (GPQA)": (
            "**Answer" + "*" * kilobytes + ":",
            "B",
            "multiple_choice",
        ),
        "\\boxed{} holding 100 KB of braces": (
            "\\boxed{" + "{" * 50_000 + "}" * 50_000 + "}",
            "3",
            "math",
        ),
        "\\boxed{} holding 100 KB of dots": ("\\boxed{3" + "." * kilobytes + "x}", "3", "math"),
        "100 KB of \\boxed{A} boxes (GPQA)": (
            "\\boxed{A}" * (kilobytes // 9),
            "A",
            "multiple_choice",
        ),
        "nested \\boxed{ 100 KB deep": ("\\boxed{" * 7000 + "1" + "}" * 7000, "1", "math"),
        "\\text{ 100 KB of spaces}": ("\\boxed{3 \\text{" + " " * kilobytes + "}}", "3", "math"),
    }


def run_stall_set(limit_s: float, grace_s: float) -> tuple[list[tuple[str, float, str]], bool]:
    """(name, seconds, reason) per hostile response, graded one by one on a 1-process pool."""
    from tagrpo.grading.pool import GradingPool

    rows = []
    ok = True
    with GradingPool(workers=1, item_timeout_s=limit_s, kill_grace_s=grace_s) as pool:
        for name, item in hostile_responses().items():
            began = time.perf_counter()
            (result,) = pool.grade([item])
            elapsed = time.perf_counter() - began
            rows.append((name, elapsed, result.reason))
            ok &= elapsed <= limit_s + grace_s + 1.0
    return rows, ok


# --- report ----------------------------------------------------------------------------------


def agreement(pairs: list[Pair], verdicts: list[bool]) -> tuple[float, float, int, int]:
    """(accuracy on positives, false-positive rate on negatives, #false negatives, #fp)."""
    positives = [v for p, v in zip(pairs, verdicts, strict=True) if p.expected]
    negatives = [v for p, v in zip(pairs, verdicts, strict=True) if not p.expected]
    false_negatives = positives.count(False)
    false_positives = negatives.count(True)
    accuracy = 1 - false_negatives / len(positives) if positives else float("nan")
    fp_rate = false_positives / len(negatives) if negatives else float("nan")
    return accuracy, fp_rate, false_negatives, false_positives


def _short(text: str, width: int = 70) -> str:
    text = text.replace("\n", " ")
    return text if len(text) <= width else text[: width - 3] + "..."


def print_errors(name: str, pairs: list[Pair], verdicts: list[bool], show: int) -> None:
    from tagrpo.grading.extract import last_boxed

    wrong = [(p, v) for p, v in zip(pairs, verdicts, strict=True) if v != p.expected]
    if not wrong or show <= 0:
        return
    print(f"  {name}: {len(wrong)} disagreement(s) with the expected label, first {show}:")
    for pair, verdict in wrong[:show]:
        said = "correct" if verdict else "wrong"
        boxed = last_boxed(pair.response) or "(no box)"
        print(f"    [{pair.source}/{pair.kind}] graded {said}: box {_short(boxed, 50)!r} "
              f"vs gold {_short(pair.gold, 40)!r}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    size = parser.add_mutually_exclusive_group()
    quick_help = f"smoke test: the first {QUICK_PER_SOURCE} problems per source"
    size.add_argument("--quick", action="store_true", help=quick_help)
    size.add_argument("--per-source", type=int, default=None, help="problems per source")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", type=Path, default=None, help="shared data directory")
    parser.add_argument("--no-peers", action="store_true", help="tagrpo only")
    parser.add_argument("--no-stall", action="store_true", help="skip the hostile-input set")
    parser.add_argument("--show", type=int, default=10, help="disagreements listed per grader")
    args = parser.parse_args(argv)

    from tagrpo.plumbing.paths import shared_data_dir

    data_dir = args.data_dir.expanduser().resolve() if args.data_dir else shared_data_dir()
    per_source = QUICK_PER_SOURCE if args.quick else args.per_source
    load = os.getloadavg()
    print(f"load average at start: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on "
          f"{os.cpu_count()} CPU(s); data: {data_dir}")  # fmt: skip
    pairs = build_pairs(load_positives(data_dir, per_source), args.seed)
    kinds = Counter(pair.kind for pair in pairs)
    sources = Counter(pair.source for pair in pairs if pair.expected)
    print(f"pairs: {len(pairs)} = {kinds['positive']} positives "
          f"({', '.join(f'{s} {n}' for s, n in sources.items())}) + {kinds['cross']} cross + "
          f"{kinds['perturbed_digit']} digit-perturbed + {kinds['perturbed_affine']} "
          "2x+1 negatives")  # fmt: skip

    runners: list[tuple[str, Callable[[], Run]]] = [
        ("tagrpo1", lambda: run_tagrpo(pairs, 1)),
        ("tagrpo2", lambda: run_tagrpo(pairs, 2)),
    ]
    if not args.no_peers:
        runners += [("math_verify", lambda: run_math_verify(pairs)),
                    ("verl", lambda: run_verl(pairs))]  # fmt: skip
    runs: dict[str, Run] = {}
    for key, runner in runners:
        runs[key] = runner()

    print()
    print(f"{'grader':34} {'answers/s':>10} {'per CPU-s':>10} {'CPU-s':>8} "
          f"{'positives':>10} {'FP rate':>8} {'FN':>5} {'FP':>5}")  # fmt: skip
    for run in runs.values():
        accuracy, fp_rate, false_negatives, false_positives = agreement(pairs, run.verdicts)
        per_cpu = len(pairs) / run.cpu_s if run.cpu_s else float("nan")
        print(f"{run.name:34} {len(pairs) / run.wall_s:10.1f} {per_cpu:10.1f} "
              f"{(run.cpu_s or float('nan')):8.1f} {accuracy:10.2%} {fp_rate:8.3%} "
              f"{false_negatives:5d} {false_positives:5d}")  # fmt: skip
    for run in runs.values():
        details = [f"reasons {dict(run.reasons.most_common())}"] if run.reasons else []
        if run.startup_s is not None:
            details.append(f"pool start-up {run.startup_s:.2f} s (excluded)")
        if run.note:
            details.append(run.note)
        print(f"  {run.name}: {'; '.join(details)}")
    if runs["tagrpo1"].verdicts != runs["tagrpo2"].verdicts:
        print("WARNING: tagrpo's verdicts differ between 1 and 2 processes")
    for run in runs.values():
        print_errors(run.name, pairs, run.verdicts, args.show)

    print()
    checks: list[tuple[bool, str]] = []
    one, two = runs["tagrpo1"], runs["tagrpo2"]
    speedup = one.wall_s / two.wall_s
    text = f"2 processes {speedup:.2f}x one process (answers/s) >= {TARGET_SPEEDUP}x"
    checks.append((speedup >= TARGET_SPEEDUP, text))
    if "math_verify" in runs and runs["math_verify"].cpu_s and one.cpu_s:
        ratio = runs["math_verify"].cpu_s / one.cpu_s
        checks.append((ratio >= TARGET_CPU_RATIO, f"tagrpo {ratio:.2f}x plain math-verify's "
                       f"answers per CPU-second >= {TARGET_CPU_RATIO}x"))  # fmt: skip
    accuracy = agreement(pairs, one.verdicts)[0]
    checks.append((accuracy == 1.0, f"tagrpo accuracy on real positives {accuracy:.2%} == 100%"))
    timings = [t for run in (one, two) for t in getattr(run, "timings", [])]
    grace = 1.0
    if timings:
        over = sum(cpu > ITEM_LIMIT_S + grace for _, cpu in timings)
        checks.append((over == 0, f"{over} item(s) over {ITEM_LIMIT_S:g} CPU-s + {grace:g} s"))
    if not args.no_stall:
        rows, stall_ok = run_stall_set(limit_s=2.0, grace_s=grace)
        print("stall set (tagrpo, 1 process, limit 2 CPU-s + 1 s grace):")
        for name, seconds, reason in rows:
            print(f"  {name:42} {seconds:6.2f} s  {reason}")
        checks.append((stall_ok, "every hostile response returned within 2 s + 1 s grace + 1 s"))
    load = os.getloadavg()
    print(f"load average at end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    for ok, text in checks:
        print(f"{'PASS' if ok else 'FAIL'}: {text}")
    return 0 if all(ok for ok, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
