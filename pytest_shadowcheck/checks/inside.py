"""Checks that look inside the MTA: its queues and configuration warnings through the
control API, and what it logged.

They are extra evidence: on a target without the capability (or without readable
logs) such a check alone is UNTESTABLE and the scenario's wire checks still decide.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import poll, result
from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.scenario.capabilities import QUEUE_PATHS
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.scenario.model import Step

__all__ = ["QUEUE_PATHS", "check_config_warning", "check_log", "check_queue", "queue_entries"]

def queue_entries(answer: Any) -> list[dict[str, Any]]:
    if isinstance(answer, dict):
        out: list[dict[str, Any]] = []
        for value in answer.values():
            out.extend(queue_entries(value))
        return out
    if isinstance(answer, list):
        return [x for x in answer if isinstance(x, dict)]
    return []


async def check_queue(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    node, queue = arg["node"], arg["queue"]
    contains, absent = arg.get("contains", []), arg.get("absent", [])
    within = arg.get("within", 0.0)
    state: dict[str, Any] = {"entries": [], "error": None}

    async def satisfied() -> bool:
        try:
            answer = await run.target.control(node, "GET", QUEUE_PATHS[queue])
        except TargetError as exc:
            state["error"] = str(exc)
            return False
        state["error"] = None
        entries = queue_entries(answer)
        state["entries"] = entries
        ids = {e.get("message_id") for e in entries}
        ok = all(run.messages[r].message_id in ids for r in contains)
        ok = ok and not any(run.messages[r].message_id in ids for r in absent)
        if "count" in arg:
            ok = ok and len(entries) == arg["count"]
        return ok

    if within:
        run.progress.waiting(within, f"for the {queue} queue of {node}")
    ok = await poll(satisfied, within)
    by_id = {m.message_id: ref for ref, m in run.messages.items()}
    held = [by_id.get(e.get("message_id"), e.get("message_id")) for e in state["entries"]]
    expected = []
    if contains:
        expected.append(f"holds {', '.join(contains)}")
    if absent:
        expected.append(f"does not hold {', '.join(absent)}")
    if "count" in arg:
        expected.append(f"holds exactly {arg['count']} message(s)")
    observed = state["error"] or f"holds {len(held)}: {', '.join(map(str, held)) or '(empty)'}"
    run.history.record("snapshot", node=node, queue=queue, entries=held)
    return result(
        step,
        f"{queue} queue of {node}",
        ok,
        f"the {queue} queue of {node} "
        + " and ".join(expected or ["answers"])
        + (f" within {within:g}s" if within else ""),
        observed,
        run.excerpt(run.history.now(), [], before=3.0, after=0.0),
    )


async def check_config_warning(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    node, present = arg["node"], arg.get("present", True)
    try:
        warnings = queue_entries(await run.target.control(node, "GET", "/config/warnings"))
    except TargetError as exc:
        return result(step, f"config warnings of {node}", False, "an answer", str(exc))
    pattern = arg.get("code", ".*")
    hits = [w for w in warnings if re.search(pattern, str(w.get("code", "")))]
    ok = bool(hits) == present
    observed = "; ".join(f"{w.get('code')}: {w.get('message')}" for w in warnings) or "no warnings"
    return result(
        step,
        f"config warnings of {node}",
        ok,
        f"{node} {'flags' if present else 'does not flag'} a warning /{pattern}/",
        observed,
    )


async def check_log(run: Run, step: Step) -> CheckResult:
    """What a node wrote to its log: where an MTA flags a configuration it accepts but
    that puts a guarantee at risk (SN-6), readable on a black box."""
    arg = step.arg
    node = arg["node"]
    name = f"log of {node}"
    wanted = []
    if "contains" in arg:
        wanted.append(f"a line matching /{arg['contains']}/")
    if "absent" in arg:
        wanted.append(f"no line matching /{arg['absent']}/")
    expected = f"{node} logs " + " and ".join(wanted)
    text: str | None = None

    async def satisfied() -> bool:
        nonlocal text
        text = run.target.node_log(node)
        if text is None:
            return True  # nothing to wait for
        lines = text.splitlines()
        ok = "contains" not in arg or any(re.search(arg["contains"], x) for x in lines)
        return ok and not ("absent" in arg and any(re.search(arg["absent"], x) for x in lines))

    within = arg.get("within", 0.0)
    if within:
        run.progress.waiting(within, f"for the log of {node}")
    ok = await poll(satisfied, within)
    if text is None:
        return CheckResult(
            name,
            Status.UNTESTABLE,
            expected,
            f"target {run.target.name} cannot read the log of {node}",
            where=str(step.where),
        )
    lines = text.splitlines()
    hits = [x for x in lines if "absent" in arg and re.search(arg["absent"], x)]
    found = [x for x in lines if "contains" in arg and re.search(arg["contains"], x)]
    observed = (
        f"found: {hits[0]}"
        if hits
        else (f"found: {found[0]}" if found else f"no such line among {len(lines)}")
    )
    tail = "\n".join(lines[-10:])
    return result(step, name, ok, expected, observed, f"--- last lines of {node}'s log ---\n{tail}")
