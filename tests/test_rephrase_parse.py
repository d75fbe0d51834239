"""The Appendix A template, parsing of messy replies, and the content-addressed reply cache."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from tagrpo.data.rephrase_templates import (
    APPENDIX_A,
    APPENDIX_A_EXAMPLES,
    load_template,
)
from tagrpo.rephrase.cache import ReplyCache, cache_key
from tagrpo.rephrase.parse import parse_reply


def test_appendix_a_template_has_the_papers_instruction_examples_and_cue() -> None:
    assert len(APPENDIX_A_EXAMPLES) == 8
    messages = APPENDIX_A.messages("What is 3 + 4?")
    assert len(messages) == 1 and messages[0]["role"] == "user"
    content = messages[0]["content"]
    assert content.startswith("You are a helpful AI assistant. Given the question, your task is")
    assert content.count("Question: ") == 9  # eight examples and the new question
    assert content.count("Rephrasing it:") == 9
    assert content.endswith("Question: What is 3 + 4?\n\nRephrasing it:")
    assert "$x^{2}+y^{2}-7=4y-14x+3$" in content  # the LaTeX form, not the PDF's double text
    assert APPENDIX_A.cache_version(1) == "appendix_a/v1"
    assert APPENDIX_A.cache_version(3) == "appendix_a/v1+numbered"
    numbered = APPENDIX_A.messages("Q?", n_items=3)[0]["content"]
    assert "Write 3 different rephrasings of the last question. Number them 1 to 3" in numbered
    with pytest.raises(ValueError, match="n_items"):
        APPENDIX_A.messages("Q?", n_items=0)


def test_template_file_is_versioned_by_content(tmp_path: Path) -> None:
    path = tmp_path / "mine.txt"
    path.write_text("Rephrase the question.")
    first = load_template(path=path)
    path.write_text("Rephrase the question, please.")
    second = load_template(path=path)
    assert first.version.startswith("file/") and first.version != second.version
    assert second.messages("Q?")[0]["content"] == (
        "Rephrase the question, please.\n\nQuestion: Q?\n\nRephrasing it:"
    )
    with pytest.raises(ValueError, match="unknown rephrase template"):
        load_template("nope")
    path.write_text("  ")
    with pytest.raises(ValueError, match="empty"):
        load_template(path=path)


@pytest.mark.parametrize(
    ("reply", "expected", "items", "issues"),
    [
        ("Rephrasing it: What is 2 + 3?", 1, ["What is 2 + 3?"], []),
        (  # the paper's first example echoes "the above question:"
            "Rephrasing it: the above question: Starting at 0, where is he?",
            1,
            ["Starting at 0, where is he?"],
            [],
        ),
        (  # the whole prompt turn echoed back
            "Question: What is 2 + 3?\nRephrasing it: Determine the sum of 2 and 3.",
            1,
            ["Determine the sum of 2 and 3."],
            [],
        ),
        ('"Find 2 + 3."', 1, ["Find 2 + 3."], []),
        ("**Find 2 + 3.**", 1, ["Find 2 + 3."], []),
        ("```\nFind 2 + 3.\n```", 1, ["Find 2 + 3."], ["fence"]),
        (  # a rephrasing that begins with a number is not a list marker
            "12 apples are shared by 3 children. How many each?",
            1,
            ["12 apples are shared by 3 children. How many each?"],
            [],
        ),
        (  # a multi-line rephrasing stays one item when one was asked for
            "Let $f$ be given by\n$$f(x)=x^2$$\nFind $f(3)$.",
            1,
            ["Let $f$ be given by\n$$f(x)=x^2$$\nFind $f(3)$."],
            [],
        ),
        ("   \n\n ", 1, [], ["empty", "short:1"]),
        (
            "Sure! Here are three rephrasings:\n\n1. What is A?\n2) What is B?\n\n(3) What is C?",
            3,
            ["What is A?", "What is B?", "What is C?"],
            ["preamble", "numbered"],
        ),
        (
            "**1.** First one\ncontinued here\n**2.** Second\n**3.** Third\n**4.** Fourth",
            3,
            ["First one\ncontinued here", "Second", "Third"],
            ["numbered", "extra:1"],
        ),
        (
            "Rephrasing 1: Alpha?\nRephrasing 2: Beta?\nRephrasing 3: Gamma?",
            3,
            ["Alpha?", "Beta?", "Gamma?"],
            ["numbered"],
        ),
        ("Alpha?\n\nBeta?\n\n\nGamma?", 3, ["Alpha?", "Beta?", "Gamma?"], ["blocks"]),
        ("Alpha?\nBeta?", 3, ["Alpha?", "Beta?"], ["lines", "short:1"]),
        (
            "1. Alpha?\n2. Alpha?\n3. Beta?",
            3,
            ["Alpha?", "Beta?"],
            ["numbered", "duplicate", "short:1"],
        ),
        (  # a numbered reply to a one-item request: the first item is kept, the rest counted
            "1. Alpha?\n2. Beta?",
            1,
            ["Alpha?"],
            ["numbered", "extra:1"],
        ),
    ],
)
def test_parse_reply_handles_messy_replies(
    reply: str, expected: int, items: list[str], issues: list[str]
) -> None:
    parsed = parse_reply(reply, expected)
    assert parsed.items == items
    assert parsed.issues == issues


def test_parse_reply_rejects_a_nonsense_expectation() -> None:
    assert parse_reply(None, 2).items == []
    with pytest.raises(ValueError, match="expected"):
        parse_reply("x", 0)


def test_cache_key_is_canonical_and_sensitive_to_every_part() -> None:
    parts = {"backend": "openai", "model": "m", "question": "Q", "variants": [0], "round": 0}
    assert cache_key(parts) == cache_key(dict(reversed(list(parts.items()))))
    for name, other in [("model", "m2"), ("question", "Q "), ("variants", [1]), ("round", 1)]:
        assert cache_key({**parts, name: other}) != cache_key(parts)


def test_reply_cache_persists_commits_and_reads_in_bulk(tmp_path: Path) -> None:
    path = tmp_path / "c" / "replies.sqlite"
    with ReplyCache(path) as cache:
        cache.put("k1", "rephrase", {"texts": ["a"], "usage": {"prompt_tokens": 3}})
        cache.put("k2", "solver", {"texts": ["b", "c"]})
        # Another connection sees the rows at once: each put is committed on its own.
        other = sqlite3.connect(path)
        assert other.execute("SELECT COUNT(*) FROM replies").fetchone() == (2,)
        other.close()
    with ReplyCache(path) as cache:
        assert cache.get("k1") == {"texts": ["a"], "usage": {"prompt_tokens": 3}}
        assert cache.get("missing") is None
        many = cache.get_many([f"x{i}" for i in range(1200)] + ["k2", "k1", "k2"])
        assert many == {"k1": cache.get("k1"), "k2": {"texts": ["b", "c"]}}
        assert cache.count() == 2 and cache.count("solver") == 1
        assert sqlite3.connect(path).execute("PRAGMA journal_mode").fetchone() == ("wal",)
