"""The preflight of a verl run (tagrpo/verl_ext/cost.py): memory per card against the card,
refused naming the setting; GPU-hours, tokens and disk per training and per profile, the same
arithmetic as docs/paper-scale.md's cost table (kept equal here)."""

from __future__ import annotations

import json
import re

import pytest
from verl_helpers import ROOT, paper_config

from tagrpo.config.params import config_with
from tagrpo.pipeline.plan import render_cost, render_models
from tagrpo.pipeline.rerun import RerunRequest
from tagrpo.verl_ext.cost import (
    GIB,
    KNOWN_MODELS,
    Architecture,
    architecture,
    check_fits,
    evaluation_gpu_hours,
    memory_plan,
    training_cost,
)

QWEN_1_7B, QWEN_4B = "Qwen/Qwen3-1.7B", "Qwen/Qwen3-4B"
# The paper's training set (MATH train, 7,498 questions) and the six benchmarks' problems
# (AMC23 40, OlympiadBench 675, AIME24 30, AIME25 30, Minerva 272, GPQA-Diamond 198).
MATH_QUESTIONS, BENCHMARK_PROBLEMS = 7498, 1245


def test_parameter_counts_equal_the_published_ones() -> None:
    counts = {name: arch.parameters for name, arch in KNOWN_MODELS.items()}
    assert counts == {
        QWEN_1_7B: 1_720_574_976,
        QWEN_4B: 4_022_468_096,
        "meta-llama/Llama-3.2-1B-Instruct": 1_235_814_400,
        "meta-llama/Llama-3.2-3B-Instruct": 3_212_749_824,
    }


def test_a_model_folder_is_read_from_its_config(tmp_path) -> None:
    config = {
        "model_type": "llama",
        "hidden_size": 128,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "intermediate_size": 256,
        "vocab_size": 512,
        "tie_word_embeddings": True,
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert architecture(str(tmp_path)) == Architecture(128, 2, 4, 2, 32, 256, 512, True)
    assert architecture("someone/unknown-model") is None


def test_memory_per_card_of_the_paper_profile() -> None:
    """Qwen3-1.7B on 4 H100s: the actor's fp32 state (16 bytes per parameter) sharded over 4,
    vLLM's 0.6 of 79.6 GiB, the logits of 8 x 3,584 tokens x 151,936 at 6 bytes."""
    plan = memory_plan(paper_config(), KNOWN_MODELS[QWEN_1_7B])
    assert plan.actor_state == 16 * 1_720_574_976 / 4 / GIB
    assert plan.vllm == pytest.approx(0.6 * 79.6)
    assert plan.update_logits == 8 * (512 + 3072) * 151_936 * 6 / GIB
    assert round(plan.rollout, 1) == 57.2 and round(plan.update, 1) == 39.2
    assert check_fits(paper_config(), QWEN_1_7B) == plan


def test_a_run_that_does_not_fit_is_refused_naming_the_setting() -> None:
    """The issue's case: 0.8 of the card for vLLM with a 4B model's actor state on it."""
    config = config_with({"verl.gpu_memory_utilization": 0.8}, paper_config())
    with pytest.raises(ValueError) as refused:
        check_fits(config, QWEN_4B)
    message = str(refused.value)
    assert "verl.gpu_memory_utilization = 0.8: the rollout phase needs 81.7 GiB" in message
    assert "runtime.gpu.memory_gib = 79.6" in message and "at most 0.77 fits" in message
    assert check_fits(config, QWEN_1_7B) is not None  # 73.1 GiB: the 1.7B model fits
    assert check_fits(paper_config(), QWEN_4B) is not None  # the profile's 0.6 fits
    wide = config_with({"verl.micro_batch_size_per_gpu": 32}, paper_config())
    with pytest.raises(
        ValueError, match=r"verl\.micro_batch_size_per_gpu = 32: .* at most 18 fits"
    ):
        check_fits(wide, QWEN_1_7B)
    # Not checked: a CPU run, and a model whose architecture is not known.
    assert (
        check_fits(
            config_with({"verl.device": "cpu", "verl.rollout_engine": "hf"}, paper_config()),
            QWEN_4B,
        )
        is None
    )
    assert check_fits(config, "someone/unknown-model") is None


def test_training_cost_counts_steps_responses_and_the_anchoring_pass() -> None:
    config, arch = paper_config(), KNOWN_MODELS[QWEN_1_7B]
    grpo = training_cost(config, "grpo", "grpo-s0", MATH_QUESTIONS, arch)
    ta = training_cost(config, "ta_grpo", "ta_grpo-s0", MATH_QUESTIONS, arch)
    # 29 steps of 256 questions per epoch (verl drops the last partial batch), 2 epochs.
    assert grpo.steps == ta.steps == 58
    assert grpo.responses == 58 * 256 * 8 and ta.responses == 58 * 256 * 32
    assert grpo.anchoring_gpu_hours == 0.0 and ta.anchoring_gpu_hours > 0.0
    off = config_with({"train.anchoring_diagnostic": False}, config)
    without = training_cost(off, "ta_grpo", "ta_grpo-s0", MATH_QUESTIONS, arch)
    assert without.gpu_hours == pytest.approx(ta.gpu_hours - ta.anchoring_gpu_hours)
    # Exports: 4 fp32 checkpoints of 4 bytes per parameter (the final policy is linked).
    assert ta.exports_gb == 4 * 4 * 1_720_574_976 / 1e9


def test_the_paper_profile_runs_14_trainings_and_15_evaluations() -> None:
    """The count docs/paper-scale.md used to get wrong ("8 policies per model"): the eight
    methods, six data-scaling runs; their evaluations and the base model's."""
    text = render_cost(ROOT, RerunRequest(profile="paper"), MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    assert "| **14 trainings** |" in text and "| 15 evaluations |" in text
    assert len(re.findall(r"^\| train(_scaling)?@", text, re.M)) == 14


def _docs_table(marker: str) -> str:
    text = (ROOT / "docs" / "paper-scale.md").read_text()
    start = text.index(f"<!-- {marker} -->") + len(f"<!-- {marker} -->\n")
    return text[start : text.index(f"<!-- /{marker} -->")].strip("\n")


def test_the_docs_cost_tables_are_the_plan_commands_output() -> None:
    """docs/paper-scale.md shows `tagrpo plan --cost --profile paper --questions 7498
    --problems 1245` verbatim, and with `--models` (a column per base model)."""
    shown = render_cost(ROOT, RerunRequest(profile="paper"), MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    assert _docs_table("cost:paper") == "```\n" + shown + "\n```"
    models = render_models(
        ROOT, RerunRequest(profile="paper"), list(KNOWN_MODELS), MATH_QUESTIONS, BENCHMARK_PROBLEMS
    )
    assert _docs_table("cost:models") == models
    api = [line for line in shown.splitlines() if line.startswith("API ")]
    assert len(api) == 2 and _docs_table("cost:api") == "```\n" + "\n".join(api) + "\n```"


def test_an_evaluation_is_one_cards_work_and_decoding_is_bound_by_memory() -> None:
    """The evaluation cost the issue doubted: one vllm.LLM at tensor parallel 1 runs on one
    card (its wall hours are its GPU-hours, not a quarter of them), and decoding Qwen3-1.7B's
    3k-token responses is bound by its KV-cache reads, not by 10% of the peak FLOPs."""
    config, arch = paper_config(), KNOWN_MODELS[QWEN_1_7B]
    gpu = config.runtime.gpu
    per_token_compute = 2 * arch.parameters / (gpu.peak_tflops * 1e12 * gpu.rollout_mfu)
    hours = evaluation_gpu_hours(config, BENCHMARK_PROBLEMS, arch)
    tokens = BENCHMARK_PROBLEMS * 64 * gpu.response_fill * 3072
    assert hours > 1.5 * tokens * per_token_compute / 3600  # memory-bound: well above compute
    # The KV cache read per token (112 KiB x its mean context) over the bandwidth, at least.
    context = gpu.prompt_fill * 512 + gpu.response_fill * 3072 / 2
    floor = tokens * arch.kv_bytes_per_token * context
    floor /= gpu.memory_bandwidth_gbs * 1e9 * gpu.decode_bandwidth_share
    assert hours > floor / 3600
    text = render_cost(ROOT, RerunRequest(profile="paper"), MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    row = re.search(r"^\| 15 evaluations \| \| \| \| (\d+) \| ([\d.]+) \| ([\d.]+) \|", text, re.M)
    assert row and row.group(1) == "1" and row.group(2) == row.group(3)  # one card: wall = busy
    # With the engine over 4 cards: about the same work (a larger KV cache batches more
    # sequences per weight read: a little less), a quarter of the wall time.
    wide = config_with({"vllm.tensor_parallel_size": 4}, config)
    spread = evaluation_gpu_hours(wide, BENCHMARK_PROBLEMS, arch)
    assert 0.9 * hours < spread <= hours
