"""The certification report's pytest side: it collects the verdict of every scenario
from the test reports (also those of xdist workers, on the controller) and writes the
report at the end of the session (:mod:`pytest_shadowcheck.report.certification`).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.plugin.exploration import EXPLORATION_PLUGIN
from pytest_shadowcheck.plugin.junit import junit_xml
from pytest_shadowcheck.plugin.state import ShadowcheckState
from pytest_shadowcheck.report.certification import (
    GLUE_PASS,
    build_report,
    library_scenarios,
    scenario_entry,
    write_report,
)
from pytest_shadowcheck.statuses import Status

__all__ = ["CertificationRecorder"]


def _exploration_figures(config: pytest.Config) -> dict[str, Any] | None:
    """What the exploration plugin counted, when explored scenarios were collected."""
    hooks = config.pluginmanager.get_plugin(EXPLORATION_PLUGIN)
    return hooks.figures() if hooks is not None else None


class CertificationRecorder:
    """Collects verdicts from test reports (also from xdist workers) on the controller."""

    def __init__(self, state: ShadowcheckState) -> None:
        self.state = state
        self.results: dict[str, dict[str, Any]] = {}
        #: each scenario's setup time: the run itself
        self.setup_s: dict[str, float] = {}
        self.errors: list[dict[str, str]] = []
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.written: tuple[Path, Path] | None = None
        self.report: dict[str, Any] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when == "setup":
            # the scenario runs in the setup phase (see collect.ScenarioItem): its time
            self.setup_s[report.nodeid] = report.duration
        data = getattr(report, "shadowcheck", None)
        if not isinstance(data, dict):
            return
        took = self.setup_s.get(report.nodeid, 0.0) + (
            report.duration if report.when == "call" else 0.0
        )
        self.results[report.nodeid] = scenario_entry(report.nodeid, data, took)

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append({"nodeid": report.nodeid, "message": str(report.longrepr)})

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes the file: it adds a property
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        state = self.state
        self.report = build_report(
            sorted(self.results.values(), key=lambda r: r["nodeid"]),
            run_id=state.run_id,
            target=state.target.label,
            target_version=state.target.version(),
            target_spec=state.target_spec,
            started_at=self.started_at,
            library=library_scenarios(state.library_paths or state.scenario_paths),
            collection_errors=self.errors,
            glue=[{"provides": list(g.provides), "what": g.what} for g in state.target.glue],
            exploration=_exploration_figures(session.config),
        )
        partial = [b["id"] for b in self.report["behaviours"] if b["status"] == "PARTIAL"]
        xml = junit_xml(session.config)
        if xml is not None:
            if partial:
                xml.add_global_property("shadowcheck.partial", ",".join(partial))
            if state.report_dir is not None:
                xml.add_global_property(
                    "shadowcheck.certification", str(state.report_dir / "certification.html")
                )
        if state.report_dir is not None:
            self.written = write_report(state.report_dir, self.report)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None:
            return
        counts = ", ".join(f"{v} {k}" for k, v in self.report["summary"].items() if v)
        terminalreporter.write_sep("-", "shadowcheck certification")
        terminalreporter.write_line(f"behaviours: {counts}")
        for status in (Status.FAIL, Status.INCONCLUSIVE, Status.PARTIAL):
            ids = [b["id"] for b in self.report["behaviours"] if b["status"] == status]
            if ids:
                terminalreporter.write_line(f"{status}: {', '.join(ids)}")
        glued = [b for b in self.report["behaviours"] if b.get("by_glue")]
        if glued:
            terminalreporter.write_line(
                f"{GLUE_PASS}, not credited to the MTA: "
                + "; ".join(f"{b['id']} (by the description's glue: {b['by_glue']})" for b in glued)
            )
        if self.report["not_run"]:
            terminalreporter.write_line(
                f"not run: {len(self.report['not_run'])} scenario(s) of the library "
                "(the certification is partial)"
            )
        if self.written:
            terminalreporter.write_line(f"report: {self.written[1]} (and {self.written[0].name})")
