"""The TA agent loop with a fake LLM server and a real (trained BPE, ChatML) tokenizer.

Generation prompt = the session's variant (q0 for sessions 0..G-1, then each rephrasing);
stored prompt = q0 for ``ta_grpo`` (old/ref/actor log-probs conditioned on q0, Eq. 4), the
rephrasing itself for ``ta_grpo_star``. Also: the verl training parquet reaches the loop through
verl's own dataset class with the rephrasings intact.
"""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from tagrpo.data.prompts import chat_messages
from tagrpo.data.schema import QUESTION_SCHEMA, Question
from tagrpo.miniworld.tokenizer import train_tokenizer
from tagrpo.verl_ext.agent_loop import TAAgentLoop
from tagrpo.verl_ext.data import chat_template_counter, prepare_training_parquet

Q0 = "What is 3 + 4?"
REPHRASINGS = ["Compute the sum of 3 and 4.", "Add 4 to 3. What do you get?", "Sam has 3 pens."]
G = 2  # responses per variant in these tests: sessions 0..7 -> variants 0,0,1,1,2,2,3,3


@pytest.fixture(scope="module")
def tokenizer():
    corpus = [Q0, *REPHRASINGS, "The answer is \\boxed{7}.", chat_messages(Q0)[0]["content"]]
    return train_tokenizer(corpus * 20, vocab_size=300)


def template_ids(tokenizer, messages) -> list[int]:
    """What evaluation sends to vLLM (and the local backend scores): chat template + encode."""
    text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


class FakeServer:
    """Answers every request with the same response tokens; records the prompts it saw."""

    def __init__(self, response_ids: list[int]) -> None:
        self.response_ids = response_ids
        self.prompts: list[list[int]] = []

    async def generate(self, request_id: str, *, prompt_ids: list[int], **kwargs: Any):
        self.prompts.append(list(prompt_ids))
        return TokenOutput(token_ids=list(self.response_ids), log_probs=None)


def make_config(method: str, **algorithm: Any):
    return OmegaConf.create(
        {
            "actor_rollout_ref": {"rollout": {"prompt_length": 256, "response_length": 64}},
            "data": {"apply_chat_template_kwargs": {}},
            "algorithm": {
                "tagrpo": {"method": method, "group_size": G, "n_neighbours": 3},
                "rollout_correction": {"bypass_mode": False, "rollout_is": None},
                **algorithm,
            },
        }
    )


def run_session(tokenizer, method, session_id, extra_info, loop_cls=TAAgentLoop, **algorithm):
    """One agent-loop session; the loop is built inside the event loop, as verl does."""
    response = list(tokenizer("The answer is \\boxed{7}.", add_special_tokens=False)["input_ids"])
    response.append(tokenizer.eos_token_id)
    server = FakeServer(response)
    config = make_config(method, **algorithm)

    async def go():
        loop = loop_cls(
            trainer_config=DictConfigWrap(config),
            server_manager=server,
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=RLHFDataset,
            data_config=DictConfigWrap(config.data),
        )
        return await loop.run(
            {"temperature": 1.0},
            raw_prompt=chat_messages(Q0),
            extra_info=extra_info,
            session_id=session_id,
            uid="u1",
        )

    output = asyncio.run(go())
    return output, server.prompts, response


def with_rephrasings() -> dict[str, Any]:
    return {"index": 0, "rephrased_prompts": [chat_messages(text) for text in REPHRASINGS]}


@pytest.mark.parametrize("session_id", range(4 * G))
def test_ta_grpo_generates_from_the_variant_and_stores_q0(tokenizer, session_id: int) -> None:
    output, prompts, response = run_session(tokenizer, "ta_grpo", session_id, with_rephrasings())
    variant = session_id // G
    texts = [Q0, *REPHRASINGS]
    assert prompts == [template_ids(tokenizer, chat_messages(texts[variant]))]
    assert output.prompt_ids == template_ids(tokenizer, chat_messages(Q0))
    assert output.response_ids == response and output.response_mask == [1] * len(response)
    assert output.extra_fields["tagrpo_variant"] == variant
    assert output.extra_fields["tagrpo_scored_under_original"] is True
    # What verl's V1 writer stores as `prompts` (and prepends to the response for every pass).
    assert output.as_dict()["prompts"].tolist() == template_ids(tokenizer, chat_messages(Q0))


@pytest.mark.parametrize("method", ["ta_grpo_star", "ta_grpo_unanchored"])
@pytest.mark.parametrize("session_id", range(4 * G))
def test_unanchored_methods_store_the_rephrasing(tokenizer, session_id: int, method: str) -> None:
    output, prompts, _ = run_session(tokenizer, method, session_id, with_rephrasings())
    variant = session_id // G
    expected = template_ids(tokenizer, chat_messages([Q0, *REPHRASINGS][variant]))
    assert prompts == [expected]
    assert output.prompt_ids == expected
    assert output.extra_fields["tagrpo_scored_under_original"] is (variant == 0)


def test_stored_q0_is_what_verl_stores_for_an_original_response(tokenizer) -> None:
    stock, _, _ = run_session(tokenizer, "ta_grpo", 0, with_rephrasings(), SingleTurnAgentLoop)
    swapped, prompts, _ = run_session(tokenizer, "ta_grpo", 5, with_rephrasings())
    assert prompts[0] != stock.prompt_ids  # generated from the second rephrasing
    assert swapped.prompt_ids == stock.prompt_ids


def test_rephrasings_as_numpy_arrays_from_the_dataset(tokenizer) -> None:
    nested = np.empty(3, dtype=object)
    for i, text in enumerate(REPHRASINGS):
        nested[i] = np.array(chat_messages(text), dtype=object)
    output, prompts, _ = run_session(tokenizer, "ta_grpo", 7, {"rephrased_prompts": nested})
    assert prompts == [template_ids(tokenizer, chat_messages(REPHRASINGS[2]))]
    assert output.prompt_ids == template_ids(tokenizer, chat_messages(Q0))


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star"])
@pytest.mark.parametrize(
    "extra_info",
    [
        {"index": 4, "id": "mw-17", "rephrased_prompts": []},  # empty list
        {"index": 4, "id": "mw-17"},  # no rephrasings field (column missing)
        {"index": 4, "id": "mw-17", "rephrased_prompts": None},  # neighbours: none
    ],
)
def test_rows_without_rephrasings_are_refused_naming_the_question(
    tokenizer, method, extra_info
) -> None:
    """Never q0 in place of the rephrasings: that would be (N+1)xGRPO under another name."""
    for session_id in (0, 3, 7):  # q0's sessions too: the whole question is refused
        with pytest.raises(ValueError, match=r"question 'mw-17' has 0 rephrasings"):
            run_session(tokenizer, method, session_id, extra_info)


def test_generation_prompt_ids_are_recorded_for_the_dumps(tokenizer) -> None:
    output, prompts, _ = run_session(tokenizer, "ta_grpo", 5, with_rephrasings())
    assert output.extra_fields["tagrpo_generation_prompt_ids"] == prompts[0]
    assert prompts[0] == template_ids(tokenizer, chat_messages(REPHRASINGS[1]))


def test_too_few_rephrasings_and_sessions_past_the_layout_are_errors(tokenizer) -> None:
    short = {"id": "q9", "rephrased_prompts": [chat_messages(REPHRASINGS[0])]}
    with pytest.raises(ValueError, match="question 'q9' has 1 rephrasings, ta_grpo samples N=3"):
        run_session(tokenizer, "ta_grpo", 2, short)
    with pytest.raises(ValueError, match=r"rollout\.n must be 8"):
        run_session(tokenizer, "ta_grpo", 4 * G, with_rephrasings())


def test_bypass_mode_is_refused_for_ta_grpo_only(tokenizer) -> None:
    bypass = {"rollout_correction": {"bypass_mode": True}}
    with pytest.raises(ValueError, match=r"under the original question q0.*bypass_mode"):
        run_session(tokenizer, "ta_grpo", 2, with_rephrasings(), **bypass)
    output, _, _ = run_session(tokenizer, "ta_grpo_star", 2, with_rephrasings(), **bypass)
    assert output.extra_fields["tagrpo_variant"] == 1


def test_training_parquet_reaches_the_loop_through_verls_dataset(tokenizer, tmp_path) -> None:
    questions = [
        Question("q0", "math", "train", Q0, "7", meta={"subject": "Prealgebra"}),
        Question("q1", "math", "train", "x " * 400, "1", meta={"subject": "Algebra"}),
    ]
    long_rephrasing = "y " * 400
    table = pa.Table.from_pylist(
        [q.to_record() for q in questions], schema=QUESTION_SCHEMA
    ).append_column("rephrasings", pa.array([[*REPHRASINGS[:2], long_rephrasing], REPHRASINGS]))
    pq.write_table(table, tmp_path / "rephrased.parquet")
    stats = prepare_training_parquet(
        tmp_path / "rephrased.parquet",
        tmp_path / "train.parquet",
        chat_template_counter(tokenizer),
        max_prompt_length=256,
        n_neighbours=3,
    )
    assert (stats.questions_in, stats.questions_written, stats.questions_dropped_too_long) == (
        2,
        1,
        1,
    )
    assert (stats.rephrasings_in, stats.rephrasings_too_long) == (3, 1)
    config = OmegaConf.create(
        {"max_prompt_length": 256, "filter_overlong_prompts": True, "truncation": "error"}
    )
    dataset = RLHFDataset(str(tmp_path / "train.parquet"), tokenizer, config)
    assert len(dataset) == 1
    row = dataset[0]
    assert row["reward_model"]["ground_truth"] == "7"
    # The over-long third rephrasing was replaced by q0's text (the equivalence fallback).
    session_texts = {0: Q0, 2: REPHRASINGS[0], 4: REPHRASINGS[1], 6: Q0}
    for session_id, text in session_texts.items():
        response = [tokenizer.eos_token_id]
        server = FakeServer(response)
        config = make_config("ta_grpo")

        async def go(session_id=session_id, server=server, config=config):
            loop = TAAgentLoop(
                trainer_config=DictConfigWrap(config),
                server_manager=server,
                tokenizer=tokenizer,
                processor=None,
                dataset_cls=RLHFDataset,
                data_config=DictConfigWrap(config.data),
            )
            kwargs = {k: row[k] for k in ("raw_prompt", "extra_info", "index")}
            return await loop.run({}, session_id=session_id, uid="u", **kwargs)

        output = asyncio.run(go())
        assert server.prompts == [template_ids(tokenizer, chat_messages(text))]
        assert output.prompt_ids == template_ids(tokenizer, chat_messages(Q0))


@pytest.mark.parametrize("method", ["ta_grpo", "ta_grpo_star", "ta_grpo_unanchored"])
def test_both_prompts_are_recorded_for_the_anchoring_pass(tokenizer, method) -> None:
    q0 = template_ids(tokenizer, chat_messages(Q0))
    rephrasing = template_ids(tokenizer, chat_messages(REPHRASINGS[1]))
    output, prompts, _ = run_session(tokenizer, method, 2 * G + 1, with_rephrasings())
    assert prompts == [rephrasing]  # sampled from the second rephrasing
    assert output.extra_fields["tagrpo_generation_prompt_ids"] == rephrasing
    assert output.extra_fields["tagrpo_original_prompt_ids"] == q0
    assert list(output.prompt_ids) == (q0 if method == "ta_grpo" else rephrasing)
    first, _, _ = run_session(tokenizer, method, 1, with_rephrasings())
    assert first.extra_fields["tagrpo_original_prompt_ids"] == q0 == list(first.prompt_ids)
