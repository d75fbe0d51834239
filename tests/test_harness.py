"""The test harness itself: a NOT TESTED skip is a skip locally and a failure with ``CI=true``
(tests/not_tested.py), an ordinary skip stays a skip; ``run_checked`` stops a command that runs
past its time limit, with everything it started; logged wall seconds reach the summary; a test
cannot be both core and slow."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

import pytest
from scratch_project import run_checked

pytest_plugins = ["pytester"]

INNER = """
import pytest
from not_tested import not_tested, reason

def test_needs_a_tool():
    not_tested("no such tool here")

@pytest.mark.skipif(True, reason=reason("no engines environment"))
def test_marked():
    pass

def test_ordinary_skip():
    pytest.skip("not relevant on this platform")

def test_runs():
    assert True
"""


@pytest.fixture
def inner(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeconftest("from harness import pytest_runtest_makereport\n")
    pytester.makepyfile(test_inner=INNER)
    return pytester


# A skipif skips at set-up: failed there, pytest counts it as an error.
@pytest.mark.parametrize(
    ("ci", "failed", "errors", "skipped"),
    [(None, 0, 0, 3), ("false", 0, 0, 3), ("true", 1, 1, 1), ("TRUE", 1, 1, 1)],
)
def test_not_tested_fails_only_in_ci(
    inner: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, ci, failed, errors, skipped
) -> None:
    if ci is None:
        monkeypatch.delenv("CI", raising=False)
    else:
        monkeypatch.setenv("CI", ci)
    result = inner.runpytest("-p", "no:cacheprovider", "-p", "no:timeout")
    result.assert_outcomes(passed=1, failed=failed, errors=errors, skipped=skipped)
    if failed:
        result.stdout.fnmatch_lines(
            [
                "*CI=true, and this check did not run: NOT TESTED: no such tool here*",
                "*CI=true, and this check did not run: NOT TESTED: no engines environment*",
            ],
            consecutive=False,
        )


def _dead(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def test_run_checked_kills_a_command_and_its_children_at_the_time_limit(tmp_path: Path) -> None:
    """A shell that starts a child and waits: stopped after 1 s (not 60), the child too."""
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(AssertionError, match=r"timed out after 1 s .*\n.*started"):
        run_checked(
            ["sh", "-c", f"sleep 60 & echo $! > {pid_file}; echo started; wait"],
            tmp_path,
            dict(os.environ),
            timeout=1,
        )
    assert time.monotonic() - started < 30
    child = int(pid_file.read_text())
    deadline = time.monotonic() + 5
    while not _dead(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _dead(child), f"the command's child {child} outlived the timeout"


def test_run_checked_returns_the_output_or_fails_with_it(tmp_path: Path) -> None:
    env = dict(os.environ)
    assert run_checked(["sh", "-c", "echo out; echo err >&2"], tmp_path, env) == "out\nerr\n"
    with pytest.raises(AssertionError, match=r"failed \(3\):\nout\n\nerr"):
        run_checked(["sh", "-c", "echo out; echo err >&2; exit 3"], tmp_path, env)


def test_logged_wall_seconds_reach_the_summary(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from harness import pytest_terminal_summary, wall_seconds\n")
    pytester.makepyfile(test_timed="def test_a(wall_seconds):\n    wall_seconds('a part', 12.5)\n")
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:timeout")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*wall seconds (logged, not asserted)*", "*12.5  a part"])


def test_a_test_marked_core_and_slow_is_refused(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("from harness import pytest_collection_modifyitems\n")
    pytester.makeini("[pytest]\nmarkers =\n    core: c\n    slow: s\n")
    pytester.makepyfile(
        test_both="import pytest\n@pytest.mark.core\n@pytest.mark.slow\ndef test_b():\n    pass\n"
    )
    result = pytester.runpytest("-p", "no:cacheprovider", "-p", "no:timeout")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*marked both core and slow*test_b*"])


SHARED = """
import os
import pytest

@pytest.fixture(scope="session")
def smoke_run(tmp_path_factory):
    built = tmp_path_factory.getbasetemp().parent / f"built-{os.getpid()}"
    built.write_text("")
    return os.getpid()
"""
USES_IT = """
import os

def test_one(smoke_run, wall_seconds):
    wall_seconds("{name} one", 1.5)
    assert smoke_run == os.getpid()

def test_two(smoke_run):
    assert smoke_run == os.getpid()
"""
ALONE = """
import os
import time

def test_{name}():
    time.sleep(1)
"""


def test_xdist_workers_share_a_session_fixture_once_and_report_wall_seconds(
    pytester: pytest.Pytester,
) -> None:
    """`make test`'s xdist run: the modules using one of the shared session fixtures run on
    one worker (the fixture is built once, not once per worker), and the seconds the workers
    log reach the controller's summary."""
    # The workers start from the interpreter's first sys.path: the harness beside the conftest.
    for helper in ("harness.py", "not_tested.py"):
        shutil.copy(Path(__file__).with_name(helper), pytester.path / helper)
    pytester.makeconftest(
        "from harness import pytest_collection_finish, pytest_collection_modifyitems, "
        "pytest_configure_node, pytest_sessionfinish, pytest_terminal_summary, "
        "pytest_testnodedown, pytest_unconfigure, pytest_xdist_make_scheduler, wall_seconds\n"
        + SHARED
    )
    pytester.makepyfile(
        test_a=USES_IT.format(name="a"),
        test_b=USES_IT.format(name="b"),
        **{f"test_{c}": ALONE.format(name=c) for c in "cdef"},
    )
    result = pytester.runpytest(
        "-p", "no:cacheprovider", "-p", "no:timeout", "-n", "2", "--dist", "loadgroup",
        "--no-loadscope-reorder",
    )  # fmt: skip
    result.assert_outcomes(passed=8)
    built = list(pytester.path.parent.glob("**/built-*"))
    assert len(built) == 1, built  # one worker built it for both modules
    result.stdout.fnmatch_lines(["*wall seconds (logged, not asserted)*"])
    result.stdout.fnmatch_lines(["*1.5  a one"], consecutive=False)
    result.stdout.fnmatch_lines(["*1.5  b one"], consecutive=False)


def test_the_longest_groups_come_first_and_each_module_is_one_group(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest("from harness import pytest_collection_modifyitems\n" + SHARED)
    # In a package: under xdist this process has imported the real tests' `test_verl_cpu_runs`
    # module (every worker collects every file), which a top-level file of that name would be.
    package = pytester.mkpydir("harness_case")
    for name, source in {
        "test_a": ALONE.format(name="a"),
        "test_smoke": USES_IT.format(name="s"),
        "test_verl_cpu_runs": ALONE.format(name="v") + ALONE.format(name="w"),
    }.items():
        (package / f"{name}.py").write_text(source)
    recorded = pytester.inline_run("--collect-only", "-p", "no:cacheprovider")
    (finished,) = recorded.getcalls("pytest_collection_finish")
    from harness import group_of

    assert [(item.name, group_of(item)) for item in finished.session.items] == [
        ("test_v", "test_verl_cpu_runs.py"),
        ("test_w", "test_verl_cpu_runs.py"),
        ("test_one", "smoke_run"),
        ("test_two", "smoke_run"),
        ("test_a", "test_a.py"),
    ]


def _junit(path: Path, wall: float, *cases: tuple[str, str, float]) -> None:
    """A tier's JUnit XML as pytest writes it: (module, test, seconds) per testcase."""
    rows = "".join(
        f'<testcase classname="tests.{module}" name="{name}" time="{seconds}"/>'
        for module, name, seconds in cases
    )
    path.write_text(
        f'<testsuites><testsuite name="pytest" time="{wall}">{rows}</testsuite></testsuites>'
    )


def test_timings_prints_each_tier_and_its_costliest_modules(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`make test`'s last lines (tests/timings.py): a tier's wall seconds, then modules by cost."""
    import timings

    _junit(
        tmp_path / "1-xdist.xml",
        130.5,
        ("test_a", "test_one", 10.0),
        ("test_b", "test_two", 90.0),
        ("test_a", "test_three", 15.0),
    )
    (tmp_path / "2-alone.xml").write_text("<testsuites><testsuite")  # killed mid-write
    assert timings.main(str(tmp_path)) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1] == "1-xdist: 130 s wall, 3 tests, 115 s in tests"
    assert [line.split()[-1] for line in lines[2:4]] == ["tests/test_b.py", "tests/test_a.py"]
    assert lines[4].split()[-1] == "tests/test_b.py::test_two"
    assert lines[-1].startswith("2-alone.xml: unreadable")


def test_timings_lists_the_slowest_tests_over_all_tiers(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tests/timings.py DIR --slowest N`: one table over every tier, costliest first."""
    import timings

    _junit(tmp_path / "1-alone.xml", 50, ("test_v", "test_serve", 40.0))
    _junit(
        tmp_path / "2-xdist.xml", 130.5, ("test_a", "test_one", 10.0), ("test_b", "test_two", 90.0)
    )
    assert timings.main(str(tmp_path), count=2) == 0
    assert capsys.readouterr().out.splitlines() == [
        "| # | seconds | test | tier |",
        "|---|---|---|---|",
        "| 1 | 90 | `tests/test_b.py::test_two` | 2-xdist |",
        "| 2 | 40 | `tests/test_v.py::test_serve` | 1-alone |",
    ]
