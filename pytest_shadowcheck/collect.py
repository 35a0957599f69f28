"""Collection: a scenario file is a pytest File, each scenario a pytest Item.

The item's name carries the scenario name and its behaviour IDs
(``cr4_single_node[CR-4]``), so ``-k CR-4`` works; each behaviour ID is also
a marker, so ``-m CR-4`` and ``-m "CR-4 or CR-5"`` select exactly.
"""

from __future__ import annotations

from typing import Any

import pytest
from _pytest._code.code import ExceptionInfo, TerminalRepr

from .errors import ScenarioError
from .scenario import Scenario, load_scenario_file
from .verdict import Status, Verdict

__all__ = ["ScenarioFailure", "ScenarioFile", "ScenarioItem"]


class ScenarioFailure(Exception):
    """Raised by a scenario item whose verdict is FAIL; carries the verdict."""

    def __init__(self, verdict: Verdict) -> None:
        super().__init__(verdict.reason)
        self.verdict = verdict


class ScenarioFile(pytest.File):
    """A YAML scenario file."""

    def collect(self) -> Any:
        for scenario in load_scenario_file(self.path):
            name = f"{scenario.name}[{','.join(scenario.behaviours)}]"
            item = ScenarioItem.from_parent(self, name=name, scenario=scenario)
            item.add_marker("shadowcheck")
            for behaviour in scenario.behaviours:
                item.add_marker(behaviour)
            yield item

    def repr_failure(  # type: ignore[override]
        self, excinfo: ExceptionInfo[BaseException]
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class ScenarioItem(pytest.Item):
    """One scenario run against the configured target."""

    def __init__(self, *, scenario: Scenario, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.scenario = scenario
        self.verdict: Verdict | None = None

    def runtest(self) -> None:
        from .plugin import get_state

        state = get_state(self.config)
        verdict = state.run(self)
        self.verdict = verdict
        if state.junit_properties_per_case:
            self.user_properties.append(("shadowcheck.behaviours", ",".join(verdict.behaviours)))
            self.user_properties.append(("shadowcheck.verdict", str(verdict.status)))
        if verdict.status == Status.UNTESTABLE:
            # reported at the scenario's location (like a skip marker), not at this line
            raise pytest.skip.Exception(f"UNTESTABLE: {verdict.reason}", _use_item_location=True)
        if verdict.status == Status.OUTSIDE_GUARANTEE:
            pytest.xfail(f"OUTSIDE-GUARANTEE: {verdict.reason}")
        if verdict.status == Status.FAIL:
            raise ScenarioFailure(verdict)

    def repr_failure(
        self, excinfo: ExceptionInfo[BaseException], style: Any = None
    ) -> str | TerminalRepr:
        if isinstance(excinfo.value, ScenarioFailure):
            return excinfo.value.verdict.render()
        return super().repr_failure(excinfo, style)

    def reportinfo(self) -> tuple[Any, int | None, str]:
        line = self.scenario.where.line
        return self.path, (line - 1 if line else None), f"scenario {self.scenario.name}"
