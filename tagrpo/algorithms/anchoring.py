"""How off-policy Eq. 4 is: the neighbour responses' log-ratio between q0 and their own prompt.

TA-GRPO scores a response sampled from a rephrasing q^n under the original question q0 (Eq. 4),
so its PPO ratio is taken against pi_old(o | q0), not the distribution it was drawn from. For
every neighbour response (variant >= 1) and every response token,

    d_t = log pi_old(o_t | q0, o_<t) - log pi_old(o_t | q^n, o_<t),

and a response's implied importance weight (target q0, proposal q^n) is ``w = exp(sum_t d_t)``.
Both backends compute the two log-probabilities with the same old policy (one extra forward
pass under the prompt the method does not score with) and call :func:`anchoring_shift`.

Metrics (``anchoring/...``; absent for methods that sample no rephrasings):

* ``log_ratio_mean`` and ``log_ratio_p1/p5/p50/p95/p99``: over all neighbour-response tokens of
  the step (every token counts once; quantiles by linear interpolation, numpy's default);
* ``seq_log_weight_mean``: the mean over neighbour responses of ``sum_t d_t``;
* ``ess_fraction``: Kish's effective sample size of the weights over all neighbour responses
  of the step, ``(sum w)^2 / sum w^2``, divided by their number (1 = uniform weights, 1/n = one
  response carries all the weight);
* ``ess_fraction_group_mean``: the same within each (question, rephrasing) group of responses,
  divided by the group's size, then averaged over the groups (the weights a single prompt's
  importance-sampling estimate would use);
* ``neighbour_responses``, ``neighbour_tokens``: what the figures are over.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

PREFIX = "anchoring/"
QUANTILES = (1, 5, 50, 95, 99)


def kish_ess_fraction(log_weights: np.ndarray) -> float:
    """``(sum w)^2 / sum w^2 / n`` for ``w = exp(log_weights)``, computed stably in log space."""
    log_weights = np.asarray(log_weights, dtype=np.float64)
    if log_weights.size == 0:
        raise ValueError("no weights: the effective sample size of nothing is undefined")
    if not np.all(np.isfinite(log_weights)):
        raise ValueError("non-finite log importance weight")
    shifted = log_weights - log_weights.max()
    total = np.exp(shifted).sum()
    squares = np.exp(2 * shifted).sum()
    return float(total * total / squares / log_weights.size)


def anchoring_shift(
    log_probs_q0: Sequence[np.ndarray],
    log_probs_qn: Sequence[np.ndarray],
    group: Sequence[int] | np.ndarray,
) -> dict[str, float]:
    """The ``anchoring/...`` metrics (module docstring) of a step's neighbour responses.

    ``log_probs_q0[i]`` / ``log_probs_qn[i]``: the old policy's log-probability of each token
    of neighbour response i under q0 and under the rephrasing it was sampled from (equal
    lengths); ``group[i]``: its (question, rephrasing) group, any integer label.
    """
    if not len(log_probs_q0) == len(log_probs_qn) == len(group):
        raise ValueError(
            f"{len(log_probs_q0)} responses under q0, {len(log_probs_qn)} under q^n, "
            f"{len(group)} group labels: one of each per neighbour response"
        )
    if not log_probs_q0:
        raise ValueError("no neighbour response: the anchoring shift needs at least one")
    per_token, per_response = [], []
    for index, (under_q0, under_qn) in enumerate(zip(log_probs_q0, log_probs_qn, strict=True)):
        under_q0 = np.asarray(under_q0, dtype=np.float64)
        under_qn = np.asarray(under_qn, dtype=np.float64)
        if under_q0.shape != under_qn.shape or under_q0.ndim != 1 or under_q0.size == 0:
            raise ValueError(
                f"neighbour response {index}: {under_q0.shape} log-probs under q0 and "
                f"{under_qn.shape} under q^n; one per response token, at least one"
            )
        difference = under_q0 - under_qn
        if not np.all(np.isfinite(difference)):
            raise ValueError(f"neighbour response {index}: non-finite log-probability")
        per_token.append(difference)
        per_response.append(difference.sum())
    tokens = np.concatenate(per_token)
    log_weights = np.asarray(per_response)
    labels = np.asarray(group)
    groups = [log_weights[labels == label] for label in dict.fromkeys(labels.tolist())]
    metrics = {
        f"{PREFIX}log_ratio_mean": float(tokens.mean()),
        **{
            f"{PREFIX}log_ratio_p{q}": float(value)
            for q, value in zip(QUANTILES, np.percentile(tokens, QUANTILES), strict=True)
        },
        f"{PREFIX}seq_log_weight_mean": float(log_weights.mean()),
        f"{PREFIX}ess_fraction": kish_ess_fraction(log_weights),
        f"{PREFIX}ess_fraction_group_mean": float(np.mean([kish_ess_fraction(g) for g in groups])),
        f"{PREFIX}neighbour_responses": float(log_weights.size),
        f"{PREFIX}neighbour_tokens": float(tokens.size),
    }
    return metrics
