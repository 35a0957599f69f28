"""Lanes: several scenarios at once in one pytest process.

A scenario mostly waits, and pytest-xdist's way to wait on several (a worker process
each) costs every worker an interpreter, pytest, the harness and the collection of the
library: on 2 cores, eight workers took 8 s before the first scenario began. A lane is
a thread with its own target instance (``ShadowcheckState.enter_lane``) and, through
the engine, its own event loop and cluster; the process's lanes share one collection.

pytest still runs the items one after another and reports them in order: when the
session starts, every scenario item is queued to the lanes in the collection's order,
longest first (the durations ``plugin/concurrency.py`` keeps); an item's setup then waits
for its own verdict, which the lanes have computed, or are computing, meanwhile. With
``-x`` or ``--maxfail``, the scenarios not yet begun are dropped when pytest stops.

Used only with a target that says it can (``Target.lanes``); others get xdist workers.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import time
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_shadowcheck.plugin.runner import run_item
from pytest_shadowcheck.plugin.state import LANES_KEY, ShadowcheckState, get_state
from pytest_shadowcheck.verdict import Verdict

if TYPE_CHECKING:
    from pytest_shadowcheck.scenario.model import Scenario

__all__ = ["LANES_PLUGIN", "Lanes", "lanes_of", "register_lanes"]

#: the name the lanes are registered under
LANES_PLUGIN = "shadowcheck-lanes"


class Lanes:
    """The session's lanes: a pool of threads, each with a target of its own."""

    def __init__(self, state: ShadowcheckState, count: int) -> None:
        self.state = state
        self.count = count
        self.pool = ThreadPoolExecutor(
            count, thread_name_prefix="shadowcheck-lane", initializer=state.enter_lane
        )
        self.futures: dict[str, Future[Verdict]] = {}
        #: seconds each scenario ran in its lane, by node id
        self.took: dict[str, float] = {}
        self.session: pytest.Session | None = None

    def pytest_report_header(self) -> str:
        return f"shadowcheck: up to {self.count} scenarios at once, in lanes of this process"

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtestloop(self, session: pytest.Session) -> None:
        """Queue every scenario (in collection order: longest first) before pytest's own
        loop runs the items; returns nothing, so that loop runs next."""
        self.session = session
        if session.config.option.collectonly:
            return
        _import_the_harness()
        for item in session.items:
            scenario = getattr(item, "scenario", None)  # a ScenarioItem (plugin/collect.py)
            if scenario is not None:
                where = item.location_arg()  # type: ignore[attr-defined]
                self.futures[item.nodeid] = self.pool.submit(
                    self._run, scenario, item.nodeid, where
                )

    def _run(self, scenario: Scenario, nodeid: str, location: str) -> Verdict:
        began = time.monotonic()
        try:
            return run_item(self.state, scenario, nodeid, location)
        finally:
            self.took[nodeid] = time.monotonic() - began

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        """The setup's duration is the scenario's run in its lane, not the wait for it
        (--durations, JUnit's time and the durations cache read it)."""
        report = yield
        if call.when == "setup" and item.nodeid in self.took:
            report.duration = self.took[item.nodeid]
        return report

    def verdict(self, scenario: Scenario, nodeid: str, location: str) -> Verdict:
        """The item's verdict, once its lane has it (run here if it was never queued)."""
        future = self.futures.get(nodeid)
        if future is None:
            return run_item(self.state, scenario, nodeid, location)
        return future.result()

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        session = self.session
        if session is not None and (session.shouldstop or session.shouldfail):
            self.stop()  # -x, --maxfail: pytest runs no more items

    def pytest_sessionfinish(self) -> None:
        self.stop()

    def stop(self) -> None:
        """Drop the scenarios not begun; the running ones end (and release their nodes)
        before the process does."""
        for future in self.futures.values():
            future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)


def _import_the_harness() -> None:
    """Import every module of the harness here, in the main thread, before a lane runs.
    pytest rewrites the asserts of a plugin's modules with ``ast.parse`` as they are
    imported, and CPython 3.11's AST constructor is not safe in two threads at once
    ("SystemError: AST constructor recursion depth mismatch", seen when a lane imported
    a module while pytest formatted a report): after this, lanes import nothing new."""
    harness = Path(__file__).resolve().parents[1]  # the pytest_shadowcheck package
    for found in pkgutil.walk_packages([str(harness)], "pytest_shadowcheck."):
        if found.name.endswith("__main__"):
            continue
        with contextlib.suppress(ImportError):  # an optional dependency missing here
            importlib.import_module(found.name)


def lanes_of(config: pytest.Config) -> Lanes | None:
    plugin = config.pluginmanager.get_plugin(LANES_PLUGIN)
    return plugin if isinstance(plugin, Lanes) else None


def register_lanes(config: pytest.Config) -> None:
    """Register the session's lanes when plugin/concurrency.py chose some."""
    count = config.stash.get(LANES_KEY, 0)
    if count > 1 and not hasattr(config, "workerinput"):
        config.pluginmanager.register(Lanes(get_state(config), count), LANES_PLUGIN)
