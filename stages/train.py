"""DVC stage ``train``: train one policy with one method and seed.

    python -m stages.train --method ta_grpo [--seed 0] [--data-multiple 1.0] [--dry-run]

The run is planned and checked first (:func:`tagrpo.training.train_stage.plan_training`), then
trained with ``train.backend``: ``local`` (:mod:`tagrpo.training`) or ``verl``
(:mod:`tagrpo.verl_ext.launcher`; ``--dry-run`` prints its command). Outputs for policy ``P``
(``<method>[_data<m>x]-s<seed>``): ``models/P/`` (with ``checkpoints/checkpoint-025..100``),
``rollouts/P/``, ``plots/train/P.csv`` and ``metrics/train/P.json``; one MLflow run.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from tagrpo.config.params import load_config
from tagrpo.pipeline.runtime import run_main, running_stage
from tagrpo.plumbing.layout import data_outputs, dvc_stage_name, policy_name, train_outputs
from tagrpo.plumbing.paths import project_root
from tagrpo.plumbing.tracking import model_label
from tagrpo.plumbing.tracking_assets import log_datasets, log_policy_model
from tagrpo.plumbing.verify import check_inputs
from tagrpo.training.train_stage import plan_training, run_summary, train_local


def main(argv: list[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--method", required=True, help="a name in tagrpo.algorithms.METHODS")
    parser.add_argument("--seed", type=int, default=None, help="default: common.seed")
    parser.add_argument("--data-multiple", type=float, default=1.0, help="data-scaling runs")
    parser.add_argument("--dry-run", action="store_true", help="verl: print the command only")
    args = parser.parse_args(argv)
    config = load_config()
    seed = config.common.seed if args.seed is None else args.seed
    backend = config.train.backend
    if args.dry_run:
        if backend != "verl":
            parser.error("--dry-run applies to train.backend: verl")
        import sys

        from tagrpo.verl_ext.dry_run import evaluation_lines
        from tagrpo.verl_ext.launcher import planned_model, run_training

        policy = policy_name(args.method, seed, args.data_multiple)
        # A fresh clone has no models/base yet: print the command with the model it will be.
        try:
            model = planned_model(config, project_root())
        except ValueError as error:
            parser.exit(2, f"{parser.prog}: {error}\n")
        if model is not None:
            print(
                f"# {config.train.model} is not built yet (dvc repro base_model): the command "
                f"names the model it will hold, {model}",
                file=sys.stderr,
            )
        planned = run_training(args.method, seed, policy, config, dry_run=True, model=model)
        print("\n".join(evaluation_lines(config)))  # what the evaluate stage will sample with
        # The preflight: memory per card (refused when it does not fit), GPU-hours, disk.
        from tagrpo.verl_ext.cost import check_fits
        from tagrpo.verl_ext.dry_run import preflight_lines
        from tagrpo.verl_ext.launcher import resolve_model

        root = project_root()
        model = model or resolve_model(config, root)
        print(
            "\n".join(preflight_lines(config, args.method, policy, model, root, args.data_multiple))
        )
        try:
            check_fits(config, model)
        except ValueError as error:
            parser.exit(2, f"{parser.prog}: {error}\n")
        return planned
    # By content, not DVC's size-and-mtime state: a model or training set damaged in place is
    # refused by name before anything is trained on it (nothing checked outside dvc.lock).
    checked = [Path(path).as_posix() for path in (config.train.model, config.train.input)]
    check_inputs(project_root(), checked)
    plan = plan_training(config, args.method, seed, args.data_multiple)
    with running_stage(
        "train",
        train_outputs(plan.policy),
        config,
        key=plan.policy,
        tags=plan.tags,
        log_sections=("train", backend),
        run_params={"run": {"steps": plan.steps, "questions": len(plan.questions)}},
        metrics_prefix="summary/",
        dvc_name=dvc_stage_name(
            "train",
            plan.spec.name,
            seed,
            args.data_multiple,
            config.runs.one_seed_methods,
            config.runs.control_methods,
        ),
        checked_inputs=checked,
    ) as ctx:
        if backend == "local":
            summary = train_local(
                plan, ctx.path("model"), ctx.path("rollouts"), ctx.path("history"), ctx.log
            )
        else:
            from tagrpo.verl_ext.launcher import run_training

            summary = run_training(
                plan.spec.name,
                seed,
                plan.policy,
                config,
                data_multiple=args.data_multiple,
                summarize=run_summary,
                outputs={role: ctx.path(role) for role in ("model", "rollouts", "history")},
            )
        inputs = [ctx.root / config.train.input]
        if args.data_multiple > 1.0:  # the data-scaling pool the extra questions come from
            inputs.append(ctx.root / data_outputs()["processed"] / "extra.parquet")
        log_datasets(inputs, "training")
        log_policy_model(
            ctx.path("model"),
            plan.policy,
            ctx.final("model"),
            base_model=model_label(config),
            # The warm-started base policy is this project's own (Apache-2.0); otherwise the
            # base model's license applies.
            license_id="apache-2.0" if config.base_model.kind == "warmstart" else "other",
        )
        ctx.set_metrics(summary)
    if backend == "verl":
        from tagrpo.verl_ext.launcher import release_work_area

        # Committed: the run's checkpoints are no longer needed (a failed or killed stage
        # never gets here, and its rerun resumes from them).
        release_work_area(config, plan.policy)
    return summary


if __name__ == "__main__":
    run_main(main, "train")
