"""A timeline page for one workload run (like Jepsen's timeline.html).

One self-contained HTML file: the nemesis' faults as bands over time, per second the
acknowledgements (250), deliveries, 4xx replies and attempts that got no reply, then
every lost and duplicated message with its attempt and deliveries (each listed message
is an anchor, ``#REF``, so a failure's ID leads straight to its history). Written next to
the certification report when there is one.
"""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.workload import Fate, WorkloadReport
    from pytest_shadowcheck.history import History

__all__ = ["render_timeline", "write_timeline"]

WIDTH, ROW = 1000, 60
COLOURS = {
    "kill": "#e4572e", "wipe": "#a4036f", "pause": "#f3a712", "restart": "#29335c",
    "cut": "#669bbc", "blackhole": "#4a4e69", "delay": "#90be6d",
}  # fmt: skip
SERIES = (("acks", "#2a9d8f", "250 acks/s"), ("deliveries", "#264653", "deliveries/s"),
          ("temporary", "#f4a261", "4xx/s"), ("errors", "#e76f51", "no reply/s"))  # fmt: skip


def render_timeline(history: History, report: WorkloadReport, scenario: str) -> str:
    """The page for ``report`` (its windows and per-second counts come from ``history``)."""
    counts: dict[str, Counter[int]] = {name: Counter() for name, _, _ in SERIES}
    bands: dict[int, list[float | str]] = {}
    mine = {f.message_id for f in report.fates.values()}
    start = min((f.sent for f in report.fates.values()), default=0.0)
    end = start
    for event in history.events():
        data = event.data
        second = int(event.t - start)
        if event.kind == "attempt" and data.get("workload") == report.workload:
            code = data.get("code")
            if code == 250 and data.get("command") == "EOD":
                counts["acks"][second] += 1
            elif isinstance(code, int) and 400 <= code < 500:
                counts["temporary"][second] += 1
            elif code is None:
                counts["errors"][second] += 1
            end = max(end, event.t)
        elif event.kind == "delivery" and data.get("message_id") in mine:
            counts["deliveries"][second] += 1
            end = max(end, event.t)
        elif event.kind == "note" and "nemesis" in data:
            if data["nemesis"] == "start":
                where = ",".join(data.get("links") or data["nodes"])
                label = f"#{data['index']} {data['fault']} {where}"
                bands[int(data["index"])] = [event.t, event.t, str(data["fault"]), label]
            elif int(data["index"]) in bands:
                bands[int(data["index"])][1] = event.t
    span = max(end - start, 1.0)

    def x(t: float) -> float:
        return round((t - start) / span * WIDTH, 1)

    rows = []
    for i, (name, colour, label) in enumerate(SERIES):
        top = i * (ROW + 10)
        peak = max(counts[name].values(), default=0) or 1
        bars = "".join(
            f'<rect x="{x(start + s)}" y="{top + ROW - n / peak * ROW:.1f}" '
            f'width="{max(WIDTH / span - 1, 1):.1f}" height="{n / peak * ROW:.1f}" '
            f'fill="{colour}"><title>+{s}s: {n}</title></rect>'
            for s, n in sorted(counts[name].items())
        )
        rows.append(f'<text x="4" y="{top + 12}" class="l">{label} (peak {peak})</text>{bars}')
    height = len(SERIES) * (ROW + 10)
    shaded = "".join(
        f'<rect x="{x(float(b0))}" y="0" width="{max(x(float(b1)) - x(float(b0)), 2)}" '
        f'height="{height}" fill="{COLOURS.get(str(kind), "#999")}" opacity="0.25">'
        f"<title>{html.escape(str(label))}</title></rect>"
        for b0, b1, kind, label in bands.values()
    )
    svg = (
        f'<svg width="{WIDTH}" height="{height}" xmlns="http://www.w3.org/2000/svg">'
        f"{shaded}{''.join(rows)}</svg>"
    )
    legend = " ".join(
        f'<span style="background:{c};opacity:.5">&nbsp;{k}&nbsp;</span>'
        for k, c in COLOURS.items()
    )
    lost = report.of("lost") + report.of("lost-outside")
    dups = report.of("duplicated")
    return (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>timeline {html.escape(scenario)} / {html.escape(report.workload)}</title>"
        "<style>body{font-family:sans-serif;margin:1em}.l{font-size:11px}"
        "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;"
        "font-size:12px;text-align:left}:target{background:#ffd}</style></head><body>"
        f"<h1>{html.escape(scenario)}: workload {html.escape(report.workload)}</h1>"
        f"<p>{html.escape(report.figures())}</p><p>faults: {legend}</p>{svg}"
        f"<p>time axis: 0 to {span:.1f}s after the first attempt</p>"
        + _table("Lost", lost, start)
        + _table("Duplicated", dups, start)
        + "</body></html>"
    )


def _table(title: str, fates: list[Fate], start: float) -> str:
    if not fates:
        return f"<h2>{title}: none</h2>"
    rows = "".join(
        f'<tr id="{html.escape(f.ref)}"><td><a href="#{html.escape(f.ref)}">'
        f"{html.escape(f.ref)}</a></td><td>{html.escape(f.message_id)}</td>"
        f"<td>{html.escape(f.via)}</td><td>+{f.sent - start:.3f}s</td>"
        f"<td>{'' if f.acked_t is None else f'+{f.acked_t - start:.3f}s'}</td>"
        f"<td>{html.escape(f.fate)}</td><td>{html.escape(f.cause)}</td><td>"
        + "<br>".join(
            f"+{t - start:.3f}s by {html.escape(by)} to {html.escape(r)}"
            for t, by, r in sorted(f.deliveries)
        )
        + "</td></tr>"
        for f in sorted(fates, key=lambda f: f.sent)
    )
    return (
        f"<h2>{title}: {len(fates)}</h2><table><tr><th>message</th><th>Message-ID</th>"
        "<th>via</th><th>sent</th><th>250 at</th><th>fate</th><th>cause</th>"
        f"<th>deliveries</th></tr>{rows}</table>"
    )


def write_timeline(
    directory: Path, history: History, report: WorkloadReport, scenario: str
) -> Path:
    """Write the page as DIRECTORY/timeline-SCENARIO-WORKLOAD.html; return its path."""
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"timeline-{scenario}-{report.workload}.html"
    path.write_text(render_timeline(history, report, scenario), encoding="utf-8")
    return path
