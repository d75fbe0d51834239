"""profiles/real-tiny.yaml stays the end-to-end check its header says it is, and the committed
report of one of its runs (reports/profiles/real-tiny/) shows real model text per benchmark.

The profile was cut to finish in minutes on 2 cores; these tests keep the cuts from reaching what
it is for: real data, the real SmolLM2, every TA method trained on the local backend, evaluation
by vLLM (the engines environment's worker), example responses in the report.
"""

from __future__ import annotations

import re
from pathlib import Path

from tagrpo.algorithms import METHODS
from tagrpo.config.params import validate_params
from tagrpo.config.profiles import merged_with_profile
from tagrpo.report.examples import WITHHELD

ROOT = Path(__file__).resolve().parents[1]
ARTIFACT = ROOT / "reports" / "profiles" / "real-tiny"


def _config():
    return validate_params(
        merged_with_profile(ROOT / "profiles" / "real-tiny.yaml", ROOT / "params.yaml")
    )


def test_real_tiny_runs_every_ta_method_on_real_data_and_evaluates_with_vllm() -> None:
    config = _config()
    assert config.data.source == "local"
    assert config.base_model.kind == "gguf_package"
    ta_methods = [name for name, spec in METHODS.items() if spec.use_neighbours]
    assert ta_methods == ["ta_grpo_star", "ta_grpo", "ta_grpo_unanchored"]
    assert config.runs.methods == ["grpo", *ta_methods]
    assert config.train.backend == "local"
    # upstream stages work on the trained questions only (all 7,498 took 25 min to check)
    assert config.rephrase.max_questions == config.train.questions == 2
    assert config.evaluate.backend == "vllm"
    assert (config.vllm.mode, config.vllm.python) == ("offline", ".venv-engines/bin/python")
    assert config.report.example_responses == 2


def test_the_committed_report_is_a_real_tiny_run_with_text_for_every_benchmark() -> None:
    report = (ARTIFACT / "report.md").read_text()
    config = _config()
    commit = re.search(r"git commit `([0-9a-f]{12})`", report)
    assert report.startswith(f"# {config.report.title}\n")
    assert commit is not None and commit.group(1) in (ARTIFACT / "README.md").read_text()
    policies = ["base", *config.runs.policies()]
    benchmarks = config.data.local.benchmarks
    shown = [b for b in benchmarks if b not in WITHHELD]
    assert len(policies) == 5 and len(shown) == 6
    examples = report[report.index("## Example responses") :]
    headings = re.findall(r"^### `([^`]+)` on (\S+)$", examples, flags=re.MULTILINE)
    assert sorted(headings) == sorted((p, b) for p in policies for b in benchmarks)
    # sample 0 of 2 questions per shown benchmark and policy, each a non-empty text block
    texts = re.findall(r"^~~~~text\n(.*?)\n~~~~$", examples, flags=re.MULTILINE | re.DOTALL)
    assert len(texts) == 5 * 6 * 2
    assert all(text.strip() for text in texts)
    assert examples.count("Withheld: ") == 5  # gpqa_diamond, once per policy
    for figure in re.findall(r"\]\(((?:figures/)?[\w.]+\.png)\)", report):
        assert (ARTIFACT / figure).stat().st_size > 1000, figure
