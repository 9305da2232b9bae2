"""The suite's CPU budget, printed at the end of every run beside ``--durations``.

Wall time on a shared two-core machine says little (other work steals the cores); CPU time says what the
suite costs. Each test's CPU seconds (its process and the subprocesses it waited for, setup and teardown
included, so a session fixture counts where it is first built) travel with its reports, also from
pytest-xdist workers; the end of the run prints the total over every worker and its children, and the
files that cost the most. Each file's wall seconds (its tests' setup, call and teardown) are kept
(``TEST_CACHE/file-wall.json``) so that the next run starts the longest files first: with ``--dist
loadscope`` a long file started last leaves the other worker idle at the end. A fresh machine (CI) has no
such file; ``tests/file-wall.json``, the figures of a whole run committed with the tests, orders it until
it has its own. Wall, not CPU, because a file that waits (a 10,000-trace SQLite write, a server's delays)
holds its worker as long as one that computes.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections import defaultdict
from pathlib import Path

import pytest

__all__ = [
    "pytest_configure",
    "pytest_configure_node",
    "pytest_runtest_logreport",
    "pytest_runtest_makereport",
    "pytest_runtest_protocol",
    "pytest_sessionfinish",
    "pytest_terminal_summary",
    "pytest_testnodedown",
]

# Caches the tests keep between runs (safe to delete): numba's compiled code, corpora's indexes, file costs.
TEST_CACHE = Path(os.environ.get("RAGTRACK_TEST_CACHE", Path.home() / ".cache" / "ragtrack-tests"))
FILE_WALL = TEST_CACHE / "file-wall.json"
SHIPPED_WALL = Path(__file__).with_name("file-wall.json")

_START = pytest.StashKey[float]()
_WORKERS = pytest.StashKey[list]()
_WALL = pytest.StashKey[float]()
CPU = "cpu_seconds"
COSTS = "ragtrack_file_cpu"
# One pytest session per process: its tests' CPU seconds per file (a hook on reports receives no config).
_PER_FILE: dict[str, float] = defaultdict(float)
_WALL_PER_FILE: dict[str, float] = defaultdict(float)


def cpu_seconds() -> float:
    """User + system CPU of this process and of every child it waited for (a ``ragtrack`` subprocess,
    a server a test started and stopped, Spark's JVM)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def pytest_configure(config):
    config.stash[_WORKERS] = []
    config.stash[_WALL] = time.monotonic()


def _read_costs(path: Path) -> dict[str, float]:
    try:
        costs = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return costs if isinstance(costs, dict) else {}


def _known_costs() -> dict[str, float]:
    """Each file's wall seconds: this machine's last run where it has one, else the committed figures."""
    return {**_read_costs(SHIPPED_WALL), **_read_costs(FILE_WALL)}


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """The controller hands its figures to each xdist worker: workers must collect one order, and another
    run may rewrite the file between two workers' reads."""
    node.workerinput[COSTS] = _known_costs()


def costliest_first(config: pytest.Config, items: list[pytest.Item]) -> None:
    """The longest files first (as the last run measured them; a new file counts as a middle one), each
    file's tests in their own order."""
    given = getattr(config, "workerinput", {})
    costs = given[COSTS] if COSTS in given else _known_costs()
    middle = sorted(costs.values())[len(costs) // 2] if costs else 0.0
    items.sort(key=lambda item: -float(costs.get(item.nodeid.split("::")[0], middle)))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item):
    item.stash[_START] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item):
    """Each phase's report carries the CPU spent since the previous phase ended."""
    outcome = yield
    now = cpu_seconds()
    outcome.get_result().user_properties.append((CPU, now - item.stash.get(_START, now)))
    item.stash[_START] = now


def pytest_runtest_logreport(report):
    """On the controller (or the only process): the CPU of each test, summed per file."""
    path = report.nodeid.split("::")[0]
    _WALL_PER_FILE[path] += report.duration
    for name, value in report.user_properties:
        if name == CPU:
            _PER_FILE[path] += value


def pytest_sessionfinish(session):
    """An xdist worker hands its whole CPU (collection and fixtures' teardown included) to the controller."""
    output = getattr(session.config, "workeroutput", None)
    if output is not None:
        output[CPU] = cpu_seconds()


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    node.config.stash[_WORKERS].append(node.workeroutput.get(CPU, 0.0) if hasattr(node, "workeroutput") else 0.0)


def pytest_terminal_summary(terminalreporter, config):
    if getattr(config, "workeroutput", None) is not None or config.option.collectonly:
        return
    workers = config.stash.get(_WORKERS, [])
    own = resource.getrusage(resource.RUSAGE_SELF)
    total = own.ru_utime + own.ru_stime + sum(workers) if workers else cpu_seconds()
    wall = time.monotonic() - config.stash.get(_WALL, time.monotonic())
    where = f"{len(workers)} workers, their children and the controller" if workers else "this process and its children"
    terminalreporter.write_sep("=", "CPU budget")
    terminalreporter.write_line(f"total CPU {total:,.0f} s ({where}) in {wall:,.0f} s wall")
    heaviest = sorted(_PER_FILE.items(), key=lambda kv: -kv[1])[:15]
    for path, seconds in heaviest:
        terminalreporter.write_line(f"{seconds:8.1f} CPU-s  {path}")
    if _WALL_PER_FILE and not config.option.keyword:  # a -k run saw part of a file; the other files' are kept
        from ragtrack.files import atomic_write_json

        measured = {k: round(v, 1) for k, v in _WALL_PER_FILE.items()}
        atomic_write_json(FILE_WALL, {**_read_costs(FILE_WALL), **measured})
