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

A PASS of a behaviour that the target's *glue* provides (a docker description's
``glue:``, e.g. a delivery program that forwards) is the glue's, not the MTA's: the
behaviour keeps its status PASS with ``by_glue`` (what the glue is), is shown as
``PASS (glue)`` (:data:`GLUE_PASS`) and counted apart, and the opening sentences
never credit it to the MTA. Any other status (a FAIL above all) stands as it is.
"""

from __future__ import annotations

import datetime as dt
import html
import json
import os
import re
import shlex
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.report.exploration import exploration_section
from pytest_shadowcheck.report.rules import rule_sentence, rule_sentences
from pytest_shadowcheck.report.workload_tables import shrunk_section, workload_table
from pytest_shadowcheck.scenario.loader import load_behaviours, load_scenario_file
from pytest_shadowcheck.statuses import LEGEND, Status, strongest
from pytest_shadowcheck.verdict import Verdict
from pytest_shadowcheck.version import __version__

__all__ = [
    "GLUE_PASS",
    "admin_summary",
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
#: how a PASS the description's glue earned is shown and counted (never as the MTA's)
GLUE_PASS = "PASS (glue)"
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


def evidence_of(row: dict[str, Any], bid: str) -> list[dict[str, Any]]:
    """The checks of a scenario row that evidence ``bid``, as ``Verdict.evidence`` chose
    them when the row was made (its ``evidence`` indices): one rule, in one place."""
    checks: list[dict[str, Any]] = row["checks"]
    return [checks[i] for i in row["evidence"].get(bid, ())]


def _behaviour_entry(
    bid: str,
    catalogue_entry: dict[str, Any],
    results: list[dict[str, Any]],
    library: list[str],
    glue: str | None = None,
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
            for c in evidence_of(r, bid)
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
    entry = {
        "id": bid,
        "group": catalogue_entry["group"],
        "group_title": catalogue_entry.get("group_title", catalogue_entry["group"]),
        "summary": catalogue_entry["summary"],
        "rule": rule_sentence(catalogue_entry),
        "status": str(status),
        "scenarios": scenarios,
        "not_run": not_run,
        "reason": _one_line_reason(status, scenarios, len(library), not_run),
    }
    if glue and status == Status.PASS:
        entry["by_glue"] = glue
        entry["reason"] = f"by the description's glue: {glue} ({entry['reason']})"
    return entry


def glue_of(glue: list[dict[str, Any]]) -> dict[str, str]:
    """Behaviour ID -> what provides it, from the target's glue
    (``[{provides: [ID, ...], what: text}]``)."""
    out: dict[str, str] = {}
    for item in glue:
        for bid in item["provides"]:
            out[bid] = f"{out[bid]}; {item['what']}" if bid in out else str(item["what"])
    return out


def status_shown(entry: dict[str, Any]) -> str:
    """A behaviour's status as pages and the terminal show it: PASS (glue) for a PASS
    the description's glue earned."""
    return GLUE_PASS if entry.get("by_glue") else str(entry["status"])


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
    glue: list[dict[str, Any]] | None = None,
    exploration: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The certification. ``glue`` is the target's (``[{provides, what}]``): a PASS of a
    behaviour it provides is counted as :data:`GLUE_PASS`, not as the MTA's PASS.
    ``exploration`` is what the explored scenarios covered, when any ran."""
    catalogue = load_behaviours()
    library = library or {}
    provided = glue_of(glue or [])
    behaviours = []
    for bid in [*catalogue, *sorted(set(library) - set(catalogue))]:
        entry = catalogue.get(bid, {"summary": "(not in the catalogue)", "group": bid[:2]})
        named_by = library.get(bid) or [r["scenario"] for r in results if bid in r["by_behaviour"]]
        behaviours.append(_behaviour_entry(bid, entry, results, named_by, provided.get(bid)))
    summary: dict[str, int] = {}
    for status in SUMMARY_ORDER:
        summary[str(status)] = 0
        if status == Status.PASS and glue:
            summary[GLUE_PASS] = 0  # beside the MTA's own, never in it
    for item in behaviours:
        summary[status_shown(item)] += 1
    run_names = {r["scenario"] for r in results}
    not_run = sorted({name for names in library.values() for name in names} - run_names)
    report = {
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
        "glue": [{"provides": list(g["provides"]), "what": g["what"]} for g in glue or []],
    }
    if exploration is not None:
        report["exploration"] = exploration
    report["admin_summary"] = admin_summary(report)
    return report


# --------------------------------------------------------------------------- in short

#: families in the catalogue's order
FAMILIES = ["CR", "DI", "PR", "SN", "XS", "TO"]


def admin_summary(report: dict[str, Any]) -> list[dict[str, Any]]:
    """The few sentences a mail admin can act on, from the verdicts alone: what the MTA
    keeps (PASS, by family, with the scenarios that showed it), what it breaks (FAIL,
    each with the observation of its most telling failed check), what lost mail only
    outside the guarantee, what never came into play and what could not be tested
    here (with the commonest reasons). Each entry: ``status``, ``text`` (a sentence)
    and ``groups`` (``family``, ``title``, ``items``: one line per behaviour)."""
    behaviours: list[dict[str, Any]] = report["behaviours"]
    total = len(behaviours)
    mta = _mta(report)
    by_status: dict[str, list[dict[str, Any]]] = {}
    for b in behaviours:
        by_status.setdefault(status_shown(b), []).append(b)
    out: list[dict[str, Any]] = []

    def add(status: Status, text: str, items: dict[str, str] | None = None) -> None:
        out.append({"status": str(status), "text": text, "groups": _grouped(behaviours, items)})

    kept = by_status.get(Status.PASS, [])
    if kept:
        add(
            Status.PASS,
            f"{mta} keeps {_count(len(kept), total)}: each held in every scenario that tested it.",
            {b["id"]: f"{_rule(b)} Held in {_scenarios_named(b)}." for b in kept},
        )
    glued = by_status.get(GLUE_PASS, [])
    if glued:
        add(
            Status.PASS,
            f"{_count(len(glued), total)} held only through glue the target description adds "
            f"around {mta}, so they are not credited to it:",
            {b["id"]: f"{_rule(b)} Provided by the description's glue: {b['by_glue']}."
             for b in glued},
        )  # fmt: skip
    broken = by_status.get(Status.FAIL, [])
    if broken:
        add(
            Status.FAIL,
            f"{mta} breaks {_count(len(broken), total)}; for each, what its most telling "
            "failed check saw:",
            {b["id"]: f"{_rule(b)} Seen: {_strongest(report, b['id'])}" for b in broken},
        )
    outside = by_status.get(Status.OUTSIDE_GUARANTEE, [])
    if outside:
        add(
            Status.OUTSIDE_GUARANTEE,
            f"{_count(len(outside), total, 'behaviour')} lost mail only when every node holding "
            "a copy failed together, which no MTA promises to survive (PR-4):",
            {
                b["id"]: f"{_rule(b)} Seen: {_strongest(report, b['id'], Status.OUTSIDE_GUARANTEE)}"
                for b in outside
            },
        )
    broke = by_status.get(Status.INCONCLUSIVE, [])
    if broke:
        add(
            Status.INCONCLUSIVE,
            f"{_count(len(broke), total, 'behaviour')} could not be judged because the target "
            "or the harness broke first; this certification is not complete:",
            {b["id"]: _reason(b) for b in broke},
        )
    idle = by_status.get(Status.NOT_APPLICABLE, [])
    if idle:
        causes = Counter(_premise(report, b["id"]) for b in idle)
        add(
            Status.NOT_APPLICABLE,
            f"{_count(len(idle), total, 'behaviour')} never came into play, because what "
            f"they presuppose never happened ({_ids(idle)}); most often: {_commonest(causes)}.",
        )
    untestable = by_status.get(Status.UNTESTABLE, [])
    if untestable:
        causes = Counter(_why_untestable(b) for b in untestable)
        add(
            Status.UNTESTABLE,
            f"{_count(len(untestable), total, 'behaviour')} could not be tested on this target "
            f"({_ids(untestable)}): {_commonest(causes)}.",
        )
    partial = by_status.get(Status.PARTIAL, [])
    if partial:
        add(
            Status.PARTIAL,
            f"{_count(len(partial), total, 'behaviour')} were only partly run here "
            f"({_ids(partial)}): run all their scenarios to judge them.",
        )
    untested = by_status.get(Status.UNTESTED, [])
    if untested:
        add(
            Status.UNTESTED,
            f"{_count(len(untested), total, 'behaviour')} were not tested at all: no scenario "
            f"for them ran ({_ids(untested)}).",
        )
    return out


def _mta(report: dict[str, Any]) -> str:
    """The MTA as a sentence names it: its version ("Postfix 3.7.11") when that names
    it, else the target and the version; an image in parentheses is left to the header."""
    target = str(report.get("target", ""))
    version = re.sub(r"\s*\(.*\)$", "", str(report.get("target_version", ""))).strip()
    if version.lower().startswith(target.lower()) or not target:
        return version or target
    return f"{target} {version}".strip()


def _count(n: int, total: int, noun: str = "behaviour") -> str:
    return f"{n} of the {total} {noun}{'s' if total != 1 else ''}"


def _ids(items: list[dict[str, Any]]) -> str:
    return ", ".join(b["id"] for b in items)


def _grouped(
    behaviours: list[dict[str, Any]], items: dict[str, str] | None
) -> list[dict[str, Any]]:
    if not items:
        return []
    groups: dict[str, dict[str, Any]] = {}
    for b in behaviours:
        if b["id"] in items:
            group = groups.setdefault(
                b["group"], {"family": b["group"], "title": b.get("group_title", ""), "items": []}
            )
            group["items"].append(f"{b['id']}: {items[b['id']]}")
    rank = {f: i for i, f in enumerate(FAMILIES)}
    return sorted(groups.values(), key=lambda g: rank.get(g["family"], len(FAMILIES)))


def _scenarios_named(entry: dict[str, Any]) -> str:
    names = [s["scenario"] for s in entry["scenarios"] if s["status"] == Status.PASS]
    shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    return f"{len(names)} scenario{'s' if len(names) != 1 else ''} ({shown})"


def _rule(entry: dict[str, Any]) -> str:
    return str(entry.get("rule") or entry["summary"])


def _reason(entry: dict[str, Any]) -> str:
    return str(entry.get("reason", ""))


def first_sentence(text: str, limit: int = 400) -> str:
    """The first sentence of ``text`` (a full stop and a capital outside backticks ends
    it), cut to ``limit`` characters."""
    quoted = False
    for i, char in enumerate(text):
        if char == "`":
            quoted = not quoted
        elif char == "." and not quoted and re.match(r"\. [A-Z]", text[i : i + 3]):
            text = text[: i + 1]
            break
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _checks_of(report: dict[str, Any], bid: str, status: Status) -> list[tuple[Any, ...]]:
    """(scenario, check) for every check with ``status`` that evidences ``bid``, most
    telling first: a check naming the behaviour itself, in a scenario of few behaviours."""
    found = []
    for index, s in enumerate(report["scenarios"]):
        if bid not in s["by_behaviour"]:
            continue
        for check in evidence_of(s, bid):
            named = check.get("behaviours") or []
            if check.get("status") != status:
                continue
            key = (bid not in named, len(s["behaviours"]), len(named or s["behaviours"]), index)
            found.append((key, s, check))
    return [(s, c) for _, s, c in sorted(found, key=lambda item: item[0])]


def _strongest(report: dict[str, Any], bid: str, status: Status = Status.FAIL) -> str:
    """The first sentence the most telling check with ``status`` observed, and where."""
    checks = _checks_of(report, bid, status)
    if not checks:
        entry = next(b for b in report["behaviours"] if b["id"] == bid)
        return _reason(entry)
    scenario, check = checks[0]
    seen = first_sentence(check["observed"]).rstrip(".")
    return f"{seen} ({scenario['scenario']}, {check['name']})"


def _premise(report: dict[str, Any], bid: str) -> str:
    """What a NOT-APPLICABLE behaviour waited for in vain: the first clause of its
    check's observation ("mbx1 never sent XSHADOW to mbx2")."""
    checks = _checks_of(report, bid, Status.NOT_APPLICABLE)
    if not checks:
        return "no check of its scenarios evidences it"
    observed = str(checks[0][1]["observed"])
    return re.split(r": |, so |, which | \(", observed, maxsplit=1)[0]


def _why_untestable(entry: dict[str, Any]) -> str:
    """The reason a behaviour could not be tested, without its scenario and step."""
    reason = re.sub(r"^[a-z0-9_]+: ", "", _reason(entry))
    reason = re.sub(r"^target \S+: ", "", reason)
    lacks = re.search(r"target (\S+) lacks (\w+)(?: - |: )([^;]*?)(?: - for |;|$)", reason)
    if lacks:
        return f"{lacks[1]} lacks {lacks[2]} - {lacks[3].strip()}"
    return first_sentence(reason, 200)


def _commonest(causes: Counter[str]) -> str:
    """ "9 because X; 3 because Y" for the three commonest, and how many others."""
    ranked = causes.most_common()
    parts = [f"{n} because {cause}" for cause, n in ranked[:3]]
    rest = sum(n for _, n in ranked[3:])
    if rest:
        parts.append(f"{rest} for other reasons")
    return "; ".join(parts)


# --------------------------------------------------------------------------- HTML


#: a PASS the glue earned: the PASS green, faded, so it never reads as the MTA's
GLUE_COLOUR = "#a5d6a7"


def _badge(status: str, text: str | None = None, title: str = "", href: str = "") -> str:
    if status == GLUE_PASS:
        colour, fg = GLUE_COLOUR, "#000"
    else:
        colour = LEGEND[Status(status)].colour
        fg = "#000" if status in ("UNTESTED", "PARTIAL", "UNTESTABLE") else "#fff"
    body = html.escape(text if text is not None else status)
    if href:
        body = f'<a href="{html.escape(href)}" style="color:{fg}">{body}</a>'
    return (
        f'<span class="b" style="background:{colour};color:{fg}" '
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
    if s.get("history"):
        rendered += (
            "<p>history around it (once for the scenario):</p>"
            f"<pre>{html.escape(s['history'])}</pre>"
        )
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
        + (f"<p>{html.escape(s['retried'])}</p>" if s.get("retried") else "")
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
        + "".join(workload_table(w) for w in s["workloads"])
        + "</section>"
        for s in report["scenarios"]
        if s.get("workloads")
    ]
    return f"<h2>Durability workloads</h2>{''.join(parts)}" if parts else ""


def _listing(report: dict[str, Any], status: str) -> str:
    items = [b for b in report["behaviours"] if status_shown(b) == status]
    if not items:
        return ""
    lis = "".join(
        f'<li><a href="#behaviour-{b["id"]}">{b["id"]}</a> {html.escape(b["reason"])}</li>'
        for b in items
    )
    return f"<h3>{_badge(str(status))} {len(items)}</h3><ul>{lis}</ul>"


def _in_short(report: dict[str, Any]) -> str:
    """The opening sentences (``admin_summary``), each with its behaviours by family."""
    parts = []
    for entry in report.get("admin_summary") or admin_summary(report):
        groups = "".join(
            f"<li><b>{html.escape(g['title'] or g['family'])}</b> ({html.escape(g['family'])})"
            "<ul>" + "".join(f"<li>{html.escape(i)}</li>" for i in g["items"]) + "</ul></li>"
            for g in entry["groups"]
        )
        parts.append(
            f"<p>{_badge(entry['status'])} {html.escape(entry['text'])}</p>"
            + (f"<ul>{groups}</ul>" if groups else "")
        )
    return f'<section class="short"><h2>In short</h2>{"".join(parts)}</section>'


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
            f'<td class="s">{_badge(status_shown(entry), None, entry["reason"])}</td>'
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
    if report.get("glue"):
        summary += "".join(
            f"<p>{_badge(GLUE_PASS)} the target description adds glue around the MTA: "
            f"{html.escape(g['what'])}; it provides {html.escape(', '.join(g['provides']))}, "
            "whose PASS is the glue's and never credited to the MTA.</p>"
            for g in report["glue"]
        )
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
            GLUE_PASS,
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
{_in_short(report)}
<p>{summary}</p>
{_legend()}
<h2>Behaviours by status</h2>{lists or "<p>every behaviour PASS</p>"}
<h2>Behaviours and scenarios</h2>
<table><thead><tr><th>ID</th><th>behaviour</th><th>status</th><th>why</th>{head}</tr></thead>
<tbody>{"".join(rows)}</tbody></table>
<h2>Evidence: scenarios with a status other than PASS</h2>{details or "<p>none</p>"}
{_workloads_section(report)}
{shrunk_section(report)}
{exploration_section(report)}
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
    (``Verdict.to_dict()`` plus its file) and how long the scenario took. Each check
    that is not a pass is ``rendered`` as pytest shows it (the rule it tested, expected,
    observed); the history around them is the scenario's ``history``, once."""
    verdict = Verdict.from_dict(data)
    for check in verdict.checks:
        check.where = _relative_where(check.where)
    texts = {id(check): text for check, text in verdict.check_texts(rule_sentences())}
    checks = []
    for check, raw in zip(verdict.checks, data.get("checks", []), strict=True):
        rendered = texts.get(id(check)) or check.render(excerpt=False)
        checks.append({**raw, "where": check.where, "rendered": rendered})
    index = {id(check): i for i, check in enumerate(verdict.checks)}
    evidence = {
        bid: [index[id(c)] for c in verdict.evidence(bid)] for bid in data["by_behaviour"]
    }
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
        "history": verdict.history_excerpt(),
        "workloads": data.get("workloads", []),
        "caveats": data.get("caveats", []),
        "retried": data.get("retried", ""),
        "named_evidence": bool(data.get("named_evidence", False)),
        #: behaviour -> indices into ``checks`` of the checks that evidence it
        "evidence": evidence,
    }


def _relative_where(where: str) -> str:
    """A check's ``where`` ("file:line", then perhaps a replay command) with its file
    made readable as :func:`_relative` makes a scenario's source."""
    head, sep, rest = where.partition(" ")
    return _relative(head) + sep + rest


def _relative(source: str) -> str:
    """A scenario's ``file:line`` relative to the working directory when it is below it."""
    path, sep, line = source.rpartition(":")
    if not sep or not os.path.isabs(path):
        return source
    try:
        return f"{Path(path).relative_to(Path.cwd())}:{line}"
    except ValueError:
        pass
    if Path(path).is_relative_to(tempfile.gettempdir()):
        # a generated scenario's file (exploration): this machine's temporary path means
        # nothing to a reader; its name says which scenario of which seed it was
        return f"{Path(path).name}:{line}"
    return source
