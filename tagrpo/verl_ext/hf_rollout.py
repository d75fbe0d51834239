"""The ``hf`` rollout engine: verl's rollout server protocol served by transformers on the CPU.

verl 0.9.1 builds rollout engines only from its registries (``RolloutReplicaRegistry`` and the
private ``_ROLLOUT_REGISTRY`` of server adapters), which hold vLLM, SGLang and TRT-LLM; none of
them serves on a CPU here (see ``docs/paper-scale.md``). This module adds ``hf``:

* :class:`HFRolloutServer`, a Ray actor holding a transformers causal LM. verl's agent loops
  call ``generate(prompt_ids=..., sampling_params=...)`` on it exactly as on vLLM's server and
  get a ``TokenOutput`` (response token ids, the stop token included; per-token log-probs when
  ``logprobs`` is asked for). Concurrent requests are batched (left-padded, one ``generate``
  call per batch of equal sampling parameters), since verl issues one request per session.
* :class:`HFRolloutReplica` (``RolloutReplica``): starts one server per replica, colocated with
  the actor workers (verl's hybrid mode, the sync trainer's layout).
* :class:`HFServerAdapter` (``BaseRollout``): lives in the actor worker. verl's weight sync
  (``checkpoint_engine.backend: naive``) hands it the trained weights after every step; it
  gathers them to full CPU tensors and loads them into the server, which from then on samples
  with them and tags every output with the step of its weights (``extra_fields``).

What it does not reproduce: vLLM's sampling kernels and numerics, its memory management
(sleep/wake are no-ops here) and its throughput. Everything around the engine (agent loops,
TransferQueue, rewards, old/reference log-probs, the update) is verl's own code.

Registered on import (the launcher lists this module in ``VERL_USE_EXTERNAL_MODULES`` for
``verl.rollout_engine: hf``); depends on a private verl registry: the CPU tests fail
loudly on a verl upgrade.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import ray
import torch
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
from verl.workers.rollout import base as rollout_base
from verl.workers.rollout.base import BaseRollout
from verl.workers.rollout.replica import (
    RolloutMode,
    RolloutReplica,
    RolloutReplicaRegistry,
    TokenOutput,
)

from tagrpo.backends.hf import left_padded
from tagrpo.verl_ext import WEIGHTS_STEP_FIELD

ENGINE_NAME = "hf"
SERVER_PREFIX = "tagrpo_hf_server"
logger = logging.getLogger(__name__)


def server_name(replica_rank: int) -> str:
    """The Ray actor name of a replica's server (the adapter looks it up by name)."""
    return f"{SERVER_PREFIX}_{replica_rank}"


def _plain(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


@dataclass(frozen=True)
class Sampling:
    """The sampling parameters of a request, as verl's agent loops send them."""

    temperature: float
    top_p: float
    top_k: int | None
    max_tokens: int
    logprobs: bool

    @classmethod
    def from_request(cls, params: dict[str, Any], default_max_tokens: int) -> Sampling:
        unsupported = float(_plain(params.get("repetition_penalty", 1.0)))
        if unsupported != 1.0:
            raise ValueError(f"the hf rollout engine has no repetition_penalty ({unsupported})")
        top_k = int(_plain(params.get("top_k", -1)) or -1)
        max_tokens = params.get("max_tokens", params.get("max_new_tokens", default_max_tokens))
        return cls(
            temperature=float(_plain(params.get("temperature", 1.0))),
            top_p=float(_plain(params.get("top_p", 1.0))),
            top_k=top_k if top_k > 0 else None,
            max_tokens=int(_plain(max_tokens)),
            logprobs=bool(_plain(params.get("logprobs", False))),
        )


@dataclass
class _Request:
    prompt_ids: list[int]
    sampling: Sampling
    future: asyncio.Future = field(repr=False)


def sample_batch(
    model: Any,
    prompts: list[list[int]],
    sampling: Sampling,
    pad_id: int,
    eos_ids: set[int],
) -> list[tuple[list[int], list[float] | None]]:
    """One ``generate`` call over left-padded prompts: (token ids, log-probs) per prompt.

    The token ids end with the stop token when generation stopped (vLLM's convention); the
    log-probs are those of each sampled token under the model's unprocessed next-token
    distribution (vLLM's default ``logprobs``).
    """
    input_ids, attention = left_padded(prompts, pad_id)
    width = input_ids.shape[1]
    greedy = sampling.temperature <= 0
    with torch.no_grad():
        output = model.generate(
            input_ids=input_ids,
            attention_mask=attention,
            do_sample=not greedy,
            temperature=None if greedy else sampling.temperature,
            top_p=None if greedy else sampling.top_p,
            top_k=None if greedy else sampling.top_k,
            max_new_tokens=sampling.max_tokens,
            pad_token_id=pad_id,
            eos_token_id=sorted(eos_ids),
            return_dict_in_generate=True,
            output_logits=sampling.logprobs,
        )
    new_tokens = output.sequences[:, width:]
    step_log_probs = None
    if sampling.logprobs:
        logits = torch.stack(list(output.logits), dim=1).float()  # [B, T, V]
        chosen = new_tokens[:, : logits.shape[1]].unsqueeze(-1)
        step_log_probs = torch.log_softmax(logits, dim=-1).gather(-1, chosen).squeeze(-1)
    results = []
    for row, tokens in enumerate(new_tokens.tolist()):
        stop = next((i for i, token in enumerate(tokens) if token in eos_ids), None)
        kept = tokens if stop is None else tokens[: stop + 1]
        log_probs = None
        if step_log_probs is not None:
            log_probs = [float(x) for x in step_log_probs[row, : len(kept)].tolist()]
        results.append((kept, log_probs))
    return results


def batch_seed(seed: int, weights_step: int | None, batch: int) -> int:
    """The sampling seed of the ``batch``-th batch drawn since the weights of ``weights_step``
    were loaded (None: the initial weights): a function of the step, not of how many batches
    this server drew before, so a run resumed from a checkpoint draws what it would have."""
    step = -1 if weights_step is None else int(weights_step)
    return (seed * 1_000_003 + (step + 1) * 10_007 + batch) % 2**63


class HFRolloutServer:
    """verl's token-in/token-out rollout server over a transformers model (a Ray actor)."""

    def __init__(self, config: Any, model_config: Any, replica_rank: int) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config
        self.replica_rank = replica_rank
        threads = int(os.environ.get("TAGRPO_HF_ROLLOUT_THREADS", "0"))
        if threads > 0:
            torch.set_num_threads(threads)
        path = str(model_config.path)
        attention = (model_config.get("override_config") or {}).get("attn_implementation", "sdpa")
        self.model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32, attn_implementation=attention
        ).eval()
        tokenizer = AutoTokenizer.from_pretrained(path)
        self.pad_id = tokenizer.pad_token_id
        if self.pad_id is None:
            self.pad_id = tokenizer.eos_token_id
        self.eos_ids = self._stop_ids(tokenizer)
        self.seed = int(config.seed)
        self.max_batch = max(1, int(config.max_num_seqs))
        self.batches = 0
        self.batches_since_update = 0
        self.weights_step: int | None = None  # None: the initial weights from `path`
        self.weight_updates = 0
        self.pending: list[_Request] = []
        self.flushing: asyncio.Task | None = None
        # One thread: generation and weight loading never overlap.
        self.executor = ThreadPoolExecutor(max_workers=1)

    def _stop_ids(self, tokenizer: Any) -> set[int]:
        ids = {tokenizer.eos_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        if isinstance(configured, int):
            ids.add(configured)
        elif configured:
            ids.update(int(x) for x in configured)
        ids.discard(None)
        if not ids:
            raise ValueError("the model has no end-of-sequence token to stop generation")
        return ids

    def ready(self) -> dict[str, Any]:
        return {"replica_rank": self.replica_rank, "parameters": self.model.num_parameters()}

    def stats(self) -> dict[str, Any]:
        """Counters for tests: batches generated, weight updates, step of the weights held."""
        return {
            "batches": self.batches,
            "weight_updates": self.weight_updates,
            "weights_step": self.weights_step,
        }

    async def generate(
        self,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        request_id: str,
        image_data: Any = None,
        video_data: Any = None,
        audio_data: Any = None,
        mm_processor_kwargs: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        if image_data or video_data or audio_data:
            raise ValueError("the hf rollout engine serves text-only models")
        ids = [int(x) for x in prompt_ids]
        budget = self.config.prompt_length + self.config.response_length - len(ids)
        default = max(1, min(self.config.response_length, budget))
        sampling = Sampling.from_request(dict(sampling_params), default)
        loop = asyncio.get_running_loop()
        request = _Request(ids, sampling, loop.create_future())
        self.pending.append(request)
        if self.flushing is None or self.flushing.done():
            self.flushing = loop.create_task(self._flush())
        tokens, log_probs = await request.future
        return TokenOutput(
            token_ids=tokens,
            log_probs=log_probs,
            stop_reason="completed",
            extra_fields={"global_steps": self.weights_step, WEIGHTS_STEP_FIELD: self.weights_step},
        )

    async def _flush(self) -> None:
        loop = asyncio.get_running_loop()
        await asyncio.sleep(0.05)  # the sessions of a batch arrive within a few milliseconds
        while self.pending:
            sampling = self.pending[0].sampling
            batch = [r for r in self.pending if r.sampling == sampling][: self.max_batch]
            chosen = {id(r) for r in batch}
            self.pending = [r for r in self.pending if id(r) not in chosen]
            # Seeded per (weights, batch since they were loaded): a rerun with the same arrival
            # order samples the same tokens, and so does a run resumed from a checkpoint.
            seed = batch_seed(self.seed, self.weights_step, self.batches_since_update)
            self.batches += 1
            self.batches_since_update += 1
            try:
                results = await loop.run_in_executor(
                    self.executor, self._sample, [r.prompt_ids for r in batch], sampling, seed
                )
            except Exception as error:  # every waiting session fails with the cause
                for request in batch:
                    if not request.future.done():
                        request.future.set_exception(error)
                continue
            for request, result in zip(batch, results, strict=True):
                if not request.future.done():
                    request.future.set_result(result)

    def _sample(self, prompts: list[list[int]], sampling: Sampling, seed: int):
        torch.manual_seed(seed)
        return sample_batch(self.model, prompts, sampling, self.pad_id, self.eos_ids)

    async def update_weights(self, state: dict[str, torch.Tensor], global_steps: int | None) -> int:
        """Load the trained weights (full tensors, HF names); returns how many were loaded."""
        loop = asyncio.get_running_loop()
        loaded = await loop.run_in_executor(self.executor, self._load, state)
        self.weights_step = None if global_steps is None else int(global_steps)
        self.weight_updates += 1
        self.batches_since_update = 0
        return loaded

    def _load(self, state: dict[str, torch.Tensor]) -> int:
        result = self.model.load_state_dict(state, strict=False)
        if result.unexpected_keys:
            raise ValueError(f"weights the rollout model does not have: {result.unexpected_keys}")
        tied = set()
        if getattr(self.model.config, "tie_word_embeddings", False):
            tied = {"lm_head.weight"}
        missing = set(result.missing_keys) - tied
        if missing:
            raise ValueError(f"the weight sync did not send {sorted(missing)}")
        if tied:
            self.model.tie_weights()
        return len(state)

    # verl's server life-cycle: memory is host memory here, nothing to release or resume.
    async def wake_up(self, tags: list[str] | None = None) -> None:
        return None

    async def sleep(self) -> None:
        return None

    async def clear_kv_cache(self) -> None:
        return None

    async def release_kv_cache(self) -> None:
        return None

    async def resume_kv_cache(self) -> None:
        return None

    async def wait_for_requests_to_drain(self) -> None:
        while self.pending or (self.flushing is not None and not self.flushing.done()):
            await asyncio.sleep(0.01)

    async def abort_all_requests(self, reject_request: bool = False, **kwargs: Any) -> dict:
        # The sync trainer never aborts: its rollouts finish before training starts.
        return {"aborted_count": 0, "request_ids": []}

    async def abort_request(self, request_id: str, **kwargs: Any) -> dict:
        return {"aborted": False, "request_id": request_id}

    async def resume_generation(self) -> None:
        return None

    async def set_global_steps(self, global_steps: int) -> None:
        return None

    async def start_profile(self, **kwargs: Any) -> None:
        return None

    async def stop_profile(self) -> None:
        return None


class HFRolloutReplica(RolloutReplica):
    """One :class:`HFRolloutServer` per replica, colocated with the actor workers."""

    async def launch_servers(self) -> None:
        if self.rollout_mode != RolloutMode.HYBRID:
            raise NotImplementedError(
                f"the hf rollout engine runs colocated with the actor (hybrid mode), not "
                f"{self.rollout_mode}"
            )
        if not self.workers:
            raise RuntimeError("the hf rollout replica has no actor worker to sit next to")
        node = await self.workers[0].__ray_call__.remote(
            lambda worker: ray.get_runtime_context().get_node_id()
        )
        name = server_name(self.replica_rank)
        server = (
            ray.remote(HFRolloutServer)
            .options(
                name=name,
                num_cpus=1,
                max_concurrency=self.max_concurrency,
                scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=node, soft=False),
            )
            .remote(self.config, self.model_config, self.replica_rank)
        )
        await server.ready.remote()
        self.servers = [server]
        self._server_handle = server
        self._server_address = f"{ENGINE_NAME}://{name}"


class HFServerAdapter(BaseRollout):
    """In the actor worker: sends the trained weights to the replica's :class:`HFRolloutServer`."""

    def __init__(
        self,
        config: Any,
        model_config: Any,
        device_mesh: Any,
        replica_rank: int = -1,
        **kwargs: Any,
    ) -> None:
        super().__init__(config, model_config, device_mesh)
        rank = int(os.environ.get("RANK", "0"))
        world = (
            self.config.tensor_model_parallel_size
            * self.config.data_parallel_size
            * self.config.pipeline_model_parallel_size
        )
        self.replica_rank = rank // world if replica_rank == -1 else replica_rank
        self.is_leader_rank = rank % world == 0
        self.server_handle: Any = None

    async def resume(self, tags: list[str]) -> None:
        return None

    async def release(self) -> None:
        return None

    async def update_weights(
        self,
        weights: Iterable[tuple[str, torch.Tensor]],
        wire_format: str = "named_tensors",
        peft_config: Any = None,
        global_steps: int | None = None,
        **kwargs: Any,
    ) -> None:
        if wire_format != "named_tensors":
            raise NotImplementedError(f"the hf engine takes full tensors, not {wire_format}")
        if peft_config is not None:
            raise NotImplementedError("the hf rollout engine does not serve LoRA adapters")
        # Every rank consumes the generator (gathering sharded tensors is collective); the
        # replica's first rank sends.
        state = {name: tensor.detach().to("cpu").clone() for name, tensor in weights}
        if not self.is_leader_rank:
            return None
        if self.server_handle is None:
            self.server_handle = ray.get_actor(server_name(self.replica_rank))
        await self.server_handle.update_weights.remote(state, global_steps)
        return None


def _load_replica() -> type[RolloutReplica]:
    return HFRolloutReplica


def register() -> None:
    """Put ``hf`` in verl's replica and server-adapter registries (idempotent)."""
    if not hasattr(rollout_base, "_ROLLOUT_REGISTRY"):
        raise RuntimeError("verl's _ROLLOUT_REGISTRY is gone: the hf engine targets verl==0.9.1")
    RolloutReplicaRegistry.register(ENGINE_NAME, _load_replica)
    rollout_base._ROLLOUT_REGISTRY[(ENGINE_NAME, "async")] = f"{__name__}.HFServerAdapter"


register()
