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
``-x`` or ``--maxfail``, when pytest stops, the scenarios not yet begun are dropped and
the running ones cut short (a deep exploration's lanes ran theirs for minutes after the
find that stopped it).

A scenario INCONCLUSIVE only because the harness itself ran late (its timing judged
against the lag the run recorded, engine/lag.py) runs once more, alone: no lane starts
another scenario until the running ones have ended and it has run again. The second
run's verdict stands, and says that it is a second run (``Verdict.retried``: the JUnit
property ``shadowcheck.retried``, the certification's scenario section).

Used only with a target that says it can (``Target.lanes``); others get xdist workers.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
import threading
import time
from collections.abc import Generator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from pytest_shadowcheck.plugin.exploration import get_exploration
from pytest_shadowcheck.plugin.runner import retried, run_item
from pytest_shadowcheck.plugin.state import LANES_KEY, ShadowcheckState, get_state
from pytest_shadowcheck.verdict import Verdict

if TYPE_CHECKING:
    from pytest_shadowcheck.scenario.model import Scenario

__all__ = ["LANES_PLUGIN", "Lanes", "lanes_of", "register_lanes"]

#: the name the lanes are registered under
LANES_PLUGIN = "shadowcheck-lanes"
#: the longest a scenario run again waits for the others to end (s)
ALONE_WAIT = 120.0


class Lanes:
    """The session's lanes: a pool of threads, each with a target of its own."""

    def __init__(self, state: ShadowcheckState, count: int) -> None:
        self.state = state
        self.count = count
        self.pool = ThreadPoolExecutor(
            count, thread_name_prefix="shadowcheck-lane", initializer=state.enter_lane
        )
        self.futures: dict[str, Future[Verdict | None]] = {}
        #: seconds each scenario ran in its lane, by node id
        self.took: dict[str, float] = {}
        self.session: pytest.Session | None = None
        # a scenario run again alone: no lane starts another while the gate is shut
        self._gate = threading.Event()
        self._gate.set()
        self._alone = threading.Lock()
        self._running = 0
        self._changed = threading.Condition()

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

    def _run(self, scenario: Scenario, nodeid: str, location: str) -> Verdict | None:
        """The scenario's verdict; None for an explored one a deep exploration's deadline
        passed before its lane came to it (it never starts)."""
        exploration = get_exploration(self.state.config)
        if exploration is not None and exploration.expired(scenario.name):
            return None
        self._gate.wait()
        began = time.monotonic()
        try:
            with self._counted():
                verdict = run_item(self.state, scenario, nodeid, location, again=False)
            if verdict.harness_late:
                verdict = self._again_alone(scenario, nodeid, location, verdict)
            return verdict
        finally:
            self.took[nodeid] = time.monotonic() - began

    def _again_alone(
        self, scenario: Scenario, nodeid: str, location: str, first: Verdict
    ) -> Verdict:
        """Run a scenario again that the harness could not judge because it ran late
        itself (its own lanes and whatever else loads the machine): no other lane starts
        a scenario until the running ones have ended and this one has run again."""
        with self._alone:
            self._gate.clear()
            try:
                with self._changed:
                    self._changed.wait_for(lambda: self._running == 0, timeout=ALONE_WAIT)
                with self._counted():
                    again = run_item(self.state, scenario, nodeid, location, again=False)
            finally:
                self._gate.set()
        return retried(again, first, ", alone in its process")

    @contextlib.contextmanager
    def _counted(self) -> Generator[None, None, None]:
        with self._changed:
            self._running += 1
        try:
            yield
        finally:
            with self._changed:
                self._running -= 1
                self._changed.notify_all()

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> bool | None:
        """An item whose lane did not start it is not run (silently, as a deep
        exploration's items past its deadline are not)."""
        future = self.futures.get(item.nodeid)
        if future is None or getattr(item, "scenario", None) is None:
            return None
        if get_exploration(item.config) is not None and future.result() is None:
            return True
        return None

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
        found = future.result() if future is not None else None
        return run_item(self.state, scenario, nodeid, location) if found is None else found

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        session = self.session
        if session is not None and (session.shouldstop or session.shouldfail):
            self.stop()  # -x, --maxfail: pytest runs no more items

    def pytest_sessionfinish(self) -> None:
        self.stop()

    def stop(self) -> None:
        """Drop the scenarios not begun and cut the running ones short; they release
        their nodes before the process ends."""
        self.state.stopping.set()
        for future in self.futures.values():
            future.cancel()
        self.pool.shutdown(wait=True, cancel_futures=True)


#: modules no lane imports: a shim whose import warns that it moved
_NOT_IMPORTED = frozenset({"pytest_shadowcheck.hookspecs"})


def _import_the_harness() -> None:
    """Import every module of the harness here, in the main thread, before a lane runs.
    pytest rewrites the asserts of a plugin's modules with ``ast.parse`` as they are
    imported, and CPython 3.11's AST constructor is not safe in two threads at once
    ("SystemError: AST constructor recursion depth mismatch", seen when a lane imported
    a module while pytest formatted a report): after this, lanes import nothing new."""
    harness = Path(__file__).resolve().parents[1]  # the pytest_shadowcheck package
    for found in pkgutil.walk_packages([str(harness)], "pytest_shadowcheck."):
        if found.name.endswith("__main__") or found.name in _NOT_IMPORTED:
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
