"""The report's example responses: real text per policy and benchmark, GPQA withheld."""

from __future__ import annotations

import pandas as pd

from tagrpo.report.examples import example_responses_section


def responses(benchmark: str, texts: list[str]) -> pd.DataFrame:
    rows = []
    for question, text in enumerate(texts):
        for sample in range(2):
            rows.append(
                {
                    "benchmark": benchmark,
                    "question_id": f"{benchmark}-{question}",
                    "sample_index": sample,
                    "answer": "7",
                    "response": text if sample == 0 else "another sample",
                    "pred": "7" if question == 0 else "",
                    "correct": question == 0,
                    "num_tokens": 12,
                    "finished": question == 0,
                }
            )
    return pd.DataFrame(rows)


def test_sample_zero_of_the_first_questions_per_benchmark_and_policy() -> None:
    base = pd.concat(
        [
            responses("math500", ["3 + 4 = \\boxed{7}", "x" * 30, "not shown"]),
            responses("gpqa_diamond", ["a GPQA answer"]),
        ]
    )
    section = example_responses_section({"base": base}, per_benchmark=2, max_chars=20)
    assert section.splitlines()[:4] == [
        "## Example responses",
        "",
        "Sample 0 of the first 2 questions of every benchmark, per policy, as graded by the "
        "evaluation (text cut at 20 characters).",
        "",
    ]
    assert (
        "`math500-0`: gold `7`, extracted `7`, correct, 12 tokens\n\n"
        "~~~~text\n3 + 4 = \\boxed{7}\n~~~~" in section
    )
    assert (
        "`math500-1`: gold `7`, extracted ``, wrong, 12 tokens, cut at the token limit" in section
    )
    assert "x" * 20 + " [...]" in section and "x" * 21 not in section
    assert "not shown" not in section and "another sample" not in section
    assert "### `base` on gpqa_diamond\n\nWithheld: its authors ask" in section
    assert "a GPQA answer" not in section


def test_a_fence_in_a_response_cannot_close_the_block() -> None:
    section = example_responses_section({"p": responses("aime24", ["a\n~~~~\nb"])}, 1)
    assert "~~~~text\na\n~ ~ ~ ~\nb\n~~~~" in section
