"""One self-contained HTML page: plotly.js is inlined once, nothing is fetched when opened."""

from __future__ import annotations

import html
import re
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

import plotly.graph_objects as go

__all__ = ["DashboardData", "render"]

Record = dict[str, Any]

TOP_DURATIONS = 10
TABLE_LIMIT = 100

# Coloured by verdict, not by pass rate: a FAIL at 90 % must not look green.
# OUTSIDE-GUARANTEE (only xfails: messages lost beyond what shadow redundancy
# promises) has the plugin certification report's orange.
_STATUS_LEVEL = {"FAIL": 0, "OUTSIDE-GUARANTEE": 1, "SKIPPED": 2, "PASS": 3}
_STATUS_COLOURS = [
    [0.0, "#c0392b"], [0.25, "#c0392b"],
    [0.25, "#ef6c00"], [0.5, "#ef6c00"],
    [0.5, "#bdc3c7"], [0.75, "#bdc3c7"],
    [0.75, "#27ae60"], [1.0, "#27ae60"],
]


@dataclass
class DashboardData:
    latest_matrix: list[Record] = field(default_factory=list)
    trends: list[Record] = field(default_factory=list)
    flaky: list[Record] = field(default_factory=list)
    regressions: list[Record] = field(default_factory=list)
    durations: list[Record] = field(default_factory=list)
    rejected: list[Record] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)


def _behaviour_key(behaviour: str) -> tuple[str, int, str]:
    match = re.fullmatch(r"([A-Z]+)-(\d+)", behaviour)
    return (match.group(1), int(match.group(2)), "") if match else ("~", 0, behaviour)


def _matrix_figure(rows: list[Record]) -> go.Figure:
    behaviours = sorted({r["behaviour"] for r in rows}, key=_behaviour_key)
    columns = sorted({(r["target"], r["target_version"]) for r in rows})
    labels = [f"{target} {version}" for target, version in columns]
    cell = {(r["behaviour"], (r["target"], r["target_version"])): r for r in rows}
    z: list[list[float | None]] = []
    text: list[list[str]] = []
    for behaviour in behaviours:
        z_row: list[float | None] = []
        text_row: list[str] = []
        for column in columns:
            found = cell.get((behaviour, column))
            if found is None:
                z_row.append(None)
                text_row.append("")
                continue
            z_row.append(_STATUS_LEVEL[found["status"]])
            label = found["status"]
            if found["failed"]:  # how bad: passed / executed
                label += f" {found['passed']}/{found['passed'] + found['failed']}"
            text_row.append(label)
        z.append(z_row)
        text.append(text_row)
    figure = go.Figure(
        go.Heatmap(
            z=z,
            x=labels,
            y=behaviours,
            text=text,
            texttemplate="%{text}",
            colorscale=_STATUS_COLOURS,
            zmin=0,
            zmax=len(_STATUS_LEVEL) - 1,
            xgap=2,
            ygap=2,
            showscale=False,
            hovertemplate="%{y} on %{x}: %{text}<extra></extra>",
        )
    )
    figure.update_layout(
        title="Latest certification matrix (behaviour x target)",
        height=max(360, 28 * len(behaviours) + 160),
        yaxis={"autorange": "reversed", "type": "category"},
        xaxis={"type": "category", "side": "top"},
        margin={"t": 110},
    )
    return figure


def _trend_figure(rows: list[Record]) -> go.Figure:
    by_target: dict[str, list[Record]] = defaultdict(list)
    for row in rows:
        by_target[row["target"]].append(row)
    figure = go.Figure()
    for target, points in sorted(by_target.items()):
        points.sort(key=lambda r: (r["started_at"], r["run_id"]))
        figure.add_trace(
            go.Scatter(
                x=[p["started_at"].isoformat() for p in points],
                y=[p["pass_rate"] for p in points],
                text=[f"{p['run_id']} ({p['target_version']})" for p in points],
                mode="lines+markers",
                name=target,
            )
        )
    figure.update_layout(
        title="Pass rate per run", yaxis={"range": [0, 1.02], "title": "pass rate"}, height=380
    )
    return figure


def _duration_figure(rows: list[Record]) -> go.Figure:
    series: dict[tuple[str, str], list[Record]] = defaultdict(list)
    for row in rows:
        series[(row["target"], row["scenario"])].append(row)
    slowest = sorted(series, key=lambda k: max(r["p95_s"] or 0 for r in series[k]), reverse=True)
    figure = go.Figure()
    for key in slowest[:TOP_DURATIONS]:
        points = sorted(series[key], key=lambda r: r["date"])
        figure.add_trace(
            go.Scatter(
                x=[p["date"].isoformat() for p in points],
                y=[p["p95_s"] for p in points],
                mode="lines+markers",
                name=f"{key[0]} · {key[1]}"[:60],
            )
        )
    figure.update_layout(
        title=f"p95 duration per day, {TOP_DURATIONS} slowest scenarios",
        yaxis={"title": "seconds"},
        height=420,
    )
    return figure


def _table(table_id: str, rows: Sequence[Record], columns: Sequence[str], empty: str) -> str:
    if not rows:
        return f'<p id="{table_id}" class="empty">{html.escape(empty)}</p>'
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in rows[:TABLE_LIMIT]:
        cells = []
        for column in columns:
            value = row.get(column)
            if isinstance(value, datetime):
                value = value.isoformat(timespec="seconds")
            cells.append(f"<td>{html.escape('' if value is None else str(value))}</td>")
        row_class = html.escape(str(row.get("change", "")))
        body.append(f'<tr class="{row_class}">{"".join(cells)}</tr>')
    more = ""
    if len(rows) > TABLE_LIMIT:
        more = f"<p>… and {len(rows) - TABLE_LIMIT} more in the CSV file.</p>"
    return (
        f'<table id="{table_id}"><thead><tr>{head}</tr></thead>'
        f"<tbody>{''.join(body)}</tbody></table>{more}"
    )


_STYLE = """
body { font-family: system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { margin-bottom: 0.2em; } h2 { margin-top: 1.6em; border-bottom: 1px solid #ddd; }
.summary span { display: inline-block; margin-right: 1.5em; }
table { border-collapse: collapse; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; text-align: left; }
th { background: #f4f4f4; } tr.regression td { background: #fde2e0; }
tr.fix td { background: #e2f7e6; } .empty { color: #777; }
"""


def render(data: DashboardData) -> str:
    """The dashboard page as a string."""
    figures = [
        ("matrix", _matrix_figure(data.latest_matrix)),
        ("trends", _trend_figure(data.trends)),
        ("durations", _duration_figure(data.durations)),
    ]
    plots: dict[str, str] = {}
    for index, (div_id, figure) in enumerate(figures):
        plots[div_id] = figure.to_html(
            full_html=False,
            include_plotlyjs=index == 0,  # the library once, inline: opens offline
            div_id=div_id,
            config={"displaylogo": False, "responsive": True},
        )
    summary = " ".join(
        f"<span><b>{html.escape(str(k))}</b>: {html.escape(str(v))}</span>"
        for k, v in data.summary.items()
    )
    generated = datetime.now(UTC).isoformat(timespec="seconds")
    flaky = _table(
        "flaky",
        data.flaky,
        ["target", "target_version", "scenario", "runs", "flips", "flip_rate",
         "last_flip_run", "reruns"],
        "No flaky scenario.",
    )
    regressions = _table(
        "regressions",
        data.regressions,
        ["change", "target", "target_version", "scenario", "behaviour", "previous_run",
         "latest_run", "latest_outcome"],
        "No regression or fix between the two latest runs of any target.",
    )
    rejected = _table("rejected", data.rejected, ["file", "reason"], "No rejected file.")
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<title>shadowcheck conformance dashboard</title><style>{_STYLE}</style></head>
<body>
<h1>shadowcheck conformance dashboard</h1>
<p class="summary">{summary} <span>generated {generated}</span></p>
<h2>Certification matrix</h2>{plots["matrix"]}
<h2>Regressions and fixes in the latest run</h2>{regressions}
<h2>Pass-rate trends</h2>{plots["trends"]}
<h2>Flaky scenarios</h2>{flaky}
<h2>Duration trends</h2>{plots["durations"]}
<h2>Rejected files</h2>{rejected}
</body></html>
"""
