"""DVC stage ``evaluate``: pass@k of one policy on every benchmark.

Samples ``evaluate.n`` responses per problem with the configured backend, grades them in worker
processes, and estimates pass@k (unbiased estimator, bootstrap CIs over problems) per benchmark
and per benchmark group (competition / out-of-distribution averages as in the paper's Table 1).

Outputs (for ``--policy P``): ``evals/P/responses.parquet`` (every response, kept for the
diagnostics), ``evals/P/passk.csv`` and ``metrics/eval_P.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from tagrpo.env import apply_offline_defaults

apply_offline_defaults()

from tagrpo.params import stage_params  # noqa: E402
from tagrpo.paths import project_root  # noqa: E402
from tagrpo.tracking import log_metrics, stage_run  # noqa: E402


def load_benchmarks(directory: Path, limit: int | None) -> dict[str, list]:
    from tagrpo.data.schema import read_questions

    paths = sorted(directory.glob("*.parquet"))
    if not paths:
        raise FileNotFoundError(f"no benchmark parquet files in {directory}: run the data stage")
    benchmarks = {}
    for path in paths:
        questions = read_questions(str(path))
        benchmarks[path.stem] = questions[:limit] if limit else questions
    return benchmarks


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default="base", help="name used in outputs and MLflow")
    parser.add_argument("--model", default="models/base", help="policy folder")
    parser.add_argument("--benchmarks", default="data/processed/benchmarks")
    parser.add_argument("--out", default=None, help="default: evals/<policy>")
    parser.add_argument("--metrics", default=None, help="default: metrics/eval_<policy>.json")
    args = parser.parse_args(argv)

    from tagrpo.backends.base import SamplingParams
    from tagrpo.backends.factory import make_backend
    from tagrpo.evaluation.grader import make_grade_fn
    from tagrpo.evaluation.runner import evaluate

    params = stage_params("evaluate")
    root = project_root()
    out_dir = root / (args.out or f"evals/{args.policy}")
    metrics_path = root / (args.metrics or f"metrics/eval_{args.policy}.json")
    sampling = SamplingParams(
        n=int(params["n"]),
        temperature=float(params["temperature"]),
        top_p=float(params["top_p"]),
        max_new_tokens=int(params["max_new_tokens"]),
        seed=int(params["common"].get("seed", 0)),
    )
    with stage_run(
        "evaluate", params, run_name=f"evaluate-{args.policy}", tags={"policy": args.policy}
    ):
        started = time.perf_counter()
        benchmarks = load_benchmarks(
            root / args.benchmarks, params.get("max_questions_per_benchmark")
        )
        backend = make_backend(params, root / args.model)
        grading = params["common"].get("grading", {})
        with make_grade_fn(
            workers=int(grading.get("workers", 2)),
            item_timeout_s=float(grading.get("item_timeout_s", 5.0)),
        ) as grade:
            result = evaluate(
                backend,
                benchmarks,
                sampling,
                grade,
                ks=[int(k) for k in params["ks"]],
                groups=params.get("groups", {}),
                n_resamples=int(params.get("bootstrap_resamples", 1000)),
            )
        out_dir.mkdir(parents=True, exist_ok=True)
        result.responses.to_parquet(out_dir / "responses.parquet", index=False)
        result.passk.assign(policy=args.policy).to_csv(out_dir / "passk.csv", index=False)
        summary = {**result.summary, "seconds": time.perf_counter() - started}
        log_metrics(summary)
        metrics_path.parent.mkdir(parents=True, exist_ok=True)
        metrics_path.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
        for row in result.passk.itertuples():
            if row.k in (1, max(result.passk["k"])):
                print(
                    f"[evaluate:{args.policy}] {row.name:>16} pass@{row.k:<2} = {row.pass_at_k:.3f}"
                )
    return summary


if __name__ == "__main__":
    main()
