"""DVC stage ``evaluate``: pass@k of one policy on every benchmark.

Samples ``evaluate.n`` responses per problem (a trained policy: ``evaluate.n_trained``, when
set) with the configured engine, grades them in worker
processes, and estimates pass@k (unbiased estimator, bootstrap CIs over problems) per benchmark
and per benchmark group (:func:`tagrpo.evaluation.runner.evaluate_policy`).

    python -m stages.evaluate --method ta_grpo --seed 0   # the policy models/ta_grpo-s0
    python -m stages.evaluate --policy base               # the base policy

Outputs for policy ``P``: ``evals/P/responses.parquet``, ``evals/P/passk.csv``,
``metrics/eval/P.json``. The MLflow run is tagged with the training run and logged model whose
weights it evaluated (:func:`tagrpo.plumbing.tracking_assets.link_evaluated_policy`). Each
benchmark's samples are saved as soon as they are drawn (:mod:`tagrpo.backends.sample_store`): a
rerun after a failure reuses them (``samples_reused``, ``samples_resampled`` in the metrics).
"""

from __future__ import annotations

import argparse

from tagrpo.backends.sample_store import SampleStore, default_store_dir
from tagrpo.config.params import load_config
from tagrpo.evaluation.parity import parity_lines, parity_table
from tagrpo.evaluation.runner import evaluate_policy
from tagrpo.pipeline.runtime import run_main, running_stage
from tagrpo.plumbing.layout import (
    BASE_POLICY,
    data_outputs,
    dvc_stage_name,
    evaluate_outputs,
    model_dir,
    policy_name,
)
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking_assets import (
    EVALUATED_MODEL_TAG,
    link_evaluated_policy,
    log_datasets,
    log_passk_intervals,
)
from tagrpo.plumbing.verify import check_inputs


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", help="a trained policy: its method ...")
    parser.add_argument("--seed", type=int, default=None, help="... and seed (default common)")
    parser.add_argument("--data-multiple", type=float, default=1.0, help="a data-scaling run")
    parser.add_argument("--policy", help="or a policy name (base, grpo_data2.5x-s0, ...)")
    args = parser.parse_args(argv)
    config = load_config()
    if (args.method is None) == (args.policy is None):
        parser.error("give --method (with --seed) or --policy")
    seed = config.common.seed if args.seed is None else args.seed
    policy = args.policy or policy_name(args.method, seed, args.data_multiple)
    model = project_root() / model_dir(policy)
    if not model.is_dir():  # before the stage deletes its old outputs
        raise FileNotFoundError(f"{model} does not exist: train the policy first")
    # By content, not DVC's size-and-mtime state: a model damaged in place is refused by name.
    checked = [model_dir(policy).as_posix()]
    check_inputs(project_root(), checked)
    store = SampleStore(default_store_dir())  # samples survive a failure after sampling
    with running_stage(
        "evaluate",
        evaluate_outputs(policy),
        config,
        key=policy,
        tags={
            "policy": policy,
            "method": args.method or policy,
            "seed": str(seed),
            "data_multiple": f"{args.data_multiple:g}",
        },
        dvc_name=(
            dvc_stage_name(
                "evaluate",
                args.method,
                seed,
                args.data_multiple,
                config.runs.one_seed_methods,
                config.runs.control_methods,
            )
            if args.method
            else "evaluate_base"
        ),
        log_sections=("evaluate", config.evaluate.backend),
        checked_inputs=checked,
    ) as ctx:
        benchmarks = ctx.root / data_outputs()["processed"] / "benchmarks"
        log_datasets(sorted(benchmarks.glob("*.parquet")), "evaluation")
        # The training run and logged model evaluated; the metrics are that model's too.
        ctx.model_id = link_evaluated_policy(model, policy).get(EVALUATED_MODEL_TAG) or None
        result = evaluate_policy(
            config,
            model,
            benchmarks,
            store,
            scope=f"evaluate@{policy}",
            trained=policy != BASE_POLICY,
        )
        log_passk_intervals(result.passk)
        result.responses.to_parquet(ctx.path("responses"), index=False)
        result.passk.assign(policy=policy).to_csv(ctx.path("passk"), index=False)
        ctx.set_metrics({**result.summary, **store.counts()})
        for row in result.passk.itertuples():
            if row.k in (1, max(result.passk["k"])):
                truncated = result.summary.get(f"{row.name}/truncated_rate")
                beside = "" if truncated is None else f"  (truncated {truncated:.3f})"
                print(
                    f"[evaluate:{policy}] {row.name:>16} pass@{row.k:<2} = {row.pass_at_k:.3f}"
                    + beside
                )
        # Every grader on the same responses (the report's grader-parity tables).
        for line in parity_lines(parity_table(result.responses, config.evaluate.ks)):
            print(f"[evaluate:{policy}] {line}")
        print(
            f"[evaluate:{policy}] samples reused {store.samples_reused}, "
            f"resampled {store.samples_resampled}"
        )
    store.discard()  # the outputs now hold the samples; a forced rerun samples afresh
    return {**result.summary, **store.counts()}


if __name__ == "__main__":
    run_main(main, "evaluate")
