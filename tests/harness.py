"""The hooks and the fixture of the test harness, registered by tests/conftest.py:

- a NOT TESTED skip fails when ``CI=true`` (:func:`not_tested.fail_in_ci`);
- a test marked both ``core`` and ``slow`` is refused (core is the fast tier, ``make test-core``);
- ``wall_seconds``: ``log(label, seconds)`` records how long a part of a test took; printed in
  the summary ("wall seconds"), never asserted (speed belongs to benchmarks/);
- run side by side (``pytest -n 2 --dist loadgroup``, pytest-xdist, as ``make test`` runs the
  tier after the core): the tests of one module run on one worker, in their order, and so do
  all the tests of the modules that use one of :data:`SHARED_SESSION_FIXTURES` (each worker
  builds its own session fixtures: one smoke repro, one ``vllm serve`` in all); the groups of
  :data:`LONGEST_GROUPS` are handed out first, so that neither worker starts one of them last.
  The groups reach the scheduler through a file (:func:`pytest_xdist_make_scheduler`):
  xdist 3.8's own ``loadgroup`` appends the group to each node id, which pytest 9.2's node ids
  ignore (pytest-xdist issue 1386), so every test would be scheduled alone.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest
from not_tested import fail_in_ci

# Two xdist workers share two cores: a process computing with two OpenMP threads waits at every
# barrier for the thread the other worker's process holds off its core (threads that spin for a
# core they do not get made the verl test's warm start 10x slower: tests/test_verl_cpu_runs.py).
# On a worker every process computes on one thread, unless it sets its own number.
if os.environ.get("PYTEST_XDIST_WORKER"):
    os.environ.setdefault("OMP_NUM_THREADS", "1")


def torch_threads() -> int:
    """Threads for a test's own torch work: 1 on an xdist worker, else the machine's 2."""
    return 1 if os.environ.get("PYTEST_XDIST_WORKER") else 2


WALL_SECONDS = pytest.StashKey[dict[str, float]]()
WORKER_WALL_SECONDS = "tagrpo_wall_seconds"  # the workers' logged seconds, sent to the controller
GROUPS_FILE = "tagrpo_xdist_groups"  # workerinput: where a worker writes each test's group
GROUPS_PATH = pytest.StashKey[Path]()

# Session-scoped fixtures that cost minutes: every test that requests one (directly or through
# another fixture), and every other test of its module, runs on the same worker.
SHARED_SESSION_FIXTURES = ("smoke_run", "vllm_server")
# The groups that take longest (pytest --durations of a full run; docs/performance.md), longest
# first: put at the front of the collection, so the scheduler (--no-loadscope-reorder) starts
# them before the many short groups, which then fill whichever worker is free.
LONGEST_GROUPS = ("test_verl_cpu_runs.py", "smoke_run", "vllm_server")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):
    outcome = yield
    fail_in_ci(outcome.get_result())


@pytest.hookimpl(tryfirst=True)  # before xdist's, which reads the groups
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    both = [
        item.nodeid
        for item in items
        if item.get_closest_marker("core") and item.get_closest_marker("slow")
    ]
    if both:
        raise pytest.UsageError(f"marked both core and slow (core is the fast tier): {both}")
    groups = worker_groups(items)
    for item in items:
        if not item.get_closest_marker("xdist_group"):
            item.add_marker(pytest.mark.xdist_group(groups[item.nodeid]))
    rank = {name: position for position, name in enumerate(LONGEST_GROUPS)}
    items.sort(key=lambda item: rank.get(group_of(item), len(rank)))  # stable: order kept


def pytest_collection_finish(session: pytest.Session) -> None:
    """On an xdist worker: each test's group (by its final node id), for the controller."""
    path = getattr(session.config, "workerinput", {}).get(GROUPS_FILE)
    if path is None:
        return
    groups = {item.nodeid: group_of(item) for item in session.items}
    partial = Path(f"{path}.{os.getpid()}")
    partial.write_text(json.dumps(groups))
    partial.replace(path)  # whole or absent: the workers write the same groups


@pytest.hookimpl(optionalhook=True)  # an xdist hook (controller): absent without xdist
def pytest_configure_node(node) -> None:
    node.workerinput[GROUPS_FILE] = str(groups_path(node.config))


def groups_path(config: pytest.Config) -> Path:
    if GROUPS_PATH not in config.stash:
        config.stash[GROUPS_PATH] = Path(tempfile.mkdtemp(prefix="xdist-groups-")) / "groups.json"
    return config.stash[GROUPS_PATH]


@pytest.hookimpl(optionalhook=True)  # an xdist hook (controller)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """``--dist loadgroup``: the groups the workers wrote (a test missing there: its module)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    path = groups_path(config)

    class ByGroup(LoadScopeScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:  # read once, after every worker has collected
                self.groups = json.loads(path.read_text()) if path.exists() else {}
            return self.groups.get(nodeid) or nodeid.split("::", 1)[0]

    return ByGroup(config, log)


def pytest_unconfigure(config: pytest.Config) -> None:
    path = config.stash.get(GROUPS_PATH, None)
    if path is not None:
        shutil.rmtree(path.parent, ignore_errors=True)


def module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::", 1)[0].rsplit("/", 1)[-1]


def worker_groups(items: list[pytest.Item]) -> dict[str, str]:
    """The xdist group of each test (by node id): its module, or the shared session fixture
    that one of its module's tests requests."""
    shared: dict[str, set[str]] = {}
    for item in items:
        requested = set(getattr(item, "fixturenames", ())) & set(SHARED_SESSION_FIXTURES)
        shared.setdefault(module_of(item), set()).update(requested)
    return {
        item.nodeid: "+".join(sorted(shared[module_of(item)])) or module_of(item) for item in items
    }


def group_of(item: pytest.Item) -> str:
    marker = item.get_closest_marker("xdist_group")
    if marker is None:
        return module_of(item)
    return str(marker.args[0] if marker.args else marker.kwargs.get("name", "default"))


@pytest.fixture(scope="session")
def wall_seconds(request: pytest.FixtureRequest):
    """``log(label, seconds)``: shown in the run's summary under "wall seconds"."""
    logged = request.config.stash.setdefault(WALL_SECONDS, {})

    def log(label: str, seconds: float) -> None:
        logged[label] = seconds

    return log


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: hand the logged seconds to the controller."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[WORKER_WALL_SECONDS] = dict(session.config.stash.get(WALL_SECONDS, {}))


@pytest.hookimpl(optionalhook=True)  # an xdist hook: absent without xdist
def pytest_testnodedown(node, error) -> None:
    """On the xdist controller: a worker's logged seconds join the summary's."""
    logged = getattr(node, "workeroutput", {}).get(WORKER_WALL_SECONDS, {})
    node.config.stash.setdefault(WALL_SECONDS, {}).update(logged)


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    logged = config.stash.get(WALL_SECONDS, {})
    if logged:
        terminalreporter.section("wall seconds (logged, not asserted)")
        for label, seconds in logged.items():
            terminalreporter.write_line(f"{seconds:8.1f}  {label}")
