"""``runtime``: how a run executes, never what it computes.

No stage lists this section in its DVC params (``tests/test_dvc_deps.py`` keeps it so), so
changing a key here reruns nothing: a setting belongs here only if every output of every stage
comes out the same whatever its value (docs/design.md, "What a stage depends on").
"""

from __future__ import annotations

from tagrpo.plumbing.config_model import ConfigModel, Field


class VerlRuntimeSettings(ConfigModel):
    """Checkpoints, resuming and worker counts of a verl run (``train.backend: verl``)."""

    resume: bool = Field(
        description="a rerun continues the same run (same code, data and params: the stage's "
        "DVC deps) from its last checkpoint, keeping its exports; false: start afresh"
    )
    checkpoint_every: int = Field(
        ge=1,
        description="a resumable checkpoint every N steps (and at each train.checkpoints step)",
    )
    max_checkpoints: int = Field(
        ge=1, description="resumable checkpoints kept (the Hugging Face exports are all kept)"
    )
    checkpoint_dir: str = Field(
        min_length=1,
        description="each run's work area <dir>/<policy>: checkpoints, exports, dumps, metrics "
        "(on a shared file system for multi-node runs)",
    )
    grading_workers: int = Field(ge=1, description="grading processes per verl reward worker")


class GPUSettings(ConfigModel):
    """The cards a verl run is planned for and the cost model's assumptions: read by the
    preflight only (tagrpo/verl_ext/cost.py: ``python -m stages.train --dry-run``, ``tagrpo
    plan --cost``, and the train stage before verl starts)."""

    memory_gib: float = Field(
        gt=0, le=4096, description="memory per card, GiB (an H100 80 GB: 79.6)"
    )
    overhead_gib: float = Field(
        ge=0, description="per card: CUDA context, NCCL buffers, allocator fragmentation"
    )
    logit_bytes: float = Field(
        gt=0,
        le=32,
        description="bytes per (token, vocabulary entry) of a micro-batch's logits pass "
        "(bf16 logits + an fp32 copy for the log-softmax: 6)",
    )
    peak_tflops: float = Field(gt=0, description="dense bf16 peak per card, TFLOP/s")
    train_mfu: float = Field(
        gt=0, le=1, description="share of the peak the forward/backward passes reach"
    )
    rollout_mfu: float = Field(
        gt=0, le=1, description="share of the peak vLLM decoding reaches when compute-bound"
    )
    memory_bandwidth_gbs: float = Field(
        gt=0, description="memory bandwidth per card, GB/s (an H100 SXM: 3,350; an H200: 4,800)"
    )
    decode_bandwidth_share: float = Field(
        gt=0,
        le=1,
        description="share of the bandwidth vLLM's decoding reaches reading the weights and "
        "the KV cache (decoding long responses is bound by it)",
    )
    host_per_gpu_gib: float = Field(
        ge=0,
        description="host RAM per GPU for verl's worker and rollout processes (Python, torch, "
        "CUDA and NCCL host memory), GiB",
    )
    response_fill: float = Field(
        gt=0, le=1, description="mean response length / the maximum (train.max_new_tokens)"
    )
    prompt_fill: float = Field(
        gt=0, le=1, description="mean prompt length / verl.max_prompt_length"
    )


class RuntimeSettings(ConfigModel):
    verl: VerlRuntimeSettings
    gpu: GPUSettings
