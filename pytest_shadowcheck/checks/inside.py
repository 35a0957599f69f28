"""Checks that look inside the MTA: its queues and configuration warnings through the
control API, and what it logged.

They are extra evidence: on a target without the capability (or without readable
logs) such a check alone is UNTESTABLE and the scenario's wire checks still decide.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import poll, result
from pytest_shadowcheck.checks.prose import no, parse_pattern, pattern_tail, pattern_words, quoted
from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.scenario.capabilities import QUEUE_PATHS
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.scenario.model import Step

__all__ = [
    "QUEUE_PATHS",
    "check_config_warning",
    "check_log",
    "check_queue",
    "log_expected",
    "queue_entries",
    "queue_expected",
    "queue_name",
    "warning_expected",
]


def queue_entries(answer: Any) -> list[dict[str, Any]]:
    if isinstance(answer, dict):
        out: list[dict[str, Any]] = []
        for value in answer.values():
            out.extend(queue_entries(value))
        return out
    if isinstance(answer, list):
        return [x for x in answer if isinstance(x, dict)]
    return []


#: how many messages a queue check's text names before "and N more"
LISTED = 20


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
        def held(ref: str) -> bool:
            return any(run.messages[ref].carried_in(e) for e in entries)

        ok = all(held(r) for r in contains) and not any(held(r) for r in absent)
        if "count" in arg:
            ok = ok and len(entries) == arg["count"]
        return ok

    if within:
        run.progress.waiting(within, f"for the {queue} queue of {node}")
    ok = await poll(satisfied, within)
    by_id = {m.message_id: ref for ref, m in run.messages.items()}
    # a workload's messages by their ref too (its attempts name them)
    for event in run.history.events(kind="attempt"):
        by_id.setdefault(str(event.data.get("message_id")), str(event.data.get("ref")))
    held = [by_id.get(e.get("message_id"), e.get("message_id")) for e in state["entries"]]
    shown = ", ".join(map(str, held[:LISTED])) + (
        f" and {len(held) - LISTED} more" if len(held) > LISTED else ""
    )
    observed = state["error"] or (f"it holds {len(held)}: {shown}" if held else "it is empty")
    run.history.record("snapshot", node=node, queue=queue, entries=held)
    return result(
        step,
        queue_name(arg),
        ok,
        queue_expected(arg),
        observed,
        run.excerpt(run.history.now(), [], before=3.0, after=0.0),
    )


def queue_name(arg: dict[str, Any]) -> str:
    return f"{arg['queue']} queue of {arg['node']}"


def queue_expected(arg: dict[str, Any]) -> str:
    """What a ``queue`` check expects, in words (also when the target cannot look)."""
    expected = []
    if arg.get("contains"):
        expected.append(f"holds {', '.join(arg['contains'])}")
    if arg.get("absent"):
        expected.append(f"does not hold {', '.join(arg['absent'])}")
    if "count" in arg:
        count = arg["count"]
        expected.append(f"holds exactly {count} message{'s' if count != 1 else ''}")
    within = arg.get("within", 0.0)
    return (
        f"the {arg['queue']} queue of {arg['node']} "
        + " and ".join(expected or ["answers"])
        + (f" within {within:g}s" if within else "")
    )


def warning_expected(arg: dict[str, Any]) -> str:
    """What a ``config_warning`` check expects, in words."""
    node, present = arg["node"], arg.get("present", True)
    if "code" not in arg:
        return f"{node} flags {'a' if present else 'no'} configuration warning"
    p = parse_pattern(arg["code"])
    code = quoted(p.literal) if p.literal is not None else f"matching the pattern `{arg['code']}`"
    return f"{node} {'flags' if present else 'does not flag'} the configuration warning {code}"


async def check_config_warning(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    node, present = arg["node"], arg.get("present", True)
    name = f"config warnings of {node}"
    try:
        warnings = queue_entries(await run.target.control(node, "GET", "/config/warnings"))
    except TargetError as exc:
        return result(step, name, False, f"{node} answers for its configuration", str(exc))
    pattern = arg.get("code", ".*")
    hits = [w for w in warnings if re.search(pattern, str(w.get("code", "")))]
    ok = bool(hits) == present
    observed = "; ".join(f"{w.get('code')}: {w.get('message')}" for w in warnings)
    return result(
        step,
        name,
        ok,
        warning_expected(arg),
        f"{node} flags {observed}" if observed else f"{node} flags no configuration warning",
    )


def log_expected(arg: dict[str, Any]) -> str:
    """What a ``log`` check expects, in words."""
    wanted = []
    if "contains" in arg:
        wanted.append(pattern_words(arg["contains"]))
    if "absent" in arg:
        wanted.append(no(pattern_words(arg["absent"])))
    return f"{arg['node']}'s log has " + " and ".join(wanted)


async def check_log(run: Run, step: Step) -> CheckResult:
    """What a node wrote to its log: where an MTA flags a configuration it accepts but
    that puts a guarantee at risk (SN-6), readable on a black box."""
    arg = step.arg
    node = arg["node"]
    name = f"log of {node}"
    expected = log_expected(arg)
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
    count = f"{len(lines)} line{'s' if len(lines) != 1 else ''}"
    if hits:
        observed = f"{node}'s log has `{hits[0]}`"
    elif found:
        observed = f"{node}'s log has `{found[0]}`"
    elif "contains" in arg:
        observed = f"{node}'s log has {count}, none {pattern_tail(arg['contains'])}"
    else:
        observed = f"{node}'s log has {count}, none {pattern_tail(arg['absent'])}"
    tail = "\n".join(lines[-10:])
    return result(step, name, ok, expected, observed, f"--- last lines of {node}'s log ---\n{tail}")
