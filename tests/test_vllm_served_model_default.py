"""``vllm.served_model: null`` against the loopback stand-in of ``vllm serve``.

A genuine ``vllm serve --served-model-name policy`` answered the evaluation's first request with
404 ("The model '<path>' does not exist"): the null default named the policy's local path.
The default is now what the server serves (its one listed model, checked by the served-model
probe like any other), or the path when the server lists it; several other names are refused
with the list. The same against a genuine server: tests/test_vllm_engine_server.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from test_vllm_backend import engine, params, save_tiny_policy
from vllm_stand_in import VLLMStandIn

from tagrpo.backends.base import SamplingParams
from tagrpo.backends.vllm_backend import ServedModelMismatchError, model_location
from tagrpo.data.prompts import chat_messages


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    return save_tiny_policy(tmp_path_factory.mktemp("policy"))


def test_null_samples_the_one_model_the_server_serves(policy_dir):
    with VLLMStandIn(policy_dir, served_name="policy", dtype=torch.bfloat16) as server:
        backend = engine(params(mode="server", base_url=server.base_url), policy_dir)
        assert backend.served_model == "policy"
        [samples] = backend.generate([chat_messages("What is 3 + 4?")], SamplingParams(n=2))
        assert [c.text for c in samples] == ["\\boxed{0}", "\\boxed{1}"]
        assert {body["model"] for body in server.bodies} == {"policy"}


def test_null_is_the_path_when_the_server_serves_it_under_its_path(policy_dir):
    path = model_location(policy_dir)
    with VLLMStandIn(policy_dir, served_name=path) as server:
        backend = engine(params(mode="server", base_url=server.base_url), policy_dir)
        assert backend.served_model == path


def test_null_with_several_other_names_is_refused_with_the_list():
    from types import SimpleNamespace

    from tagrpo.backends.vllm_backend import default_served_model

    listed = [SimpleNamespace(id="grpo-s0"), SimpleNamespace(id="base")]
    client = SimpleNamespace(models=SimpleNamespace(list=lambda: SimpleNamespace(data=listed)))
    with pytest.raises(ServedModelMismatchError, match=r"serves \['base', 'grpo-s0'\], none"):
        default_served_model(client, "/models/ta_grpo-s0", "http://h/v1")
    assert default_served_model(client, "base", "http://h/v1") == "base"
