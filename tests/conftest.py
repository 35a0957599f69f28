"""Fixtures for every test of the project (the per-package conftest files add theirs)."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from harnesskit import ThreadedSink

# The child pytest runs of these tests do not need Hypothesis's reporting plugin, which
# imports all of Hypothesis (about 1 CPU-second) at the end of every run.
os.environ["PYTEST_ADDOPTS"] = " ".join(
    filter(None, [os.environ.get("PYTEST_ADDOPTS", ""), "-p no:hypothesispytest"])
)


# How long each slow test took in a recent run (``python3 benchmarks/tests_durations.py
# JUNIT`` writes it): an order to start them in, never a limit or an expectation.
DURATIONS = Path(__file__).with_name("durations.json")
#: a test the file does not name: a slow one (a multi-process cluster) or any other
UNKNOWN_SLOW, UNKNOWN = 10.0, 0.5
#: fixture scopes wider than a test but narrower than a worker's session
_SHARED_SCOPES = {"package", "module", "class"}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """``-n N`` with no ``--dist`` of the user's: groups and our order (below), not
    xdist's plain ``load``."""
    said = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    chosen = any(a.startswith(("--dist", "-d")) and not a.startswith("-do") for a in said)
    if getattr(config.option, "dist", None) == "load" and not chosen:
        config.option.dist = "loadgroup"
        config.option.loadscopereorder = False


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    # a worker parses the command line again, where no --dist was said: tell it
    node.workerinput["project_tests_grouped"] = node.config.option.dist == "loadgroup"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In xdist workers: every test that uses the Spark session runs in one worker (one
    JVM, warm, instead of one per worker: 344 against 533 CPU-seconds for the reports
    tests), so do the runs of the whole library one after another, a module's tests
    that share a module fixture run together, and the longest groups start first, so
    that no long test starts last and runs alone."""
    if not getattr(config, "workerinput", {}).get("project_tests_grouped"):
        return
    config.option.loadgroup = True  # xdist's own hook then names each test's group
    expected = json.loads(DURATIONS.read_text(encoding="utf-8")) if DURATIONS.exists() else {}
    groups: dict[str, float] = {}
    group_of: dict[str, str] = {}
    for item in items:
        if "spark" in item.fixturenames:
            group = "spark"
        elif item.get_closest_marker("whole_library"):
            # each sizes its scenarios' concurrency to an idle machine: two at once put
            # 2 cores at load 11, past the tolerances of correct scenarios
            group = "whole_library"
        elif _shares_a_fixture(item):
            group = item.nodeid.partition("::")[0]
        else:
            group = item.nodeid
        if group != item.nodeid:
            item.add_marker(pytest.mark.xdist_group(group))
        group_of[item.nodeid] = group
        slow = UNKNOWN_SLOW if item.get_closest_marker("slow") else UNKNOWN
        groups[group] = groups.get(group, 0.0) + float(expected.get(item.nodeid, slow))
    position = {item.nodeid: i for i, item in enumerate(items)}
    items.sort(key=lambda item: (-groups[group_of[item.nodeid]], position[item.nodeid]))


def _shares_a_fixture(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(
        d.scope in _SHARED_SCOPES for defs in info.name2fixturedefs.values() for d in defs
    )


@pytest.fixture
def plain_smtp() -> Iterator[ThreadedSink]:
    sink = ThreadedSink()
    try:
        yield sink
    finally:
        sink.close()
