"""``tagrpo grade``: the JSONL contract, bad input lines, and the reconciling summary."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tagrpo.pipeline.cli import build_parser, main

ROWS = [
    {"id": "q1-0", "response": "so $\\boxed{\\dfrac{1}{2}}$", "answer": "0.5"},
    {"id": "q1-1", "response": "\\boxed{3} then \\boxed{4}", "answer": "3"},
    {"id": 7, "response": "no box here", "answer": "4", "benchmark": "math500"},
    {"id": "g1", "response": "Answer: (b)", "answer": "B", "benchmark": "gpqa_diamond"},
    # an explicit answer_kind wins over the benchmark registry
    {"id": "g2", "response": "Answer: B", "answer": "B", "benchmark": "gpqa_diamond",
     "answer_kind": "math"},
    {"id": "n", "response": None, "answer": 12},
]  # fmt: skip

EXPECTED = [
    {"id": "q1-0", "correct": True, "pred": "\\dfrac{1}{2}", "reason": "numeric"},
    {"id": "q1-1", "correct": False, "pred": "4", "reason": "mismatch"},
    {"id": 7, "correct": False, "pred": "", "reason": "no_answer"},
    {"id": "g1", "correct": True, "pred": "B", "reason": "exact"},
    {"id": "g2", "correct": False, "pred": "", "reason": "no_answer"},
    {"id": "n", "correct": False, "pred": "", "reason": "no_answer"},
]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_grade_writes_one_row_per_line_in_order(tmp_path, capsys):
    source = write_lines(tmp_path / "in.jsonl", [json.dumps(row) for row in ROWS])
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target), "--workers", "1"]) == 0
    assert read_jsonl(target) == EXPECTED
    summary = capsys.readouterr().out
    assert "lines in 6 = graded 6 + rejected 0" in summary
    assert "correct 2/6" in summary


BAD_LINES = [
    json.dumps(ROWS[0]),
    "{not json",
    json.dumps({"id": "x", "response": "\\boxed{1}"}),  # no answer
    "",
    json.dumps([1, 2]),
    json.dumps({"id": "k", "response": "\\boxed{1}", "answer": "1", "answer_kind": "essay"}),
    json.dumps(ROWS[3]),
]


def test_invalid_lines_stop_with_their_line_numbers(tmp_path, capsys):
    source = write_lines(tmp_path / "in.jsonl", BAD_LINES)
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target)]) == 2
    errors = capsys.readouterr().err
    assert "line 2: invalid JSON" in errors
    assert "line 3: missing field(s): answer" in errors
    assert "line 4: empty line" in errors
    assert "line 5: not a JSON object" in errors
    assert "line 6: answer_kind must be one of" in errors
    assert "5 of 7 input line(s) invalid" in errors
    assert not target.exists()


def test_skip_invalid_writes_rejections_and_reconciles(tmp_path, capsys):
    source = write_lines(tmp_path / "in.jsonl", BAD_LINES)
    target = tmp_path / "out.jsonl"
    argv = ["grade", "--input", str(source), "--output", str(target), "--skip-invalid"]
    assert main([*argv, "--workers", "1", "--item-timeout", "2"]) == 0
    rows = read_jsonl(target)
    assert len(rows) == 7
    assert rows[0] == EXPECTED[0]
    assert rows[6] == EXPECTED[3]
    assert rows[1] == {
        "id": None,
        "correct": False,
        "pred": "",
        "reason": "invalid_input: line 2: invalid JSON (Expecting property name enclosed in "
        "double quotes at column 2)",
    }
    assert rows[2]["id"] == "x"
    assert rows[2]["reason"] == "invalid_input: line 3: missing field(s): answer"
    assert all(not row["correct"] and row["pred"] == "" for row in rows[1:6])
    assert all(row["reason"].startswith("invalid_input: ") for row in rows[1:6])
    assert "lines in 7 = graded 2 + rejected 5" in capsys.readouterr().out


def test_missing_input_file(tmp_path, capsys):
    argv = ["grade", "--input", str(tmp_path / "absent.jsonl"), "--output", str(tmp_path / "o")]
    assert main(argv) == 2
    assert "cannot read" in capsys.readouterr().err


def test_empty_input_gives_empty_output(tmp_path, capsys):
    source = write_lines(tmp_path / "in.jsonl", [])
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target)]) == 0
    assert target.read_text() == ""
    assert "lines in 0 = graded 0 + rejected 0" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--workers", "0"], ["--item-timeout", "0"]])
def test_option_values_are_checked(argv):
    with pytest.raises(SystemExit):
        build_parser().parse_args(["grade", "--input", "a", "--output", "b", *argv])


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_console_script_end_to_end(tmp_path):
    source = write_lines(tmp_path / "in.jsonl", [json.dumps(row) for row in ROWS])
    target = tmp_path / "out.jsonl"
    command = [sys.executable, "-m", "tagrpo.pipeline.cli", "grade", "--input", str(source),
               "--output", str(target), "--workers", "2"]  # fmt: skip
    finished = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 0, finished.stderr
    assert read_jsonl(target) == EXPECTED
    assert "lines in 6 = graded 6 + rejected 0" in finished.stdout


# --- per-line decoding and input errors (issue 10) -------------------------------------------


def write_bytes(path: Path, lines: list[bytes]) -> Path:
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def good(record_id: object, answer: str = "1") -> bytes:
    row = {"id": record_id, "response": f"\\boxed{{{answer}}}", "answer": answer}
    return json.dumps(row).encode()


def test_a_non_utf8_line_is_rejected_with_its_number(tmp_path, capsys):
    source = write_bytes(tmp_path / "in.jsonl", [good("a"), b'{"id": "b", "response": "\xff"}',
                                                 good("c")])  # fmt: skip
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target)]) == 2
    errors = capsys.readouterr().err
    assert "line 2: not valid UTF-8 (byte 0xff at byte 26 of the line)" in errors
    assert "1 of 3 input line(s) invalid" in errors
    argv = ["grade", "--input", str(source), "--output", str(target), "--skip-invalid"]
    assert main([*argv, "--workers", "1"]) == 0
    rows = read_jsonl(target)
    assert [row["id"] for row in rows] == ["a", None, "c"]
    assert rows[1]["reason"] == (
        "invalid_input: line 2: not valid UTF-8 (byte 0xff at byte 26 of the line)"
    )
    assert [row["correct"] for row in rows] == [True, False, True]
    assert "lines in 3 = graded 2 + rejected 1" in capsys.readouterr().out


def test_lone_surrogates_are_rejected_up_front(tmp_path, capsys):
    lines = [
        good("a"),
        b'{"id": "b", "response": "\\\\boxed{1} \\ud800", "answer": "1"}',
        b'{"id": "\\udfff", "response": "\\\\boxed{1}", "answer": "1"}',
        b'{"id": "d", "response": "\\ud83d\\ude00 \\\\boxed{1}", "answer": "1"}',  # a pair: fine
    ]
    source = write_bytes(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    argv = ["grade", "--input", str(source), "--output", str(target), "--skip-invalid"]
    assert main([*argv, "--workers", "1"]) == 0
    rows = read_jsonl(target)
    assert rows[1] == {
        "id": "b",
        "correct": False,
        "pred": "",
        "reason": "invalid_input: line 2: response holds a lone surrogate (U+D800 at index 10)",
    }
    assert rows[2]["id"] is None
    assert rows[2]["reason"] == (
        "invalid_input: line 3: id holds a lone surrogate (U+DFFF at index 0)"
    )
    assert [rows[0]["correct"], rows[3]["correct"]] == [True, True]
    assert "lines in 4 = graded 2 + rejected 2" in capsys.readouterr().out


def test_nan_ids_and_duplicate_ids_are_input_errors(tmp_path, capsys):
    lines = [
        good("q1"),
        b'{"id": NaN, "response": "\\\\boxed{1}", "answer": "1"}',
        b'{"id": 7, "response": "\\\\boxed{1}", "answer": Infinity}',
        good("q1"),
        good(7),
        good(7.0),  # the same number as 7
        good("7"),  # a string: another id
    ]
    source = write_bytes(tmp_path / "in.jsonl", lines)
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target)]) == 2
    errors = capsys.readouterr().err
    assert "line 2: invalid JSON (NaN is not a JSON value)" in errors
    assert "line 3: invalid JSON (Infinity is not a JSON value)" in errors
    assert "line 4: duplicate id (first on line 1)" in errors
    assert "line 6: duplicate id (first on line 5)" in errors
    assert "4 of 7 input line(s) invalid" in errors
    argv = ["grade", "--input", str(source), "--output", str(target), "--skip-invalid"]
    assert main([*argv, "--workers", "1"]) == 0
    for line in target.read_text(encoding="utf-8").splitlines():  # every output line is JSON
        json.loads(line, parse_constant=lambda name: pytest.fail(f"{name} in the output"))
    rows = read_jsonl(target)
    assert [row["id"] for row in rows] == ["q1", None, None, "q1", 7, 7.0, "7"]
    assert [row["correct"] for row in rows] == [True, False, False, False, True, False, True]
    assert "lines in 7 = graded 3 + rejected 4" in capsys.readouterr().out


def test_a_byte_order_mark_is_ignored(tmp_path):
    source = write_bytes(tmp_path / "in.jsonl", [b"\xef\xbb\xbf" + good("a"), good("b")])
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target), "--workers", "1"]) == 0
    assert [row["correct"] for row in read_jsonl(target)] == [True, True]


def test_small_inputs_start_a_small_cold_pool(tmp_path, monkeypatch):
    from tagrpo.grading import pool as pool_module

    made: list[dict] = []

    class RecordingPool(pool_module.GradingPool):
        def __init__(self, **kwargs):
            made.append(kwargs)
            super().__init__(**kwargs)

    monkeypatch.setattr(pool_module, "GradingPool", RecordingPool)
    source = write_bytes(tmp_path / "in.jsonl", [good("only")])
    target = tmp_path / "out.jsonl"
    assert main(["grade", "--input", str(source), "--output", str(target), "--workers", "2"]) == 0
    assert made == [{"workers": 1, "item_timeout_s": 5.0, "warm_up": False}]
    invalid_only = write_bytes(tmp_path / "bad.jsonl", [b"{not json"])
    argv = ["grade", "--input", str(invalid_only), "--output", str(target), "--skip-invalid"]
    assert main(argv) == 0
    assert len(made) == 1  # nothing to grade: no pool at all
