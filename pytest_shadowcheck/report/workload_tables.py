"""The certification report's workload tables: each workload's figures and what it
sent (the traffic histogram), and the shrunk reproductions of failing ones."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["shrunk_section", "workload_table"]


def shrunk_section(report: dict[str, Any]) -> str:
    """Each failing workload that was shrunk (``--shadowcheck-shrink``): the messages and
    faults it took to fail, before and after, and the command replaying each."""
    rows = []
    for s in report["scenarios"]:
        for w in s.get("workloads", []):
            shrunk, facts = w.get("shrunk"), w.get("replay") or {}
            if not isinstance(shrunk, dict):
                continue
            early = f"; stopped early: {shrunk['stopped']}" if shrunk.get("stopped") else ""
            cells = [
                f"{s['scenario']} / {w.get('workload')}",
                f"{shrunk['messages_before']} -> {shrunk['messages_after']} "
                f"(kept: {shrunk['messages']})",
                f"{shrunk['faults_before']} -> {shrunk['faults_after']} "
                f"(kept: {shrunk['faults']})",
                f"{shrunk['attempts']} runs, {shrunk['seconds']:g}s{early}",
            ]
            commands = (
                f"shrunk: <code>{html.escape(shrunk['command'])}</code><br>"
                f"full: <code>{html.escape(str(facts.get('command', '')))}</code>"
            )
            rows.append(
                "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells)
                + f"<td>{commands}</td></tr>"
            )
    if not rows:
        return ""
    return (
        "<h2>Shrunk reproductions</h2><p>Each failing workload re-run on parts of its plan "
        "until the fewest messages and faults that still fail the same way were left "
        "(same checks failing, same behaviour IDs).</p><table><thead><tr><th>scenario / "
        "workload</th><th>messages</th><th>faults</th><th>search</th><th>replay</th></tr>"
        f"</thead><tbody>{''.join(rows)}</tbody></table>"
    )


def workload_table(w: dict[str, Any]) -> str:
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
    rows += _traffic_rows(w.get("traffic") or {})
    body = "".join(f"<tr><th>{html.escape(k)}</th><td>{html.escape(v)}</td></tr>" for k, v in rows)
    return (
        f'<table class="workload"><caption>workload {html.escape(str(w.get("workload")))}'
        f"</caption>{body}</table>"
    )


#: the histogram's counts as the report names them
_TRAFFIC_WORDS = {
    "eight_bit": "8-bit (8BITMIME)",
    "smtputf8": "SMTPUTF8",
    "utf8_headers": "UTF-8 Subject",
    "mime": "MIME attachment",
    "dot_lines": "lines starting with a dot",
    "long_lines": "998-octet lines",
    "pipelined": "pipelined",
    "bdat": "BDAT",
    "rset": "after an RSET",
    "null_senders": "null sender",
    "duplicate_ids": "sharing another's Message-ID",
    "missing_ids": "no Message-ID",
}


def _traffic_rows(t: dict[str, Any]) -> list[tuple[str, str]]:
    """What the workload sent (engine/traffic_model.histogram), in a few rows."""
    if not t.get("messages"):
        return []
    n = int(t["messages"])

    def buckets(key: str) -> str:
        return ", ".join(f"{label}: {count}" for label, count in (t.get(key) or {}).items())

    def share(*keys: str) -> str:
        return ", ".join(f"{_TRAFFIC_WORDS[k]} {t.get(k, 0)} ({t.get(k, 0) / n:.0%})" for k in keys)

    content = ("eight_bit", "smtputf8", "utf8_headers", "mime", "dot_lines", "long_lines")
    return [
        ("sent: sizes", f"{buckets('sizes')}; largest {t.get('largest', 0)} bytes"),
        ("sent: recipients", f"{buckets('recipients')}; most {t.get('most_recipients', 0)}"),
        ("sent: content", share(*content)),
        ("sent: transactions per session", buckets("transactions_per_session")),
        ("sent: protocol", share("pipelined", "bdat", "rset", "null_senders")),
        ("sent: Message-IDs", share("duplicate_ids", "missing_ids")),
        ("sent: busiest second", f"{t.get('burst_peak_per_second', 0)} messages"),
    ]
