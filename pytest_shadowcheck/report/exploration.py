"""The certification's exploration section: how much was explored, which behaviours'
rules of the catalogue model decided something and how often, and which behaviours
exploration cannot exercise on the target (UNTESTABLE by exploration, never PASS)."""

from __future__ import annotations

import html
from typing import Any

__all__ = ["exploration_section", "exploration_sentence"]


def exploration_sentence(figures: dict[str, Any]) -> str:
    """One line: what ran, from which seed, and how it went."""
    kind = "deep exploration" if figures.get("deep") else "bounded slice"
    failed = len(figures.get("failed") or [])
    return (
        f"{kind} from seed {figures['seed']}: {figures['scenarios_run']} explored scenario(s), "
        f"{figures['operations_run']} generated operations, "
        + (f"{failed} FAILed" if failed else "none FAILed")
    )


def exploration_section(report: dict[str, Any]) -> str:
    figures = report.get("exploration")
    if not figures:
        return ""
    exercised: dict[str, int] = figures.get("exercised") or {}
    rows = "".join(
        f"<tr><th>{html.escape(bid)}</th><td>{count}</td></tr>" for bid, count in exercised.items()
    )
    table = (
        "<table><thead><tr><th>ID</th><th>times a rule of the model decided</th></tr>"
        f"</thead><tbody>{rows}</tbody></table>"
        if rows
        else "<p>no rule of the catalogue model decided anything</p>"
    )
    untestable: dict[str, str] = figures.get("untestable") or {}
    missing = "".join(
        f"<li><b>{html.escape(bid)}</b>: {html.escape(why)}</li>" for bid, why in untestable.items()
    )
    failed = "".join(f"<li><code>{html.escape(n)}</code></li>" for n in figures.get("failed") or [])
    return (
        '<h2 id="exploration">Exploration</h2>'
        f"<p>{html.escape(exploration_sentence(figures))}; replay with "
        f"<code>--shadowcheck-explore-seed={int(figures['seed'])}</code></p>"
        + (f"<p>failed:</p><ul>{failed}</ul>" if failed else "")
        + table
        + (f"<p>UNTESTABLE by exploration on this target:</p><ul>{missing}</ul>" if missing else "")
    )
