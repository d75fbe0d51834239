"""The ``hf`` rollout engine without Ray: batching, sampling, log-probs and the weight sync.

The server class is a plain class that Ray wraps; here it is driven directly on an event loop
with a saved tiny policy, and compared with the project's own generation and scoring code.
"""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

import pytest
import torch
from omegaconf import OmegaConf
from tiny_policy import tiny_policy

from tagrpo.training.scoring import build_scoring_batch, score_log_probs
from tagrpo.verl_ext import WEIGHTS_STEP_FIELD
from tagrpo.verl_ext.hf_rollout import (
    HFRolloutServer,
    HFServerAdapter,
    Sampling,
    sample_batch,
    server_name,
)


@pytest.fixture(scope="module")
def policy_dir(tmp_path_factory):
    model, tokenizer = tiny_policy(seed=1)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    folder = tmp_path_factory.mktemp("policy")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def make_server(policy_dir, response_length: int = 12, max_num_seqs: int = 64) -> HFRolloutServer:
    config = SimpleNamespace(
        seed=7, max_num_seqs=max_num_seqs, prompt_length=64, response_length=response_length
    )
    model_config = OmegaConf.create(
        {"path": str(policy_dir), "override_config": {"attn_implementation": "sdpa"}}
    )
    return HFRolloutServer(config, model_config, replica_rank=0)


def prompts_of(server: HFRolloutServer) -> list[list[int]]:
    ids = torch.arange(5, 40).tolist()
    return [ids[:7], ids[3:15], ids[10:14], ids[:7]]


def test_concurrent_requests_are_batched_and_greedy_matches_one_at_a_time(policy_dir) -> None:
    server = make_server(policy_dir)
    greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": True}

    async def go():
        return await asyncio.gather(
            *[
                server.generate(prompt_ids=p, sampling_params=dict(greedy), request_id=str(i))
                for i, p in enumerate(prompts_of(server))
            ]
        )

    outputs = asyncio.run(go())
    assert server.stats()["batches"] == 1  # four sessions, one generate call
    sampling = Sampling.from_request(greedy, 12)
    for prompt, output in zip(prompts_of(server), outputs, strict=True):
        alone = sample_batch(server.model, [prompt], sampling, server.pad_id, server.eos_ids)[0]
        assert output.token_ids == alone[0]
        assert output.log_probs == pytest.approx(alone[1], abs=1e-5)
        assert 1 <= len(output.token_ids) <= 12
        assert output.extra_fields[WEIGHTS_STEP_FIELD] is None  # the initial weights


def test_log_probs_are_the_models_scores_of_the_sampled_tokens(policy_dir) -> None:
    server = make_server(policy_dir)
    params = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}

    async def go():
        return await asyncio.gather(
            *[
                server.generate(prompt_ids=p, sampling_params=dict(params), request_id=str(i))
                for i, p in enumerate(prompts_of(server))
            ]
        )

    outputs = asyncio.run(go())
    prompts = prompts_of(server)
    batch = build_scoring_batch(prompts, [o.token_ids for o in outputs], server.pad_id)
    scores = score_log_probs(server.model, batch, micro_batch=8)
    for row, output in enumerate(outputs):
        expected = scores[row][batch.target_mask[row]].tolist()
        assert output.log_probs == pytest.approx(expected, abs=1e-4)


def test_weight_sync_replaces_the_model_and_tags_outputs_with_the_step(policy_dir) -> None:
    server = make_server(policy_dir)
    state = {name: tensor.clone() + 0.05 for name, tensor in server.model.state_dict().items()}
    loaded = asyncio.run(server.update_weights(state, global_steps=3))
    assert loaded == len(state)
    for name, tensor in server.model.state_dict().items():
        assert torch.equal(tensor, state[name]), name
    output = asyncio.run(
        server.generate(
            prompt_ids=prompts_of(server)[0],
            sampling_params={"temperature": 0.0},
            request_id="x",
        )
    )
    assert output.extra_fields[WEIGHTS_STEP_FIELD] == 3
    assert server.stats() == {"batches": 1, "weight_updates": 1, "weights_step": 3}


def test_weight_sync_refuses_unknown_and_missing_weights(policy_dir) -> None:
    server = make_server(policy_dir)
    state = dict(server.model.state_dict())
    with pytest.raises(ValueError, match="does not have"):
        asyncio.run(server.update_weights({**state, "extra.weight": torch.zeros(1)}, 1))
    del state["model.norm.weight"]
    with pytest.raises(ValueError, match=r"did not send \['model.norm.weight'\]"):
        asyncio.run(server.update_weights(state, 1))


def test_sampling_options_the_engine_cannot_honour_are_errors() -> None:
    with pytest.raises(ValueError, match="repetition_penalty"):
        Sampling.from_request({"repetition_penalty": 1.1}, 8)
    sampling = Sampling.from_request({"top_k": -1, "max_tokens": 5, "temperature": 0.7}, 8)
    assert (sampling.top_k, sampling.max_tokens, sampling.temperature) == (None, 5, 0.7)


def test_adapter_sends_full_cpu_tensors_from_the_replicas_first_rank(monkeypatch) -> None:
    sent = {}

    class Handle:
        class update_weights:  # mirrors a Ray method handle
            @staticmethod
            def remote(state, step):
                sent.update(state=state, step=step)
                future = asyncio.get_running_loop().create_future()
                future.set_result(len(state))
                return future

    looked_up = []
    monkeypatch.setattr(
        "tagrpo.verl_ext.hf_rollout.ray.get_actor", lambda name: looked_up.append(name) or Handle
    )
    # Built without BaseRollout.__init__ (which would load the model's tokenizer and config).
    adapter = HFServerAdapter.__new__(HFServerAdapter)
    adapter.replica_rank, adapter.is_leader_rank, adapter.server_handle = 0, True, None
    weights = [("a", torch.ones(2)), ("b", torch.zeros(3))]

    asyncio.run(adapter.update_weights(iter(weights), global_steps=2))
    assert looked_up == [server_name(0)]
    assert sent["step"] == 2 and set(sent["state"]) == {"a", "b"}
    assert torch.equal(sent["state"]["a"], torch.ones(2))
    with pytest.raises(NotImplementedError, match="LoRA"):
        asyncio.run(adapter.update_weights(iter(weights), peft_config={"r": 8}))
