"""Collection: a scenario file is a pytest File, each scenario a pytest Item.

The item's name carries the scenario name and its behaviour IDs
(``cr4_single_node[CR-4]``), so ``-k CR-4`` works; each behaviour ID is also
a marker, so ``-m CR-4`` and ``-m "CR-4 or CR-5"`` select exactly.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.plugin.junit import workload_properties
from pytest_shadowcheck.report.rules import rule_sentences
from pytest_shadowcheck.scenario.loader import Scenario, load_scenario_file
from pytest_shadowcheck.statuses import VERDICTS_PROPERTY, format_verdicts
from pytest_shadowcheck.verdict import Status, Verdict

if TYPE_CHECKING:
    # pytest names the type repr_failure returns only in a private module
    from _pytest._code.code import TerminalRepr

__all__ = ["ScenarioFailure", "ScenarioFile", "ScenarioInconclusive", "ScenarioItem"]


class ScenarioFailure(Exception):
    """Raised by a scenario item whose verdict is FAIL; carries the verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


class ScenarioInconclusive(ScenarioFailure):
    """Raised in setup when the target or the harness broke: a pytest *error*, not a
    failure, so JUnit shows ``<error>`` and the MTA is not blamed."""


class ScenarioFile(pytest.File):
    """A YAML scenario file."""

    def collect(self) -> Any:
        for scenario in load_scenario_file(self.path):
            name = f"{scenario.name}[{','.join(scenario.behaviours)}]"
            item = ScenarioItem.from_parent(self, name=name, scenario=scenario)
            item.add_marker("shadowcheck")
            for behaviour in scenario.behaviours:
                item.add_marker(behaviour)
            if self.config.pluginmanager.hasplugin("timeout"):
                # a scenario keeps its own time limit (its ``timeout``); pytest-timeout's
                # would also count the wait for a lane and an explored FAIL's shrinking,
                # and its alarm breaks the session (INTERNALERROR) instead of the scenario
                item.add_marker(pytest.mark.timeout(0))
            yield item

    def repr_failure(  # type: ignore[override]
        self, excinfo: pytest.ExceptionInfo[BaseException]
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ScenarioItem(pytest.Item):
    """One scenario run against the configured target.

    The scenario runs in the setup phase, so that a target or harness error
    (INCONCLUSIVE) is a pytest error; the call phase turns the verdict into the
    outcome: passed, failed (FAIL), skipped (UNTESTABLE, NOT-APPLICABLE) or xfailed
    (OUTSIDE-GUARANTEE).
    """

    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.verdict: Verdict | None = None

    def setup(self) -> None:
        from pytest_shadowcheck.plugin.lanes import lanes_of
        from pytest_shadowcheck.plugin.runner import run_item
        from pytest_shadowcheck.plugin.state import get_state

        state = get_state(self.config)
        lanes = lanes_of(self.config)
        if lanes is not None:
            # run in a lane meanwhile
            verdict = self.verdict = lanes.verdict(self.scenario, self.nodeid, self.location_arg())
        else:
            verdict = self.verdict = run_item(
                state, self.scenario, self.nodeid, self.location_arg()
            )
        if state.junit_properties_per_case:
            self.user_properties.append(("shadowcheck.behaviours", ",".join(verdict.behaviours)))
            self.user_properties.append(("shadowcheck.verdict", str(verdict.status)))
            self.user_properties.append((VERDICTS_PROPERTY, format_verdicts(verdict.by_behaviour)))
            self.user_properties.extend(workload_properties(verdict.workloads))
            if verdict.retried:
                self.user_properties.append(("shadowcheck.retried", verdict.retried))
        if verdict.status == Status.INCONCLUSIVE:
            raise ScenarioInconclusive(verdict)

    def location_arg(self) -> str:
        """The argument that selects this item on a command line run where this one was:
        its file relative to that directory (absolute when outside it), then its name."""
        path = self.path.resolve()
        here = self.config.invocation_params.dir.resolve()
        shown = path.relative_to(here) if path.is_relative_to(here) else path
        return f"{shown}::{self.name}"

    def runtest(self) -> None:
        verdict = self.verdict
        assert verdict is not None, "setup() runs the scenario"
        status = verdict.status
        if status in (Status.UNTESTABLE, Status.NOT_APPLICABLE):
            # reported at the scenario's location (like a skip marker), not at this line
            raise pytest.skip.Exception(f"{status}: {verdict.summary()}", _use_item_location=True)
        if status == Status.OUTSIDE_GUARANTEE:
            pytest.xfail(f"OUTSIDE-GUARANTEE: {verdict.summary()}")
        if status == Status.FAIL:
            raise ScenarioFailure(verdict)

    def repr_failure(
        self, excinfo: pytest.ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioFailure):
            from pytest_shadowcheck.plugin.shrinking import explored_text, shrink_text

            verdict = excinfo.value.verdict
            return "\n".join(
                [
                    verdict.render(rule_sentences()),
                    *shrink_text(verdict.workloads),
                    *explored_text(verdict.explored),
                ]
            )
        if isinstance(excinfo.value, (pytest.xfail.Exception, pytest.skip.Exception)):
            # its message is the whole story; no traceback to format (and parse) for it
            return str(excinfo.value)
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        line = self.scenario.where.line
        return self.path, (line - 1 if line else None), f"scenario {self.scenario.name}"
