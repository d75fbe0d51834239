"""Example responses in the report: what each policy actually wrote, a few per benchmark."""

from __future__ import annotations

from collections.abc import Mapping

import pandas as pd

# Benchmarks whose items must not be shown in plain text in a public artifact.
WITHHELD = {"gpqa_diamond": "its authors ask that examples not be posted in plain text"}
FENCE = "~~~~"


def example_responses_section(
    responses: Mapping[str, pd.DataFrame], per_benchmark: int, max_chars: int = 600
) -> str:
    """Markdown: for each policy and benchmark, sample 0 of its first ``per_benchmark``
    questions (``responses``: policy -> the evaluate stage's responses table), graded as the
    evaluation graded them; text cut at ``max_chars``."""
    lines = [
        "## Example responses",
        "",
        f"Sample 0 of the first {per_benchmark} questions of every benchmark, per policy, as "
        f"graded by the evaluation (text cut at {max_chars} characters).",
        "",
    ]
    for policy, table in responses.items():
        for benchmark, rows in table.groupby("benchmark", sort=False):
            lines.append(f"### `{policy}` on {benchmark}")
            lines.append("")
            if benchmark in WITHHELD:
                lines += [f"Withheld: {WITHHELD[str(benchmark)]}.", ""]
                continue
            picked = rows[rows["sample_index"] == 0].head(per_benchmark)
            for row in picked.itertuples():
                verdict = "correct" if row.correct else "wrong"
                cut = "" if row.finished else ", cut at the token limit"
                lines.append(
                    f"`{row.question_id}`: gold `{row.answer}`, extracted `{row.pred or ''}`, "
                    f"{verdict}, {row.num_tokens} tokens{cut}"
                )
                lines.append("")
                text = str(row.response).replace(FENCE, "~ ~ ~ ~")
                if len(text) > max_chars:
                    text = text[:max_chars] + " [...]"
                lines += [f"{FENCE}text", text, FENCE, ""]
    return "\n".join(lines).rstrip() + "\n"
