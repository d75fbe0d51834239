"""Grader parity: the same saved responses graded by every grader that applies.

Evaluation grades each response with ``common.grading.grader`` (``correct``, ``pred``,
``grade_reason``) and then with every grader of :mod:`tagrpo.grading.graders` (columns
``correct_<grader>``, ``pred_<grader>``, ``reason_<grader>``); ``tagrpo grade --parity`` does
the same over saved samples without sampling. The table per benchmark: pass@1 and pass@k under
each grader, the responses graded ``timeout``/``wall_timeout``/``error`` (a grader that hung or
raised, bounded by the grading pool: never counted as a plain wrong answer), the responses on
which the graders disagree, and a few of them.

Multiple choice is graded by option letters under every grader
(:func:`tagrpo.grading.graders.applicable_graders`), so its chance floor is the same under each
and its table has one row. The mini world's answers are plain integers in a box: where a
response's every ``\\boxed{...}`` is closed and holds the same plain integer, every grader reads
it alike, so a disagreement there is reported as a bug. Any other response (no box, a chain cut
at the token limit; ``\\boxed`` without its brace, an unclosed brace, boxes of different
values, a box that is not an integer) is read by each grader its own way: math-verify, as verl
calls it, takes the last number it can parse (``15 + 8 = 23.``), verl's ``math_reward`` takes a
``\\boxed `` without a brace before any braced box; such disagreements are counted apart
(``malformed``: :func:`plain_integer_box`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence

import numpy as np
import pandas as pd

from tagrpo.grading.graders import GRADERS, applicable_graders, parity_kind
from tagrpo.grading.types import GradeFn
from tagrpo.metrics.passk import pass_at_k_per_problem
from tagrpo.plumbing.markdown import markdown_table

ERROR_REASONS = frozenset({"timeout", "wall_timeout", "error"})
SHOWN_EXAMPLES = 3
_SHOWN_CHARS = 80


_BOX = "\\boxed"
_PLAIN_INTEGER = re.compile(r"\s*[-+]?\d+\s*")


def plain_integer_box(response: str) -> bool:
    """Whether every ``\\boxed`` of ``response`` opens a brace that closes, each holding the same
    plain integer: the one answer form every grader reads alike."""
    values = set()
    start = response.find(_BOX)
    if start < 0:
        return False
    while start >= 0:
        opening = start + len(_BOX)
        if not response.startswith("{", opening):
            return False
        depth, end = 1, opening + 1
        while end < len(response) and depth:
            depth += {"{": 1, "}": -1}.get(response[end], 0)
            end += 1
        content = response[opening + 1 : end - 1]
        if depth or not _PLAIN_INTEGER.fullmatch(content):
            return False
        values.add(int(content))
        start = response.find(_BOX, end)
    return len(values) == 1


def verdict_columns(grader: str) -> tuple[str, str, str]:
    """The correct, pred and reason columns of ``grader``."""
    return f"correct_{grader}", f"pred_{grader}", f"reason_{grader}"


def has_parity(responses: pd.DataFrame) -> bool:
    """Whether every grader's verdict columns are there."""
    return all(column in responses for g in GRADERS for column in verdict_columns(g))


def grade_parity(
    responses: pd.DataFrame, grade: GradeFn, graded_by: str | None = None
) -> pd.DataFrame:
    """``responses`` with every grader's verdict columns, in one grading call.

    ``graded_by``: the grader whose verdicts ``correct``/``pred``/``grade_reason`` already
    hold (reused, not graded again); None grades every grader afresh.
    """
    kinds = responses["answer_kind"].tolist()
    texts, answers = responses["response"].tolist(), responses["answer"].astype(str).tolist()
    reused = graded_by is not None
    verdicts: dict[str, list[tuple[bool, str, str] | None]] = {
        g: [None] * len(kinds) for g in GRADERS
    }
    if reused:
        previous = zip(
            responses["correct"], responses["pred"], responses["grade_reason"], strict=True
        )
        for index, (correct, pred, reason) in enumerate(previous):
            verdict = (bool(correct), str(pred), str(reason))
            verdicts[str(graded_by)][index] = verdict
            if kinds[index] != "math":  # one rule for every grader (the module docstring)
                for grader in GRADERS:
                    verdicts[grader][index] = verdict
    wanted = [
        (grader, index)
        for index, kind in enumerate(kinds)
        for grader in applicable_graders(kind)
        if verdicts[grader][index] is None
    ]
    results = grade(
        [texts[i] for _, i in wanted],
        [answers[i] for _, i in wanted],
        [parity_kind(kinds[i], grader) for grader, i in wanted],
    )
    for (grader, index), result in zip(wanted, results, strict=True):
        graders = GRADERS if kinds[index] != "math" else (grader,)
        for each in graders:
            verdicts[each][index] = (bool(result[0]), str(result[1]), str(result[2]))
    graded = responses.copy()
    for grader in GRADERS:
        correct, pred, reason = verdict_columns(grader)
        column = verdicts[grader]
        graded[correct] = [v[0] for v in column]  # type: ignore[index]  # all filled above
        graded[pred] = [v[1] for v in column]  # type: ignore[index]
        graded[reason] = [v[2] for v in column]  # type: ignore[index]
    return graded


def _graders_of(rows: pd.DataFrame) -> tuple[str, ...]:
    kinds = set(rows["answer_kind"])
    return GRADERS if "math" in kinds else ("tagrpo",)


def disagreeing(rows: pd.DataFrame) -> pd.Series:
    """Per response: whether the graders that apply to it give different verdicts."""
    graders = _graders_of(rows)
    verdicts = rows[[verdict_columns(g)[0] for g in graders]].astype(bool)
    return verdicts.nunique(axis=1) > 1


def parity_table(
    responses: pd.DataFrame, ks: Sequence[int], must_agree: Collection[str] = ()
) -> pd.DataFrame:
    """One row per (benchmark, grader that applies): responses, ``pass_at_1``, ``pass_at_k``
    (``k``: the largest of ``ks`` every question has samples for), errors, and the benchmark's
    disagreements, and for a benchmark of ``must_agree`` those on responses without a plain
    integer box among them (``malformed``: :func:`plain_integer_box`; 0 for the others; the
    same on each of a benchmark's rows)."""
    rows = []
    for benchmark, table in responses.groupby("benchmark", sort=False):
        sizes = table.groupby("question_id", sort=False).size()
        feasible = [k for k in ks if k <= int(sizes.min())] or [1]
        largest = max(feasible)
        differ = disagreeing(table)
        disagreements = int(differ.sum())
        malformed = 0
        if benchmark in must_agree:  # which of its disagreements are bugs: the texts say
            if "response" not in table:
                raise ValueError(f"{benchmark} must agree: its responses' texts are needed")
            malformed = int((differ & ~table["response"].map(plain_integer_box)).sum())
        for grader in _graders_of(table):
            correct, _, reason = verdict_columns(grader)
            sums = table.groupby("question_id", sort=False)[correct].sum()
            rows.append(
                {
                    "benchmark": benchmark,
                    "grader": grader,
                    "responses": len(table),
                    "pass_at_1": float(np.mean(pass_at_k_per_problem(sizes, sums, 1))),
                    "k": largest,
                    "pass_at_k": float(np.mean(pass_at_k_per_problem(sizes, sums, largest))),
                    "errors": int(table[reason].isin(ERROR_REASONS).sum()),
                    "disagreements": disagreements,
                    "malformed_disagreements": malformed,
                    "must_agree": benchmark in must_agree,
                }
            )
    return pd.DataFrame(rows)


def parity_lines(table: pd.DataFrame) -> list[str]:
    """One line per benchmark of a :func:`parity_table`: pass@1 and errors by grader, and the
    disagreements (for a stage's log)."""
    lines = []
    for benchmark, rows in table.groupby("benchmark", sort=False):
        shown = ", ".join(
            f"{row.grader} {100 * row.pass_at_1:.1f}% ({row.errors} errors)"
            for row in rows.itertuples()
        )
        disagreements = int(rows["disagreements"].iloc[0])
        lines.append(f"{benchmark}: pass@1 {shown}; {disagreements} disagreement(s)")
    return lines


def _shown(text: object) -> str:
    value = str(text).replace("`", "'").replace("|", "\\|").replace("\n", " ")
    return value if len(value) <= _SHOWN_CHARS else value[:_SHOWN_CHARS] + "..."


def _verdict(row: pd.Series, grader: str) -> str:
    correct, _, reason = verdict_columns(grader)
    return f"{'right' if row[correct] else 'wrong'} ({row[reason]})"


def disagreement_examples(
    responses: pd.DataFrame, benchmark: str, count: int = SHOWN_EXAMPLES
) -> list[list[str]]:
    """The first ``count`` disagreeing responses of ``benchmark``: question, sample, gold, the
    answer each extraction read, each grader's verdict."""
    table = responses[responses["benchmark"] == benchmark]
    picked = table[disagreeing(table)].head(count)
    graders = _graders_of(table)
    examples = []
    for _, row in picked.iterrows():
        extracted = {_shown(row[verdict_columns(g)[1]]) for g in graders}
        examples.append(
            [
                f"`{row['question_id']}` #{row['sample_index']}",
                f"`{_shown(row['answer'])}`",
                " / ".join(f"`{e}`" for e in sorted(extracted)),
                *(_verdict(row, g) for g in graders),
            ]
        )
    return examples


def parity_section(
    responses: Mapping[str, pd.DataFrame],
    ks: Sequence[int],
    must_agree: Collection[str] = (),
    withheld: Mapping[str, str] | None = None,
    heading: str = "## Grader parity",
) -> str:
    """Markdown: per benchmark, each policy's pass@1 and pass@k under each grader, errors,
    disagreements, and a few disagreeing responses (``responses``: policy -> responses table;
    ``withheld``: benchmarks whose items must not be shown, and why)."""
    lines = [
        heading,
        "",
        "The same saved responses graded by each grader: `tagrpo` (this project's), "
        "`math_reward` (verl's `math_reward.compute_score`, the TA-GRPO authors'), "
        "`math_verify` (math-verify as verl calls it). Multiple choice is graded by option "
        "letters under every grader (one row). Errors: responses a grader hung or raised on, "
        "bounded by the grading pool (not counted as right). Disagreements: responses the "
        "graders give different verdicts.",
        "",
    ]
    missing = [policy for policy, table in responses.items() if not has_parity(table)]
    if missing:
        shown = ", ".join(f"`{p}`" for p in missing)
        lines += [
            f"Not graded by every grader (evaluated before grader parity): {shown}; "
            "`tagrpo grade --parity --input evals/<policy>/responses.parquet` regrades them.",
            "",
        ]
    tables = {p: t for p, t in responses.items() if p not in missing}
    if not tables:
        return "\n".join(lines).rstrip() + "\n"
    parity = {p: parity_table(t, ks, must_agree) for p, t in tables.items()}
    benchmarks = list(dict.fromkeys(b for t in parity.values() for b in t["benchmark"]))
    for benchmark in benchmarks:
        lines += [f"### {benchmark}", ""]
        rows, bug, malformed, graders = [], 0, 0, GRADERS
        for policy, table in parity.items():
            members = table[table["benchmark"] == benchmark]
            graders = tuple(members["grader"]) or graders
            for row in members.itertuples():
                rows.append(
                    [
                        f"`{policy}`",
                        row.grader if len(members) > 1 else "option letters (every grader)",
                        row.responses,
                        f"{100 * row.pass_at_1:.1f}",
                        f"{100 * row.pass_at_k:.1f} (k={row.k})",
                        row.errors,
                        row.disagreements,
                    ]
                )
                if row.must_agree and row.grader == "tagrpo":  # once per policy
                    bug += row.disagreements - row.malformed_disagreements
                    malformed += row.malformed_disagreements
        header = ["policy", "grader", "responses", "pass@1 (%)", "pass@k (%)", "errors"]
        lines += [markdown_table([*header, "disagreements"], rows), ""]
        if benchmark in must_agree:
            verdict = (
                f"**Bug: the graders disagree on {bug} plain boxed integer answer(s) of the mini "
                "world** (each `\\boxed{...}` closed, all the same integer: every grader reads "
                "those alike)."
                if bug
                else "The mini world's plain boxed integer answers (each `\\boxed{...}` closed, "
                "all the same integer): every grader agrees."
            )
            if malformed:
                verdict += (
                    f" {malformed} response(s) without such a box (none, `\\boxed` without its "
                    "brace, an unclosed brace, boxes of different values, a box that is not an "
                    "integer) disagree: each grader reads those its own way."
                )
            lines += [verdict, ""]
        if withheld and benchmark in withheld:
            lines += [f"Examples withheld: {withheld[benchmark]}.", ""]
            continue
        examples = [
            [f"`{policy}`", *example]
            for policy, table in tables.items()
            for example in disagreement_examples(table, benchmark)
        ][:SHOWN_EXAMPLES]
        if examples:
            header = ["policy", "question #sample", "gold", "extracted", *graders]
            lines += ["Disagreeing responses:", "", markdown_table(header, examples), ""]
    return "\n".join(lines).rstrip() + "\n"


__all__ = [
    "ERROR_REASONS",
    "GRADERS",
    "disagreeing",
    "disagreement_examples",
    "grade_parity",
    "has_parity",
    "parity_lines",
    "parity_section",
    "parity_table",
    "verdict_columns",
]
