"""What a verl run needs before a GPU is spent: memory per card, GPU-hours, tokens and disk.

Arithmetic from the params and the model's architecture (no verl, no torch); its assumptions
are ``runtime.gpu`` (the card, what share of its peak the passes reach, how long responses
are) and each is printed with the numbers. ``python -m stages.train --method M --dry-run``
prints the plan of one run; the train stage refuses a run that does not fit before verl
starts (:func:`check_fits`: the message names the setting to change); ``tagrpo plan --cost``
adds it up over the trainings and evaluations of a profile (docs/paper-scale.md, "Cost in
detail").

Memory per card, in the two phases of a colocated verl step (vLLM sleeps during the update):

* rollout: the FSDP actor's state (fp32 weights, gradients and AdamW moments: 16 bytes per
  parameter, sharded over every GPU of the run) + the reference model's bf16 weights unless
  offloaded + vLLM's share (``verl.gpu_memory_utilization`` x the card: its weights, KV cache
  and activations) + ``overhead_gib``;
* update: the actor's state + the logits of the largest micro-batch (``micro_batch_size_per_gpu``
  x (prompt + response) tokens x the vocabulary x ``logit_bytes``) + the activations (layer
  inputs kept by gradient checkpointing, one layer recomputed) + ``overhead_gib``; the
  log-prob passes' micro-batch (``log_prob_micro_batch_size_per_gpu``) likewise, without
  gradients.

Compute, per trained token: a forward pass costs 2 FLOPs per parameter; verl runs the old
policy's and the reference's forward passes, the anchoring pass over the N/(N+1) neighbour
responses (TA methods, ``train.anchoring_diagnostic``) and the update (forward, recomputed
forward, backward: 4 passes' worth), at ``train_mfu``; so is the prompts' prefill. Decoding
(:func:`decode_seconds`) costs each generated token the larger of its compute (one forward
pass at ``rollout_mfu``) and its memory traffic (the KV cache of its context and the weights
shared by the sequences decoded with it, at ``decode_bandwidth_share`` of
``memory_bandwidth_gbs``): decoding 3k-token responses of a model with a large KV cache per
token (Qwen3-1.7B: 112 KiB) is bound by the memory. Attention's own FLOPs (about 12% at 3.5k
tokens for Qwen3-1.7B), dynamic sampling's refills and length spread (a long response's
context is longer than the mean's) are left out: the figures are lower bounds.

Where it runs: a training uses every GPU of ``verl`` (its wall time is its GPU-hours over
them); an evaluation or a diagnostics stage one ``vllm.LLM`` on ``vllm.tensor_parallel_size``
cards (no data parallelism), and DVC runs stages one at a time, so on a node the other cards
idle while it runs (:func:`cost_table` gives both the busy GPU-hours and the wall hours).

Imports nothing beyond the standard library at module level: ``benchmarks/
gpu_paper_path_check.py`` measures these terms on a GPU machine without the project's
environment.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tagrpo.config.params import Params
    from tagrpo.config.runtime import GPUSettings

GIB = 2**30
GB = 1e9
# vLLM's max_num_seqs when not set (the evaluate and diagnostics stages do not set it): 1,024
# for vllm.LLM on a card of at least 70 GiB (an A100 excepted), else 256 (vLLM's
# EngineArgs.get_batch_defaults).
VLLM_DEFAULT_MAX_NUM_SEQS = {True: 1024, False: 256}


@dataclass(frozen=True)
class Architecture:
    """What the arithmetic needs of a decoder-only transformer (its HF ``config.json``)."""

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    tied: bool
    qk_norm: bool = False  # Qwen3's per-head query and key norms

    @property
    def parameters(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        mlp = 3 * self.hidden * self.intermediate
        norms = 2 * self.hidden + (2 * self.head_dim if self.qk_norm else 0)
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * (attention + mlp + norms) + embeddings + self.hidden

    @property
    def kv_bytes_per_token(self) -> int:
        """vLLM's bf16 KV cache per token."""
        return 2 * self.layers * self.kv_heads * self.head_dim * 2

    @classmethod
    def from_config(cls, config: dict) -> Architecture:
        heads = int(config["num_attention_heads"])
        hidden = int(config["hidden_size"])
        return cls(
            hidden=hidden,
            layers=int(config["num_hidden_layers"]),
            heads=heads,
            kv_heads=int(config.get("num_key_value_heads") or heads),
            head_dim=int(config.get("head_dim") or hidden // heads),
            intermediate=int(config["intermediate_size"]),
            vocab=int(config["vocab_size"]),
            tied=bool(config.get("tie_word_embeddings", False)),
            qk_norm=str(config.get("model_type", "")).startswith("qwen3"),
        )


# The paper's base models, from their config.json on the hub (for a plan made offline).
KNOWN_MODELS: dict[str, Architecture] = {
    "Qwen/Qwen3-1.7B": Architecture(2048, 28, 16, 8, 128, 6144, 151936, True, qk_norm=True),
    "Qwen/Qwen3-4B": Architecture(2560, 36, 32, 8, 128, 9728, 151936, True, qk_norm=True),
    "meta-llama/Llama-3.2-1B-Instruct": Architecture(2048, 16, 32, 8, 64, 8192, 128256, True),
    "meta-llama/Llama-3.2-3B-Instruct": Architecture(3072, 28, 24, 8, 128, 8192, 128256, True),
}


def architecture(model: str) -> Architecture | None:
    """The architecture of ``model``: a folder's ``config.json``, or a known hub id; None when
    neither (a hub id not listed: the preflight then says it could not check)."""
    config = Path(model) / "config.json"
    if config.is_file():
        return Architecture.from_config(json.loads(config.read_text()))
    return KNOWN_MODELS.get(model)


# -- memory per card --


@dataclass(frozen=True)
class MemoryPlan:
    """GiB per card in each phase of a step (see the module docstring)."""

    card: float
    actor_state: float
    reference: float
    vllm: float
    vllm_weights: float
    kv_cache: float
    kv_sequences: float  # full-length sequences the KV cache holds
    update_logits: float
    log_prob_logits: float
    activations: float
    overhead: float

    @property
    def rollout(self) -> float:
        return self.actor_state + self.reference + self.vllm + self.overhead

    @property
    def update(self) -> float:
        return (
            self.actor_state
            + self.reference
            + self.update_logits
            + self.activations
            + (self.overhead)
        )

    @property
    def log_prob(self) -> float:
        return self.actor_state + self.reference + self.log_prob_logits + self.overhead

    def lines(self) -> list[str]:
        return [
            f"memory per card (GiB of {self.card:g}): rollout {self.rollout:.1f} = actor state "
            f"{self.actor_state:.1f} + reference {self.reference:.1f} + vLLM {self.vllm:.1f} "
            f"(bf16 weights {self.vllm_weights:.1f}, KV cache {self.kv_cache:.1f} = "
            f"{self.kv_sequences:.0f} full-length sequences) + overhead {self.overhead:g}",
            f"memory per card (GiB of {self.card:g}): update {self.update:.1f} = actor state "
            f"{self.actor_state:.1f} + reference {self.reference:.1f} + logits "
            f"{self.update_logits:.1f} + activations {self.activations:.1f} + overhead "
            f"{self.overhead:g}; log-prob passes {self.log_prob:.1f}",
        ]


def memory_plan(config: Params, arch: Architecture) -> MemoryPlan:
    """:class:`MemoryPlan` of a verl run with these params on ``runtime.gpu``'s cards."""
    verl, gpu = config.verl, config.runtime.gpu
    parameters = arch.parameters
    gpus = verl.n_gpus_per_node * verl.nnodes
    sequence = verl.max_prompt_length + config.train.max_new_tokens
    vllm = verl.gpu_memory_utilization * gpu.memory_gib
    vllm_weights = 2 * parameters / verl.tensor_parallel_size / GIB
    # vLLM keeps part of its share for its own activations (profiled at start-up): ~5% here.
    kv_cache = max(0.0, vllm - vllm_weights - 0.05 * vllm)
    kv_per_sequence = arch.kv_bytes_per_token * sequence / verl.tensor_parallel_size / GIB

    def logits(micro_batch: int) -> float:
        return micro_batch * sequence * arch.vocab * gpu.logit_bytes / GIB

    tokens = verl.micro_batch_size_per_gpu * sequence
    kept = arch.layers * tokens * arch.hidden * 2  # bf16 layer inputs (checkpointing)
    per_layer = tokens * (10 * arch.hidden + 4 * arch.intermediate) * 2
    activations = (kept + per_layer) if verl.gradient_checkpointing else arch.layers * per_layer
    return MemoryPlan(
        card=gpu.memory_gib,
        actor_state=16 * parameters / gpus / GIB,
        reference=0.0 if verl.ref_param_offload else 2 * parameters / gpus / GIB,
        vllm=vllm,
        vllm_weights=vllm_weights,
        kv_cache=kv_cache,
        kv_sequences=kv_cache / kv_per_sequence,
        update_logits=logits(verl.micro_batch_size_per_gpu),
        log_prob_logits=logits(verl.log_prob_micro_batch_size_per_gpu),
        activations=activations / GIB,
        overhead=gpu.overhead_gib,
    )


def fit_problems(plan: MemoryPlan, config: Params) -> list[str]:
    """Why a run does not fit a card, each naming the setting to change (empty: it fits)."""
    verl, card = config.verl, plan.card
    problems = []
    if plan.rollout > card:
        room = card - plan.actor_state - plan.reference - plan.overhead
        problems.append(
            f"verl.gpu_memory_utilization = {verl.gpu_memory_utilization:g}: the rollout phase "
            f"needs {plan.rollout:.1f} GiB per card of runtime.gpu.memory_gib = {card:g} (the "
            f"FSDP actor's state, {plan.actor_state:.1f} GiB, stays on the card while vLLM "
            f"wakes): at most {max(0.0, room / card):.2f} fits, or shard the actor over more "
            "GPUs (verl.n_gpus_per_node, verl.nnodes)"
        )
    if plan.kv_cache <= 0:
        problems.append(
            f"verl.gpu_memory_utilization = {verl.gpu_memory_utilization:g}: vLLM's "
            f"{plan.vllm:.1f} GiB do not hold its bf16 weights ({plan.vllm_weights:.1f} GiB) "
            "and a KV cache"
        )
    fixed = plan.actor_state + plan.reference + plan.overhead
    passes = (
        (
            "verl.micro_batch_size_per_gpu",
            verl.micro_batch_size_per_gpu,
            plan.update_logits + plan.activations,
            plan.update,
        ),
        (
            "verl.log_prob_micro_batch_size_per_gpu",
            verl.log_prob_micro_batch_size_per_gpu,
            plan.log_prob_logits,
            plan.log_prob,
        ),
    )
    for key, micro_batch, variable, need in passes:
        if need <= card:
            continue
        fits = max(0, math.floor((card - fixed) / (variable / micro_batch)))
        problems.append(
            f"{key} = {micro_batch}: a micro-batch of {micro_batch} x (verl.max_prompt_length "
            "+ train.max_new_tokens) tokens (its logits over the vocabulary at "
            f"runtime.gpu.logit_bytes, its activations) brings the pass to {need:.1f} GiB per "
            f"card of {card:g}: at most {fits} fits"
        )
    return problems


def check_fits(config: Params, model: str) -> MemoryPlan | None:
    """Refuse (ValueError) a GPU run whose memory does not fit ``runtime.gpu.memory_gib``,
    naming the setting; None for a CPU run or a model whose architecture is not known."""
    if config.verl.device != "cuda":
        return None
    arch = architecture(model)
    if arch is None:
        return None
    plan = memory_plan(config, arch)
    problems = fit_problems(plan, config)
    if problems:
        raise ValueError(
            f"{model} does not fit the cards of runtime.gpu (refused before any GPU work):\n  - "
            + "\n  - ".join(problems)
        )
    return plan


def host_memory_gib(config: Params, arch: Architecture) -> float:
    """Host RAM a node needs at least during a verl run (GiB): its share of the resumable
    checkpoint while it is written (FSDP shards are copied to the CPU first: 16 bytes per
    parameter over the nodes), the offloaded reference model (``verl.ref_param_offload``, bf16),
    the fp32 weights gathered on one rank for a Hugging Face export, and ``host_per_gpu_gib``
    per GPU for the worker and rollout processes (Python, torch, CUDA and NCCL host memory).
    vLLM keeps no host copy: verl's rollout sleeps at level 2 (weights resynced each step)."""
    verl, gpu = config.verl, config.runtime.gpu
    checkpoint = 16 * arch.parameters / verl.nnodes
    reference = 2 * arch.parameters / verl.nnodes if verl.ref_param_offload else 0.0
    export = 4 * arch.parameters
    return (checkpoint + reference + export) / GIB + verl.n_gpus_per_node * gpu.host_per_gpu_gib


def scaled_questions(questions: int, multiple: float) -> int:
    """Questions a data-scaling run at ``multiple`` trains on: the 1x set and
    ``(multiple - 1)`` x its size from the pool."""
    return questions + round((multiple - 1.0) * questions)


def training_questions(config: Params, root: Path) -> int | None:
    """Questions in the 1x training set of ``config``: the rows of ``train.input`` or, before
    the check_equivalence stage, of the data stage's training split (at most
    ``rephrase.max_questions``), where that table is the one these params build, at most
    ``train.questions``; where neither is built, ``train.questions`` (None: not known).
    ValueError where the tables built are another profile's (a checkout that ran the default
    holds the mini world's): never counts another experiment's questions."""
    import pyarrow.parquet as pq

    from tagrpo.config.data import table_mismatch, training_source
    from tagrpo.plumbing.layout import data_outputs

    split = data_outputs().outs["processed"] / "train.parquet"
    refused = []
    for table, limit in (
        (Path(config.train.input), None),
        (split, config.rephrase.max_questions),
    ):
        path = Path(root) / table
        if not path.is_file():
            continue
        rows = pq.ParquetFile(path).metadata.num_rows
        why = table_mismatch(path, config)
        if why is not None:
            refused.append(f"{table} ({rows:,} questions): {why}")
            continue
        rows = rows if limit is None else min(rows, limit)
        return rows if config.train.questions is None else min(rows, config.train.questions)
    if refused:
        raise ValueError(
            f"the training table here is not profile {config.common.profile}'s, which trains "
            f"on {training_source(config)}: " + "; ".join(refused) + "; run its data stage first"
        )
    return config.train.questions


# -- compute, tokens, disk --


@dataclass(frozen=True)
class TrainingCost:
    """One training's steps, tokens, GPU-hours and disk (decimal GB)."""

    policy: str
    steps: int
    responses: int  # sampled responses (dynamic sampling's refills not counted)
    rollout_tokens: float  # generated tokens
    gpu_hours: float
    anchoring_gpu_hours: float  # of gpu_hours: the anchoring diagnostic's forward pass
    checkpoint_gb: float  # one resumable verl checkpoint
    exports_gb: float  # the Hugging Face exports (train.checkpoints; the final policy linked)
    dumps_gb: float  # the rollout dumps (uncompressed upper bound)
    peak_gb: float  # the work area at its largest (two checkpoints while one is replaced)

    @property
    def outputs_gb(self) -> float:
        """What stays after the stage: its outputs and their DVC cache copy."""
        return 2 * (self.exports_gb + self.dumps_gb)


def training_cost(
    config: Params, method: str, policy: str, questions: int, arch: Architecture
) -> TrainingCost:
    """:class:`TrainingCost` of ``method`` over ``questions`` training questions."""
    from tagrpo.algorithms import get_method
    from tagrpo.verl_ext.overrides import verl_training_steps

    train, verl, gpu = config.train, config.verl, config.runtime.gpu
    spec = get_method(method)
    per_question = spec.responses_per_question(train.group_size, train.n_neighbours)
    per_step = train.questions_per_step(method)
    steps = train.steps or verl_training_steps(questions, per_step, train.epochs)
    responses = steps * per_step * per_question
    response_tokens = gpu.response_fill * train.max_new_tokens
    prompt_tokens = gpu.prompt_fill * verl.max_prompt_length
    generated = responses * response_tokens
    trained = responses * (response_tokens + prompt_tokens)
    anchoring = 0.0
    if spec.use_neighbours and train.anchoring_diagnostic:
        anchoring = train.n_neighbours / (train.n_neighbours + 1)
    forward = 2.0 * arch.parameters  # FLOPs per token
    train_flops = trained * forward * (1 + 1 + 4)  # old, reference, update
    prefill_flops = responses * prompt_tokens * forward
    peak = gpu.peak_tflops * 1e12
    plan = memory_plan(config, arch)
    concurrent = min(
        verl.max_num_seqs,
        plan.kv_cache
        * GIB
        / (arch.kv_bytes_per_token / verl.tensor_parallel_size)
        / (prompt_tokens + response_tokens),
    )
    seconds = (train_flops + prefill_flops) / (peak * gpu.train_mfu) + decode_seconds(
        generated, prompt_tokens, response_tokens, arch, gpu, concurrent
    )
    anchoring_seconds = anchoring * trained * forward / (peak * gpu.train_mfu)
    checkpoint = 16 * arch.parameters / GB
    export = 4 * arch.parameters / GB
    fractions = len(train.checkpoints)
    # Per response token: ids, mask, advantage and three log-probs (8 bytes each) and ~4 bytes
    # of text; per prompt token two id lists.
    dump = per_step * per_question * (response_tokens * 52 + prompt_tokens * 16) / GB
    runtime = config.runtime.verl
    return TrainingCost(
        policy=policy,
        steps=steps,
        responses=responses,
        rollout_tokens=generated,
        gpu_hours=(seconds + anchoring_seconds) / 3600,
        anchoring_gpu_hours=anchoring_seconds / 3600,
        checkpoint_gb=checkpoint,
        exports_gb=fractions * export,
        dumps_gb=fractions * dump,
        peak_gb=(runtime.max_checkpoints + 1) * checkpoint + fractions * (export + dump),
    )


def decode_seconds(
    tokens: float,
    prompt_tokens: float,
    response_tokens: float,
    arch: Architecture,
    gpu: GPUSettings,
    concurrent: float,
) -> float:
    """Busy GPU-seconds of decoding ``tokens`` tokens of responses of ``response_tokens``
    after prompts of ``prompt_tokens``, ``concurrent`` sequences at a time: per token the
    larger of its compute and its memory traffic (module docstring). A token's context is on
    average the prompt and half the response. The same for any tensor parallelism (its cards
    share the work: fewer wall seconds, as many GPU-seconds)."""
    compute = 2.0 * arch.parameters / (gpu.peak_tflops * 1e12 * gpu.rollout_mfu)
    context = prompt_tokens + response_tokens / 2
    traffic = arch.kv_bytes_per_token * context + 2.0 * arch.parameters / max(1.0, concurrent)
    memory = traffic / (gpu.memory_bandwidth_gbs * 1e9 * gpu.decode_bandwidth_share)
    return tokens * max(compute, memory)


def _vllm_concurrent(config: Params, arch: Architecture, sequence_tokens: float) -> float:
    """Sequences one ``vllm.LLM`` of the evaluate/diagnostics stages decodes at once: its KV
    cache (``vllm.gpu_memory_utilization`` of the card, ~5% kept for its activations, less
    the bf16 weights) over the mean sequence, at most vLLM's default ``max_num_seqs`` (the
    stages do not set it)."""
    vllm, gpu = config.vllm, config.runtime.gpu
    tp = vllm.tensor_parallel_size
    share = vllm.gpu_memory_utilization * gpu.memory_gib
    cache = vllm.kv_cache_gib or max(0.0, 0.95 * share - 2 * arch.parameters / tp / GIB)
    limit = VLLM_DEFAULT_MAX_NUM_SEQS[gpu.memory_gib >= 70]
    return min(limit, cache * GIB / (arch.kv_bytes_per_token / tp) / sequence_tokens)


def _vllm_gpu_hours(
    config: Params, prompts: float, samples: int, max_new_tokens: int, arch: Architecture
) -> float:
    """Busy GPU-hours of one ``vllm.LLM`` sampling ``samples`` responses to each of
    ``prompts`` prompts: each prompt's prefill once (vLLM shares it among its samples) and the
    decoding."""
    gpu = config.runtime.gpu
    prompt = gpu.prompt_fill * config.verl.max_prompt_length
    response = gpu.response_fill * max_new_tokens
    flops = prompts * prompt * 2.0 * arch.parameters
    prefill = flops / (gpu.peak_tflops * 1e12 * gpu.train_mfu)
    concurrent = _vllm_concurrent(config, arch, prompt + response)
    tokens = prompts * samples * response
    return (prefill + decode_seconds(tokens, prompt, response, arch, gpu, concurrent)) / 3600


def evaluation_gpu_hours(config: Params, problems: int, arch: Architecture) -> float:
    """vLLM's sampling of ``evaluate.n`` responses to each of ``problems`` problems."""
    settings = config.evaluate
    return _vllm_gpu_hours(config, problems, settings.n, settings.max_new_tokens, arch)


def assumption_lines(config: Params) -> list[str]:
    gpu = config.runtime.gpu
    return [
        f"assumed (runtime.gpu): {gpu.peak_tflops:g} TFLOP/s bf16 peak per card, forward/backward "
        f"and prefill at {gpu.train_mfu:.0%} of it; decoding per token the larger of a forward "
        f"pass at {gpu.rollout_mfu:.0%} of the peak and its KV cache and weight reads at "
        f"{gpu.decode_bandwidth_share:.0%} of {gpu.memory_bandwidth_gbs:g} GB/s; responses "
        f"{gpu.response_fill:.0%} of the maximum, prompts {gpu.prompt_fill:.0%} of "
        f"verl.max_prompt_length, {gpu.logit_bytes:g} bytes per logit, {gpu.overhead_gib:g} GiB "
        "overhead per card; no dynamic-sampling refills, no attention FLOPs, no length spread "
        "(lower bounds)"
    ]


def run_lines(
    config: Params, method: str, policy: str, model: str, questions: int | None
) -> list[str]:
    """The dry run's ``# memory`` and ``# cost`` lines for one training."""
    arch = architecture(model)
    if arch is None:
        return [f"# memory: not estimated ({model}: no config.json and not a known model)"]
    lines = []
    if config.verl.device == "cuda":
        plan = memory_plan(config, arch)
        lines += [f"# {line}" for line in plan.lines()]
        lines += [f"# DOES NOT FIT: {problem}" for problem in fit_problems(plan, config)]
    if questions is not None:
        cost = training_cost(config, method, policy, questions, arch)
        gpus = config.verl.n_gpus_per_node * config.verl.nnodes
        lines.append(
            f"# cost ({questions:,} questions, {arch.parameters / 1e9:.2f}B parameters): "
            f"{cost.steps} steps, {cost.responses:,} responses, "
            f"{cost.rollout_tokens / 1e6:,.0f}M generated tokens, {cost.gpu_hours:.1f} "
            f"GPU-hours ({cost.gpu_hours / gpus:.1f} h on {gpus} GPUs); disk: checkpoint "
            f"{cost.checkpoint_gb:.0f} GB, work area up to {cost.peak_gb:.0f} GB, outputs "
            f"{cost.outputs_gb:.0f} GB with their DVC cache copy"
        )
        if cost.anchoring_gpu_hours:
            lines.append(
                f"# of which the anchoring diagnostic: {cost.anchoring_gpu_hours:.1f} GPU-hours "
                f"({cost.anchoring_gpu_hours / cost.gpu_hours:.0%}; "
                "train.anchoring_diagnostic: false saves it)"
            )
        lines += [f"# {line}" for line in assumption_lines(config)]
    return lines


def diagnostics_responses(config: Params) -> int:
    """Responses the diagnostics stage samples: its (2N+1) x G per question
    (:func:`tagrpo.config.evaluation.diagnostics_sampling`) for ``diagnostics.questions``
    questions, at each checkpoint of each policy (and the base)."""
    settings = config.diagnostics
    return settings.questions * settings.responses_per_question * _diagnostics_points(config)


def _diagnostics_points(config: Params) -> int:
    """Checkpoints the diagnostics stage probes: each of each policy's, and the base."""
    settings = config.diagnostics
    return len(settings.policies) * len(settings.checkpoints) + int(settings.include_base)


def diagnostics_gpu_hours(config: Params, arch: Architecture) -> float:
    """The diagnostics stage's sampling, as it samples (:func:`diagnostics_responses`): each
    prompt variant's prefill once per question and checkpoint, and its responses."""
    from tagrpo.config.evaluation import diagnostics_sampling

    settings = config.diagnostics
    prompts = settings.questions * _diagnostics_points(config)
    return sum(
        _vllm_gpu_hours(config, prompts, count, settings.max_new_tokens, arch)
        for _, count in diagnostics_sampling(settings.group_size, settings.n_neighbours)
    )


def profile_model(config: Params, root: Path) -> str:
    """The policy a profile's verl runs start from, as :func:`architecture` reads it."""
    if config.verl.model:
        return config.verl.model
    base = config.base_model
    if base.kind == "hub":
        return base.hub.hub_id
    if base.kind == "local":
        return str(Path(root) / base.local.path)
    return str(Path(root) / config.train.model)


@dataclass(frozen=True)
class ProfileCost:
    """Every training and evaluation a profile's DAG runs, and its diagnostics, costed."""

    trainings: list[TrainingCost]
    evaluations: list[tuple[str, float]]  # (stage, GPU-hours)
    diagnostics: float  # GPU-hours

    @property
    def gpu_hours(self) -> float:
        """Busy GPU-hours: what the stages compute, on the cards they use."""
        trained = sum(t.gpu_hours for t in self.trainings)
        return trained + sum(h for _, h in self.evaluations) + self.diagnostics

    def wall_hours(self, gpus: int, vllm_gpus: int) -> float:
        """The DAG's wall hours, one stage at a time: trainings on ``gpus`` cards, the vLLM
        stages on ``vllm_gpus``."""
        trained = sum(t.gpu_hours for t in self.trainings) / gpus
        sampled = (sum(h for _, h in self.evaluations) + self.diagnostics) / vllm_gpus
        return trained + sampled


def profile_cost(
    config: Params,
    stages: Sequence[tuple[str, str, str, float]],
    questions: int,
    problems: int,
    arch: Architecture,
) -> ProfileCost:
    """``stages``: (DVC stage, kind ``train`` | ``evaluate``, method, data multiple) of the
    profile's DAG; ``questions`` in the 1x training set, ``problems`` over the benchmarks."""
    trainings, evaluations = [], []
    for name, kind, method, multiple in stages:
        if kind == "train":
            scaled = scaled_questions(questions, multiple)
            trainings.append(training_cost(config, method, name, scaled, arch))
        else:
            evaluations.append((name, evaluation_gpu_hours(config, problems, arch)))
    return ProfileCost(trainings, evaluations, diagnostics_gpu_hours(config, arch))


def cost_table(cost: ProfileCost, gpus: int, vllm_gpus: int) -> list[str]:
    """``tagrpo plan --cost``'s table (markdown; docs/paper-scale.md holds the paper's): per
    stage the GPUs it uses, its busy GPU-hours and its wall hours on them; then the wall hours
    of the DAG (DVC runs one stage at a time) and what a node of ``gpus`` cards held for all of
    it bills."""
    lines = [
        "| stage | steps | responses | generated tokens | GPUs | GPU-hours (of which anchoring) "
        "| wall hours | work area GB | outputs GB |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for t in cost.trainings:
        anchoring = f" ({t.anchoring_gpu_hours:.1f})" if t.anchoring_gpu_hours else ""
        lines.append(
            f"| {t.policy} | {t.steps} | {t.responses:,} | {t.rollout_tokens / 1e6:,.0f}M "
            f"| {gpus} | {t.gpu_hours:.1f}{anchoring} | {t.gpu_hours / gpus:.1f} "
            f"| {t.peak_gb:.0f} | {t.outputs_gb:.0f} |"
        )
    trained = sum(t.gpu_hours for t in cost.trainings)
    evaluated = sum(hours for _, hours in cost.evaluations)
    lines.append(
        f"| **{len(cost.trainings)} trainings** | | {sum(t.responses for t in cost.trainings):,} "
        f"| {sum(t.rollout_tokens for t in cost.trainings) / 1e6:,.0f}M | {gpus} "
        f"| **{trained:.0f}** | {trained / gpus:.0f} "
        f"| {max((t.peak_gb for t in cost.trainings), default=0):.0f} "
        f"| {sum(t.outputs_gb for t in cost.trainings):.0f} |"
    )
    lines.append(
        f"| {len(cost.evaluations)} evaluations | | | | {vllm_gpus} | {evaluated:.1f} "
        f"| {evaluated / vllm_gpus:.1f} | | |"
    )
    lines.append(
        f"| diagnostics | | | | {vllm_gpus} | {cost.diagnostics:.1f} "
        f"| {cost.diagnostics / vllm_gpus:.1f} | | |"
    )
    wall = cost.wall_hours(gpus, vllm_gpus)
    lines.append(f"| **total** | | | | | **{cost.gpu_hours:.0f}** | **{wall:.0f}** | | |")
    lines.append(
        f"one stage at a time (DVC): {wall:.0f} wall hours; a node of {gpus} GPUs held for all "
        f"of it bills {wall * gpus:,.0f} GPU-hours, {cost.gpu_hours:.0f} of them busy (an "
        f"evaluation or the diagnostics use {vllm_gpus} of the {gpus}: vllm.tensor_parallel_size)"
    )
    return lines
