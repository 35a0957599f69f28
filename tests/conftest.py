"""Fixtures for every test of the project (the per-package conftest files add theirs)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from harnesskit import ThreadedSink

from pytest_shadowcheck.plugin import enabled as shadowcheck_enabled

#: plugins the child pytest runs of these tests do without: Hypothesis's reporting plugin
#: (it imports all of Hypothesis as a run ends), and, in a child process, pytest's
#: unraisable-exception plugin, which collects garbage five times as each run ends (0.2
#: CPU-seconds a child; an in-process pytester run collects none, and an exception it
#: would report still reaches the worker's own plugin)
NO_HYPOTHESIS = "-p no:hypothesispytest"
NO_UNRAISABLE = "-p no:unraisableexception"


def _addopts(*more: str) -> str:
    return " ".join(filter(None, [os.environ.get("PYTEST_ADDOPTS", ""), *more]))


# every process below this one, xdist's workers included
os.environ["PYTEST_ADDOPTS"] = _addopts(NO_HYPOTHESIS)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytest's own, whose runs see no PYTEST_ADDOPTS of ours unless told again."""
    monkeypatch.setenv("PYTEST_ADDOPTS", f"{NO_HYPOTHESIS} {NO_UNRAISABLE}")
    return pytester


#: fixture scopes wider than a test but narrower than a worker's session
_SHARED_SCOPES = {"package", "module", "class"}


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """``-n N`` with no ``--dist`` of the user's: the groups below, not xdist's plain
    ``load``."""
    if shadowcheck_enabled(config):
        return  # a conformance run from this directory: the plugin schedules its scenarios
    if hasattr(config, "workerinput") or getattr(config.option, "dist", "no") == "no":
        # the process that runs the tests, its own plugins chosen by now: its children
        # do without the unraisable-exception plugin; not xdist's controller (-n N, or
        # --tx with --dist), so that the workers it starts keep theirs
        os.environ["PYTEST_ADDOPTS"] = _addopts(NO_UNRAISABLE)
    said = [*config.invocation_params.args, *os.environ.get("PYTEST_ADDOPTS", "").split()]
    chosen = any(a.startswith(("--dist", "-d")) for a in said)
    if getattr(config.option, "dist", None) == "load" and not chosen:
        config.option.dist = "loadgroup"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    # a worker parses the command line again, where no --dist was said: tell it
    node.workerinput["project_tests_grouped"] = node.config.option.dist == "loadgroup"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """In xdist workers: every test that uses the Spark session runs in one worker (one
    JVM, warm, instead of one per worker: 344 against 533 CPU-seconds for the reports
    tests), and a module's tests that share a module fixture run together. xdist sends
    the largest group first (the Spark one); the other tests follow in their order."""
    if not getattr(config, "workerinput", {}).get("project_tests_grouped"):
        return
    config.option.loadgroup = True  # xdist's own hook then names each test's group
    for item in items:
        if "spark" in item.fixturenames:
            item.add_marker(pytest.mark.xdist_group("spark"))
        elif _shares_a_fixture(item):
            item.add_marker(pytest.mark.xdist_group(item.nodeid.partition("::")[0]))


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
