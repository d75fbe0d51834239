"""``tagrpo grade --parity``: saved samples regraded by every grader, nothing sampled.

    tagrpo grade --parity --input evals/base/responses.parquet --output parity.md
    tagrpo grade --parity --input .cache/samples --benchmarks data/processed/benchmarks \\
        --output parity.md

The input is an evaluation's responses table (``evals/<policy>/responses.parquet``: each
response with its gold) or a sample store (:mod:`tagrpo.backends.sample_store`), whose chunks
hold responses only: each chunk is matched to the benchmark whose first questions, posed as
evaluation poses them (``chat`` or ``raw``), have the chunk's prompt digest. Chunks that match
no benchmark (a diagnostics or consistency chunk) are counted, never graded. The output is the
evaluation report's grader-parity section (:func:`tagrpo.evaluation.parity.parity_section`).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from tagrpo.backends.sample_store import canonical_digest
from tagrpo.data.schema import read_questions
from tagrpo.evaluation.parity import grade_parity, parity_lines, parity_section, parity_table
from tagrpo.evaluation.runner import DEFAULT_KS, evaluation_messages
from tagrpo.grading.grade_fn import make_grade_fn
from tagrpo.miniworld.dataset import SOURCE as MINIWORLD_SOURCE

_PROMPT_FORMATS = ("chat", "raw")
_NEEDED = ("benchmark", "question_id", "sample_index", "answer", "answer_kind", "response")


def _benchmark_digests(benchmarks_dir: Path, counts: set[int]) -> dict[tuple[int, str], Any]:
    """(question count, prompt digest) -> (benchmark, its first questions, is mini world)."""
    paths = sorted(benchmarks_dir.glob("*.parquet"))
    if not paths:
        raise FileNotFoundError(f"no benchmark parquet files in {benchmarks_dir} (--benchmarks)")
    digests = {}
    for path in paths:
        questions = read_questions(str(path))
        for count in sorted(c for c in counts if c <= len(questions)):
            first = questions[:count]
            for prompt_format in _PROMPT_FORMATS:
                conversations = [list(evaluation_messages(q, prompt_format)) for q in first]
                key = (count, canonical_digest(conversations))
                mini_world = all(q.source == MINIWORLD_SOURCE for q in first)
                digests[key] = (path.stem, first, mini_world)
    return digests


def _draw_order(chunk: dict[str, Any]) -> tuple[str, int]:
    """A chunk's place in its stage run: ``scope#i`` is the scope's i-th generate call."""
    scope, _, number = str(chunk.get("label", "")).rpartition("#")
    return (scope, int(number)) if number.isdigit() else (str(chunk.get("label", "")), -1)


def store_responses(store: Path, benchmarks_dir: Path) -> tuple[pd.DataFrame, set[str], int]:
    """A sample store's evaluation chunks as a responses table, the mini-world benchmarks among
    them, and how many chunks matched no benchmark."""
    chunks = sorted((store / "chunks").glob("*/*.json.gz"))
    if not chunks:
        raise FileNotFoundError(f"{store} holds no sample chunks (chunks/*/*.json.gz)")
    saved = [json.loads(gzip.decompress(path.read_bytes())) for path in chunks]
    saved.sort(key=_draw_order)
    counts = {int(chunk["fingerprint"]["prompts"]["count"]) for chunk in saved}
    digests = _benchmark_digests(benchmarks_dir, counts)
    rows, mini_world, unmatched = [], set(), 0
    for chunk in saved:
        prompts = chunk["fingerprint"]["prompts"]
        match = digests.get((int(prompts["count"]), prompts["sha256"]))
        if match is None:
            unmatched += 1
            continue
        benchmark, questions, is_mini_world = match
        if is_mini_world:
            mini_world.add(benchmark)
        for question, samples in zip(questions, chunk["completions"], strict=True):
            for index, completion in enumerate(samples):
                rows.append(
                    {
                        "benchmark": benchmark,
                        "question_id": question.id,
                        "sample_index": index,
                        "answer": question.answer,
                        "answer_kind": question.answer_kind,
                        "response": str(completion["text"]),
                    }
                )
    return pd.DataFrame(rows, columns=list(_NEEDED)), mini_world, unmatched


def _read_input(args: argparse.Namespace) -> tuple[pd.DataFrame, set[str], str]:
    source = Path(args.input)
    if source.is_dir():
        benchmarks = Path(args.benchmarks)
        responses, mini_world, unmatched = store_responses(source, benchmarks)
        return responses, mini_world, f"; {unmatched} chunk(s) matched no benchmark"
    if source.suffix != ".parquet":
        raise ValueError(f"{source}: give a responses .parquet or a sample-store folder")
    responses = pd.read_parquet(source)
    missing = [column for column in _NEEDED if column not in responses]
    if missing:
        raise KeyError(f"{source} has no column(s) {missing}: not an evaluation's responses")
    # The evaluation labels responses with their solution path when every benchmark is the
    # mini world's (tagrpo.evaluation.runner.label_strategies).
    mini_world = set(responses["benchmark"]) if "strategy" in responses else set()
    return responses, mini_world, ""


def cmd_grade_parity(args: argparse.Namespace) -> int:
    try:
        responses, mini_world, note = _read_input(args)
    except (OSError, ValueError, KeyError) as error:
        print(f"tagrpo grade --parity: {error}", file=sys.stderr)
        return 2
    if responses.empty:
        print(f"tagrpo grade --parity: {args.input}: no responses to grade", file=sys.stderr)
        return 2
    ks = [int(k) for k in args.ks.split(",")] if args.ks else list(DEFAULT_KS)
    workers = min(args.workers, len(responses))
    with make_grade_fn(workers=workers, item_timeout_s=args.item_timeout) as grade:
        graded = grade_parity(responses[list(_NEEDED)], grade)
    text = parity_section({Path(args.input).as_posix(): graded}, ks, mini_world)
    try:
        Path(args.output).write_text(text)
    except OSError as error:
        print(f"tagrpo grade --parity: cannot write {args.output}: {error}", file=sys.stderr)
        return 2
    table = parity_table(graded, ks, mini_world)
    for line in parity_lines(table):
        print(line)
    boxed = table["disagreements"] - table["malformed_disagreements"]
    bugs = table[table["must_agree"] & (boxed > 0)]
    print(f"graded {len(graded)} responses, nothing sampled{note}; wrote {args.output}")
    if not bugs.empty:
        names = sorted(set(bugs["benchmark"]))
        print(f"tagrpo grade --parity: graders disagree on plain boxed mini-world answers: {names}",
              file=sys.stderr)  # fmt: skip
        return 1
    return 0
