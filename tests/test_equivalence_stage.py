"""The two DVC stages end to end, in a scratch project: outputs, metrics, MLflow, secrets.

Each test builds a project folder (params.yaml, dvc.yaml, a small mini-world training split,
a tiny random solver model) and calls the stages' ``main()`` there, as ``dvc repro`` would
call ``python -m stages.<name>``.
"""

from __future__ import annotations

import json
from pathlib import Path

import mlflow
import pyarrow.parquet as pq
import pytest
import torch
import yaml
from openai_fake_server import FakeOpenAIServer, Fault, last_user_message, question_of

from stages import check_equivalence, rephrase
from tagrpo.config.common import MiniWorldSettings
from tagrpo.config.data import SyntheticSettings
from tagrpo.config.params import deep_merge, embedded, repo_params
from tagrpo.data.schema import write_questions
from tagrpo.equivalence.dataset import read_rephrased
from tagrpo.miniworld.dataset import build_miniworld
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.training.warmstart import TinyModelConfig, build_model, save_policy

KEY_ENV = "TAGRPO_STAGE_TEST_KEY"
SECRET = "sk-stage-test-9f8e7d6c5b4a"
QUESTIONS = 6


def _params(tmp: Path, rephrase_section: dict, check_section: dict) -> dict:
    return {
        "common": {
            "profile": "custom",
            "seed": 0,
            "torch_threads": 1,
            "tracking": {"enabled": True, "uri": "mlflow.db", "experiment": "stage-test"},
            "grading": {"workers": 1, "item_timeout_s": 5.0},
        },
        "rephrase": {
            "backend": "rules",
            "n": 3,
            "cache_dir": ".cache/rephrase",
            **rephrase_section,
        },
        "check_equivalence": check_section,
    }


@pytest.fixture
def equivalence_project(empty_project: Path) -> Path:
    """The empty project (the working directory) with the inputs of the two stages: a train
    split of 6 mini-world questions and a tiny random base policy."""
    built = build_miniworld(
        embedded(SyntheticSettings, seed=3, train_size=QUESTIONS), embedded(MiniWorldSettings)
    )
    (empty_project / "data" / "processed").mkdir(parents=True)
    write_questions(built["train"].questions, str(empty_project / "data/processed/train.parquet"))
    torch.manual_seed(0)
    tokenizer = train_tokenizer([q.problem for q in built["train"].questions] * 20, 300)
    save_policy(
        build_model(tokenizer, embedded(TinyModelConfig, hidden_size=32, intermediate_size=64)),
        tokenizer,
        empty_project / "models/base",
    )
    return empty_project


def _reply_without_digits(body: dict) -> str:
    """A distinct rephrasing per seed that adds no number (so no answer can leak into it)."""
    question = question_of(last_user_message(body))
    return f"Rephrasing it: Version {chr(65 + int(body['seed']) % 26)}. {question}"


def _write_params(equivalence_project: Path, params: dict) -> None:
    """The embedded default with the test's sections over it (params.yaml is always complete)."""
    full = deep_merge(repo_params().model_dump(mode="json"), params)
    (equivalence_project / "params.yaml").write_text(yaml.safe_dump(full, sort_keys=False))


def _mlflow_metrics(equivalence_project: Path, stage: str) -> dict[str, float]:
    client = mlflow.tracking.MlflowClient(f"sqlite:///{equivalence_project / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("stage-test")
    runs = client.search_runs(
        [experiment.experiment_id], f"tags.stage = '{stage}'", order_by=["start_time DESC"]
    )
    return runs[0].data.metrics


def test_rules_backend_and_all_checks_write_the_trainers_input(equivalence_project: Path) -> None:
    check = {
        "similarity": {"enabled": True, "threshold": 0.2},
        "consistency": {"enabled": True, "solver": "local", "k": 2, "max_new_tokens": 4},
        "policy": {"max_rounds": 1, "fallback": "pad_original"},
        "controls": {"enabled": True},
    }
    _write_params(equivalence_project, _params(equivalence_project, {}, check))
    produced = rephrase.main([])
    assert (produced["questions"], produced["slots"], produced["missing"]) == (6, 18, 0)
    assert produced["rules/transform/family"] == 18.0
    summary = check_equivalence.main([])

    rows = read_rephrased(equivalence_project / "data/rephrased/train.parquet")
    assert len(rows) == QUESTIONS and all(len(texts) == 3 for _, texts, _ in rows)
    assert all(fallback == 0 for _, _, fallback in rows)
    assert all(q.problem not in texts for q, texts, _ in rows)
    # The random tiny solver never reaches a gold answer: every rephrasing is unverifiable,
    # and accepted by the default on_unverifiable policy.
    assert summary["reasons"] == {"solver_unsolved": 18}
    assert summary["accepted_unverified"] == 18
    assert summary["questions"] == {"rows_in": 6, "kept": 6, "rejected": 0}
    assert summary["controls"]["number_changed"]["rejected_by"] == {"structural": 6}
    verdicts = pq.read_table(equivalence_project / "data/rephrased/verdicts.parquet").to_pandas()
    assert len(verdicts[verdicts["kind"] == "candidate"]) == 18
    assert verdicts.loc[verdicts["kind"] == "candidate", "similarity"].notna().all()
    assert (verdicts.loc[verdicts["kind"] == "candidate", "solver_k"] == 2).all()
    assert pq.read_table(equivalence_project / "data/rephrased/rejections.parquet").num_rows == 0

    stored = json.loads((equivalence_project / "metrics/check_equivalence.json").read_text())
    assert stored["checks"]["consistency"]["reached"] == 18
    section = (equivalence_project / "reports/sections/equivalence.md").read_text()
    assert section.startswith("## Rephrasings and their equivalence checks")
    assert "| similarity | 18 | 18 | 100.0% |" in section
    # MLflow names keep one "/" (deeper levels joined by "."): one chart section per stage part.
    logged = _mlflow_metrics(equivalence_project, "check_equivalence")
    assert logged["checks/consistency.reached"] == 18.0
    assert logged["by_source/miniworld.acceptance_rate"] == 1.0
    assert _mlflow_metrics(equivalence_project, "rephrase")["slots"] == 18.0


def test_openai_backend_stage_reruns_send_nothing_and_never_leak_the_key(
    equivalence_project: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv(KEY_ENV, SECRET)
    with FakeOpenAIServer(reply=_reply_without_digits) as server:
        endpoint = {
            "base_url": server.base_url,
            "model": "fake-llm",
            "api_key_env": KEY_ENV,
            "max_attempts": 2,
            "backoff_base_s": 0.01,
            "timeout_s": 5,
        }
        check = {
            "similarity": {"enabled": False},
            "consistency": {"enabled": False},
            "policy": {"max_rounds": 1, "fallback": "drop"},
        }
        rephrase_section = {"backend": "openai", "openai": endpoint, "max_failed_share": 0.1}
        _write_params(equivalence_project, _params(equivalence_project, rephrase_section, check))
        # One question's first slot fails twice (every attempt), with the key in the message.
        first_question = pq.read_table(equivalence_project / "data/processed/train.parquet")[
            "problem"
        ][0]
        message = "upstream said {authorization}"
        fault = Fault("status", str(first_question), seed=0, status=503, times=2, message=message)
        server.add_fault(fault)
        produced = rephrase.main([])
        assert produced["missing_by_reason"] == {"generation_failed": 1}
        assert produced["requests/http_requests"] == 19.0  # 18 requests, one retried once
        assert produced["requests/failed/server_error"] == 1.0
        assert produced["requests/prompt_tokens"] > 0

        # The checks regenerate the missing slot (round 1, a new request) and keep all rows.
        summary = check_equivalence.main([])
        assert server.received == 20
        assert summary["policy"] == {"complete_first_round": 5, "complete_regenerated": 1}
        assert summary["reasons"] == {"generation_failed": 1, "passed": 18}
        assert summary["questions"] == {"rows_in": 6, "kept": 6, "rejected": 0}

        again = rephrase.main([])  # a rerun: 17 replies cached, the failure retried
        assert again["requests/cache_hits"] == 17.0
        assert again["requests/http_requests"] == 1.0 and again["missing"] == 0
        third = rephrase.main([])
        assert third["requests/http_requests"] == 0.0 and third["requests/cache_hits"] == 18.0
        assert server.received == 21

    captured = capsys.readouterr()
    leaks = [
        path
        for path in equivalence_project.rglob("*")
        if path.is_file() and SECRET.encode() in path.read_bytes()
    ]
    assert leaks == []  # not in parquet, metrics, the report, the cache or mlflow.db
    assert SECRET not in captured.out + captured.err
    assert server.requests[0].authorization == f"Bearer {SECRET}"


def test_a_wrong_key_fails_the_rephrase_stage_at_the_first_reply(
    equivalence_project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The drill: every request answers 401. The stage used to exit 0 with 0/18 rephrased."""
    from tagrpo.rephrase.openai_backend import EndpointRefusedError

    monkeypatch.setenv(KEY_ENV, "wrong-key")
    with FakeOpenAIServer(reply=_reply_without_digits) as server:
        server.add_fault(Fault("status", status=401, times=10_000, message="invalid key"))
        endpoint = {
            "base_url": server.base_url,
            "model": "fake-llm",
            "api_key_env": KEY_ENV,
            "concurrency": 2,
            "max_attempts": 6,
            "backoff_base_s": 0.01,
        }
        _write_params(
            equivalence_project,
            _params(equivalence_project, {"backend": "openai", "openai": endpoint}, {}),
        )
        with pytest.raises(EndpointRefusedError, match="HTTP 401"):
            rephrase.main([])
        assert server.received <= 2  # the requests in flight, no retry, no more requests
    assert not (equivalence_project / "data/rephrased/candidates.parquet").exists()
    assert not (equivalence_project / "metrics/rephrase.json").exists()
    runs = mlflow.tracking.MlflowClient(
        f"sqlite:///{equivalence_project / 'mlflow.db'}"
    ).search_runs(
        [
            mlflow.tracking.MlflowClient(f"sqlite:///{equivalence_project / 'mlflow.db'}")
            .get_experiment_by_name("stage-test")
            .experiment_id
        ]
    )
    assert [run.info.status for run in runs] == ["FAILED"]


def test_too_many_padded_slots_fail_the_equivalence_stage(equivalence_project: Path) -> None:
    """Rephrasings nobody accepts would make TA-GRPO train on copies of q0: the stage fails
    with the counts instead of padding every slot and exiting 0."""
    from tagrpo.rephrase.shares import TooManyFailuresError

    check = {
        "similarity": {"enabled": True, "threshold": 0.999},  # rejects every rephrasing
        "consistency": {"enabled": False},
        "policy": {"max_rounds": 0, "fallback": "pad_original", "max_padded_share": 0.05},
        "controls": {"enabled": False},
    }
    _write_params(equivalence_project, _params(equivalence_project, {}, check))
    rephrase.main([])
    with pytest.raises(
        TooManyFailuresError,
        match=r"18 of 18 rephrasing slots .* \(100\.0%\) exceeds the allowed share 5\.0%",
    ):
        check_equivalence.main([])
    assert not (equivalence_project / "data/rephrased/train.parquet").exists()
    assert not (equivalence_project / "metrics/check_equivalence.json").exists()
    # Allowed explicitly, the run goes through and the report says how much was padded.
    check["policy"]["max_padded_share"] = 1.0
    _write_params(equivalence_project, _params(equivalence_project, {}, check))
    summary = check_equivalence.main([])
    assert summary["unfilled_slot_share"] == 1.0
    section = (equivalence_project / "reports/sections/equivalence.md").read_text()
    assert section.splitlines()[2].startswith("**Slots without a checked rephrasing: 18 (100.0%)")
