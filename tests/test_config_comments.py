"""The comments of params.yaml and the profiles state no number that a run, a file or the code
can give (issue 54): no measured figure, no restated value of another key, no count the file
itself or dvc.yaml gives. They say why, and point to where a number is (a key, a command, a
file). Names that hold digits stay: key paths and files (``world-v3.md``, ``checkpoint-050``),
the paper's and the pre-registrations' sections, version pins and commit hashes of upstream code,
and upstream settings quoted as ``key=value`` (the authors' scripts)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from test_doc_quotes import NAMES, NOT_PROSE

ROOT = Path(__file__).resolve().parents[1]

# Names with digits that config comments need beyond the docs' NAMES: a pre-registration's
# rules, candidates, drops and amendments, equations cited as "Eq. 2/4", "Section 5.5",
# upstream version pins (verl 0.9.1, 0.5.0.dev) and commit hashes (67d09b7), upstream settings
# in Hydra/call form (data.train_batch_size=256, n=128), pass@k, hub ids and paths
# (Qwen/Qwen3-4B) and model names (Qwen3-4B).
CONFIG_NAMES = re.compile(
    r"\b(?:rules?|candidates?|drops?|amendment) \d+(?: and \d+)*\b"
    r"|\bEqs?\. \d+(?:[/-]\d+)*|\bSections? \d+(?:\.\d+)*"
    r"|\b\d+\.\d+\.\d+(?:\.dev\d*)?"
    r"|\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}\b"
    r"|\b[a-z_][\w.]*=[\w.\-]+"
    r"|@\w+"
    r"|\b[A-Za-z][\w.-]*/[A-Za-z][\w.-]*"
    r"|\b(?:Qwen3|Llama-3\.\d)-\d+(?:\.\d+)?B(?:-Instruct)?\b"
)
# A word: what a number or a name is made of. One that starts with a letter is a name
# (H100, world-v3.md, grpo_x4, q0); one that starts with a digit is a number (5e-6, 4,309).
WORD = re.compile(r"[\w.\-/]+")


def config_files() -> list[Path]:
    profiles = sorted((ROOT / "profiles").glob("*.yaml"))
    return [ROOT / "params.yaml", *profiles]


def comment_of(line: str) -> str:
    """The comment of a YAML line: from a ``#`` at its start or after a blank, outside quotes."""
    quote = ""
    for i, char in enumerate(line):
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[i + 1 :]
    return ""


def numbers_in(comment: str) -> list[str]:
    """The words of ``comment`` that are numbers once the allowed names are taken out."""
    text = NAMES.sub(" ", CONFIG_NAMES.sub(" ", NOT_PROSE.sub(" ", comment)))
    words = (word.lstrip(".-/") for word in WORD.findall(text))
    return [word for word in words if word[:1].isdigit()]


def hand_written_numbers(name: str, text: str) -> list[str]:
    """``name:line: [numbers] in 'line'`` for each line of ``text`` whose comment has numbers."""
    found = []
    for number, line in enumerate(text.splitlines(), start=1):
        numbers = numbers_in(comment_of(line))
        if numbers:
            found.append(f"{name}:{number}: {numbers} in {line.strip()!r}")
    return found


@pytest.mark.parametrize("path", config_files(), ids=lambda path: path.name)
def test_no_hand_written_number_in_the_comments(path: Path) -> None:
    found = hand_written_numbers(str(path.relative_to(ROOT)), path.read_text(encoding="utf-8"))
    assert not found, "numbers a run, a file or the code gives:\n" + "\n".join(found)


def test_the_scan_covers_params_and_the_profiles() -> None:
    names = {path.name for path in config_files()}
    assert {"params.yaml", "paper.yaml", "smoke.yaml", "local.yaml"} <= names
    assert {"study-pilot.yaml", "study-main.yaml"} <= names


@pytest.mark.parametrize(
    ("line", "numbers"),
    [
        (
            "  torch_threads: 2  # differs by 5e-6 at 2 threads against 1 and 4",
            ["5e-6", "2", "1", "4"],
        ),
        ("  wall_timeout_s: null    # null = 3 x item_timeout_s + 10", ["3", "10"]),
        ("# the longest problems have 4,309 (MATH) characters", ["4", "309"]),
        ("# 65-78 s per policy (cold `dvc repro` of this profile 10.6 min)", ["65-78", "10.6"]),
        ("# the negative control (+/-1 points, -0.2 nats)", ["1", "0.2"]),
        ("  seed: 7  # a value, no comment digits", []),
        ('  title: "draw #3 of 5"', []),
        ("# preregistration/world-v3.md, rule 7, drops 4 and 5; Eq. 2/4; section 5.5", []),
        ("# verl 0.9.1 (theirs 0.5.0.dev at 67d09b7): rollout.max_num_seqs=1024, n=128", []),
        ("# checkpoint-050, H100, grpo_x4, q0, pass@32, `12 + 7`, http://127.0.0.1:8000/v1", []),
        ("# hub ids Qwen/Qwen3-1.7B, meta-llama/Llama-3.2-1B-Instruct; Qwen3-4B's state", []),
        ("# a 1.7B policy, 256/128 rows", ["1.7B", "256/128"]),
    ],
)
def test_the_scan_finds_numbers_and_passes_names(line: str, numbers: list[str]) -> None:
    assert numbers_in(comment_of(line)) == numbers


def test_a_measured_figure_in_params_is_named_by_file_and_line() -> None:
    lines = (ROOT / "params.yaml").read_text(encoding="utf-8").splitlines()
    line = next(i for i, text in enumerate(lines) if text.startswith("  torch_threads:"))
    lines[line] += "  # differs by 5e-6 at 2 threads"
    assert hand_written_numbers("params.yaml", "\n".join(lines)) == [
        f"params.yaml:{line + 1}: ['5e-6', '2'] in {lines[line].strip()!r}"
    ]
