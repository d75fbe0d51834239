"""What each training method samples, how it groups responses and which prompt it scores under.

A :class:`MethodSpec` is the whole difference between the methods of the paper and its
baselines; trainers (the local backend here, verl at paper scale) read it and never branch on
a method's name.

==================  ========  ==================  ============  ========  ===  ============
method              prompts   responses / prompt  grouping      anchor    DS   estimator
==================  ========  ==================  ============  ========  ===  ============
grpo                q0        G                   per original  own       no   grpo
grpo_ds             q0        G                   per original  own       yes  grpo
grpo_x4             q0        (N+1)G              per original  own       no   grpo
grpo_x4_ds          q0        (N+1)G              per original  own       yes  grpo
ta_grpo_star        q0..qN    G                   per variant   own       no   grpo
ta_grpo             q0..qN    G                   joint         original  no   grpo
ta_grpo_unanchored  q0..qN    G                   joint         own       no   grpo
avspo               q0        G                   per original  own       no   avspo
grpo_flipped        q0        G                   per original  own       no   grpo_flipped
==================  ========  ==================  ============  ========  ===  ============

``grpo_x4`` is the paper's "(N+1)xGRPO" (section 5.4) for any N, named for N=3 (the name stays:
output paths and MLflow run names are built from method names); ``ta_grpo_star`` is
TA-GRPO* (Appendix C); the anchor "original" means every response is scored with q0's prompt
(Eq. 4), "own" with the prompt it was sampled from. ``ta_grpo_unanchored`` is what the authors'
public code runs (groups pooled over the rephrasings, every ratio under the response's own
prompt): beside ``ta_grpo`` it measures Eq. 4's anchoring on its own. The estimator is a name in
:mod:`tagrpo.algorithms.estimators`. ``grpo_flipped`` is the negative control (issue 21, V4):
GRPO with every advantage's sign flipped, a known-bad method the report must find worse than
GRPO (``negative_control`` marks it; the report finds it by that flag, not by its name).

Adding a method is one entry in :data:`METHODS` (and its tests); both backends read the spec.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tagrpo.algorithms.estimators import get_estimator

Grouping = Literal["per_original", "per_variant", "joint"]
Anchor = Literal["original", "own"]
GROUPINGS: tuple[str, ...] = ("per_original", "per_variant", "joint")
ANCHORS: tuple[str, ...] = ("original", "own")


@dataclass(frozen=True, kw_only=True)
class MethodSpec:
    """One training method (keyword fields only: a row of :data:`METHODS` reads as the table).

    use_neighbours: sample from the rephrasings q1..qN as well as from q0.
    matched_budget: q0 alone gets (N+1)G responses, the response budget of TA-GRPO.
    grouping: the normalisation groups: all responses to q0 of a question (``per_original``),
        one group per (question, prompt variant) (``per_variant``, Eq. 1 per rephrasing), or
        all (N+1)G responses of a question together (``joint``, Eq. 3).
    anchor: prompt under which old, reference and current log-probabilities are computed.
    dynamic_sampling: drop groups whose rewards are all equal and refill the batch (DAPO).
    estimator: the advantage estimator, by registered name (``grpo``, ``avspo``, ...).
    negative_control: a known-bad method kept to check that the instrument detects a harmful
        change (the report's controls); never one of the paper's methods.
    """

    name: str
    use_neighbours: bool
    matched_budget: bool
    grouping: Grouping
    anchor: Anchor
    dynamic_sampling: bool = False
    estimator: str = "grpo"
    description: str = ""
    negative_control: bool = False

    def __post_init__(self) -> None:
        if self.grouping not in GROUPINGS:
            raise ValueError(f"grouping must be one of {GROUPINGS}, got {self.grouping!r}")
        if self.anchor not in ANCHORS:
            raise ValueError(f"anchor must be one of {ANCHORS}, got {self.anchor!r}")
        if self.grouping == "per_original" and self.use_neighbours:
            raise ValueError(f"{self.name}: per_original grouping samples no neighbours")
        if self.grouping != "per_original" and not self.use_neighbours:
            raise ValueError(f"{self.name}: {self.grouping} grouping needs neighbours")
        if self.matched_budget and self.use_neighbours:
            raise ValueError(f"{self.name}: the matched budget applies to q0-only methods")
        get_estimator(self.estimator)
        if self.dynamic_sampling and self.estimator != "grpo":
            raise ValueError(f"{self.name}: dynamic sampling is defined for the grpo estimator")

    @property
    def avspo(self) -> bool:
        """Whether the method's estimator is AVSPO (kept for callers that branch on it)."""
        return self.estimator == "avspo"

    def variants(self, n_neighbours: int) -> tuple[int, ...]:
        """Prompt variants sampled per question: 0 is q0, n >= 1 the n-th rephrasing."""
        if n_neighbours < 0:
            raise ValueError("n_neighbours must be >= 0")
        return tuple(range(n_neighbours + 1)) if self.use_neighbours else (0,)

    def responses_per_variant(self, group_size: int, n_neighbours: int) -> int:
        """Responses sampled for each prompt variant."""
        if group_size < 1:
            raise ValueError("group_size must be >= 1")
        return (n_neighbours + 1) * group_size if self.matched_budget else group_size

    def responses_per_question(self, group_size: int, n_neighbours: int) -> int:
        return len(self.variants(n_neighbours)) * self.responses_per_variant(
            group_size, n_neighbours
        )


METHODS: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            name="grpo",
            use_neighbours=False,
            matched_budget=False,
            grouping="per_original",
            anchor="own",
            description="GRPO (Eq. 1, 2)",
        ),
        MethodSpec(
            name="grpo_ds",
            use_neighbours=False,
            matched_budget=False,
            grouping="per_original",
            anchor="own",
            dynamic_sampling=True,
            description="GRPO with DAPO dynamic sampling",
        ),
        MethodSpec(
            name="grpo_x4",
            use_neighbours=False,
            matched_budget=True,
            grouping="per_original",
            anchor="own",
            description="(N+1)xGRPO: (N+1)G responses to q0 (matched budget, section 5.4)",
        ),
        MethodSpec(
            name="grpo_x4_ds",
            use_neighbours=False,
            matched_budget=True,
            grouping="per_original",
            anchor="own",
            dynamic_sampling=True,
            description="(N+1)xGRPO with dynamic sampling",
        ),
        MethodSpec(
            name="ta_grpo_star",
            use_neighbours=True,
            matched_budget=False,
            grouping="per_variant",
            anchor="own",
            description="TA-GRPO*: rephrasings sampled, per-rephrasing groups and ratios",
        ),
        MethodSpec(
            name="ta_grpo",
            use_neighbours=True,
            matched_budget=False,
            grouping="joint",
            anchor="original",
            description="TA-GRPO: joint normalisation (Eq. 3), ratios under q0 (Eq. 4)",
        ),
        MethodSpec(
            name="ta_grpo_unanchored",
            use_neighbours=True,
            matched_budget=False,
            grouping="joint",
            anchor="own",
            description="TA-GRPO without Eq. 4: joint groups (Eq. 3), ratios under each "
            "response's own prompt (the authors' public code)",
        ),
        MethodSpec(
            name="avspo",
            use_neighbours=False,
            matched_budget=False,
            grouping="per_original",
            anchor="own",
            estimator="avspo",
            description="AVSPO: virtual rewards in collapsed groups' statistics",
        ),
        MethodSpec(
            name="grpo_flipped",
            use_neighbours=False,
            matched_budget=False,
            grouping="per_original",
            anchor="own",
            estimator="grpo_flipped",
            description="negative control: GRPO with the advantages' sign flipped",
            negative_control=True,
        ),
    )
}


def get_method(name: str) -> MethodSpec:
    """The spec of a method by name (``ValueError`` listing the known names otherwise)."""
    try:
        return METHODS[name]
    except KeyError:
        raise ValueError(f"unknown method {name!r}; known: {sorted(METHODS)}") from None
