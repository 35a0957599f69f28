"""One self-contained HTML page: data, script and style inline, nothing fetched when opened.

No charting library: plotly.js alone is 4.8 MB, which left nothing of the 5 MB a
page may weigh for 50 targets x 200 runs. The matrix, the scenario histories and
the tables are HTML written here; the drill-down, the run list, the stacked bars
and the duration chart are drawn by ``dashboard.js`` from one JSON payload.
"""

from __future__ import annotations

import hashlib
import html
import json
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from reports.verdicts import COLOURS, MEANINGS, ORDER

__all__ = ["FAMILIES", "DashboardData", "behaviour_key", "history_anchor", "render"]

Record = dict[str, Any]

TOP_DURATIONS = 10
# The durations shown (and durations.csv): each target's last days, not the whole history.
DURATION_DAYS = 90
TABLE_LIMIT = 100
VERSION_CHARS = 18  # a longer version is cut in the header (the whole one on hover)
# The catalogue's order (spec/BEHAVIOURS.md), not the alphabet's.
FAMILIES = ("CR", "DI", "PR", "SN", "XS", "TO")
_ASSETS = Path(__file__).parent


@dataclass
class DashboardData:
    latest_matrix: list[Record] = field(default_factory=list)
    trends: list[Record] = field(default_factory=list)
    flaky: list[Record] = field(default_factory=list)
    regressions: list[Record] = field(default_factory=list)
    durations: list[Record] = field(default_factory=list)
    rejected: list[Record] = field(default_factory=list)
    latest_cases: list[Record] = field(default_factory=list)
    history: list[Record] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def behaviour_key(behaviour: str) -> tuple[int, int, str]:
    """CR, DI, PR, SN, XS, TO, then number; anything else after them by name."""
    match = re.fullmatch(r"([A-Z]+)-(\d+)", behaviour)
    if match and match.group(1) in FAMILIES:
        return FAMILIES.index(match.group(1)), int(match.group(2)), ""
    return len(FAMILIES), 0, behaviour


def history_anchor(target: str, scenario: str) -> str:
    digest = hashlib.sha1(f"{target}\0{scenario}".encode()).hexdigest()[:12]
    return f"hist-{digest}"


def _e(value: Any) -> str:
    if isinstance(value, datetime):
        value = value.isoformat(timespec="seconds")
    return html.escape("" if value is None else str(value))


def _iso(value: Any) -> str | None:
    if isinstance(value, datetime):
        return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")
    if isinstance(value, date):
        return value.isoformat()
    return None if value is None else str(value)


def _short(version: str) -> str:
    return version if len(version) <= VERSION_CHARS else version[: VERSION_CHARS - 1] + "…"


def _legend() -> str:
    items = "".join(
        f'<li><span class="sq" style="background:{COLOURS[s]}"></span>'
        f'<b>{_e(s)}</b> {_e(MEANINGS[s])}</li>'
        for s in ORDER
    )
    return f'<ul id="legend">{items}</ul>'


def _columns(rows: list[Record]) -> list[Record]:
    """Matrix columns: one per target (its latest run), sorted by name."""
    seen: dict[str, Record] = {}
    for row in rows:
        seen.setdefault(row["target"], row)
    return [seen[t] for t in sorted(seen)]


def _cell_title(row: Record) -> str:
    executed = row["passed"] + row["failed"] + (row.get("inconclusive") or 0)
    parts = [f"{row['status']} in run {row['run_id']}: {row['passed']} of {executed} "
             "scenario results with a verdict passed"]
    for key, word in (("failed", "failed"), ("inconclusive", "inconclusive"),
                      ("skipped", "without a verdict")):
        if row.get(key):
            parts.append(f"{row[key]} {word}")
    if row.get("partial"):
        parts.append("only part of its scenarios ran")
    return ", ".join(parts) + ". Click for the scenarios."


def _matrix(rows: list[Record]) -> str:
    if not rows:
        return '<p id="matrix" class="empty">No result yet.</p>'
    columns = _columns(rows)
    index = {c["target"]: i for i, c in enumerate(columns)}
    behaviours = sorted({r["behaviour"] for r in rows}, key=behaviour_key)
    cells = {(r["behaviour"], r["target"]): r for r in rows}
    head = "".join(
        f'<th class="target"><span class="tname">{_e(c["target"])}</span>'
        f'<span class="tver" title="{_e(c["target_version"])}">'
        f'{_e(_short(str(c["target_version"])))}</span></th>'
        for c in columns
    )
    body = []
    for behaviour in behaviours:
        tds = []
        for column in columns:
            row = cells.get((behaviour, column["target"]))
            if row is None:
                tds.append('<td class="none"></td>')
                continue
            status = row["status"]
            tds.append(
                f'<td class="cell" style="background:{COLOURS.get(status, "#fff")}" '
                f'data-b="{_e(behaviour)}" data-t="{index[column["target"]]}" '
                f'title="{_e(_cell_title(row))}">{_e(status)}</td>'
            )
        body.append(f'<tr><th class="beh">{_e(behaviour)}</th>{"".join(tds)}</tr>')
    return (
        f'<table id="matrix"><thead><tr><th></th>{head}</tr></thead>'
        f'<tbody>{"".join(body)}</tbody></table>'
    )


def _history(rows: list[Record]) -> str:
    if not rows:
        return '<p id="history" class="empty">No scenario changed status or failed lately.</p>'
    lines = []
    for row in rows:
        squares = "".join(
            f'<span class="sq" style="background:{COLOURS.get(e["status"], "#fff")}" '
            f'title="{_e(e["run_id"])} {_e(_iso(e["at"]))}: {_e(e["status"])}'
            f'{": " + _e(e["message"]) if e["message"] else ""}"></span>'
            for e in row["history"]
        )
        anchor = history_anchor(row["target"], row["scenario"])
        lines.append(
            f'<tr id="{anchor}"><td>{_e(row["target"])}</td><td>{_e(row["scenario"])}</td>'
            f'<td class="squares">{squares}</td></tr>'
        )
    return (
        '<table id="history"><thead><tr><th>target</th><th>scenario</th>'
        "<th>last runs, oldest first (hover for the reason)</th></tr></thead>"
        f"<tbody>{''.join(lines)}</tbody></table>"
    )


def _table(
    table_id: str, rows: Sequence[Record], columns: Sequence[str], empty: str,
    linked: set[str] | None = None,
) -> str:
    """A plain table; rows whose scenario has a history get a link to it."""
    if not rows:
        return f'<p id="{table_id}" class="empty">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows[:TABLE_LIMIT]:
        cells = []
        for column in columns:
            text = _e(row.get(column))
            if column == "scenario" and linked is not None:
                anchor = history_anchor(row["target"], row["scenario"])
                if anchor in linked:
                    text = f'<a href="#{anchor}">{text}</a>'
            cells.append(f"<td>{text}</td>")
        body.append(f'<tr class="{_e(row.get("change", ""))}">{"".join(cells)}</tr>')
    more = ""
    if len(rows) > TABLE_LIMIT:
        more = f"<p>… and {len(rows) - TABLE_LIMIT} more in the CSV file.</p>"
    return (
        f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{more}"
    )


def _payload(data: DashboardData) -> dict[str, Any]:
    """What the script draws: compact lists, strings interned where they repeat."""
    columns = _columns(data.latest_matrix)
    index = {c["target"]: i for i, c in enumerate(columns)}
    scenarios: dict[str, int] = {}
    messages: dict[str, int] = {}
    drill: dict[int, dict[str, list]] = defaultdict(lambda: defaultdict(list))
    for row in data.latest_cases:
        column = index.get(row["target"])
        if column is None or row["behaviour"] is None:
            continue
        s = scenarios.setdefault(row["scenario"], len(scenarios))
        m = messages.setdefault(row["message"], len(messages)) if row["message"] else -1
        drill[column][row["behaviour"]].append([s, row["status"], m])
    durations: dict[tuple[str, str], list] = defaultdict(list)
    for row in data.durations:
        durations[(row["target"], row["scenario"])].append(row)
    slowest = sorted(durations, key=lambda k: -max(r["p95_s"] or 0 for r in durations[k]))
    return {
        "colours": COLOURS,
        "targets": [
            {"name": c["target"], "version": c["target_version"], "run": c["run_id"],
             "at": _iso(c["started_at"]), "cert": c.get("certification")}
            for c in columns
        ],
        "scenarios": list(scenarios),
        "messages": list(messages),
        "drill": drill,
        "runs": [
            [_iso(r["started_at"]), r["target"], r["target_version"], r["run_id"],
             r["passed"], r["failed"], r["errors"], r["skipped"], r.get("certification")]
            for r in sorted(data.trends, key=lambda r: (r["started_at"], r["run_id"]))
        ],
        "durations": [
            {"name": f"{key[0]} · {key[1]}",
             "points": [[_iso(p["date"]), p["p95_s"]]
                        for p in sorted(durations[key], key=lambda r: r["date"])]}
            for key in slowest[:TOP_DURATIONS]
        ],
    }


def _json(value: Any) -> str:
    # Inside <script>: "</" would end the element early.
    return json.dumps(value, separators=(",", ":"), default=str).replace("</", "<\\/")


def render(data: DashboardData) -> str:
    """The dashboard page as a string."""
    summary = " ".join(
        f"<span><b>{_e(k)}</b>: {_e(v)}</span>" for k, v in data.summary.items()
    )
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    history = _history(data.history)
    linked = {history_anchor(r["target"], r["scenario"]) for r in data.history}
    flaky = _table(
        "flaky", data.flaky,
        ["target", "target_version", "scenario", "runs", "flips", "flip_rate",
         "last_flip_run", "reruns"],
        "No flaky scenario.", linked,
    )
    regressions = _table(
        "regressions", data.regressions,
        ["change", "target", "target_version", "scenario", "behaviour", "previous_run",
         "latest_run", "latest_outcome"],
        "No regression or fix between the two latest runs of any target.", linked,
    )
    rejected = _table(
        "rejected", data.rejected, ["file", "testcase", "reason"], "No rejected file."
    )
    style = (_ASSETS / "dashboard.css").read_text()
    script = (_ASSETS / "dashboard.js").read_text()
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>shadowcheck conformance dashboard</title><style>{style}</style></head>
<body>
<h1>shadowcheck conformance dashboard</h1>
<p class="summary">{summary} <span>generated {generated}</span></p>
<h2>Certification matrix <small>latest run of each target; click a cell</small></h2>
<div class="matrix-wrap">{_matrix(data.latest_matrix)}
<aside id="drill"><p class="empty">Click a cell of the matrix to see its scenarios.</p></aside>
</div>
<details id="legend-box" open><summary>Statuses (the certification page's legend)</summary>
{_legend()}</details>
<h2>Regressions and fixes in the latest run</h2>{regressions}
<h2>Runs</h2>
<p><label>target <select id="run-target"></select></label> <span id="run-note"></span></p>
<div id="bars" class="chart"></div>
<table id="runs"><thead><tr><th>time (UTC)</th><th>target</th><th>version</th><th>run</th>
<th>passed</th><th>failed</th><th>errors</th><th>skipped</th><th>report</th></tr></thead>
<tbody></tbody></table>
<h2>Scenario history</h2>{history}
<h2>Flaky scenarios</h2>{flaky}
<h2>Duration trends <small>p95 per day, {TOP_DURATIONS} slowest scenarios,
last {DURATION_DAYS} days</small></h2>
<div id="durations" class="chart"></div>
<h2>Rejected files and test cases</h2>{rejected}
<script id="payload" type="application/json">{_json(_payload(data))}</script>
<script>{script}</script>
</body></html>
"""
