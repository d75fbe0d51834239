"""The agent loop of the methods that sample rephrasings (``tagrpo_agent``).

verl's V1 rollout runs ``rollout.n`` sessions per dataset row (one row per original question);
session ``j`` of a question is generated from prompt variant ``j // G`` (q0 for the first G
sessions, then each rephrasing in ``extra_info.rephrased_prompts`` in turn).

* ``ta_grpo`` (Eq. 4): after generation the stored prompt ids are replaced by q0's. verl builds
  ``input_ids = prompt + response`` from them for the old-policy, reference and actor passes,
  so all three log-probabilities of every response are conditioned on q0; the response ids,
  its mask and the reward are unchanged.
* ``ta_grpo_star``: nothing is swapped; each response is scored under the rephrasing it was
  sampled from.

A row with fewer than N rephrasings is refused with an error naming its question: sampling q0
for its sessions would turn the method into (N+1)xGRPO under its name. Validation rows carry
``agent_name: single_turn_agent`` (:func:`tagrpo.verl_ext.data.prepare_validation_parquet`) and
never reach this loop. Rollout-correction modes that would reuse vLLM's log-probabilities under
a rephrasing are refused for ``ta_grpo``
(:func:`tagrpo.verl_ext.settings.refuse_rollout_correction`).

Every output records, in ``extra_fields``, the variant it was sampled from, whether it is scored
under q0, the token ids of the prompt it was generated from (the rollout dumps keep them) and
those of q0's prompt (the trainer's anchoring pass scores neighbour responses under both).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopOutput, register
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop

from tagrpo.verl_ext import AGENT_LOOP_NAME, ORIGINAL_PROMPT_IDS
from tagrpo.verl_ext.settings import MethodSettings, refuse_rollout_correction

Messages = list[dict[str, str]]


def as_messages(value: Any) -> Messages:
    """A chat-message list from what the dataset hands over (lists or numpy object arrays)."""
    messages = [
        {"role": str(message["role"]), "content": str(message["content"])} for message in value
    ]
    if not messages:
        raise ValueError("empty chat-message list")
    return messages


def rephrased_prompts(extra_info: Any) -> list[Messages]:
    """The rephrasings of a row (``extra_info.rephrased_prompts``), [] when it has none."""
    if not isinstance(extra_info, Mapping):
        return []
    variants = extra_info.get("rephrased_prompts")
    if variants is None:
        return []
    return [as_messages(variant) for variant in variants]


def pick_variant(
    settings: MethodSettings, session_id: int, available: int, question: str = "?"
) -> int:
    """Variant a session samples; an error naming the question if it has too few rephrasings."""
    variant = settings.variant_of(session_id)
    if available < settings.n_neighbours:
        raise ValueError(
            f"question {question!r} has {available} rephrasings, {settings.method} samples N="
            f"{settings.n_neighbours}: rebuild the training parquet (tagrpo.verl_ext.data) from a "
            "rephrased training set; refusing to sample q0 in their place"
        )
    return variant


def question_of(kwargs: Mapping[str, Any]) -> str:
    """The question id of a row (``extra_info.id``), for error messages."""
    info = kwargs.get("extra_info")
    if isinstance(info, Mapping) and info.get("id") is not None:
        return str(info["id"])
    return str(kwargs.get("uid", "?"))


@register(AGENT_LOOP_NAME)
class TAAgentLoop(SingleTurnAgentLoop):
    """Single-turn generation from the session's prompt variant, scored under its anchor."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.settings = MethodSettings.from_algorithm(self.config.algorithm)
        refuse_rollout_correction(self.settings.method, self.config.algorithm)
        # Prompt ids of the last ct_build_initial_tokens call: the generation prompt, so that
        # tokens verl adds at the prompt/response boundary can be carried over to q0.
        self._last_prompt_ids: list[int] | None = None

    async def ct_build_initial_tokens(self, messages: list[dict], *args: Any, **kwargs: Any):
        prompt_ids = await super().ct_build_initial_tokens(messages, *args, **kwargs)
        self._last_prompt_ids = list(prompt_ids)
        return prompt_ids

    async def run(
        self, sampling_params: dict[str, Any], priority: int = 0, **kwargs: Any
    ) -> AgentLoopOutput:
        if "session_id" not in kwargs:
            raise RuntimeError(
                f"{AGENT_LOOP_NAME} needs verl's V1 trainer (trainer.use_v1=True): the session "
                "index selects the prompt variant"
            )
        original = as_messages(kwargs["raw_prompt"])
        variants = rephrased_prompts(kwargs.get("extra_info"))
        variant = pick_variant(
            self.settings, int(kwargs["session_id"]), len(variants), question_of(kwargs)
        )
        generation = original if variant == 0 else variants[variant - 1]
        output = await super().run(
            sampling_params, priority, **{**kwargs, "raw_prompt": generation}
        )
        generated_from = list(self._last_prompt_ids or [])
        anchored = variant > 0 and self.settings.spec.anchor == "original"
        # q0's prompt (with the boundary tokens verl merged after the generation prompt): the
        # stored prompt of TA-GRPO's neighbour responses, and what the trainer's anchoring pass
        # scores the others' under (tagrpo.verl_ext.trainer: anchoring/* metrics).
        original_ids = (
            await self._original_prompt_ids(original, list(output.prompt_ids))
            if variant > 0
            else list(output.prompt_ids)
        )
        if anchored:
            output.prompt_ids = original_ids
            if output.routed_experts is not None:
                raise RuntimeError(
                    "router replay indexes experts by absolute position and cannot follow the "
                    "swap to q0's prompt: disable it for ta_grpo"
                )
        output.extra_fields.update(
            {
                "tagrpo_variant": variant,
                "tagrpo_scored_under_original": variant == 0 or anchored,
                "tagrpo_generation_prompt_ids": generated_from,
                ORIGINAL_PROMPT_IDS: [int(x) for x in original_ids],
            }
        )
        return output

    async def _original_prompt_ids(self, original: Messages, stored: Sequence[int]) -> list[int]:
        generated_from = self._last_prompt_ids
        if generated_from is None or list(stored[: len(generated_from)]) != generated_from:
            raise RuntimeError(
                "the stored prompt does not start with the generation prompt: cannot swap to q0"
            )
        boundary = list(stored[len(generated_from) :])  # tokens verl merged after the prompt
        return [*await self.ct_build_initial_tokens(original), *boundary]
