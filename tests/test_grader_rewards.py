"""``common.grading.grader`` as the training reward of both backends: the local trainer's
rollouts and verl's reward hook grade with the grader it names."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from omegaconf import OmegaConf
from test_verl_reward import score
from verl.trainer.ppo.reward import get_custom_reward_fn
from verl_helpers import paper_config, run_for

from tagrpo.algorithms.methods import get_method
from tagrpo.backends.base import Completion, Messages, SamplingParams
from tagrpo.config.params import config_with
from tagrpo.grading import grade_fn as grade_fn_module
from tagrpo.grading.grade_fn import make_grade_fn
from tagrpo.splits.training_set import TrainQuestion
from tagrpo.training.rollout import sample_rollouts
from tagrpo.training.train_stage import TrainPlan, train_local
from tagrpo.verl_ext import reward as reward_module
from tagrpo.verl_ext.overrides import build_overrides

# One question, gold 5; its four responses: graded right by this project's grader all but the
# last, by verl's math_reward only the second ("5." and "\mbox" units are strings to it).
RESPONSES = ["So $\\boxed{5.}$", "So $\\boxed{5}$", "So $\\boxed{5 \\mbox{ cm}}$", "$\\boxed{6}$"]
REWARDS = {
    "tagrpo": [1.0, 1.0, 1.0, 0.0],
    "math_reward": [0.0, 1.0, 0.0, 0.0],
    "math_verify": [0.0, 1.0, 1.0, 0.0],
}


class Scripted:
    """Each conversation's n samples are ``RESPONSES`` (with token ids, as training needs)."""

    prompt_format = "chat"

    def prompt_text(self, messages: Messages) -> str:
        return messages[-1]["content"]

    def generate(
        self, conversations: Sequence[Messages], sampling: SamplingParams
    ) -> list[list[Completion]]:
        assert sampling.n == len(RESPONSES)
        return [
            [Completion(text=t, num_tokens=1, finished=True, token_ids=(7,)) for t in RESPONSES]
            for _ in conversations
        ]


@pytest.mark.parametrize("grader", ["tagrpo", "math_reward", "math_verify"])
def test_local_rollout_rewards_follow_the_grader(grader) -> None:
    question = TrainQuestion(id="q0", problem="What is 2 + 3?", answer="5")
    with make_grade_fn(workers=1, grader=grader) as grade:
        (rollout,) = sample_rollouts(
            Scripted(), [question], get_method("grpo"), 4, 0, SamplingParams(n=4), grade
        )
    assert rollout.rewards.tolist() == REWARDS[grader]


def test_the_local_trainer_grades_with_the_setting(monkeypatch) -> None:
    """train_local opens its grading function with ``common.grading.grader``."""
    seen = []

    class Stop(Exception):
        pass

    def recording(grading, grader):
        seen.append((grading.grader, grader))
        raise Stop

    monkeypatch.setattr(grade_fn_module, "grade_fn_for", recording)
    config = config_with({"common.grading.grader": "math_reward"})
    question = TrainQuestion(id="q0", problem="What is 2 + 3?", answer="5")
    plan = TrainPlan(config, get_method("grpo"), 0, 1.0, "grpo-s0", [question], 1)
    with pytest.raises(Stop):
        train_local(plan, None, None, None)  # type: ignore[arg-type]  # stops before any use
    assert seen == [("math_reward", "math_reward")]


@pytest.mark.parametrize("grader", ["tagrpo", "math_reward", "math_verify"])
def test_verl_reward_hook_follows_the_grader(grader) -> None:
    """verl's custom reward function, loaded as verl loads it, with the reward_kwargs the
    overrides pass (tagrpo/verl_ext/overrides.py)."""
    kwargs = {"grading_workers": 1, "item_timeout_s": 5.0, "grader": grader}
    config = OmegaConf.create(
        {
            "reward": {
                "custom_reward_function": {
                    "path": "pkg://tagrpo.verl_ext.reward",
                    "name": "compute_score",
                    "reward_kwargs": kwargs,
                }
            }
        }
    )
    fn = get_custom_reward_fn(config)
    try:
        scores = [
            score(fn, data_source="math", solution_str=text, ground_truth="5", extra_info={})
            for text in RESPONSES
        ]
        letter = score(
            fn,
            data_source="gpqa_diamond",
            solution_str="The answer is (B).",
            ground_truth="B",
            extra_info={"answer_kind": "multiple_choice"},
        )
    finally:
        reward_module.close_pools()
    assert [s["score"] for s in scores] == REWARDS[grader]
    assert [s["acc"] for s in scores] == REWARDS[grader]
    assert letter == {"score": 1.0, "acc": 1.0, "pred": "B"}  # letters under every grader


def test_verl_overrides_pass_the_grader(tmp_path) -> None:
    """The reward hook's kwargs carry the setting (the paper profiles' dry runs pin theirs)."""
    config = config_with({"common.grading.grader": "math_verify"}, base=paper_config())
    overrides = build_overrides(run_for("grpo", tmp_path), config)
    assert "++reward.custom_reward_function.reward_kwargs.grader=math_verify" in overrides


class Characters:
    """A tokenizer for verl's reward manager: token ids are character codes."""

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        return "".join(chr(int(i)) for i in ids)


def test_verls_reward_manager_scores_with_the_grader() -> None:
    """verl's own reward manager (the naive one, verl's default) around the hook, one response
    at a time as verl's reward loop feeds it, under math_reward and under tagrpo."""
    import numpy as np
    import torch
    from verl import DataProto
    from verl.experimental.reward_loop.reward_manager.naive import NaiveRewardManager

    def item(text: str) -> DataProto:
        ids = torch.tensor([[ord(c) for c in text]])
        return DataProto.from_dict(
            tensors={"responses": ids, "attention_mask": torch.ones_like(ids)},
            non_tensors={
                "data_source": np.array(["math"], dtype=object),
                "reward_model": np.array([{"ground_truth": "5"}], dtype=object),
                "extra_info": np.array([{"answer_kind": "math"}], dtype=object),
            },
        )

    async def scores(grader: str) -> list[float]:
        kwargs = {"grading_workers": 1, "item_timeout_s": 5.0, "grader": grader}
        custom = {"path": "pkg://tagrpo.verl_ext.reward", "name": "compute_score"}
        config = OmegaConf.create(
            {"reward": {"custom_reward_function": {**custom, "reward_kwargs": kwargs}}}
        )
        manager = NaiveRewardManager(config, Characters(), get_custom_reward_fn(config))
        results = [await manager.run_single(item(text)) for text in RESPONSES]
        return [result["reward_score"] for result in results]

    try:
        assert asyncio.run(scores("math_reward")) == REWARDS["math_reward"]
        assert asyncio.run(scores("tagrpo")) == REWARDS["tagrpo"]
    finally:
        reward_module.close_pools()
