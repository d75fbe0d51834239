"""Every quoted block of README.md, docs/ and the package READMEs equals what its source renders
now (tagrpo/pipeline/doc_quotes.py): the committed report's tables, params.yaml and the
profiles, dvc.lock, the metrics the committed run wrote. A stale block fails with its diff;
``python -m tagrpo.pipeline.doc_quotes --write`` re-renders it."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from tagrpo.pipeline import doc_quotes
from tagrpo.pipeline.doc_quotes import QuoteError, blocks, documents, refreshed, render, stale

ROOT = Path(__file__).resolve().parents[1]


def test_every_quoted_block_equals_its_source() -> None:
    diffs = stale(ROOT)
    assert not diffs, (
        "stale quoted blocks (python -m tagrpo.pipeline.doc_quotes --write):\n"
        + "\n".join(diffs.values())
    )


def test_the_documents_quote_the_committed_tables_and_the_defaults() -> None:
    """The blocks are there: results.md quotes both report tables, README the controls, the
    mini world, the methods and seeds, and the committed run's cost."""
    specs: dict[str, set[str]] = {}
    for doc in documents(ROOT):
        text = doc.read_text(encoding="utf-8")
        specs[str(doc.relative_to(ROOT))] = {b.spec for b in blocks(text, doc.name)}
    assert {"validity", "file reports/claims.md"} <= specs["docs/results.md"]
    assert {"controls", "world-summary", "runs", "committed-run"} <= specs["README.md"]


def test_a_changed_source_makes_its_block_stale(tmp_path: Path) -> None:
    """A scratch copy with one params value changed: the block quoting it no longer matches,
    and refreshing writes the new value."""
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    text = "before\n<!-- quote: params runs.seeds -->\n| stale |\n<!-- end quote -->\nafter\n"
    current = refreshed(text, ROOT)
    assert "`[0, 1, 2]`" in current or "`runs.seeds`" in current
    params = (tmp_path / "params.yaml").read_text(encoding="utf-8")
    seeds_line = next(line for line in params.splitlines() if line.strip().startswith("seeds:"))
    changed = params.replace(seeds_line, seeds_line.split(":")[0] + ": [0, 7]", 1)
    (tmp_path / "params.yaml").write_text(changed, encoding="utf-8")
    assert refreshed(current, tmp_path) != current
    assert "| `runs.seeds` | `[0, 7]` |" in refreshed(current, tmp_path)
    assert refreshed(current, tmp_path).startswith("before\n<!-- quote: params runs.seeds -->\n")
    assert refreshed(current, tmp_path).endswith("<!-- end quote -->\nafter\n")


def test_a_stale_document_is_reported_with_its_diff(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    shutil.copy(ROOT / "params.yaml", tmp_path / "params.yaml")
    doc = tmp_path / "docs" / "page.md"
    doc.write_text("<!-- quote: params runs.seeds -->\nold\n<!-- end quote -->\n", encoding="utf-8")
    diffs = stale(tmp_path)
    assert list(diffs) == [doc]
    assert "-old\n" in diffs[doc] and "+| `runs.seeds` |" in diffs[doc]


def test_unknown_sources_bad_keys_and_unclosed_markers_are_refused() -> None:
    with pytest.raises(QuoteError, match="unknown source 'nope'"):
        render("nope", ROOT)
    with pytest.raises(QuoteError, match=r"runs\.sedes: not a params key"):
        render("params runs.sedes", ROOT)
    with pytest.raises(QuoteError, match="no profile 'nope'"):
        render("runs nope", ROOT)
    with pytest.raises(QuoteError, match="without its"):
        list(blocks("<!-- quote: controls -->\nno end\n", "page.md"))


def test_the_controls_sentence_follows_the_validity_verdicts(tmp_path: Path) -> None:
    """README's status sentence: "passes" exactly where the validity table says PASS."""
    report = (ROOT / "reports" / "report.md").read_text(encoding="utf-8")
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "report.md").write_text(report, encoding="utf-8")
    assert render("controls", tmp_path).startswith("The positive control passes (V1:")
    row = next(line for line in report.splitlines() if line.startswith("| V1 (policy)"))
    failed = report.replace(row, row.rsplit("| PASS |", 1)[0] + "| FAIL |")
    (tmp_path / "reports" / "report.md").write_text(failed, encoding="utf-8")
    assert render("controls", tmp_path).startswith("The positive control fails (V1:")


def test_every_source_renders_on_this_checkout() -> None:
    """Each registered source renders something for arguments the documents use."""
    used = {
        b.spec.split()[0]
        for doc in documents(ROOT)
        for b in blocks(doc.read_text(encoding="utf-8"), doc.name)
    }
    assert used <= set(doc_quotes.SOURCES), used - set(doc_quotes.SOURCES)


def test_readme_is_a_first_screen() -> None:
    """README at most 10 KB (issue 54): what it is, the mini world, the two commands, the
    result, the GPU path, the map, in that order; the rest is in docs/."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.encode("utf-8")) <= 10_000, len(readme.encode("utf-8"))
    headings = [line for line in readme.splitlines() if line.startswith("## ")]
    order = ["## The mini world", "## Two commands", "## The committed result", "## The GPU path"]
    assert [h for h in headings if h in order] == order, headings
    assert headings[-1] == "## Documentation", headings


def test_the_embedded_profiles_stages_are_the_committed_runs() -> None:
    """profile-stages expands dvc.yaml with params.yaml as DVC does: the embedded default's
    count is dvc.lock's (the committed run ran every stage of it)."""
    import yaml

    lock = yaml.safe_load((ROOT / "dvc.lock").read_text(encoding="utf-8"))["stages"]
    row = render("profile-stages embedded", ROOT).splitlines()[-1]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[:2] == ["`embedded`", str(len(lock))], (cells, sorted(lock))
    trained = sum(name.startswith("train") for name in lock)
    evaluated = sum(name.startswith("evaluate") for name in lock)
    assert cells[2:] == [str(trained), str(evaluated)]


def test_metrics_and_claim_sources_name_what_is_missing() -> None:
    with pytest.raises(QuoteError, match="no nope"):
        render('metrics "metrics/train/*.json" nope', ROOT)
    with pytest.raises(QuoteError, match="no such files"):
        render('metrics "metrics/none/*.json" seconds', ROOT)
    with pytest.raises(QuoteError, match="no claim starts with"):
        render('claim "Nothing like this"', ROOT)
    assert render('claim "TA-GRPO beats GRPO at pass@16"', ROOT).startswith(
        "TA-GRPO beats GRPO at pass@16 (primary endpoint) (pass@16, TA-GRPO minus GRPO"
    )


def test_readmes_good_run_tails_are_what_the_code_prints() -> None:
    """The lines README says a good `make run` and `make test` end with are printed by the
    report stage and tests/timings.py."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    fences = re.findall(r"```text\n(.*?)```", readme, re.DOTALL)
    shown = {line for fence in fences for line in fence.splitlines()}
    from tagrpo.plumbing.layout import report_outputs

    report_line = f"[report] wrote {report_outputs()['report']}"
    assert report_line in shown
    assert 'print(f"[report] wrote {report_outputs()' in (ROOT / "stages" / "report.py").read_text(
        encoding="utf-8"
    )
    timings_header = next(line for line in shown if line.startswith("=== make test:"))
    assert f'print("{timings_header}")' in (ROOT / "tests" / "timings.py").read_text(
        encoding="utf-8"
    )


def test_constants_are_quoted_as_the_code_declares_them(tmp_path: Path) -> None:
    """``constants``: a benchmark's target and a Makefile variable as their files write them; a
    changed target makes the block stale and refreshing writes the new value."""
    (tmp_path / "benchmarks").mkdir()
    bench = tmp_path / "benchmarks" / "speed.py"
    bench.write_text('"""A benchmark."""\nTARGET_MS = 5.0  # median, per call\n', encoding="utf-8")
    (tmp_path / "Makefile").write_text("TEST_DEADLINE_S ?= 5200\n", encoding="utf-8")
    spec = "constants benchmarks/speed.py TARGET_MS Makefile TEST_DEADLINE_S"
    text = f"<!-- quote: {spec} -->\nold\n<!-- end quote -->\n"
    current = refreshed(text, tmp_path)
    assert current.splitlines()[1:5] == [
        "| file | constant | value | its comment |",
        "|---|---|---|---|",
        "| `benchmarks/speed.py` | `TARGET_MS` | `5.0` | median, per call |",
        "| `Makefile` | `TEST_DEADLINE_S` | `5200` |  |",
    ]
    bench.write_text("TARGET_MS: float = 2.5\n", encoding="utf-8")
    assert refreshed(current, tmp_path) != current
    assert "| `benchmarks/speed.py` | `TARGET_MS` | `2.5` |  |" in refreshed(current, tmp_path)


def test_constants_name_a_missing_file_or_constant() -> None:
    with pytest.raises(ValueError, match=r"benchmarks/none\.py: no such file"):
        render("constants benchmarks/none.py TARGET", ROOT)
    with pytest.raises(ValueError, match=r"benchmarks/advantages_speed\.py declares no TARGET_S"):
        render("constants benchmarks/advantages_speed.py TARGET_S", ROOT)
    with pytest.raises(ValueError, match="'TARGET_MS' before any file"):
        render("constants TARGET_MS", ROOT)
    rendered = render("constants benchmarks/advantages_speed.py TARGET_MS", ROOT)
    assert (
        rendered.splitlines()[-1] == "| `benchmarks/advantages_speed.py` | `TARGET_MS` | `5.0` |  |"
    )


# Numbers that are names, not measurements or settings: the paper's sections, figures and
# tables, its arXiv id, the Python release, world and criterion names, the draw a run is of,
# model and data-set names, list numbers, training-set multiples (1x, 2.5x).
NAMES = re.compile(
    r"arXiv:\d+\.\d+|Python \d+\.\d+"
    r"|(?:Table|Figures?|section|Eq\.|Assumption|Appendix|Box) \d+(?:(?:[.-]| and )\d+)*"
    r"|\b[vV]\d(?:-[vV]?\d)?\b|\b[dD]raw \d\b|\bside of 0\b|\(N\+1\)|\bseeds3\b|X\^2"
    r"|^\d+\. |\b\d+(?:\.\d+)?x\b|SmolLM2-135M|Qwen3|Llama-3\.\d|OpenR1-Math-220k",
    re.MULTILINE,
)
# Where a number may stand: a quoted block, code (it names a command, key or file) and link
# targets.
NOT_PROSE = re.compile(
    r"<!-- quote:.*?<!-- end quote -->|```.*?```|`[^`\n]*`|\]\([^)]*\)|https?://\S+", re.DOTALL
)


# README, every page under docs/ (a new page is on the list by being there) and the package
# READMEs.
NUMBER_FREE_PAGES = [
    "README.md",
    *sorted(path.relative_to(ROOT).as_posix() for path in (ROOT / "docs").glob("*.md")),
    "tagrpo/algorithms/README.md",
    "tagrpo/verl_ext/README.md",
]


@pytest.mark.parametrize("name", NUMBER_FREE_PAGES)
def test_no_hand_written_number_in_the_quoted_pages(name: str) -> None:
    """README, every page of docs/ and the package READMEs state no number in their own prose:
    every figure is inside a quoted block (or names a section, figure or version)."""
    prose = NAMES.sub("", NOT_PROSE.sub("", (ROOT / name).read_text(encoding="utf-8")))
    numbers = [line.strip() for line in prose.splitlines() if re.search(r"(?<![\w@])\d", line)]
    assert not numbers, f"{name}: numbers outside quoted blocks:\n" + "\n".join(numbers)


def test_the_command_lists_then_rewrites_stale_blocks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m tagrpo.pipeline.doc_quotes`` prints the diff and exits 1; ``--write``
    re-renders the block in place, after which the check passes."""
    for name in ("params.yaml", "dvc.yaml"):
        shutil.copy(ROOT / name, tmp_path / name)
    (tmp_path / "docs").mkdir()
    page = tmp_path / "docs" / "page.md"
    page.write_text(
        "<!-- quote: params runs.seeds -->\nold\n<!-- end quote -->\n", encoding="utf-8"
    )
    monkeypatch.chdir(tmp_path)
    assert doc_quotes.main([]) == 1
    assert "-old" in capsys.readouterr().out
    assert doc_quotes.main(["--write"]) == 0
    assert "| `runs.seeds` |" in page.read_text(encoding="utf-8")
    assert doc_quotes.main([]) == 0


def test_the_study_source_renders_the_verdicts_from_the_report_tables(tmp_path: Path) -> None:
    """``study FOLDER``: the draws' validity and V5 over them in a sentence, then the controls
    and the family rows (a row beside a family row left out), each value as the CSV has it."""
    tables = tmp_path / "rep" / "tables"
    tables.mkdir(parents=True)
    (tables / "validity_by_draw.csv").write_text(
        "draw,criterion,requirement,measured,verdict\n"
        "d1,V1 (policy),r,m,PASS\nd1,V4,r,m,PASS\nd2,V1 (policy),r,m,PASS\nd2,V4,r,m,FAIL\n"
        "over draws,V5 (over draws),r,+/-4.20 points,PASS\n"
    )
    header = "claim,kind,in_family,measure,estimate,ci_low,ci_high,interval,holm_p,verdict,unit\n"
    (tables / "claims.csv").write_text(
        header
        + "Negative control,control,False,m,0.3,0.25,0.35,95%,,detected,points\n"
        + "Primary,claim,True,m,-0.1,-0.15,-0.05,95%,0.0123,reversed,points\n"
        + "On log scale,beside,False,m,-0.4,-0.7,-0.1,95%,,reversed,plain\n"
        + "Entropy,claim,True,m,0.01,0.0,0.02,95%,0.3,undecided,plain\n"
        + "Equivalent,equivalence,True,m,,,,90% (TOST),1.0,not run (not supported),points\n"
    )
    assert render("study rep", tmp_path) == (
        "V1-V4 and every band pass on 1 of 2 draws (d1); V5 over the draws: +/-4.20 points, "
        "**PASS**.\n\n"
        "| row | estimate [interval] | Holm p | verdict |\n|---|---|---|---|\n"
        "| Negative control | +30.00 [+25.00, +35.00] points | - | detected |\n"
        "| Primary | -10.00 [-15.00, -5.00] points | 0.012 | reversed |\n"
        "| Entropy | +0.01 [+0.00, +0.02] | 0.300 | undecided |\n"
        "| Equivalent | - | 1.000 | not run (not supported) |\n"
    )
