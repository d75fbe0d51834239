"""The ``check_equivalence`` stage's work: check every candidate, regenerate, apply the fallback.

Layered checks, cheapest first: structural, embedding similarity, answer-consistency solve
(:mod:`tagrpo.equivalence.acceptance`); negative controls measure what each check catches. A run
where more than ``policy.max_padded_share`` of the slots end without a checked rephrasing
(padded with the original, or their question dropped) fails: TA-GRPO would train on copies
of q0 under its own name.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pyarrow.parquet as pq

from tagrpo.config.data import REPHRASED_KEYS, table_provenance
from tagrpo.config.params import Params
from tagrpo.data.schema import read_provenance, read_questions, write_rejections
from tagrpo.equivalence.acceptance import (
    CheckSettings,
    EquivalenceChecker,
    run_policy,
    verdicts_table,
)
from tagrpo.equivalence.consistency import LocalSolver, make_solver, solve_and_grade, solve_item
from tagrpo.equivalence.controls import make_controls
from tagrpo.equivalence.dataset import write_rephrased
from tagrpo.equivalence.report import report_section, summarize
from tagrpo.equivalence.similarity import SimilarityScorer
from tagrpo.grading.grade_fn import grade_fn_for
from tagrpo.rephrase.candidates import Candidate, read_candidates
from tagrpo.rephrase.generate import make_rephraser
from tagrpo.rephrase.settings import open_cache, questions_to_rephrase
from tagrpo.rephrase.shares import check_failed_share

if TYPE_CHECKING:
    from tagrpo.backends.sample_store import SampleStore


@contextlib.contextmanager
def _grader(config: Params, needed: bool) -> Iterator[Any]:
    if not needed:
        yield None
        return
    with grade_fn_for(config.common.grading) as grade:
        yield grade


def run_controls(checker: Any, questions: list[Any], config: Params) -> list:
    """Verdicts for the negative controls (see :mod:`tagrpo.equivalence.controls`)."""
    controls_settings = config.check_equivalence.controls
    if not controls_settings.enabled:
        return []
    controls = make_controls(
        questions, seed=config.common.seed, max_questions=controls_settings.max_questions
    )
    by_id = {q.id: q for q in questions}
    verdicts = []
    for kind in sorted({c.kind for c in controls}):
        pairs = [
            (by_id[c.question_id], Candidate(c.question_id, -1, 0, c.text, f"control:{kind}"))
            for c in controls
            if c.kind == kind
        ]
        verdicts.extend(checker.check(pairs, kind=f"control:{kind}"))
    return verdicts


def difficulty_probe(
    config: Params,
    root: Path,
    verdicts: list[Any],
    by_id: dict[str, Any],
    grade: Any,
    store: SampleStore | None = None,
) -> dict[str, Any]:
    """The policy's success on every checked candidate, by verdict (see the config's help)."""
    section = config.check_equivalence
    probe = section.difficulty_probe
    candidates = [v for v in verdicts if v.kind == "candidate" and v.text]
    model = Path(section.consistency.local.model)
    solver = LocalSolver(
        model if model.is_absolute() else root / model,
        section.consistency.rule(),
        seed=config.common.seed + 1,
        max_batch_sequences=section.consistency.local.max_batch_sequences,
        store=store,
    )
    items = [solve_item(by_id[v.question_id], v.text) for v in candidates]
    stats = solve_and_grade(solver, items, probe.k, grade)
    rates = {"accepted": [], "rejected": []}
    for verdict, stat in zip(candidates, stats, strict=True):
        if stat is not None:
            rates["accepted" if verdict.accepted else "rejected"].append(stat.correct / stat.k)
    every = rates["accepted"] + rates["rejected"]

    def mean(values: list[float]) -> float:
        return float(sum(values) / len(values)) if values else float("nan")

    return {
        "policy": str(section.consistency.local.model),
        "k": probe.k,
        "candidates": len(every),
        "success_all": mean(every),
        "success_accepted": mean(rates["accepted"]),
        "success_rejected": mean(rates["rejected"]),
        "shift_points": 100 * (mean(rates["accepted"]) - mean(every)),
    }


def rephrased_provenance(train_path: Path, config: Params) -> dict[str, Any] | None:
    """The training table's provenance: the processed split's (None where it records none)
    and the keys that decide which of its questions this stage keeps."""
    made = read_provenance(str(train_path))
    if made is None:
        return None
    kept = table_provenance(config, "train", REPHRASED_KEYS)["params"]
    return {**made, "params": {**made["params"], **{key: kept[key] for key in REPHRASED_KEYS}}}


def check_rephrasings(
    config: Params,
    root: Path,
    train_path: Path,
    candidates_path: Path,
    out: dict[str, Path],
    store: SampleStore | None = None,
) -> dict[str, Any]:
    """Check, regenerate, write ``out["train"|"verdicts"|"rejections"|"section"]``; metrics.

    With a ``store``, the local solver's samples are saved per call before grading and reused
    by a rerun (:mod:`tagrpo.backends.sample_store`)."""
    import torch  # heavy: loaded only when the stage runs

    section = config.check_equivalence
    settings = CheckSettings.from_section(section)
    seed = config.common.seed
    torch.set_num_threads(section.torch_threads)  # see params.yaml for why it is 1
    timings: dict[str, float] = {}
    started = time.perf_counter()
    questions = questions_to_rephrase(read_questions(str(train_path)), config.rephrase)
    candidates = read_candidates(candidates_path)
    scorer = solver = None
    if settings.similarity_enabled:
        scorer = SimilarityScorer(
            section.similarity.model, batch_size=section.similarity.batch_size
        )
    timings["load_similarity_s"] = time.perf_counter() - started
    endpoint_solver = settings.consistency_enabled and section.consistency.solver == "openai"
    cache = open_cache(
        config.rephrase, needed=config.rephrase.backend != "rules" or endpoint_solver
    )
    rephraser = None
    difficulty = None
    try:
        if settings.consistency_enabled:
            solver = make_solver(
                section.consistency,
                seed,
                root,
                cache=cache,
                torch_threads=section.torch_threads,
                store=store,
            )
        needs_grader = settings.consistency_enabled or section.difficulty_probe.enabled
        with _grader(config, needs_grader) as grade:
            checker = EquivalenceChecker(settings, scorer, solver, grade)
            if section.policy.max_rounds > 0:
                rephraser = make_rephraser(config.rephrase, seed, cache=cache, root=root)
            checked = time.perf_counter()
            result = run_policy(
                questions, candidates, checker, section.policy, config.rephrase.n, rephraser
            )
            timings["policy_s"] = time.perf_counter() - checked
            controls_started = time.perf_counter()
            control_verdicts = run_controls(checker, questions, config)
            timings["controls_s"] = time.perf_counter() - controls_started
            if section.difficulty_probe.enabled:
                probe_started = time.perf_counter()
                by_id = {q.id: q for q in questions}
                difficulty = difficulty_probe(config, root, result.verdicts, by_id, grade, store)
                timings["difficulty_probe_s"] = time.perf_counter() - probe_started
    finally:
        if cache is not None:
            cache.close()
    if len(questions) != len(result.rows) + len(result.rejections):
        raise AssertionError("questions in != kept + rejected")

    enabled = ["generation", "sibling", "structural"]
    enabled += ["similarity"] if settings.similarity_enabled else []
    enabled += ["consistency"] if settings.consistency_enabled else []
    verdicts = result.verdicts + control_verdicts
    summary = summarize(
        verdicts,
        result.outcome,
        enabled,
        questions=len(questions),
        kept=len(result.rows),
        rejected=len(result.rejections),
    )
    slots = len(questions) * config.rephrase.n
    unfilled = int(result.outcome.get("unfilled_slots", 0))
    summary["unfilled_slot_share"] = unfilled / slots if slots else 0.0
    summary["solver_samples"] = checker.solver_samples
    if store is not None:
        summary.update(store.counts())
    if difficulty is not None:
        summary["difficulty"] = difficulty
        print(
            f"[check_equivalence] the policy solves {100 * difficulty['success_all']:.1f}% of "
            f"all checked rephrasings, {100 * difficulty['success_accepted']:.1f}% of the accepted "
            f"(shift {difficulty['shift_points']:+.1f} points), "
            f"{100 * difficulty['success_rejected']:.1f}% of the rejected"
        )
    if rephraser is not None:
        summary["regeneration"] = rephraser.metrics()
    timings["total_s"] = time.perf_counter() - started
    summary["seconds"] = timings
    print(
        f"[check_equivalence] {summary['candidates']} candidates, {summary['accepted']} "
        f"accepted ({100 * summary['acceptance_rate']:.1f}%); rows {len(questions)} = kept "
        f"{len(result.rows)} + dropped {len(result.rejections)}; {unfilled}/{slots} slots "
        f"without a checked rephrasing ({section.policy.fallback})"
    )
    check_failed_share(
        unfilled,
        slots,
        section.policy.max_padded_share,
        f"rephrasing slots ended without a checked rephrasing ({section.policy.fallback})",
        f"rejections by reason {summary['reasons']}; check the rephraser and the solver, or "
        "raise check_equivalence.policy.max_padded_share",
    )
    write_rephrased(result.rows, out["train"], rephrased_provenance(train_path, config))
    write_rejections(result.rejections, str(out["rejections"]))
    pq.write_table(verdicts_table(verdicts), str(out["verdicts"]))
    out["section"].write_text(
        report_section(
            summary,
            verdicts,
            {q.id: q.problem for q in questions},
            {
                "backend": config.rephrase.backend,
                "n": config.rephrase.n,
                "max_rounds": section.policy.max_rounds,
                "fallback": section.policy.fallback,
                "solver": section.consistency.solver if settings.consistency_enabled else "off",
                "consistency": section.consistency.model_dump(mode="json"),
            },
            examples=section.report_examples,
        )
    )
    for check, row in summary["checks"].items():
        print(
            f"[check_equivalence] {check}: {row['passed']}/{row['reached']} passed "
            f"({100 * row['pass_rate']:.1f}%)"
        )
    for kind, row in summary.get("controls", {}).items():
        print(
            f"[check_equivalence] control {kind}: {row['rejected']}/{row['n']} rejected "
            f"{row['rejected_by']}"
        )
    return summary
