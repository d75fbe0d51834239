"""GPU check of the paper path's memory preflight (tagrpo/verl_ext/cost.py) on one card.

The preflight refuses a verl run whose memory per card does not fit, from arithmetic: the FSDP
actor's state (16 bytes per parameter), a micro-batch's logits (``runtime.gpu.logit_bytes``
per token and vocabulary entry) and activations under gradient checkpointing, and an
overhead per card. This script builds a Qwen3-1.7B-shaped model (random weights: nothing is
downloaded) on the GPU and measures each term as verl's FSDP actor meets it (bf16 compute on
fp32 weights, AdamW, gradient checkpointing, 8 sequences of 512 + 3,072 tokens), then prints
PASS/FAIL lines and writes ``$OUT/gpu_paper_path_check.json``:

* the parameter count of cost.Architecture equals the real model's;
* the actor's state after an optimizer step is 16 bytes per parameter (within 2%);
* an update's peak above that state is covered by the preflight's logits + activations, with
  the log-probabilities taken by a fused cross-entropy (what verl's flash-attn kernel does);
  the plain fp32 log-softmax (verl without flash-attn) is measured too, for information;
* a no-grad log-prob pass (with the entropy, as verl's old-log-prob pass) likewise;
* memory outside PyTorch's tensors (CUDA context, allocator slack) fits ``overhead_gib``;
* the achieved share of the card's bf16 peak in the update (the cost table assumes 35%).

Needs: a CUDA GPU with at least 64 GB (an H100 80 GB or an H200), torch with CUDA and a
transformers that has Qwen3 (>= 4.51; 5.x). Nothing else: the repository is put on sys.path
for ``tagrpo/verl_ext/cost.py``, which imports only the standard library (the project's .venv
is not used). Usage, from the repository root:

    python benchmarks/gpu_paper_path_check.py [--micro-batch 8] [--peak-tflops 989]

It takes about 2 minutes on an H100 (model building included); exit status 1 if any check
fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

GIB = 2**30
PROMPT, RESPONSE = 512, 3072  # Appendix B
results: dict[str, object] = {}
failures: list[str] = []


def emit(name: str, ok: bool | None, detail: dict) -> None:
    """One PASS / FAIL / INFO line, and the JSON file so far."""
    label = "INFO" if ok is None else ("PASS" if ok else "FAIL")
    if ok is False:
        failures.append(name)
    results[name] = {"result": label, **detail}
    print(f"{label} {name}: {json.dumps(detail)}", flush=True)
    out = Path(os.environ.get("OUT", "/tmp"))
    (out / "gpu_paper_path_check.json").write_text(json.dumps(results, indent=1))


def plan_config(micro_batch: int, card_gib: float):
    """The attributes cost.memory_plan reads, as the paper profile sets them, on one GPU."""
    return SimpleNamespace(
        verl=SimpleNamespace(
            n_gpus_per_node=1,
            nnodes=1,
            max_prompt_length=PROMPT,
            gpu_memory_utilization=0.6,
            tensor_parallel_size=1,
            micro_batch_size_per_gpu=micro_batch,
            log_prob_micro_batch_size_per_gpu=micro_batch,
            gradient_checkpointing=True,
            ref_param_offload=True,
        ),
        train=SimpleNamespace(max_new_tokens=RESPONSE),
        runtime=SimpleNamespace(
            gpu=SimpleNamespace(memory_gib=card_gib, overhead_gib=3.0, logit_bytes=6.0)
        ),
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--micro-batch", type=int, default=8, help="sequences per micro-batch")
    parser.add_argument("--peak-tflops", type=float, default=989.0, help="the card's bf16 peak")
    args = parser.parse_args()

    import torch
    import transformers

    from tagrpo.verl_ext.cost import KNOWN_MODELS, memory_plan

    if not torch.cuda.is_available():
        emit("cuda", False, {"error": "no CUDA device"})
        return 1
    device = torch.device("cuda")
    props = torch.cuda.get_device_properties(0)
    card = props.total_memory / GIB
    emit(
        "device",
        None,
        {
            "gpu": props.name,
            "memory_gib": round(card, 2),
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "transformers": transformers.__version__,
        },
    )
    arch = KNOWN_MODELS["Qwen/Qwen3-1.7B"]
    plan = memory_plan(plan_config(args.micro_batch, card), arch)

    config = transformers.Qwen3Config(
        hidden_size=arch.hidden,
        intermediate_size=arch.intermediate,
        num_hidden_layers=arch.layers,
        num_attention_heads=arch.heads,
        num_key_value_heads=arch.kv_heads,
        head_dim=arch.head_dim,
        vocab_size=arch.vocab,
        tie_word_embeddings=arch.tied,
        max_position_embeddings=PROMPT + RESPONSE,
        use_cache=False,
    )
    started = time.perf_counter()
    with device:
        model = transformers.AutoModelForCausalLM.from_config(
            config, dtype=torch.float32, attn_implementation="sdpa"
        )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()
    parameters = sum(p.numel() for p in model.parameters())
    emit(
        "parameters",
        parameters == arch.parameters,
        {
            "model": parameters,
            "cost.Architecture": arch.parameters,
            "build_s": round(time.perf_counter() - started, 1),
        },
    )

    # The actor's state: fp32 weights, gradients and AdamW's two moments.
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    ids = torch.randint(0, arch.vocab, (1, 16), device=device)
    with torch.autocast("cuda", dtype=torch.bfloat16):
        model(input_ids=ids).logits.float().mean().backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=False)  # verl keeps the gradients between steps
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    state = torch.cuda.memory_allocated()
    per_parameter = state / parameters
    emit(
        "actor_state_bytes_per_parameter",
        abs(per_parameter - 16) / 16 < 0.02,
        {"measured": round(per_parameter, 3), "preflight": 16, "gib": round(state / GIB, 2)},
    )

    tokens = args.micro_batch * (PROMPT + RESPONSE)
    ids = torch.randint(0, arch.vocab, (args.micro_batch, PROMPT + RESPONSE), device=device)

    def update(kind: str) -> tuple[float, float]:
        """Peak GiB above the actor's state, and seconds, of one forward/backward pass."""
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.synchronize()
        began = time.perf_counter()
        with torch.autocast("cuda", dtype=torch.bfloat16):  # FSDP's bf16 compute
            logits = model(input_ids=ids).logits[:, :-1]  # bf16
        labels = ids[:, 1:]
        if kind == "fused":  # on the bf16 logits, no fp32 copy (verl's flash-attn kernel)
            log_probs = -torch.nn.functional.cross_entropy(
                logits.reshape(-1, arch.vocab), labels.reshape(-1), reduction="none"
            )
        else:  # log-softmax in fp32, then gather
            log_probs = torch.log_softmax(logits.float(), dim=-1)
            log_probs = log_probs.gather(-1, labels.unsqueeze(-1)).squeeze(-1)
        log_probs.float().mean().backward()
        torch.cuda.synchronize()
        seconds = time.perf_counter() - began
        del logits, log_probs
        peak = (torch.cuda.max_memory_allocated() - state) / GIB
        optimizer.zero_grad(set_to_none=False)
        return peak, seconds

    estimate = plan.update_logits + plan.activations
    for kind in ("fused", "fp32_log_softmax"):
        try:
            peak, seconds = update(kind)
            flops = 6 * parameters * tokens * 4 / 3  # forward, backward, recomputed forward
            detail = {
                "micro_batch": args.micro_batch,
                "tokens": tokens,
                "peak_above_state_gib": round(peak, 2),
                "preflight_logits_plus_activations_gib": round(estimate, 2),
                "bytes_per_logit_entry_at_most": round(peak * GIB / (tokens * arch.vocab), 2),
                "seconds": round(seconds, 2),
                "mfu": round(flops / seconds / (args.peak_tflops * 1e12), 3),
            }
            emit(f"update_peak/{kind}", (peak <= estimate) if kind == "fused" else None, detail)
        except torch.OutOfMemoryError:
            emit(f"update_peak/{kind}", False if kind == "fused" else None, {"error": "OOM"})
            torch.cuda.empty_cache()

    # The old-log-prob pass: no gradients, log-probs and the entropy.
    try:
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
        with torch.no_grad():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(input_ids=ids).logits[:, :-1]  # bf16
            # verl's entropy_from_logits on the logits' dtype, then the log-probs
            entropy = torch.logsumexp(logits, -1) - (torch.softmax(logits, -1) * logits).sum(-1)
            log_probs = -torch.nn.functional.cross_entropy(
                logits.reshape(-1, arch.vocab), ids[:, 1:].reshape(-1), reduction="none"
            )
        torch.cuda.synchronize()
        del logits, log_probs, entropy
        peak = (torch.cuda.max_memory_allocated() - state) / GIB
        emit(
            "log_prob_peak",
            peak <= plan.log_prob_logits,
            {
                "peak_above_state_gib": round(peak, 2),
                "preflight_logits_gib": round(plan.log_prob_logits, 2),
            },
        )
    except torch.OutOfMemoryError:
        emit("log_prob_peak", False, {"error": "OOM"})
        torch.cuda.empty_cache()

    # What the card holds beyond PyTorch's tensors at the peak: CUDA context, allocator slack.
    free, total = torch.cuda.mem_get_info()
    used = (total - free) / GIB
    outside = used - torch.cuda.memory_allocated() / GIB
    context = used - torch.cuda.memory_reserved() / GIB
    emit(
        "overhead",
        context <= plan.overhead,
        {
            "cuda_context_and_other_gib": round(context, 2),
            "reserved_not_allocated_gib": round(outside - context, 2),
            "preflight_overhead_gib": plan.overhead,
        },
    )
    print("FAILED: " + ", ".join(failures) if failures else "ALL PASSED", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Exception:
        emit("script", False, {"error": traceback.format_exc()[-3000:]})
        sys.exit(1)
