"""pass@k evaluation: sample n responses per problem, grade them, estimate pass@k.

The runner is backend-agnostic (transformers on CPU, vLLM at paper scale) and grader-agnostic
(the stage passes the process-pool grader), so the science is the same at both scales.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from tagrpo.backends.base import GenerationBackend, SamplingParams
from tagrpo.backends.factory import make_stored_backend
from tagrpo.data.prompts import authors_prompt_text, chat_messages
from tagrpo.data.schema import Question, read_questions
from tagrpo.evaluation.parity import grade_parity
from tagrpo.grading.grade_fn import grade_fn_for
from tagrpo.grading.types import GradeFn
from tagrpo.metrics.passk import pass_at_k_table
from tagrpo.miniworld.dataset import SOURCE as MINIWORLD_SOURCE
from tagrpo.miniworld.dataset import problem_from_meta
from tagrpo.miniworld.strategy import strategy_of
from tagrpo.plumbing.progress import labelled

if TYPE_CHECKING:
    from tagrpo.backends.sample_store import SampleStore
    from tagrpo.config.params import Params

DEFAULT_KS = (1, 2, 4, 8, 16, 32)


@dataclass
class EvaluationResult:
    responses: pd.DataFrame  # one row per sampled response
    passk: pd.DataFrame  # one row per (benchmark or group, k): mean and bootstrap CI
    summary: dict[str, float]  # flat metrics for DVC/MLflow, e.g. "mini_chains/pass@8"


def evaluation_messages(question: Question, prompt_format: str = "chat") -> list[dict[str, str]]:
    """The user turn of ``question``: Box 2 (``chat``) or the authors' text (``raw``)."""
    if prompt_format == "raw":
        return [
            {"role": "user", "content": authors_prompt_text(question.problem, question.choices)}
        ]
    return chat_messages(question.problem, question.choices)


def sample_benchmarks(
    backend: GenerationBackend,
    benchmarks: Mapping[str, Sequence[Question]],
    sampling: SamplingParams,
    prompt_format: str = "chat",
) -> pd.DataFrame:
    """Sample ``sampling.n`` responses per question; one row per response, ungraded."""
    served = getattr(backend, "prompt_format", "chat")
    if served != prompt_format:  # the authors' text inside a chat template is neither setting
        raise ValueError(f"prompt_format {prompt_format!r} but the backend serves {served!r}")
    rows = []
    for number, (name, questions) in enumerate(benchmarks.items(), 1):
        conversations = [evaluation_messages(q, prompt_format) for q in questions]
        with labelled(f"{name} ({number} of {len(benchmarks)})"):
            completions = backend.generate(conversations, sampling)
        for question, samples in zip(questions, completions, strict=True):
            for sample_index, completion in enumerate(samples):
                rows.append(
                    {
                        "benchmark": name,
                        "question_id": question.id,
                        "sample_index": sample_index,
                        "answer": question.answer,
                        "answer_kind": question.answer_kind,
                        "response": completion.text,
                        "num_tokens": completion.num_tokens,
                        "finished": completion.finished,
                    }
                )
    return pd.DataFrame(rows)


def grade_responses(responses: pd.DataFrame, grade: GradeFn) -> pd.DataFrame:
    """Add ``correct``, ``pred`` and ``grade_reason`` columns (one grading call for all)."""
    verdicts = grade(
        responses["response"].tolist(),
        responses["answer"].tolist(),
        responses["answer_kind"].tolist(),
    )
    graded = responses.copy()
    graded["correct"] = [bool(v[0]) for v in verdicts]
    graded["pred"] = [v[1] for v in verdicts]
    graded["grade_reason"] = [v[2] for v in verdicts]
    return graded


def label_strategies(
    responses: pd.DataFrame, benchmarks: Mapping[str, Sequence[Question]]
) -> pd.DataFrame:
    """Mini-world benchmarks only: each response's solution path in a ``strategy`` column
    (:func:`tagrpo.miniworld.strategy.strategy_of`; the testbed's V3 reads it). Other
    benchmarks have no known paths: the responses are returned as they are."""
    questions = {q.id: q for members in benchmarks.values() for q in members}
    if not questions or any(q.source != MINIWORLD_SOURCE for q in questions.values()):
        return responses
    problems = {qid: problem_from_meta(q.meta) for qid, q in questions.items()}
    labelled = responses.copy()
    labelled["strategy"] = [
        strategy_of(problems[qid], text)
        for qid, text in zip(responses["question_id"], responses["response"], strict=True)
    ]
    return labelled


def passk_tables(
    graded: pd.DataFrame,
    ks: Sequence[int],
    groups: Mapping[str, Sequence[str]],
    n_resamples: int = 1000,
    seed: int = 0,
) -> tuple[pd.DataFrame, dict[str, float]]:
    """pass@k per benchmark (with bootstrap CIs) and per group (mean over its benchmarks).

    Group averages are plain means of benchmark-level pass@k, as in the paper's Table 1.
    """
    rows = []
    per_question = (
        graded.groupby(["benchmark", "question_id"], sort=False)["correct"]
        .agg(["size", "sum"])
        .reset_index()
    )
    for benchmark, table in per_question.groupby("benchmark", sort=False):
        intervals = pass_at_k_table(
            table["size"].to_numpy(),
            table["sum"].to_numpy(),
            ks,
            n_resamples=n_resamples,
            seed=seed,
        )
        for interval in intervals:
            rows.append(
                {
                    "name": benchmark,
                    "kind": "benchmark",
                    "k": interval.k,
                    "pass_at_k": interval.mean,
                    "ci_low": interval.low,
                    "ci_high": interval.high,
                    "n_problems": interval.n_problems,
                    "n_samples": int(table["size"].min()),
                }
            )
    frame = pd.DataFrame(rows)
    for group, members in groups.items():
        present = frame[(frame["kind"] == "benchmark") & frame["name"].isin(members)]
        if present.empty:
            continue
        missing = set(members) - set(present["name"])
        for k, at_k in present.groupby("k"):
            if len(at_k) < len(members) - len(missing):
                continue  # a member lacks this k (too few samples): no fair average
            rows.append(
                {
                    "name": group,
                    "kind": "group",
                    "k": int(k),
                    "pass_at_k": float(at_k["pass_at_k"].mean()),
                    "ci_low": np.nan,
                    "ci_high": np.nan,
                    "n_problems": int(at_k["n_problems"].sum()),
                    "n_samples": int(at_k["n_samples"].min()),
                }
            )
    table = pd.DataFrame(rows)
    summary = {f"{row.name}/pass@{row.k}": float(row.pass_at_k) for row in table.itertuples()}
    return table, summary


def evaluate(
    backend: GenerationBackend,
    benchmarks: Mapping[str, Sequence[Question]],
    sampling: SamplingParams,
    grade: GradeFn,
    ks: Sequence[int] = DEFAULT_KS,
    groups: Mapping[str, Sequence[str]] | None = None,
    n_resamples: int = 1000,
    prompt_format: str = "chat",
    grader: str = "tagrpo",
) -> EvaluationResult:
    """Sample, grade and tabulate pass@k for every benchmark.

    ``grade`` grades with ``grader`` (``correct``, the pass@k); every response is then graded
    by every grader as well, from the same samples (:mod:`tagrpo.evaluation.parity`)."""
    feasible = [k for k in ks if k <= sampling.n]
    if not feasible:
        raise ValueError(f"no k in {list(ks)} is <= n={sampling.n} samples per problem")
    graded = grade_responses(sample_benchmarks(backend, benchmarks, sampling, prompt_format), grade)
    graded = grade_parity(graded, grade, graded_by=grader)
    graded = label_strategies(graded, benchmarks)
    table, summary = passk_tables(
        graded, feasible, groups or {}, n_resamples=n_resamples, seed=sampling.seed
    )
    summary["responses"] = float(len(graded))
    summary["truncated_rate"] = float(1.0 - graded["finished"].mean()) if len(graded) else 0.0
    # Beside each benchmark's pass@k: the share of responses cut at max_new_tokens (a
    # truncated response is graded wrong, so pass@k falls with it).
    for name, finished in graded.groupby("benchmark", sort=False)["finished"]:
        summary[f"{name}/truncated_rate"] = float(1.0 - finished.mean())
    return EvaluationResult(responses=graded, passk=table, summary=summary)


def load_benchmarks(directory: Path, limit: int | None = None) -> dict[str, list[Question]]:
    """Every ``<name>.parquet`` of the data stage's benchmark folder (the first ``limit``)."""
    paths = sorted(Path(directory).glob("*.parquet"))
    if not paths:
        raise FileNotFoundError(f"no benchmark parquet files in {directory}: run the data stage")
    benchmarks = {}
    for path in paths:
        questions = read_questions(str(path))
        benchmarks[path.stem] = questions[:limit] if limit else questions
    return benchmarks


def evaluate_policy(
    config: Params,
    model_dir: Path,
    benchmarks_dir: Path,
    store: SampleStore | None = None,
    scope: str = "evaluate",
    trained: bool = True,
) -> EvaluationResult:
    """The evaluate stage's work for one policy: ``evaluate`` settings, its engine, pass@k
    (``evaluate.n_trained`` samples per problem for a ``trained`` policy, ``n`` for the base).

    With a ``store``, each benchmark's samples are saved as soon as they are drawn and reused
    by a rerun with the same fingerprint (a failure in grading loses no sample)."""

    settings = config.evaluate
    sampling = SamplingParams(
        n=settings.samples(trained),
        temperature=settings.temperature,
        top_p=settings.top_p,
        max_new_tokens=settings.max_new_tokens,
        seed=config.common.seed,
    )
    benchmarks = load_benchmarks(benchmarks_dir, settings.max_questions_per_benchmark)
    missing = sorted(
        {name for members in settings.groups.values() for name in members} - set(benchmarks)
    )
    if missing:
        raise ValueError(f"evaluate.groups name benchmarks the data stage did not write: {missing}")
    grading = config.common.grading
    with grade_fn_for(grading, grading.grader) as grade:  # graders start while the model loads
        backend = make_stored_backend(
            settings.backend, config, model_dir, store, scope, settings.prompt_format
        )
        return evaluate(
            backend,
            benchmarks,
            sampling,
            grade,
            ks=settings.ks,
            groups=settings.groups,
            n_resamples=settings.bootstrap_resamples,
            prompt_format=settings.prompt_format,
            grader=grading.grader,
        )
