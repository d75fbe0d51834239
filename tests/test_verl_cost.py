"""The preflight of a verl run (tagrpo/verl_ext/cost.py): memory per card against the card,
refused naming the setting; GPU-hours, tokens and disk per training and per profile, the same
arithmetic as docs/paper-scale.md's cost table (kept equal here)."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from pathlib import Path

import pytest
from verl_helpers import MODEL, ROOT, paper_config

from tagrpo.backends.base import SamplingParams
from tagrpo.config.params import config_with, load_config
from tagrpo.data.schema import Question, write_questions
from tagrpo.pipeline.cost_quotes import plan_cost
from tagrpo.pipeline.plan import cost_plan, render_cost, render_models
from tagrpo.pipeline.rerun import RerunRequest
from tagrpo.verl_ext.cost import (
    GIB,
    KNOWN_MODELS,
    Architecture,
    architecture,
    check_fits,
    diagnostics_gpu_hours,
    diagnostics_responses,
    evaluation_gpu_hours,
    memory_plan,
    training_cost,
    training_questions,
)
from tagrpo.verl_ext.dry_run import preflight_lines

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


def _quoted_blocks() -> list[tuple[list[str], str]]:
    """docs/paper-scale.md's ``plan-cost`` blocks: (arguments, text)."""
    text = (ROOT / "docs" / "paper-scale.md").read_text()
    found = re.findall(r"<!-- quote: plan-cost ([^\n]*?) -->\n(.*?)<!-- end quote -->", text, re.S)
    return [(shlex.split(spec), body.strip("\n")) for spec, body in found]


def test_the_docs_cost_blocks_are_the_plan_commands_output() -> None:
    """docs/paper-scale.md quotes `tagrpo plan --cost --profile paper --questions 7498
    --problems 1245`, with `--models` (a column per base model and the whole paper) and its
    API and diagnostics lines, rendered by the command's own functions (no number typed)."""
    blocks = _quoted_blocks()
    shown = render_cost(ROOT, RerunRequest(profile="paper"), MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    paper = ["--profile", "paper", "--questions", "7498", "--problems", "1245"]
    assert [args for args, _ in blocks] == [
        [*paper, "--models", *KNOWN_MODELS],
        [*paper, "--lines", "API"],
        paper,
        [*paper, "--lines", "diagnostics"],
    ]
    for args, body in blocks:
        assert body == plan_cost(ROOT, args)
    assert blocks[2][1] == "```\n" + shown + "\n```"
    api = [line for line in shown.splitlines() if line.startswith("API ")]
    assert len(api) == 2 and blocks[1][1] == "```\n" + "\n".join(api) + "\n```"
    with pytest.raises(ValueError, match="no line starts with"):
        plan_cost(ROOT, [*paper, "--lines", "nothing"])
    with pytest.raises(ValueError, match="plan-cost: unrecognized arguments: --bogus"):
        plan_cost(ROOT, [*paper, "--bogus"])


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


# -- which training set the preflight prices --


def _scratch_checkout(tmp_path: Path) -> Path:
    """A checkout's params, profiles and dvc.yaml, with no data built."""
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(ROOT / "profiles", tmp_path / "profiles")
    return tmp_path


def _build_default_tables(root: Path) -> int:
    """What `make run`'s data and check_equivalence stages leave of the embedded default: the
    mini world's processed split and benchmarks, and the training table, written by the stages'
    own writers with their provenance. Returns its questions."""
    from tagrpo.config.data import table_provenance
    from tagrpo.equivalence.check_stage import rephrased_provenance
    from tagrpo.equivalence.dataset import write_rephrased
    from tagrpo.splits.build import load_sources, write_processed

    config = load_config(root / "params.yaml")
    sources = load_sources(config)
    made = {table: table_provenance(config, table) for table in ["train", *sources.benchmarks]}
    processed = root / "data" / "processed"
    questions = write_processed(processed, sources, config.data.extra_seed, made)
    (root / "data" / "rephrased").mkdir(parents=True)
    rows = [(q, [q.problem] * 3, 3) for q in questions]
    provenance = rephrased_provenance(processed / "train.parquet", config)
    write_rephrased(rows, root / "data" / "rephrased" / "train.parquet", provenance)
    return len(questions)


def test_the_paper_cost_never_prices_the_default_s_training_set(tmp_path) -> None:
    """The issue's case: after `make run` the training table is the mini world's; `tagrpo plan
    --cost --profile paper` refuses it, naming it, who built it and what paper trains on, and
    so do the benchmarks; the dry run says its cost is not estimated. With --questions it
    prices MATH's, and the default's own plan still counts its table."""
    root = _scratch_checkout(tmp_path)
    built = _build_default_tables(root)
    assert built == load_config(root / "params.yaml").data.synthetic.train_size
    paper = RerunRequest(profile="paper")
    with pytest.raises(ValueError) as refused:
        render_cost(root, paper, None, BENCHMARK_PROBLEMS)
    message = str(refused.value)
    assert message.startswith(
        "the training table here is not profile paper's, which trains on math (data.hub.train): "
        f"data/rephrased/train.parquet ({built:,} questions): profile embedded built it "
        '(data.source = "synthetic" there, "hub" in profile paper); '
        f"data/processed/train.parquet ({built:,} questions): profile embedded built it"
    )
    assert message.endswith("run its data stage first or pass --questions N")
    with pytest.raises(ValueError, match=r"benchmarks \['aime24', .*\] are not built"):
        render_cost(root, paper, MATH_QUESTIONS, None)
    # Benchmarks of the same names from another world: refused by their provenance too.
    verl = [
        "train.backend=verl",
        "verl.device=cpu",
        "verl.rollout_engine=hf",
        f"verl.model={MODEL}",
    ]
    reseeded = RerunRequest(overrides=[*verl, "data.synthetic.seed=1"])
    with pytest.raises(ValueError) as other:
        render_cost(root, reseeded, 640, None)
    assert str(other.value).startswith(
        "the benchmarks here are not profile embedded's: mini_chains (profile embedded built it "
        "(data.synthetic.seed = 279846 there, 1 in profile embedded)); "
    )
    assert str(other.value).endswith(": run its data stage first or pass --problems N")
    text = render_cost(root, paper, MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    assert f"{MATH_QUESTIONS:,} training questions" in text and "| train@grpo-0 | 58 |" in text
    config = config_with({"verl.model": MODEL}, paper_config())
    [reason, *_] = preflight_lines(config, "grpo", "grpo-s0", MODEL, root)
    assert reason.startswith(
        "# cost: not estimated: the training table here is not profile paper's"
    )
    assert not any(
        line.startswith("# cost (")
        for line in preflight_lines(config, "grpo", "grpo-s0", MODEL, root)
    )
    # The default's own tables are its own: counted (a verl run of the same data).
    own = cost_plan(root, RerunRequest(overrides=verl), None, None)
    assert own.questions == built
    assert own.problems == sum(
        b.size for b in load_config(root / "params.yaml").data.synthetic.benchmarks.values()
    )


def test_a_profile_s_own_tables_are_counted_and_unrecorded_ones_refused(tmp_path) -> None:
    """A training split the paper profile's data stage wrote (its provenance) is counted, at
    most rephrase.max_questions, before check_equivalence has run and when the training table
    there is another profile's; a table without provenance is never counted."""
    from tagrpo.config.data import table_provenance

    root = _scratch_checkout(tmp_path)
    _build_default_tables(root)
    config = paper_config()
    split = root / "data" / "processed" / "train.parquet"
    questions = [Question(f"q{i}", "math", "train", f"problem {i}", "1") for i in range(300)]
    write_questions(questions, str(split), table_provenance(config, "train"))
    assert training_questions(config, root) == 300  # the rephrased table is embedded's
    limited = config_with({"rephrase.max_questions": 260, "train.questions": 260}, config)
    assert training_questions(limited, root) == 260
    fewer = config_with({"train.questions": 100}, config)
    assert training_questions(fewer, root) == 100
    other = config_with({"data.hub.options": {"math": {"keep_empty_boxed": False}}}, config)
    with pytest.raises(ValueError, match=r"data\.hub\.options\.math = .* there"):
        training_questions(other, root)
    write_questions(questions, str(split))  # no provenance: not known to be anyone's
    (root / "data" / "rephrased" / "train.parquet").unlink()
    with pytest.raises(ValueError, match="it records no provenance"):
        training_questions(config, root)
    split.unlink()
    assert training_questions(config, root) is None  # nothing built: --questions is needed
    with pytest.raises(ValueError, match="the training set is not built: give --questions N"):
        render_cost(root, RerunRequest(profile="paper"), None, BENCHMARK_PROBLEMS)


# -- the diagnostics, the data-scaling runs, the whole paper --


def test_the_diagnostics_are_charged_what_the_stage_samples() -> None:
    """N = 3, G = 8: the stage samples (N+1)G = 32 responses to q0 and G = 8 to each
    neighbour, 56 a question; the preflight counts and prices the same (it once charged 32)."""
    from tagrpo.backends.base import Completion
    from tagrpo.evaluation.vanishing_diversity import sample_training_questions
    from tagrpo.splits.training_set import TrainQuestion

    class Counting:
        def __init__(self) -> None:
            self.calls: list[tuple[int, int]] = []

        def generate(self, conversations, sampling):
            self.calls.append((len(conversations), sampling.n))
            return [[Completion("1", 1, True, (1,))] * sampling.n for _ in conversations]

    config = paper_config()
    settings = config.diagnostics
    assert (settings.n_neighbours, settings.group_size) == (3, 8)
    questions = [TrainQuestion(f"q{i}", f"p{i}", "1", neighbours=("a", "b", "c")) for i in range(5)]
    backend = Counting()
    frame = sample_training_questions(
        backend,
        questions,
        8,
        3,
        SamplingParams(n=8, max_new_tokens=4, seed=0),
        lambda responses, answers, kinds: [(True, "1", "ok")] * len(responses),
    )
    assert backend.calls == [(5, 32), (5, 8), (5, 8), (5, 8)]
    assert len(frame) == 5 * 56 == 5 * settings.responses_per_question
    points = len(settings.policies) * len(settings.checkpoints) + int(settings.include_base)
    assert diagnostics_responses(config) == settings.questions * 56 * points
    # Priced as an engine sampling `count` responses to each prompt of one variant, q0's and
    # each neighbour's: the evaluation's arithmetic with the diagnostics' response length.
    arch = KNOWN_MODELS[QWEN_1_7B]
    prompts = settings.questions * points

    def sampled(count: int) -> dict:
        return {
            "evaluate.n": count,
            "evaluate.ks": [1],
            "evaluate.max_new_tokens": settings.max_new_tokens,
        }

    priced = sum(
        evaluation_gpu_hours(config_with(sampled(count), config), prompts, arch)
        for count in (32, 8, 8, 8)
    )
    assert diagnostics_gpu_hours(config, arch) == pytest.approx(priced)
    text = render_cost(ROOT, RerunRequest(profile="paper"), MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    assert f"= {settings.questions * 56:,} responses per checkpoint, {points} checkpoints" in text


def test_restricting_methods_says_which_data_scaling_runs_still_run() -> None:
    """`-S runs.methods=[ta_grpo]` keeps runs.data_scaling's six runs of grpo and grpo_ds (their
    own list): the preflight names them, their GPU-hours, that their 1x runs are gone, and how
    to drop them; without them it says none."""
    only = ["runs.methods=[ta_grpo]", "diagnostics.policies=[ta_grpo-s0]"]
    text = render_cost(
        ROOT, RerunRequest(profile="paper", overrides=only), MATH_QUESTIONS, BENCHMARK_PROBLEMS
    )
    cells = [line.split(" | ") for line in text.splitlines() if line.startswith("| train")]
    # (stage, busy GPU-hours): the sixth column, the anchoring share in brackets after it.
    rows = [(row[0].removeprefix("| "), row[5].split(" ")[0]) for row in cells]
    scaling = [float(hours) for name, hours in rows if name.startswith("train_scaling@")]
    assert rows[0][0] == "train@ta_grpo-0" and len(scaling) == 6
    line = next(line for line in text.splitlines() if line.startswith("data-scaling runs"))
    assert line.startswith(
        "data-scaling runs (runs.data_scaling, whatever runs.methods lists): 6 trainings of "
        "grpo, grpo_ds at 1.5x, 2x, 2.5x (seeds 0), "
    )
    assert f" {sum(scaling):.0f} GPU-hours of the trainings' " in line
    assert line.endswith("drops them (not in runs.methods, so no 1x run: grpo, grpo_ds)")
    none = render_cost(
        ROOT,
        RerunRequest(profile="paper", overrides=[*only, "runs.data_scaling.multiples=[]"]),
        MATH_QUESTIONS,
        BENCHMARK_PROBLEMS,
    )
    assert "data-scaling runs: none (runs.data_scaling.multiples or .methods is empty)" in none
    assert "train_scaling@" not in none


def test_the_preflight_adds_up_the_whole_paper() -> None:
    """Beside one model's table: the same DAG for each of Table 1's four base models, added
    up, equal to the --models table's last column."""
    paper = RerunRequest(profile="paper")
    models = render_models(ROOT, paper, list(KNOWN_MODELS), MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    plans = [
        cost_plan(
            ROOT,
            RerunRequest(profile="paper", overrides=[f"base_model.hub.hub_id={model}"]),
            MATH_QUESTIONS,
            BENCHMARK_PROBLEMS,
        )
        for model in KNOWN_MODELS
    ]
    busy = sum(plan.cost.gpu_hours for plan in plans)
    outputs = sum(t.outputs_gb for plan in plans for t in plan.cost.trainings)
    cells = " | ".join(f"**{plan.cost.gpu_hours:.0f}**" for plan in plans)
    assert f"| **GPU-hours, busy** | {cells} | **{busy:,.0f}** |" in models
    assert f"| {outputs:,.0f} |\n" in models
    text = render_cost(ROOT, paper, MATH_QUESTIONS, BENCHMARK_PROBLEMS)
    line = next(line for line in text.splitlines() if line.startswith("the whole paper"))
    assert (
        f"Table 1's 4 base models: {', '.join(KNOWN_MODELS)}): {busy:,.0f} GPU-hours busy" in line
    )
    assert f"disk {outputs:,.0f} GB of outputs" in line
