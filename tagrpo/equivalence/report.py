"""Acceptance figures of the equivalence checks, and the report section that shows them."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Mapping, Sequence
from typing import Any

from tagrpo.equivalence.acceptance import CHECKS, Verdict
from tagrpo.equivalence.consistency import CONSISTENCY_REASONS, UNVERIFIABLE_REASONS
from tagrpo.equivalence.structural import STRUCTURAL_REASONS

OTHER_REASONS = {
    "passed": "accepted by every enabled check",
    "duplicate": "the same text as another slot of the question",
    "low_similarity": "embedding cosine below the threshold",
    "generation_failed": "the request failed after its retries",
    "parse_missing": "the reply held fewer rephrasings than asked",
    "no_transform": "the rules backend has no further equivalent transform",
}
REASONS = {**STRUCTURAL_REASONS, **CONSISTENCY_REASONS, **OTHER_REASONS}


def _rate(part: int, whole: int) -> float:
    return part / whole if whole else 0.0


def check_rates(verdicts: Sequence[Verdict], enabled: Sequence[str]) -> dict[str, dict[str, Any]]:
    """Per check: how many candidates reached it, passed it, and the pass rate.

    A candidate reached a check if its last applied check (``check_reached``) is that one or
    a later one; it passed unless it was rejected there.
    """
    rates = {}
    for check in CHECKS:
        if check not in enabled:
            continue
        position = CHECKS.index(check)
        reached = [v for v in verdicts if CHECKS.index(v.check_reached) >= position]
        rejected = sum(1 for v in reached if v.check_reached == check and not v.accepted)
        rates[check] = {
            "reached": len(reached),
            "passed": len(reached) - rejected,
            "pass_rate": _rate(len(reached) - rejected, len(reached)),
        }
    return rates


def _group_rates(verdicts: Sequence[Verdict], key: Any) -> dict[str, dict[str, Any]]:
    groups: dict[str, list[Verdict]] = defaultdict(list)
    for verdict in verdicts:
        groups[str(key(verdict))].append(verdict)
    return {
        name: {
            "candidates": len(items),
            "accepted": sum(v.accepted for v in items),
            "acceptance_rate": _rate(sum(v.accepted for v in items), len(items)),
        }
        for name, items in sorted(groups.items())
    }


def origin_group(origin: str) -> str:
    """A short label for an origin: the rules transform's first part, or the backend:model."""
    if origin.startswith("rules:"):
        first = origin[len("rules:") :].split("+")[0]
        return "rules:" + (first if first.startswith("family:") else first.split(":")[0])
    return origin


def summarize(
    verdicts: Sequence[Verdict],
    outcome: Mapping[str, int],
    enabled: Sequence[str],
    questions: int,
    kept: int,
    rejected: int,
) -> dict[str, Any]:
    """The metrics of ``metrics/check_equivalence.json`` (nested; flattened for MLflow)."""
    candidates = [v for v in verdicts if v.kind == "candidate"]
    controls = [v for v in verdicts if v.kind.startswith("control:")]
    first_round = [v for v in candidates if v.round == 0]
    accepted = sum(v.accepted for v in candidates)
    consistency = [v for v in candidates if v.check_reached == "consistency"]
    summary: dict[str, Any] = {
        "questions": {"rows_in": questions, "kept": kept, "rejected": rejected},
        "candidates": len(candidates),
        "accepted": accepted,
        "acceptance_rate": _rate(accepted, len(candidates)),
        "first_round_acceptance_rate": _rate(
            sum(v.accepted for v in first_round), len(first_round)
        ),
        "accepted_unverified": sum(
            v.accepted and v.reason in UNVERIFIABLE_REASONS for v in candidates
        ),
        "checks": check_rates(candidates, enabled),
        "reasons": dict(sorted(Counter(v.reason for v in candidates).items())),
        "by_source": _group_rates(candidates, lambda v: v.source),
        "by_origin": _group_rates(candidates, lambda v: origin_group(v.origin)),
        "by_round": _group_rates(candidates, lambda v: v.round),
        "policy": {key: int(value) for key, value in sorted(outcome.items())},
    }
    if consistency:
        originals = {v.question_id: v for v in consistency if v.original_k}
        summary["solver"] = {
            "original_success": _rate(
                sum(v.original_correct or 0 for v in originals.values()),
                sum(v.original_k or 0 for v in originals.values()),
            ),
            "rephrasing_success": _rate(
                sum(v.solver_correct or 0 for v in consistency),
                sum(v.solver_k or 0 for v in consistency),
            ),
        }
    if controls:
        by_kind: dict[str, dict[str, Any]] = {}
        for kind in sorted({v.kind for v in controls}):
            items = [v for v in controls if v.kind == kind]
            caught = [v for v in items if not v.accepted]
            by_kind[kind.split(":", 1)[1]] = {
                "n": len(items),
                "rejected": len(caught),
                "detection_rate": _rate(len(caught), len(items)),
                "rejected_by": dict(sorted(Counter(v.check_reached for v in caught).items())),
            }
        summary["controls"] = by_kind
    return summary


def flatten_metrics(tree: Mapping[str, Any], prefix: str = "") -> dict[str, float]:
    """Numeric leaves of a nested dict as ``a/b/c`` keys (MLflow metrics)."""
    flat: dict[str, float] = {}
    for key, value in tree.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            flat.update(flatten_metrics(value, f"{name}/"))
        elif isinstance(value, int | float):  # bool included
            flat[name] = float(value)
    return flat


def _cell(text: str | None, limit: int = 160) -> str:
    text = " ".join((text or "").split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text.replace("|", "\\|") or "(none)"


def _percent(value: float) -> str:
    return f"{100 * value:.1f}%"


def report_section(
    summary: Mapping[str, Any],
    verdicts: Sequence[Verdict],
    originals: Mapping[str, str],
    settings: Mapping[str, Any],
    examples: int = 6,
) -> str:
    """Markdown for ``reports/sections/equivalence.md`` (included by the report stage)."""
    lines = ["## Rephrasings and their equivalence checks", ""]
    if "unfilled_slot_share" in summary:
        unfilled = summary["policy"].get("unfilled_slots", 0)
        padded = settings["fallback"] == "pad_original"
        handled = "padded with the original question" if padded else "their questions dropped"
        lines += [
            f"**Slots without a checked rephrasing: {unfilled} "
            f"({_percent(summary['unfilled_slot_share'])}), {handled}.** "
            "A padded slot makes TA-GRPO sample q0 again in that slot.",
            "",
        ]
    difficulty = summary.get("difficulty")
    if difficulty:
        lines += [
            f"Solver for the answer-consistency check: `{settings.get('solver', 'n/a')}`. The "
            f"policy `{difficulty['policy']}` (k = {difficulty['k']}) solves "
            f"{_percent(difficulty['success_all'])} of all {difficulty['candidates']} checked "
            f"rephrasings and {_percent(difficulty['success_accepted'])} of the accepted ones "
            f"(shift {difficulty['shift_points']:+.1f} points; rejected: "
            f"{_percent(difficulty['success_rejected'])}). A solver that is the policy itself "
            "keeps the rephrasings it already solves and shifts the training set toward easy "
            "ones; an independent solver should show no shift.",
            "",
        ]
    lines.append(
        f"Backend `{settings['backend']}`, N = {settings['n']} rephrasings per question, up to "
        f"{settings['max_rounds']} regeneration rounds, fallback `{settings['fallback']}`. "
        f"{summary['candidates']} candidates checked, {summary['accepted']} accepted "
        f"({_percent(summary['acceptance_rate'])}; first round "
        f"{_percent(summary['first_round_acceptance_rate'])}); "
        f"{summary['accepted_unverified']} of the accepted could not be verified by the solver."
    )
    if settings["backend"] == "rules":
        lines += [
            "",
            "The rules backend's rephrasings are equivalent by construction, so here every "
            f"rejection is a false one ({summary['candidates'] - summary['accepted']} of "
            f"{summary['candidates']}): the price of checking with an imperfect solver, "
            "weighed against what the checks catch in the negative controls below.",
        ]
    lines += ["", "| check | reached | passed | pass rate |", "|---|---:|---:|---:|"]
    for check, row in summary["checks"].items():
        lines.append(
            f"| {check} | {row['reached']} | {row['passed']} | {_percent(row['pass_rate'])} |"
        )
    lines += ["", "| source | candidates | accepted | rate |", "|---|---:|---:|---:|"]
    for name, row in summary["by_source"].items():
        lines.append(
            f"| {name} | {row['candidates']} | {row['accepted']} | "
            f"{_percent(row['acceptance_rate'])} |"
        )
    lines += ["", "| origin | candidates | accepted | rate |", "|---|---:|---:|---:|"]
    for name, row in summary["by_origin"].items():
        lines.append(
            f"| {_cell(name, 60)} | {row['candidates']} | {row['accepted']} | "
            f"{_percent(row['acceptance_rate'])} |"
        )
    policy = summary["policy"]
    rows = summary["questions"]
    lines += [
        "",
        f"Questions: {rows['rows_in']} in = {rows['kept']} kept + {rows['rejected']} dropped. "
        f"All N slots filled in the first round: {policy.get('complete_first_round', 0)}; after "
        f"regeneration: {policy.get('complete_regenerated', 0)}; padded with the original: "
        f"{policy.get('padded_questions', 0)} questions ({policy.get('padded_slots', 0)} slots).",
    ]
    if "solver" in summary:
        consistency = settings.get("consistency", {})
        lines += [
            "",
            f"Answer-consistency solve: k = {consistency.get('k')} samples of each original and "
            f"each rephrasing; solver success {_percent(summary['solver']['original_success'])} "
            f"on originals, {_percent(summary['solver']['rephrasing_success'])} on rephrasings. "
            f"Rule: accept if the gold answer is reached at least {consistency.get('min_correct')} "
            "time(s); reject if it never is while a one-sided Fisher exact test finds the "
            f"original solved significantly more often (p < {consistency.get('alpha')}); "
            f"otherwise unverifiable, which is `{consistency.get('on_unverifiable')}`ed.",
        ]
    if "controls" in summary:
        lines += [
            "",
            "Negative controls (answer-changing variants, never trained on): share rejected "
            "and by which check.",
            "",
            "| control | n | rejected | rate | rejected by |",
            "|---|---:|---:|---:|---|",
        ]
        for kind, row in summary["controls"].items():
            by = ", ".join(f"{check} {count}" for check, count in row["rejected_by"].items())
            lines.append(
                f"| {kind} | {row['n']} | {row['rejected']} | "
                f"{_percent(row['detection_rate'])} | {by or '-'} |"
            )
    rejected = [v for v in verdicts if v.kind == "candidate" and not v.accepted]
    chosen: list[Verdict] = []
    for reason in sorted({v.reason for v in rejected}):  # one per reason first, then more
        chosen.append(next(v for v in rejected if v.reason == reason))
    chosen += [v for v in rejected if v not in chosen]
    if chosen[:examples]:
        lines += [
            "",
            "Examples of rejected rephrasings:",
            "",
            "| original | rephrasing | reason | evidence |",
            "|---|---|---|---|",
        ]
        for verdict in chosen[:examples]:
            evidence = verdict.detail or ""
            if verdict.solver_k is not None:
                evidence = (
                    f"solver {verdict.solver_correct}/{verdict.solver_k} on the rephrasing "
                    f"(mostly {verdict.solver_mode!r}), {verdict.original_correct}/"
                    f"{verdict.original_k} on the original, p = {verdict.p_value:.3g}"
                    if verdict.p_value is not None
                    else f"solver {verdict.solver_correct}/{verdict.solver_k}"
                )
            lines.append(
                f"| {_cell(originals.get(verdict.question_id))} | {_cell(verdict.text)} | "
                f"{verdict.reason} | {_cell(evidence, 120)} |"
            )
    elif not rejected:
        lines += ["", "No rephrasing was rejected."]
    seen = sorted(summary["reasons"])
    lines += ["", "Reason codes: " + "; ".join(f"`{r}`: {REASONS.get(r, r)}" for r in seen) + "."]
    return "\n".join(lines) + "\n"
