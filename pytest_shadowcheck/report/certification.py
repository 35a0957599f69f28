"""The certification report: every behaviour ID with its status, and the evidence that decided it.

Written by ``--shadowcheck-report DIR`` as ``certification.json`` and a readable
``certification.html``. Verdicts come from the test reports (``report.shadowcheck``),
so the report is complete under pytest-xdist: the controller sees every worker's
reports.

A behaviour's status combines, over the scenarios that name it, its status in
each (computed from the checks that evidence it, see :mod:`.verdict`), by
``statuses.strongest``. A behaviour some of whose scenarios in the library did
not run (``-k``, ``-m``, a file argument) is PARTIAL unless a FAIL, an
INCONCLUSIVE or an OUTSIDE-GUARANTEE was seen; one none of whose scenarios ran
is UNTESTED. The words and colours are :data:`.statuses.LEGEND`.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import shlex
from pathlib import Path
from typing import Any

from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.scenario.loader import load_behaviours, load_scenario_file
from pytest_shadowcheck.statuses import LEGEND, Status, strongest
from pytest_shadowcheck.version import __version__

__all__ = [
    "build_report",
    "is_scenario_file",
    "library_scenarios",
    "render_html",
    "scenario_entry",
    "write_report",
]

#: summary order: what needs attention first
SUMMARY_ORDER = [
    Status.FAIL,
    Status.INCONCLUSIVE,
    Status.OUTSIDE_GUARANTEE,
    Status.PARTIAL,
    Status.PASS,
    Status.NOT_APPLICABLE,
    Status.UNTESTABLE,
    Status.UNTESTED,
]
#: statuses a partial run cannot confirm (a FAIL or a crash is news whatever else ran)
_PARTIAL_HIDES = {Status.PASS, Status.NOT_APPLICABLE, Status.UNTESTABLE}


def is_scenario_file(path: Path) -> bool:
    """The files the plugin collects as scenario files."""
    if path.suffix not in (".yaml", ".yml"):
        return False
    if "topologies" in path.parts or path.name.startswith(("_", ".")):
        return False
    return not (path.name == "behaviours.yaml" and path.parent.name == "pytest_shadowcheck")


def library_scenarios(paths: list[Path]) -> dict[str, list[str]]:
    """Behaviour ID -> names of the scenarios that name it, over the whole library.

    Files that do not load are left out: they are reported as collection errors."""
    files: list[Path] = []
    for path in paths:
        if path.is_dir():
            files += sorted(p for p in path.rglob("*") if p.is_file() and is_scenario_file(p))
        elif path.is_file():
            files.append(path)
    out: dict[str, list[str]] = {}
    for file in files:
        try:
            scenarios = load_scenario_file(file)
        except (ScenarioError, OSError):
            continue
        for scenario in scenarios:
            for bid in scenario.behaviours:
                out.setdefault(bid, []).append(scenario.name)
    return out


def _behaviour_entry(
    bid: str,
    catalogue_entry: dict[str, Any],
    results: list[dict[str, Any]],
    library: list[str],
) -> dict[str, Any]:
    ran = [r for r in results if bid in r["by_behaviour"]]
    statuses = [Status(r["by_behaviour"][bid]["status"]) for r in ran]
    status = strongest(statuses)
    run_names = {r["scenario"] for r in ran}
    not_run = [name for name in library if name not in run_names]
    if ran and not_run and status in _PARTIAL_HIDES:
        status = Status.PARTIAL
    scenarios = []
    for r in ran:
        entry = r["by_behaviour"][bid]
        decided_by = [
            {"name": c["name"], "status": c["status"], "where": c.get("where", "")}
            for c in r["checks"]
            if not c.get("behaviours") or bid in c["behaviours"]
        ]
        scenarios.append(
            {
                "nodeid": r["nodeid"],
                "scenario": r["scenario"],
                "status": entry["status"],
                "reason": entry["reason"],
                "decided_by": decided_by,
            }
        )
    return {
        "id": bid,
        "group": catalogue_entry["group"],
        "summary": catalogue_entry["summary"],
        "status": str(status),
        "scenarios": scenarios,
        "not_run": not_run,
        "reason": _one_line_reason(status, scenarios, len(library), not_run),
    }


def _one_line_reason(
    status: Status, scenarios: list[dict[str, Any]], in_library: int, not_run: list[str]
) -> str:
    if status == Status.UNTESTED:
        return "no scenario for it ran" if in_library else "no scenario in the library names it"
    if status == Status.PARTIAL:
        return f"{in_library - len(not_run)} of {in_library} scenarios run"
    for s in scenarios:
        if s["status"] == status and s["reason"]:
            return f"{s['scenario']}: {s['reason']}"
    return f"{len(scenarios)} scenario(s)"


def build_report(
    results: list[dict[str, Any]],
    *,
    run_id: str,
    target: str,
    target_version: str,
    started_at: str,
    target_spec: str = "",
    library: dict[str, list[str]] | None = None,
    collection_errors: list[dict[str, str]] | None = None,
) -> dict[str, Any]:
    catalogue = load_behaviours()
    library = library or {}
    behaviours = []
    for bid in [*catalogue, *sorted(set(library) - set(catalogue))]:
        entry = catalogue.get(bid, {"summary": "(not in the catalogue)", "group": bid[:2]})
        named_by = library.get(bid) or [r["scenario"] for r in results if bid in r["by_behaviour"]]
        behaviours.append(_behaviour_entry(bid, entry, results, named_by))
    summary = {str(status): 0 for status in SUMMARY_ORDER}
    for item in behaviours:
        summary[item["status"]] += 1
    run_names = {r["scenario"] for r in results}
    not_run = sorted({name for names in library.values() for name in names} - run_names)
    return {
        "run_id": run_id,
        "target": target,
        "target_version": target_version,
        "target_spec": target_spec,
        "harness_version": __version__,
        "started_at": started_at,
        "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "summary": summary,
        "behaviours": behaviours,
        "scenarios": results,
        "not_run": not_run,
        "collection_errors": collection_errors or [],
    }


# --------------------------------------------------------------------------- HTML


def _badge(status: str, text: str | None = None, title: str = "", href: str = "") -> str:
    info = LEGEND[Status(status)]
    fg = "#000" if status in ("UNTESTED", "PARTIAL", "UNTESTABLE") else "#fff"
    body = html.escape(text if text is not None else status)
    if href:
        body = f'<a href="{html.escape(href)}" style="color:{fg}">{body}</a>'
    return (
        f'<span class="b" style="background:{info.colour};color:{fg}" '
        f'title="{html.escape(title)}">{body}</span>'
    )


def _legend() -> str:
    rows = "".join(
        f"<tr><td>{_badge(str(s))}</td><td>{html.escape(i.meaning)}</td>"
        f"<td>{html.escape(i.pytest_outcome)}</td><td><code>{html.escape(i.junit)}</code></td></tr>"
        for s, i in LEGEND.items()
    )
    return (
        "<details><summary>What the statuses mean</summary><table><thead><tr><th>status</th>"
        "<th>meaning</th><th>pytest</th><th>JUnit</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></details>"
    )


def reproduce_command(report: dict[str, Any], nodeid: str) -> str:
    spec = report.get("target_spec") or report["target"]
    return shlex.join(["pytest", "--shadowcheck", f"--shadowcheck-target={spec}", nodeid])


def _scenario_section(report: dict[str, Any], s: dict[str, Any]) -> str:
    checks = [c for c in s.get("checks", []) if c.get("status") != "PASS"]
    rendered = "".join(f"<pre>{html.escape(c.get('rendered', ''))}</pre>" for c in checks)
    per_behaviour = " ".join(
        _badge(v["status"], f"{bid} {v['status']}", v.get("reason", ""), f"#behaviour-{bid}")
        for bid, v in s["by_behaviour"].items()
    )
    diagnostics = (
        f"<details><summary>target diagnostics (node logs)</summary>"
        f"<pre>{html.escape(s['diagnostics'])}</pre></details>"
        if s.get("diagnostics")
        else ""
    )
    passed = [c["name"] for c in s.get("checks", []) if c.get("status") == "PASS"]
    workloads = (
        f'<p>workload figures: <a href="#workloads-{html.escape(s["scenario"])}">below</a></p>'
        if s.get("workloads")
        else ""
    )
    return (
        f'<section id="scenario-{html.escape(s["scenario"])}"><h3>{html.escape(s["scenario"])}'
        f" {_badge(s['verdict'])}</h3><p>{html.escape(s.get('title', ''))}</p>"
        f"<p>{per_behaviour}</p><p>{html.escape(s['reason'])}</p>"
        + "".join(f"<p>caveat: {html.escape(c)}</p>" for c in s.get("caveats", []))
        + f"<p>defined at <code>{html.escape(s.get('source', ''))}</code>; reproduce with "
        f"<code>{html.escape(reproduce_command(report, s['nodeid']))}</code></p>"
        f"{rendered}"
        + (f"<p>passed: {html.escape(', '.join(passed))}</p>" if passed else "")
        + f"{workloads}{diagnostics}</section>"
    )


def _workloads_section(report: dict[str, Any]) -> str:
    """Every workload's figures, whatever its scenario's status: durability at volume is
    measured as much as judged."""
    parts = [
        f'<section id="workloads-{html.escape(s["scenario"])}"><h3>{html.escape(s["scenario"])} '
        f"{_badge(s['verdict'])}</h3>"
        + "".join(_workload_table(w) for w in s["workloads"])
        + "</section>"
        for s in report["scenarios"]
        if s.get("workloads")
    ]
    return f"<h2>Durability workloads</h2>{''.join(parts)}" if parts else ""


def _workload_table(w: dict[str, Any]) -> str:
    """A workload's figures: what happened to every message, and how fast."""
    fates = ", ".join(f"{k} {v}" for k, v in sorted(w.get("fates", {}).items()))
    causes = ", ".join(f"{k}: {v}" for k, v in w.get("duplicate_causes", {}).items()) or "none"
    ack, e2e = w.get("ack_latency_s", {}), w.get("end_to_end_s", {})
    rows = [
        ("messages", f"{w.get('attempted')} attempted, {w.get('acknowledged')} acknowledged"),
        ("fates", fates),
        ("duplicate rate", f"{w.get('duplicate_rate', 0):.3%}; causes: {causes}"),
        ("ack latency p50 / p99", f"{ack.get('p50', 0):.3f} / {ack.get('p99', 0):.3f} s"),
        ("end to end p50 / p99", f"{e2e.get('p50', 0):.3f} / {e2e.get('p99', 0):.3f} s"),
        ("availability", f"{w.get('availability', 0):.1%} of 1-second buckets with a 250"),
        ("faults", f"{w.get('faults')}, {w.get('temporary_failures')} 4xx replies"),
        ("seed", str(w.get("seed"))),
    ]
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (
        f'<table class="workload"><caption>workload {html.escape(str(w.get("workload")))}'
        f"</caption>{body}</table>"
    )


def _listing(report: dict[str, Any], status: Status) -> str:
    items = [b for b in report["behaviours"] if b["status"] == status]
    if not items:
        return ""
    lis = "".join(
        f'<li><a href="#behaviour-{b["id"]}">{b["id"]}</a> {html.escape(b["reason"])}</li>'
        for b in items
    )
    return f"<h3>{_badge(str(status))} {len(items)}</h3><ul>{lis}</ul>"


def render_html(report: dict[str, Any]) -> str:
    """A self-contained page: banners, summary, lists by status, the behaviour matrix with
    links to the evidence, and one evidence section per scenario that did not pass."""
    scenarios = report["scenarios"]
    head = "".join(
        f'<th class="v"><div><a href="#scenario-{html.escape(s["scenario"])}">'
        f"{html.escape(s['scenario'])}</a></div></th>"
        for s in scenarios
    )
    rows = []
    for entry in report["behaviours"]:
        cells = []
        for s in scenarios:
            mine = s["by_behaviour"].get(entry["id"])
            if mine is None:
                cells.append("<td></td>")
                continue
            cells.append(
                f'<td class="s">{_badge(mine["status"], None, mine.get("reason", ""), "#scenario-" + s["scenario"])}</td>'  # noqa: E501
            )
        rows.append(
            f'<tr id="behaviour-{html.escape(entry["id"])}"><th>{html.escape(entry["id"])}</th>'
            f'<td class="t">{html.escape(entry["summary"])}</td>'
            f'<td class="s">{_badge(entry["status"], None, entry["reason"])}</td>'
            f'<td class="t">{html.escape(entry["reason"])}</td>{"".join(cells)}</tr>'
        )
    details = "".join(
        _scenario_section(report, s)
        for s in scenarios
        if s["verdict"] != "PASS" or any(v["status"] != "PASS" for v in s["by_behaviour"].values())
    )
    errors = "".join(
        f"<pre>{html.escape(e['nodeid'])}\n{html.escape(e['message'])}</pre>"
        for e in report["collection_errors"]
    )
    summary = " ".join(_badge(k, f"{k}: {v}") for k, v in report["summary"].items() if v)
    banners = []
    if report["summary"].get("INCONCLUSIVE"):
        banners.append(
            f"{report['summary']['INCONCLUSIVE']} behaviour(s) INCONCLUSIVE: the target or the "
            "harness broke before they could be judged (see their scenarios' diagnostics). "
            "This certification is not complete."
        )
    if report["not_run"]:
        banners.append(
            f"Partial run: {len(report['not_run'])} scenario(s) of the library were not run "
            f"({', '.join(report['not_run'][:20])}{' ...' if len(report['not_run']) > 20 else ''})."
        )
    banner = "".join(f'<p class="warn">{html.escape(b)}</p>' for b in banners)
    lists = "".join(
        _listing(report, s)
        for s in (
            Status.FAIL,
            Status.INCONCLUSIVE,
            Status.OUTSIDE_GUARANTEE,
            Status.UNTESTABLE,
            Status.NOT_APPLICABLE,
            Status.PARTIAL,
        )
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
td.s {{ text-align: center; white-space: nowrap; }}
td.t {{ max-width: 32em; }}
th.v {{ height: 12em; vertical-align: bottom; }}
th.v div {{ writing-mode: vertical-rl; transform: rotate(180deg); }}
.b {{ padding: 2px 6px; margin-right: 4px; border-radius: 3px; font-weight: bold;
      font-size: 12px; }}
.warn {{ background: #fff3e0; border-left: 4px solid #ef6c00; padding: 6px 10px; }}
pre {{ background: #f6f6f6; padding: 6px; overflow-x: auto; }}
section {{ border-top: 1px solid #ddd; margin-top: 1em; }}
</style></head><body>
<h1>Shadow redundancy and Safety Net: certification report</h1>
<p>{meta}</p>
{banner}
<p>{summary}</p>
{_legend()}
<h2>Behaviours by status</h2>{lists or "<p>every behaviour PASS</p>"}
<h2>Behaviours and scenarios</h2>
<table><thead><tr><th>ID</th><th>behaviour</th><th>status</th><th>why</th>{head}</tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h2>Evidence: scenarios with a status other than PASS</h2>{details or "<p>none</p>"}
{_workloads_section(report)}
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


def scenario_entry(nodeid: str, data: dict[str, Any], duration_s: float) -> dict[str, Any]:
    """One scenario's row of the report, from the verdict a test report carries
    (``Verdict.to_dict()`` plus its file) and how long the scenario took."""
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
    return {
        "nodeid": nodeid,
        "scenario": data["scenario"],
        "title": data.get("title", ""),
        "behaviours": data["behaviours"],
        "verdict": data["status"],
        "by_behaviour": data["by_behaviour"],
        "reason": data.get("reason", ""),
        "source": _relative(data.get("source", "")),
        "diagnostics": data.get("diagnostics", ""),
        "duration_s": round(duration_s, 3),
        "checks": checks,
        "workloads": data.get("workloads", []),
        "caveats": data.get("caveats", []),
    }


def _relative(source: str) -> str:
    """A scenario's ``file:line`` relative to the working directory when it is below it."""
    path, sep, line = source.rpartition(":")
    if not sep or not os.path.isabs(path):
        return source
    try:
        return f"{Path(path).relative_to(Path.cwd())}:{line}"
    except ValueError:
        return source
