"""The certification report: every behaviour ID with its status and the scenarios behind it.

Written by ``--shadowcheck-report DIR`` as ``certification.json`` and a
readable ``certification.html`` (an Autobahn-style matrix: behaviours down,
scenarios across). Verdicts come from the test reports
(``report.shadowcheck``), so the report is complete under pytest-xdist: the
controller sees every worker's reports.

Status of a behaviour, strongest first: FAIL (a scenario failed), PASS (at
least one passed, none failed), OUTSIDE-GUARANTEE (only outside-guarantee
results), UNTESTABLE (every scenario lacked a capability), UNTESTED (no
scenario for it ran).
"""

from __future__ import annotations

import datetime as dt
import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import __version__
from .scenario import load_behaviours

if TYPE_CHECKING:
    from .plugin import ShadowcheckState

__all__ = ["CertificationRecorder", "behaviour_status", "build_report", "render_html"]

UNTESTED = "UNTESTED"
STATUS_ORDER = ["FAIL", "PASS", "OUTSIDE-GUARANTEE", "UNTESTABLE", UNTESTED]
COLOURS = {
    "PASS": "#2e7d32",
    "FAIL": "#c62828",
    "UNTESTABLE": "#9e9e9e",
    "OUTSIDE-GUARANTEE": "#ef6c00",
    UNTESTED: "#e0e0e0",
}


def behaviour_status(verdicts: list[str]) -> str:
    for status in STATUS_ORDER:
        if status in verdicts:
            return status
    return UNTESTED


def build_report(
    results: list[dict[str, Any]],
    *,
    run_id: str,
    target: str,
    target_version: str,
    started_at: str,
    collection_errors: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    catalogue = load_behaviours()
    by_behaviour: dict[str, list[dict[str, Any]]] = {bid: [] for bid in catalogue}
    for result in results:
        for bid in result["behaviours"]:
            by_behaviour.setdefault(bid, []).append(result)
    behaviours = []
    for bid, scenario_results in by_behaviour.items():
        status = behaviour_status([r["verdict"] for r in scenario_results])
        entry: dict[str, Any] = catalogue.get(
            bid, {"summary": "(not in the catalogue)", "group": bid.split("-")[0]}
        )
        behaviours.append(
            {
                "id": bid,
                "group": entry["group"],
                "summary": entry["summary"],
                "status": status,
                "scenarios": [
                    {
                        "nodeid": r["nodeid"],
                        "scenario": r["scenario"],
                        "verdict": r["verdict"],
                        "reason": r["reason"],
                    }
                    for r in scenario_results
                ],
            }
        )
    summary = {status: 0 for status in STATUS_ORDER}
    for item in behaviours:
        summary[item["status"]] += 1
    return {
        "run_id": run_id,
        "target": target,
        "target_version": target_version,
        "harness_version": __version__,
        "started_at": started_at,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "summary": summary,
        "behaviours": behaviours,
        "scenarios": results,
        "collection_errors": collection_errors or [],
    }


def _cell(status: str, title: str = "") -> str:
    colour = COLOURS.get(status, "#ffffff")
    fg = "#000" if status == UNTESTED else "#fff"
    return (
        f'<td class="s" style="background:{colour};color:{fg}" title="{html.escape(title)}">'
        f"{html.escape(status)}</td>"
    )


def render_html(report: dict[str, Any]) -> str:
    """A self-contained page: summary, behaviour x scenario matrix, failure details."""
    scenarios = report["scenarios"]
    head = "".join(f'<th class="v"><div>{html.escape(s["scenario"])}</div></th>' for s in scenarios)
    rows = []
    for entry in report["behaviours"]:
        cells = []
        for s in scenarios:
            if entry["id"] in s["behaviours"]:
                cells.append(_cell(s["verdict"], s["reason"]))
            else:
                cells.append("<td></td>")
        rows.append(
            f'<tr><th>{html.escape(entry["id"])}</th><td class="t">'
            f"{html.escape(entry['summary'])}</td>{_cell(entry['status'])}{''.join(cells)}</tr>"
        )
    details = []
    for s in scenarios:
        if s["verdict"] in ("PASS",):
            continue
        checks = "".join(
            f"<pre>{html.escape(c.get('rendered', ''))}</pre>"
            for c in s.get("checks", [])
            if c.get("status") != "PASS"
        )
        details.append(
            f'<h3 id="{html.escape(s["scenario"])}">{html.escape(s["scenario"])} '
            f"({html.escape(', '.join(s['behaviours']))}): {html.escape(s['verdict'])}</h3>"
            f"<p>{html.escape(s['reason'])}</p><p><code>{html.escape(s['nodeid'])}</code></p>"
            f"{checks}"
        )
    errors = "".join(
        f"<pre>{html.escape(e['nodeid'])}\n{html.escape(e['message'])}</pre>"
        for e in report["collection_errors"]
    )
    summary = " ".join(
        f'<span class="b" style="background:{COLOURS[k]};'
        f'color:{"#000" if k == UNTESTED else "#fff"}">{html.escape(k)}: {v}</span>'
        for k, v in report["summary"].items()
    )
    meta = (
        f"target <b>{html.escape(report['target'])}</b> "
        f"{html.escape(report['target_version'])} - "
        f"harness {html.escape(report['harness_version'])}"
        f" - run {html.escape(report['run_id'])} - {html.escape(report['started_at'])}"
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>shadowcheck certification - {html.escape(report["target"])}</title>
<style>
body {{ font-family: sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; font-size: 13px; }}
td, th {{ border: 1px solid #ccc; padding: 3px 6px; }}
td.s {{ text-align: center; font-weight: bold; white-space: nowrap; }}
td.t {{ max-width: 40em; }}
th.v {{ height: 12em; vertical-align: bottom; }}
th.v div {{ writing-mode: vertical-rl; transform: rotate(180deg); }}
.b {{ padding: 2px 8px; margin-right: 6px; border-radius: 3px; }}
pre {{ background: #f6f6f6; padding: 6px; overflow-x: auto; }}
</style></head><body>
<h1>Shadow redundancy and Safety Net: certification report</h1>
<p>{meta}</p>
<p>{summary}</p>
<table><thead><tr><th>ID</th><th>behaviour</th><th>status</th>{head}</tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h2>Scenarios not passed</h2>{"".join(details) or "<p>none</p>"}
{"<h2>Scenario files with errors</h2>" + errors if errors else ""}
</body></html>
"""


def write_report(directory: Path, report: dict[str, Any]) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    json_path = directory / "certification.json"
    html_path = directory / "certification.html"
    json_path.write_text(json.dumps(report, indent=2), encoding="utf-8")
    html_path.write_text(render_html(report), encoding="utf-8")
    return json_path, html_path


class CertificationRecorder:
    """Collects verdicts from test reports (also from xdist workers) on the controller."""

    def __init__(self, state: ShadowcheckState) -> None:
        self.state = state
        self.results: dict[str, dict[str, Any]] = {}
        self.errors: list[dict[str, str]] = []
        self.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
        self.written: tuple[Path, Path] | None = None
        self.report: dict[str, Any] | None = None

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "shadowcheck", None)
        if not isinstance(data, dict):
            return
        checks = []
        for check in data.get("checks", []):
            rendered = "\n".join(
                [
                    f"[{check['status']}] {check['name']}  ({check.get('where', '')})",
                    f"expected: {check['expected']}",
                    f"observed: {check['observed']}",
                    check.get("excerpt", ""),
                ]
            )
            checks.append({**check, "rendered": rendered})
        self.results[report.nodeid] = {
            "nodeid": report.nodeid,
            "scenario": data["scenario"],
            "title": data.get("title", ""),
            "behaviours": data["behaviours"],
            "verdict": data["status"],
            "reason": data.get("reason", ""),
            "source": data.get("source", ""),
            "duration_s": round(report.duration, 3),
            "checks": checks,
        }

    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            self.errors.append({"nodeid": report.nodeid, "message": str(report.longrepr)})

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        state = self.state
        self.report = build_report(
            list(self.results.values()),
            run_id=state.run_id,
            target=state.target_spec,
            target_version=state.target.version(),
            started_at=self.started_at,
            collection_errors=self.errors,
        )
        if state.report_dir is not None:
            self.written = write_report(state.report_dir, self.report)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if self.report is None:
            return
        counts = ", ".join(f"{v} {k}" for k, v in self.report["summary"].items() if v)
        terminalreporter.write_sep("-", "shadowcheck certification")
        terminalreporter.write_line(f"behaviours: {counts}")
        failing = [b["id"] for b in self.report["behaviours"] if b["status"] == "FAIL"]
        if failing:
            terminalreporter.write_line(f"FAIL: {', '.join(failing)}")
        if self.written:
            terminalreporter.write_line(f"report: {self.written[1]} (and {self.written[0].name})")
