"""What ``dvc repro`` would rerun after a params change, computed without running anything.

``dvc exp run --dry`` cannot answer this (DVC makes a temporary copy without the outputs, so it
fails on the first missing input). :func:`plan_rerun` resolves the change like a rerun does
(:func:`tagrpo.pipeline.rerun.resolve_params`: profile, ``key=value`` overrides, validated
against the typed params) and then reads, never writes, the checkout:

* the stages are dvc.yaml expanded with the *new* params (a changed ``runs.methods`` adds or
  drops matrix items);
* a stage runs when its recorded run in dvc.lock differs from what it would be: a param it
  declares has another value (compared as DVC reads YAML), its command changed, it has no
  entry in dvc.lock, or ``dvc status`` reports a changed dependency or a missing/changed output
  in the checkout as it is;
* and every stage downstream of one that runs (its inputs are about to be rewritten; DVC skips
  it only if they come out byte-identical).

An ``always_changed`` stage (``preflight``) runs on every ``dvc repro`` but rewrites its outputs
byte-identical unless its inputs changed: where the text it will write is known without running
it (:func:`predicted_outputs`), a stage downstream runs only when that text differs from the
one it last ran on (dvc.lock), e.g. benchmark files edited under ``TAGRPO_DATA_DIR``; elsewhere
everything downstream counts as rerun.

The checkout's params.yaml and outputs are not touched (``dvc status`` only reads them).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tagrpo.pipeline.rerun import (
    RerunRequest,
    changed_leaves,
    dvc_binary,
    read_yaml_mapping,
    resolve_params,
    topological,
)
from tagrpo.plumbing.dvc_stages import ExpandedStage, expand_stages

PARAMS_FILE = "params.yaml"


@dataclass(frozen=True)
class PlannedStage:
    name: str
    reasons: tuple[str, ...]  # why the stage itself is out of date (empty: only downstream)
    after: tuple[str, ...] = ()  # the stages upstream of it that run first


@dataclass(frozen=True)
class RerunPlan:
    request: RerunRequest
    changed_params: dict[str, tuple[Any, Any]]  # dotted key -> (params.yaml value, new value)
    order: list[str]  # every stage of the new pipeline, in dvc repro order
    runs: list[PlannedStage] = field(default_factory=list)  # in dvc repro order

    @property
    def unchanged(self) -> list[str]:
        running = {stage.name for stage in self.runs}
        return [name for name in self.order if name not in running]


def _dvc_yaml_view(data: Mapping[str, Any]) -> Any:
    """``data`` as DVC reads it: YAML 1.2 (``1e-6`` is a number there, a string in PyYAML)."""
    from dvc.utils.serialize import parse_yaml  # optional (pipeline extra) and slow to import

    return parse_yaml(yaml.safe_dump(dict(data), sort_keys=False), PARAMS_FILE)


def _lookup(tree: Any, dotted: str) -> tuple[bool, Any]:
    node = tree
    for part in dotted.split("."):
        if not isinstance(node, Mapping) or part not in node:
            return False, None
        node = node[part]
    return True, node


def leaf_differences(old: Any, new: Any, prefix: str) -> list[str]:
    """Dotted keys under ``prefix`` whose values differ (lists are leaves)."""
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        keys = sorted(set(old) | set(new), key=str)
        found: list[str] = []
        for key in keys:
            if key not in old or key not in new:
                found.append(f"{prefix}.{key}")
            else:
                found += leaf_differences(old[key], new[key], f"{prefix}.{key}")
        return found
    return [] if old == new else [prefix]


def dvc_status(root: Path) -> dict[str, list[Any]]:
    """``dvc status --json`` of the checkout as it is: stage -> DVC's list of changes."""
    result = subprocess.run(
        [dvc_binary(), "status", "--json"], cwd=root, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise RuntimeError(f"dvc status failed in {root}:\n{result.stderr[-3000:]}")
    text = result.stdout.strip()
    return json.loads(text) if text else {}


def checkout_reasons(changes: Sequence[Any]) -> list[str]:
    """DVC's status entries of one stage, except params and command (compared with the new
    params instead): changed dependencies and missing or changed outputs, one reason each."""
    deps: list[str] = []
    outs: list[str] = []
    reasons: list[str] = []
    for change in changes:
        if change == "always changed":
            reasons.append("always changed")
        if not isinstance(change, Mapping):
            continue
        for path, state in (change.get("changed deps") or {}).items():
            if path != PARAMS_FILE:
                deps.append(path if state == "modified" else f"{path} ({_state(state)})")
        for path, state in (change.get("changed outs") or {}).items():
            outs.append(f"{path} ({_state(state)})")
    if deps:
        reasons.append("changed deps: " + ", ".join(deps))
    if outs:
        reasons.append("outputs: " + ", ".join(outs))
    return reasons


def _state(state: str) -> str:
    return {"deleted": "missing", "not in cache": "missing, not in the cache"}.get(state, state)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def stage_edges(stages: Mapping[str, ExpandedStage]) -> list[tuple[str, str]]:
    """(upstream, downstream) whenever a dependency is, holds or lies inside an output, as in
    ``dvc dag``."""
    edges = []
    for upstream in stages.values():
        for downstream in stages.values():
            if upstream.name != downstream.name and any(
                _inside(dep, out) or _inside(out, dep)
                for dep in downstream.deps
                for out in upstream.outs
            ):
                edges.append((upstream.name, downstream.name))
    return edges


def _param_reasons(
    stage: ExpandedStage, recorded: Mapping[str, Any] | None, new_view: Any
) -> list[str]:
    if recorded is None:
        return []
    reasons = []
    for key in stage.params:
        present, value = _lookup(new_view, key)
        if key not in recorded:
            reasons.append(f"new params dependency {key}")
        elif not present:
            reasons.append(f"params: {key} removed")
        else:
            changed = leaf_differences(recorded[key], value, key)
            if changed:
                reasons.append("params: " + ", ".join(changed))
    dropped = sorted(set(recorded) - set(stage.params))
    if dropped:
        reasons.append(f"no longer depends on params {', '.join(dropped)}")
    return reasons


ALWAYS_CHANGED = "always changed"


def predicted_outputs(stage: ExpandedStage, params: Mapping[str, Any]) -> dict[str, bytes]:
    """The bytes an always-changed stage will write, per output, where known without running it:
    the preflight stage's params.ok (constant text) and inputs.json (the benchmark files'
    manifest under ``params``, :mod:`tagrpo.splits.inputs`). Other outputs: not listed."""
    if stage.stage != "preflight":
        return {}
    from tagrpo.config.params import validate_params
    from tagrpo.plumbing.layout import preflight_outputs
    from tagrpo.splits.inputs import PARAMS_OK, input_manifest, manifest_text

    outputs = preflight_outputs()
    manifest = input_manifest(validate_params(params, "plan"))
    return {
        str(outputs["params_ok"]): PARAMS_OK.encode("utf-8"),
        str(outputs["inputs"]): manifest_text(manifest).encode("utf-8"),
    }


def _recorded_dep_md5(recorded: Mapping[str, Any] | None, path: str) -> str | None:
    for dep in (recorded or {}).get("deps") or []:
        if dep.get("path") == path:
            return dep.get("md5")
    return None


def plan_rerun(
    root: Path, request: RerunRequest, status: Mapping[str, Sequence[Any]] | None = None
) -> RerunPlan:
    """The stages ``dvc repro`` would run in ``root`` with ``request``'s params, and why.

    ``status``: ``dvc status --json`` of the checkout (read from DVC when None); raises
    :class:`~tagrpo.config.params.ConfigError` for an invalid request.
    """
    from dvc.utils.serialize import parse_yaml  # optional (pipeline extra) and slow to import

    resolved = resolve_params(root, request)
    current = read_yaml_mapping(root / PARAMS_FILE)
    changed = {
        key: (_lookup(current, key)[1], value)
        for key, value in changed_leaves(current, resolved).items()
    }
    dvc_yaml = yaml.safe_load((root / "dvc.yaml").read_text()) or {}
    stages = expand_stages(dvc_yaml, resolved)
    lock_path = root / "dvc.lock"
    lock = parse_yaml(lock_path.read_text(), str(lock_path)) if lock_path.is_file() else {}
    recorded_stages = (lock or {}).get("stages") or {}
    if status is None:
        status = dvc_status(root)
    new_view = _dvc_yaml_view(resolved)

    edges = stage_edges(stages)
    order = topological(list(stages), edges)
    upstream_of: dict[str, list[str]] = {name: [] for name in stages}
    for upstream, downstream in edges:
        upstream_of[downstream].append(upstream)

    runs: list[PlannedStage] = []
    running: set[str] = set()  # stages that run and may rewrite what their downstream reads
    predicted: dict[str, tuple[str, bytes]] = {}  # output -> (its always-changed stage, bytes)
    for name in order:
        stage = stages[name]
        recorded = recorded_stages.get(name)
        reasons: list[str] = []
        if recorded is None:
            reasons.append("not in dvc.lock (never run)")
        else:
            if str(recorded.get("cmd", "")) != stage.cmd:
                reasons.append(f"command changed: {stage.cmd}")
            # A run that recorded no params at all: every param the stage declares is new.
            reasons += _param_reasons(
                stage, (recorded.get("params") or {}).get(PARAMS_FILE) or {}, new_view
            )
            reasons += checkout_reasons(status.get(name, []))
        rewritten = sorted(
            f"{dep} (rewritten by {predicted[dep][0]})"
            for dep in stage.deps
            if dep in predicted
            and _recorded_dep_md5(recorded, dep) != hashlib.md5(predicted[dep][1]).hexdigest()
        )
        if recorded is not None and rewritten:
            reasons.append("changed deps: " + ", ".join(rewritten))
        after = tuple(up for up in order if up in running and up in upstream_of[name])
        if reasons or after:
            runs.append(PlannedStage(name, tuple(reasons), after))
            outputs = predicted_outputs(stage, resolved) if ALWAYS_CHANGED in reasons else {}
            if outputs and set(stage.outs) - set(outputs) == _unread(stage, stages, outputs):
                # Reruns, but what its downstream reads is known: compared per stage above.
                predicted.update({out: (name, data) for out, data in outputs.items()})
            else:
                running.add(name)
    return RerunPlan(request=request, changed_params=changed, order=order, runs=runs)


def _unread(
    stage: ExpandedStage, stages: Mapping[str, ExpandedStage], known: Mapping[str, bytes]
) -> set[str]:
    """``stage``'s outputs outside ``known`` that no other stage reads."""
    return {
        out
        for out in stage.outs
        if out not in known
        and not any(
            _inside(dep, out) or _inside(out, dep)
            for other in stages.values()
            if other.name != stage.name
            for dep in other.deps
        )
    }


def _short(value: Any) -> str:
    text = json.dumps(value, default=str)
    return text if len(text) <= 60 else text[:57] + "..."


def render_plan(plan: RerunPlan) -> str:
    """The plan as the ``tagrpo plan`` command prints it."""
    lines = [f"request: {plan.request.describe()}"]
    if plan.changed_params:
        lines.append(f"params changed from params.yaml ({len(plan.changed_params)}):")
        lines += [
            f"  {key}: {_short(old)} -> {_short(new)}"
            for key, (old, new) in plan.changed_params.items()
        ]
    else:
        lines.append("params changed from params.yaml: none")
    total = len(plan.order)
    if not plan.runs:
        lines.append(f"dvc repro would run nothing: all {total} stages are up to date")
        return "\n".join(lines)
    lines.append(f"dvc repro would run {len(plan.runs)} of {total} stages, in this order:")
    width = max(len(stage.name) for stage in plan.runs)
    for stage in plan.runs:
        why = list(stage.reasons)
        if stage.after:
            shown = ", ".join(stage.after[:3])
            more = f" and {len(stage.after) - 3} more" if len(stage.after) > 3 else ""
            why.append(f"upstream runs: {shown}{more}")
        lines.append(f"  {stage.name:<{width}}  {'; '.join(why)}")
    unchanged = plan.unchanged
    lines.append(f"up to date ({len(unchanged)}): {', '.join(unchanged) or '-'}")
    return "\n".join(lines)


@dataclass(frozen=True)
class CostPlan:
    """What ``tagrpo plan --cost`` computes for one profile (:mod:`tagrpo.verl_ext.cost`)."""

    config: Any
    model: str
    arch: Any
    questions: int
    problems: int
    cost: Any  # ProfileCost
    memory: Any  # MemoryPlan

    @property
    def gpus(self) -> int:
        return self.config.verl.n_gpus_per_node * self.config.verl.nnodes

    @property
    def vllm_gpus(self) -> int:
        return self.config.vllm.tensor_parallel_size


def cost_plan(
    root: Path, request: RerunRequest, questions: int | None, problems: int | None
) -> CostPlan:
    """The cost of the verl DAG under ``request``'s params. ``questions`` (1x training set)
    and ``problems`` (over the evaluated benchmarks) default to the built data's counts;
    ValueError names a missing one."""
    from tagrpo.config.params import validate_params
    from tagrpo.verl_ext.cost import (
        architecture,
        memory_plan,
        profile_cost,
        profile_model,
        training_questions,
    )

    resolved = resolve_params(root, request)
    config = validate_params(resolved, f"plan ({request.describe()})")
    if config.train.backend != "verl":
        raise ValueError("--cost plans verl runs: train.backend is local in these params")
    model = profile_model(config, root)
    arch = architecture(model)
    if arch is None:
        raise ValueError(f"{model}: no config.json and not a known model: no cost to compute")
    if questions is None:
        try:
            questions = training_questions(config, root)
        except ValueError as error:
            raise ValueError(f"{error} or pass --questions N") from None
    if questions is None:
        raise ValueError("the training set is not built: give --questions N")
    if problems is None:
        problems = _benchmark_problems(root, config)
    dvc_yaml = yaml.safe_load((root / "dvc.yaml").read_text()) or {}
    stages = [
        (
            name,
            stage.stage.partition("_")[0],
            str(stage.item.get("method", "base")),
            float(stage.item.get("multiple", 1.0)),
        )
        for name, stage in expand_stages(dvc_yaml, resolved).items()
        if stage.stage.startswith(("train", "evaluate"))
    ]
    cost = profile_cost(config, stages, questions, problems, arch)
    return CostPlan(config, model, arch, questions, problems, cost, memory_plan(config, arch))


def render_cost(
    root: Path, request: RerunRequest, questions: int | None, problems: int | None
) -> str:
    """``tagrpo plan --cost``: memory per card and the GPU-hours, tokens and disk of every
    training, evaluation and the diagnostics of the DAG under ``request``'s params, the host
    RAM and the API calls (:func:`cost_plan`)."""
    from tagrpo.data.rephrase_templates import load_template
    from tagrpo.rephrase.api_usage import MATH_QUESTION_CHARS, api_usage
    from tagrpo.verl_ext.cost import (
        KNOWN_MODELS,
        assumption_lines,
        cost_table,
        fit_problems,
        host_memory_gib,
    )

    planned = cost_plan(root, request, questions, problems)
    config, arch = planned.config, planned.arch
    lines = [
        f"cost of {request.describe()}: {planned.model} ({arch.parameters / 1e9:.2f}B "
        f"parameters), {planned.questions:,} training questions, {planned.problems:,} benchmark "
        f"problems x evaluate.n {config.evaluate.n}, {planned.gpus} GPUs",
        *cost_table(planned.cost, planned.gpus, planned.vllm_gpus),
        scaling_line(planned),
        diagnostics_line(config),
    ]
    if planned.model in KNOWN_MODELS:
        models = list(KNOWN_MODELS)
        totals = paper_totals([_model_plan(root, request, m, questions, problems) for m in models])
        lines.append(
            f"the whole paper (this DAG for each of Table 1's {len(models)} base models: "
            f"{', '.join(models)}): {totals['busy']:,.0f} GPU-hours busy, "
            f"{totals['billed']:,.0f} billed with {planned.gpus} GPUs held; disk "
            f"{totals['outputs']:,.0f} GB of outputs with their DVC cache copy, "
            f"{totals['weights']:.1f} GB of weights from the hub, a work area of up to "
            f"{totals['work_area']:.0f} GB (--models: a column per model)"
        )
    lines += planned.memory.lines()
    lines += [f"DOES NOT FIT: {problem}" for problem in fit_problems(planned.memory, config)]
    lines.append(
        f"host RAM per node: at least {host_memory_gib(config, arch):.0f} GiB (checkpoint "
        "shards while written, offloaded reference, one fp32 export, worker processes)"
    )
    template = load_template(config.rephrase.template, config.rephrase.template_file)
    for usage in api_usage(config, planned.questions, MATH_QUESTION_CHARS, len(template.body)):
        lines.append(usage.line())
    lines += assumption_lines(config)
    return "\n".join(lines)


def scaling_line(planned: CostPlan) -> str:
    """Which data-scaling runs the DAG trains and what they cost: ``runs.data_scaling`` lists
    their own methods, so restricting ``runs.methods`` leaves them in."""
    scaling = planned.config.runs.data_scaling
    runs = [t for t in planned.cost.trainings if t.policy.startswith("train_scaling@")]
    if not runs:
        return "data-scaling runs: none (runs.data_scaling.multiples or .methods is empty)"
    hours = sum(t.gpu_hours for t in runs)
    trained = {*planned.config.runs.methods, *planned.config.runs.control_methods}
    alone = [method for method in scaling.methods if method not in trained]
    multiples = ", ".join(f"{m:g}x" for m in scaling.multiples)
    return (
        f"data-scaling runs (runs.data_scaling, whatever runs.methods lists): {len(runs)} "
        f"trainings of {', '.join(scaling.methods)} at {multiples} (seeds "
        f"{', '.join(map(str, scaling.seeds))}), {hours:.0f} GPU-hours of the trainings' "
        f"{sum(t.gpu_hours for t in planned.cost.trainings):.0f}; -S "
        "runs.data_scaling.multiples=[] drops them"
        + (f" (not in runs.methods, so no 1x run: {', '.join(alone)})" if alone else "")
    )


def diagnostics_line(config: Any) -> str:
    """What the diagnostics stage samples, as the preflight prices it: the counts of
    :func:`tagrpo.config.evaluation.diagnostics_sampling`."""
    from tagrpo.config.evaluation import diagnostics_sampling
    from tagrpo.verl_ext.cost import diagnostics_responses

    settings = config.diagnostics
    (_, first), *rest = diagnostics_sampling(settings.group_size, settings.n_neighbours)
    per_checkpoint = settings.questions * settings.responses_per_question
    total = diagnostics_responses(config)
    return (
        f"diagnostics: {settings.questions:,} questions x ({first} responses from q0 + "
        f"{sum(count for _, count in rest)} from its {len(rest)} neighbours: (N+1) x G and G "
        f"each, N = {settings.n_neighbours}, G = {settings.group_size}) = {per_checkpoint:,} "
        f"responses per checkpoint, {total // per_checkpoint} checkpoints (diagnostics.policies "
        f"x .checkpoints, and the base): {total:,} responses"
    )


def _model_plan(
    root: Path, request: RerunRequest, model: str, questions: int | None, problems: int | None
) -> CostPlan:
    """:func:`cost_plan` of ``request`` with ``base_model.hub.hub_id`` = ``model``."""
    overrides = [*request.overrides, f"base_model.hub.hub_id={model}"]
    changed = RerunRequest(request.profile, request.methods, request.seeds, overrides)
    return cost_plan(root, changed, questions, problems)


def paper_totals(plans: Sequence[CostPlan]) -> dict[str, float]:
    """One DAG per base model, added up: busy and billed GPU-hours (one node's GPUs held
    through each), wall hours, the outputs' disk with DVC's cache copy and the weights'; the
    work area is one training's at a time, so its largest."""
    return {
        "busy": sum(p.cost.gpu_hours for p in plans),
        "wall": sum(p.cost.wall_hours(p.gpus, p.vllm_gpus) for p in plans),
        "billed": sum(p.cost.wall_hours(p.gpus, p.vllm_gpus) * p.gpus for p in plans),
        "trainings": sum(t.gpu_hours for p in plans for t in p.cost.trainings),
        "outputs": sum(t.outputs_gb for p in plans for t in p.cost.trainings),
        "weights": sum(2 * p.arch.parameters / 1e9 for p in plans),
        "work_area": max(t.peak_gb for p in plans for t in p.cost.trainings),
    }


def render_models(
    root: Path,
    request: RerunRequest,
    models: Sequence[str],
    questions: int | None,
    problems: int | None,
) -> str:
    """``tagrpo plan --cost --models``: what one run of the profile needs, a column per base
    model (``base_model.hub.hub_id``), and the models together (:func:`paper_totals`: with
    Table 1's four, the whole paper), as docs/paper-scale.md shows it."""
    from tagrpo.verl_ext.cost import host_memory_gib

    plans = [_model_plan(root, request, model, questions, problems) for model in models]
    first, total = plans[0], paper_totals(plans)

    def training(plan: CostPlan, method: str) -> str:
        hours = [
            t.gpu_hours for t in plan.cost.trainings if t.policy.startswith(f"train@{method}-")
        ]
        return f"{hours[0]:.1f}" if hours else "-"

    def row(label: str, cell: Any, together: str = "") -> str:
        return f"| {label} | " + " | ".join(cell(plan) for plan in plans) + f" | {together} |"

    def largest(value: Any, form: str) -> str:
        return f"{max(value(plan) for plan in plans):{form}} (largest)"

    card = first.memory.card
    evaluations = len(first.cost.evaluations)
    trainings = len(first.cost.trainings)
    evaluated = sum(h for p in plans for _, h in p.cost.evaluations)
    diagnosed = sum(p.cost.diagnostics for p in plans)
    lines = [
        "| one run of the profile | "
        + " | ".join(m.split("/")[-1] for m in models)
        + f" | the {len(models)} together |",
        "|---|" + "---:|" * (len(models) + 1),
        row(
            f"memory per card, rollout / update (GiB of {card:g})",
            lambda p: f"{p.memory.rollout:.1f} / {p.memory.update:.1f}",
            largest(lambda p: max(p.memory.rollout, p.memory.update), ".1f"),
        ),
        row(
            "host RAM per node, at least (GiB)",
            lambda p: f"{host_memory_gib(p.config, p.arch):.0f}",
            largest(lambda p: host_memory_gib(p.config, p.arch), ".0f"),
        ),
        row(
            "disk: the model's weights from the hub (GB)",
            lambda p: f"{2 * p.arch.parameters / 1e9:.1f}",
            f"{total['weights']:.1f}",
        ),
        row(
            "disk: a training's verl work area, largest (GB)",
            lambda p: f"{max(t.peak_gb for t in p.cost.trainings):.0f}",
            f"{total['work_area']:.0f} (largest)",
        ),
        row(
            "disk: the outputs with DVC's cache copy (GB)",
            lambda p: f"{sum(t.outputs_gb for t in p.cost.trainings):,.0f}",
            f"{total['outputs']:,.0f}",
        ),
        row(
            "GPU-hours: one GRPO / (N+1)xGRPO / TA-GRPO training",
            lambda p: " / ".join(training(p, m) for m in ("grpo", "grpo_x4", "ta_grpo")),
        ),
        row(
            f"GPU-hours: {trainings} trainings",
            lambda p: f"{sum(t.gpu_hours for t in p.cost.trainings):.0f}",
            f"{total['trainings']:,.0f}",
        ),
        row(
            f"GPU-hours: {evaluations} evaluations + diagnostics",
            lambda p: f"{sum(h for _, h in p.cost.evaluations):.0f} + {p.cost.diagnostics:.0f}",
            f"{evaluated:.0f} + {diagnosed:.0f}",
        ),
        row(
            "**GPU-hours, busy**",
            lambda p: f"**{p.cost.gpu_hours:.0f}**",
            f"**{total['busy']:,.0f}**",
        ),
        row(
            f"wall hours on {first.gpus} GPUs, one stage at a time",
            lambda p: f"{p.cost.wall_hours(p.gpus, p.vllm_gpus):.0f}",
            f"{total['wall']:,.0f}",
        ),
        row(
            f"GPU-hours billed, {first.gpus} GPUs held throughout",
            lambda p: f"{p.cost.wall_hours(p.gpus, p.vllm_gpus) * p.gpus:,.0f}",
            f"{total['billed']:,.0f}",
        ),
    ]
    return "\n".join(lines)


def _benchmark_problems(root: Path, config: Any) -> int:
    """Problems over the evaluated benchmarks (evaluate.groups), from the built data: each
    file the one these params build (its provenance), else refused naming it."""
    import pyarrow.parquet as pq

    from tagrpo.config.data import table_mismatch

    names = sorted({name for members in config.evaluate.groups.values() for name in members})
    folder = root / "data" / "processed" / "benchmarks"
    missing = [name for name in names if not (folder / f"{name}.parquet").is_file()]
    if missing:
        raise ValueError(f"benchmarks {missing} are not built: give --problems N")
    others = [
        f"{name} ({why})"
        for name in names
        if (why := table_mismatch(folder / f"{name}.parquet", config)) is not None
    ]
    if others:
        raise ValueError(
            f"the benchmarks here are not profile {config.common.profile}'s: "
            + "; ".join(others)
            + ": run its data stage first or pass --problems N"
        )
    limit = config.evaluate.max_questions_per_benchmark
    counts = [pq.ParquetFile(folder / f"{name}.parquet").metadata.num_rows for name in names]
    return sum(count if limit is None else min(count, limit) for count in counts)
