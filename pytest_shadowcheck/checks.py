"""Expectation checkers over the run's History, and the always-on no-loss invariant.

Each checker returns a :class:`~pytest_shadowcheck.verdict.CheckResult` with
what was expected, what was observed and the history excerpt around it (the
SMTP lines on the links involved), so a failure reads like an incident report.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from .history import Event
from .network.smtp_text import header_section
from .scenario import CAPABILITY_NEED
from .targets.base import TargetError
from .verdict import CheckResult, Status

if TYPE_CHECKING:
    from .evidence import RunView as Run
    from .scenario import Step

__all__ = [
    "CHECKERS",
    "INVARIANT",
    "PRECONDITION",
    "QUEUE_PATHS",
    "no_loss_invariant",
    "premise_missing",
    "queue_entries",
    "run_check",
]

QUEUE_PATHS = {
    "active": "/queues/active",
    "shadow": "/queues/shadow",
    "safetynet_primary": "/safetynet/primary",
    "safetynet_shadow": "/safetynet/shadow",
    "discard_events": "/discard-events",
}
DEFAULT_TOLERANCE = 0.5
#: the pseudo-behaviour a passing no-loss check evidences (no behaviour of the catalogue)
INVARIANT = "no-loss"
#: the pseudo-behaviour a passing precondition evidences
PRECONDITION = "precondition"
POLL = 0.05


def _result(
    step: Step, name: str, ok: bool, expected: str, observed: str, excerpt: str = ""
) -> CheckResult:
    return CheckResult(
        name=name,
        status=Status.PASS if ok else Status.FAIL,
        expected=expected,
        observed=observed,
        where=str(step.where),
        excerpt=excerpt,
    )


async def _poll(condition: Callable[[], Awaitable[bool]], within: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if await condition():
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL)


# --------------------------------------------------------------------------- replies


async def check_reply(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    msg = await run.settled_message(arg["message"])
    code, enhanced, text = msg.code, msg.enhanced, msg.text
    expected = f"{arg['code']}" + (f" {arg['enhanced']}" if "enhanced" in arg else "")
    if "text" in arg:
        expected += f" matching /{arg['text']}/"
    ok = code == arg["code"]
    if "enhanced" in arg:
        ok = ok and enhanced == arg["enhanced"]
    if "text" in arg:
        ok = ok and bool(re.search(arg["text"], text or ""))
    observed = f"{code} {text}".strip() if code is not None else f"no reply ({msg.error})"
    return _result(
        step,
        f"reply to {arg['message']}",
        ok,
        f"the sender gets {expected} after the message content",
        observed,
        run.excerpt(msg.reply_t or msg.sent_t, msg.links()),
    )


# --------------------------------------------------------------------------- delivery


def _deliveries(run: Run, ref: str, sink: str | None = None, by: str | None = None) -> list[Any]:
    msg = run.messages[ref]
    out = []
    for name, s in run.sinks.items():
        if sink and name != sink:
            continue
        for d in s.deliveries_for(msg.message_id):
            if by and not _helo_is(d.helo, by):
                continue
            out.append((name, d))
    return out


def _helo_is(helo: str | None, node: str) -> bool:
    if not helo:
        return False
    return helo == node or helo.split(".")[0] == node


def _describe_deliveries(found: list[Any]) -> str:
    if not found:
        return "not delivered"
    parts = [f"{sink} at +{d.t:.2f}s by {d.helo} rcpt={','.join(d.rcpt_tos)}" for sink, d in found]
    return f"delivered {len(found)}x: " + "; ".join(parts)


async def check_delivered(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    ref, sink, by = arg["message"], arg.get("to"), arg.get("by")
    within = arg.get("within", run.scenario.settle)
    duplicates = arg.get("duplicates", "forbidden")
    where = f" to {sink}" if sink else ""
    if by:
        where += f" by {by}"
    run.progress.waiting(within, f"for {ref} to be delivered{where}")

    async def arrived() -> bool:
        found = _deliveries(run, ref, sink, by)
        return len(found) >= (2 if duplicates == "expected" else 1)

    await _poll(arrived, within)
    found = _deliveries(run, ref, sink, by)
    count = len(found)
    ok = count >= 1
    expected = f"{ref} delivered{where} within {within:g}s"
    if duplicates == "forbidden":
        ok = count == 1
        expected += ", exactly once"
    elif duplicates == "expected":
        ok = count >= 2
        expected += ", more than once (duplicates expected)"
    else:
        expected += " (duplicates allowed)"
    if ok and "recipients" in arg:
        got = {r for _, d in found for r in d.rcpt_tos}
        missing = [r for r in arg["recipients"] if r not in got]
        ok = not missing
        expected += f" to {', '.join(arg['recipients'])}"
    observed = _describe_deliveries(found)
    if "headers" in arg:
        wanted, wrong = _check_headers(found, arg["headers"])
        expected += f", every copy with {wanted}"
        if wrong:
            ok = False
            observed += "; " + "; ".join(wrong)
    if not found:
        others = _deliveries(run, ref)
        if others and (sink or by):
            observed += f" as required; elsewhere: {_describe_deliveries(others)}"
    msg = run.messages[ref]
    around = found[0][1].t if found else run.history.now()
    return _result(
        step,
        f"delivered {ref}",
        ok,
        expected,
        observed,
        run.excerpt(around, msg.links(all_nodes=True)),
    )


def _header_lines(raw: bytes) -> list[str]:
    """The header lines of a delivered copy, unfolded (``Name: value``)."""
    text = header_section(raw).decode("utf-8", "replace")
    lines: list[str] = []
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and lines:
            lines[-1] += " " + line.strip()
        elif line:
            lines.append(line)
    return lines


def _check_headers(found: list[Any], rule: dict[str, str]) -> tuple[str, list[str]]:
    """(what is wanted, what each copy got wrong) for ``headers: {contains?, absent?}``."""
    wanted = []
    if "contains" in rule:
        wanted.append(f"a header line matching /{rule['contains']}/")
    if "absent" in rule:
        wanted.append(f"no header line matching /{rule['absent']}/")
    wrong = []
    for sink, delivery in found:
        lines = _header_lines(delivery.raw)
        copy = f"the copy {delivery.helo} delivered to {sink} at +{delivery.t:.2f}s"
        if "contains" in rule and not any(re.search(rule["contains"], x) for x in lines):
            wrong.append(f"{copy} has no header line /{rule['contains']}/")
        hits = [x for x in lines if "absent" in rule and re.search(rule["absent"], x)]
        if hits:
            wrong.append(f"{copy} has {hits[0]!r}")
    return " and ".join(wanted), wrong


async def check_not_delivered(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    ref, sink, by = arg["message"], arg.get("to"), arg.get("by")
    msg = run.messages[ref]
    hold = arg.get("for", 0.0)
    remaining = msg.sent_t + hold - run.history.now()
    if remaining > 0:
        run.progress.waiting(remaining, f"to see that {ref} is not delivered")
        await asyncio.sleep(remaining)
    found = _deliveries(run, ref, sink, by)
    where = (f" to {sink}" if sink else "") + (f" by {by}" if by else "")
    return _result(
        step,
        f"not delivered {ref}",
        not found,
        f"{ref} not delivered{where}" + (f" for {hold:g}s after it was sent" if hold else ""),
        _describe_deliveries(found),
        run.excerpt(found[0][1].t if found else run.history.now(), msg.links(all_nodes=True)),
    )


# --------------------------------------------------------------------------- events


def find_event(run: Run, matcher: dict[str, Any]) -> tuple[float, str] | None:
    """First history event matching ``matcher``: (t, description) or None."""
    if "reply" in matcher:
        msg = run.messages[matcher["reply"]]
        if msg.reply_t is None:
            return None
        return msg.reply_t, f"the sender got {msg.code} {msg.text} for {matcher['reply']}"
    if "delivered" in matcher:
        found = _deliveries(run, matcher["delivered"], matcher.get("to"))
        if not found:
            return None
        first = min(found, key=lambda item: item[1].t)
        return first[1].t, f"{matcher['delivered']} delivered to {first[0]} by {first[1].helo}"
    if "step" in matcher:
        for event in run.history.events(kind="step"):
            if re.search(matcher["step"], str(event.data.get("text", ""))):
                return event.t, f"step {event.data.get('text')}"
        return None
    link = matcher["link"]
    events = run.history.events(link=link)
    pattern = re.compile(matcher.get("line", ".*"))
    direction = matcher.get("direction")
    conns: dict[Any, float] | None = None
    if "message" in matcher:
        conns = _conns_with_content(events, run.messages[matcher["message"]].message_id)
    if "closed" in matcher:
        return _find_close(events, link, matcher["closed"], conns)
    for event in events:
        if event.kind != "line":
            continue
        if direction and event.direction != direction:
            continue
        if conns is not None and (event.conn not in conns or event.t < conns[event.conn]):
            continue
        if pattern.search(str(event.data.get("text", ""))):
            side = "C" if event.direction == "c2s" else "S"
            return event.t, f"{link} #{event.conn} {side}: {event.data.get('text')}"
    return None


def _conns_with_content(events: list[Event], message_id: str) -> dict[Any, float]:
    """Connection number -> when it carried the content of ``message_id``."""
    conns: dict[Any, float] = {}
    for event in events:
        if event.kind == "data" and event.data.get("message_id") == message_id:
            conns.setdefault(event.conn, event.t)
    return conns


def _find_close(
    events: list[Event], link: str, by: str, conns: dict[Any, float] | None
) -> tuple[float, str] | None:
    """The first close of a proxied connection on ``link`` (by ``server``, ``client`` or
    ``any`` side), only of the connections in ``conns`` if given."""
    for event in events:
        # the proxy's own record; the harness client notes its closes too (side=...)
        if event.kind != "close" or "side" in event.data:
            continue
        if conns is not None and event.conn not in conns:
            continue
        reason = str(event.data.get("reason", ""))
        if by == "any" or reason.startswith(by):
            return event.t, f"{link} #{event.conn} closed ({reason})"
    return None


def _matcher_text(matcher: dict[str, Any]) -> str:
    if "reply" in matcher:
        return f"the sender's reply for {matcher['reply']}"
    if "delivered" in matcher:
        return f"delivery of {matcher['delivered']}"
    if "step" in matcher:
        return f"step /{matcher['step']}/"
    if "closed" in matcher:
        who = "" if matcher["closed"] == "any" else f" by the {matcher['closed']}"
        text = f"a connection on {matcher['link']} closed{who}"
    else:
        text = f"/{matcher.get('line', '.*')}/ on {matcher['link']}"
    if "message" in matcher:
        text += f" after the content of {matcher['message']}"
    return text


def _matcher_links(run: Run, *matchers: dict[str, Any]) -> list[str]:
    links: list[str] = []
    for m in matchers:
        if "link" in m:
            links.append(m["link"])
        for key in ("reply", "delivered", "message"):
            if key in m:
                links += run.messages[m[key]].links(all_nodes=key != "reply")
    return sorted(set(links))


async def _await_event(run: Run, matcher: dict[str, Any], within: float) -> None:
    """Wait (up to ``within``) for an event the history may not have yet: the steps do
    not wait for what the wire shows later, so a check must."""

    async def seen() -> bool:
        return find_event(run, matcher) is not None

    if not await seen():
        run.progress.waiting(within, f"for {_matcher_text(matcher)}")
        await _poll(seen, within)


async def check_order(run: Run, step: Step) -> CheckResult:
    first, then = step.arg["first"], step.arg["then"]
    # once 'then' happened the order is decided, whatever comes later
    await _await_event(run, then, step.arg.get("within", run.scenario.settle))
    a, b = find_event(run, first), find_event(run, then)
    expected = f"{_matcher_text(first)} before {_matcher_text(then)}"
    if a is None and b is not None:
        # 'then' came and 'first' had not: the order is broken whatever happens later
        observed = (
            f"+{b[0]:.3f}s {b[1]}; {_matcher_text(first)} had not happened "
            f"by then (checked at +{run.history.now():.3f}s)"
        )
        ok = False
    elif a is None or b is None:
        missing = [_matcher_text(m) for m, e in ((first, a), (then, b)) if e is None]
        observed = "never happened: " + "; ".join(missing)
        ok = False
    else:
        ok = a[0] < b[0]
        observed = f"+{a[0]:.3f}s {a[1]}  /  +{b[0]:.3f}s {b[1]}"
    around = (a or b or (run.history.now(), ""))[0]
    return _result(
        step, "order", ok, expected, observed, run.excerpt(around, _matcher_links(run, first, then))
    )


async def check_timing(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    tolerance = arg.get("tolerance", DEFAULT_TOLERANCE)
    within = arg.get("within", run.scenario.settle)
    await _await_event(run, arg["from"], within)
    a = find_event(run, arg["from"])
    if a is not None:
        # the 'to' event can only count until the upper bound has passed
        limit = within
        if "at_most" in arg:
            limit = max(0.0, a[0] + arg["at_most"] + tolerance - run.history.now()) + POLL
        await _await_event(run, arg["to"], limit)
    b = find_event(run, arg["to"])
    bounds = []
    if "at_least" in arg:
        bounds.append(f"at least {arg['at_least']:g}s")
    if "at_most" in arg:
        bounds.append(f"at most {arg['at_most']:g}s")
    expected = (
        f"{_matcher_text(arg['to'])} {' and '.join(bounds) or 'any time'} after "
        f"{_matcher_text(arg['from'])} (tolerance {tolerance:g}s)"
    )
    if a is None:
        # the clock never started: the behaviour timed here did not come into play
        return CheckResult(
            "timing",
            Status.NOT_APPLICABLE,
            expected,
            f"{_matcher_text(arg['from'])} never happened, so there was nothing to time",
            where=str(step.where),
        )
    if b is None:
        return _result(
            step,
            "timing",
            False,
            expected,
            f"+{a[0]:.3f}s {a[1]}; then {_matcher_text(arg['to'])} never happened",
            run.excerpt(run.history.now(), _matcher_links(run, arg["from"], arg["to"])),
        )
    delta = b[0] - a[0]
    ok = True
    if "at_least" in arg:
        ok = ok and delta >= arg["at_least"] - tolerance
    if "at_most" in arg:
        ok = ok and delta <= arg["at_most"] + tolerance
    return _result(
        step,
        "timing",
        ok,
        expected,
        f"{delta:.3f}s ({a[1]} -> {b[1]})",
        run.excerpt(b[0], _matcher_links(run, arg["from"], arg["to"]), before=delta + 1),
    )


async def check_lines(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    link, direction = arg["link"], arg.get("direction")
    if "within" in arg and "contains" in arg:
        # wait for the wanted line first (e.g. the reply that ends an attempt)
        wanted = re.compile(arg["contains"])

        async def seen() -> bool:
            return any(
                wanted.search(str(e.data.get("text", "")))
                for e in run.history.events(kind="line", link=link)
                if not direction or e.direction == direction
            )

        run.progress.waiting(arg["within"], f"for /{arg['contains']}/ on {link}")
        await _poll(seen, arg["within"])
    lines = [
        e
        for e in run.history.events(kind="line", link=link)
        if not direction or e.direction == direction
    ]
    texts = [str(e.data.get("text", "")) for e in lines]
    ok = True
    expected, observed = [], []
    hit: Event | None = None
    if "contains" in arg:
        matches = [e for e, t in zip(lines, texts, strict=True) if re.search(arg["contains"], t)]
        expected.append(f"a line matching /{arg['contains']}/")
        if matches:
            observed.append(f"found: {matches[0].data.get('text')}")
        else:
            ok = False
            observed.append(f"no such line among {len(lines)}")
        if arg.get("unique"):
            expected.append("each such line once")
            first_at: dict[str, Event] = {}
            for event in matches:
                text = str(event.data.get("text", ""))
                if text in first_at:
                    ok = False
                    hit = event
                    observed.append(
                        f"{text} again at +{event.t:.3f}s (first at +{first_at[text].t:.3f}s)"
                    )
                    break
                first_at[text] = event
    if "absent" in arg:
        matches = [e for e, t in zip(lines, texts, strict=True) if re.search(arg["absent"], t)]
        expected.append(f"no line matching /{arg['absent']}/")
        if matches:
            ok = False
            hit = matches[0]
            observed.append(f"found: {hit.data.get('text')} at +{hit.t:.3f}s")
        else:
            observed.append(f"none among {len(lines)} lines")
    around = hit.t if hit else (lines[-1].t if lines else run.history.now())
    return _result(
        step,
        f"lines on {link}",
        ok,
        " and ".join(expected)
        + f" on {link}"
        + (f" (waiting up to {arg['within']:g}s)" if "within" in arg else ""),
        "; ".join(observed),
        run.excerpt(around, [link]),
    )


async def check_connections(run: Run, step: Step) -> CheckResult:
    """How many connections were opened on a link (in a window, carrying a message)."""
    arg = step.arg
    link = arg["link"]
    opened = run.history.events(kind="connect", link=link)
    wanted = [
        f"{word} {arg[key]}"
        for key, word in (("count", "exactly"), ("at_least", "at least"), ("at_most", "at most"))
        if key in arg
    ]
    expected = f"{' and '.join(wanted)} connection(s) opened on {link}"
    if "message" in arg:
        data = run.history.events(kind="data", link=link)
        conns = _conns_with_content(data, run.messages[arg["message"]].message_id)
        opened = [e for e in opened if e.conn in conns]
        expected += f" carrying the content of {arg['message']}"
    window: dict[str, tuple[float, str] | None] = {}
    for key, word in (("from", "after"), ("to", "before")):
        if key in arg:
            window[key] = find_event(run, arg[key])
            expected += f", {word} {_matcher_text(arg[key])}"
    if window.get("from", ()) is None:
        return CheckResult(
            f"connections on {link}",
            Status.NOT_APPLICABLE,
            expected,
            f"{_matcher_text(arg['from'])} never happened, so the window never opened",
            where=str(step.where),
        )
    missing = [_matcher_text(arg[key]) for key, found in window.items() if found is None]
    if missing:
        observed = "the window never happened: " + "; ".join(missing)
        excerpt = run.excerpt(run.history.now(), [link])
        return _result(step, f"connections on {link}", False, expected, observed, excerpt)
    start, end = window.get("from"), window.get("to")
    opened = [e for e in opened if (not start or e.t >= start[0]) and (not end or e.t <= end[0])]
    n = len(opened)
    ok = n == arg.get("count", n) and n >= arg.get("at_least", n) and n <= arg.get("at_most", n)
    observed = f"{n} opened"
    if opened:
        observed += ": " + ", ".join(f"#{e.conn} at +{e.t:.3f}s" for e in opened)
    around = opened[-1].t if opened else (end[0] if end else run.history.now())
    excerpt = run.excerpt(around, [link])
    return _result(step, f"connections on {link}", ok, expected, observed, excerpt)


# --------------------------------------------------------------------------- control API


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
    ok = await _poll(satisfied, within)
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
    return _result(
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
        return _result(step, f"config warnings of {node}", False, "an answer", str(exc))
    pattern = arg.get("code", ".*")
    hits = [w for w in warnings if re.search(pattern, str(w.get("code", "")))]
    ok = bool(hits) == present
    observed = "; ".join(f"{w.get('code')}: {w.get('message')}" for w in warnings) or "no warnings"
    return _result(
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
    ok = await _poll(satisfied, within)
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
    return _result(
        step, name, ok, expected, observed, f"--- last lines of {node}'s log ---\n{tail}"
    )


CHECKERS: dict[str, Callable[[Run, Step], Awaitable[CheckResult]]] = {
    "log": check_log,
    "reply": check_reply,
    "delivered": check_delivered,
    "not_delivered": check_not_delivered,
    "order": check_order,
    "timing": check_timing,
    "lines": check_lines,
    "connections": check_connections,
    "queue": check_queue,
    "config_warning": check_config_warning,
}


async def run_check(run: Run, step: Step) -> CheckResult:
    """Run one check, tagged with the behaviours it evidences. A check the target cannot
    look at is UNTESTABLE (alone: the scenario's other checks still count); a check whose
    ``given`` event never happened is NOT-APPLICABLE."""
    needed = step.capability()
    if needed is not None and needed not in run.target.capabilities:
        what = ", ".join(f"{k}={v}" for k, v in step.arg.items() if not isinstance(v, dict))
        result = CheckResult(
            f"{step.kind} ({what})",
            Status.UNTESTABLE,
            f"a look at {needed}",
            f"target {run.target.name} lacks {needed}: {CAPABILITY_NEED[needed]}",
            where=str(step.where),
        )
    elif (given := step.given or run.scenario.given) and find_event(run, given) is None:
        result = CheckResult(
            step.kind,
            Status.NOT_APPLICABLE,
            f"applies once {_matcher_text(given)} has happened",
            f"{_matcher_text(given)} never happened, so there was nothing to check",
            where=str(step.where),
        )
    else:
        result = await CHECKERS[step.kind](run, step)
    result.behaviours = list(step.behaviours)
    if step.precondition:
        if result.status == Status.PASS:
            result.behaviours = [PRECONDITION]  # a premise proves no behaviour
        elif result.status == Status.FAIL:
            result.status = Status.NOT_APPLICABLE
            result.observed = f"the scenario's premise did not hold: {result.observed}"
    return result


# --------------------------------------------------------------------------- invariant


def premise_missing(run: Run, results: list[CheckResult]) -> list[CheckResult]:
    """The invariants' results when the scenario's ``given`` event never happened: a loss
    there is the failure of the behaviour that required the event (no shadow copy: CR-1),
    judged in its own scenarios; here it is NOT-APPLICABLE, with the loss named."""
    given = run.scenario.given
    if given is None or find_event(run, given) is not None:
        return results
    for result in results:
        if result.status not in (Status.PASS, Status.NOT_APPLICABLE):
            result.observed = (
                f"{_matcher_text(given)} never happened, which every behaviour of this "
                f"scenario presupposes: {result.observed}"
            )
            result.status = Status.NOT_APPLICABLE
    return results


async def no_loss_invariant(run: Run) -> list[CheckResult]:
    """Every acknowledged message is delivered (or still held by a live node), unless
    every node holding a copy failed: then it is OUTSIDE-GUARANTEE (PR-4).

    A loss is blamed on every behaviour of the scenario; a message that arrived proves
    none of them (it would make an idle-timeout behaviour PASS where nothing was timed),
    so a pass evidences only the invariant itself."""
    acknowledged = [ref for ref, m in run.messages.items() if m.code is not None and m.code < 300]
    if not acknowledged or not run.sinks:
        # without next hops the harness sees, deliveries cannot be observed
        return []
    settle = run.scenario.settle

    async def all_delivered() -> bool:
        return all(_deliveries(run, ref) for ref in acknowledged)

    if not await all_delivered():
        run.progress.waiting(settle, "for acknowledged messages to be delivered (no-loss check)")
        await _poll(all_delivered, settle)
    results = []
    for ref in acknowledged:
        msg = run.messages[ref]
        found = _deliveries(run, ref)
        name = f"no loss of {ref}"
        expected = f"acknowledged message {ref} is delivered (or still queued on a live node)"
        if found:
            results.append(
                CheckResult(
                    name, Status.PASS, expected, _describe_deliveries(found), behaviours=[INVARIANT]
                )
            )
            continue
        held = await run.still_held(ref)
        if held:
            results.append(
                CheckResult(
                    name, Status.PASS, expected, f"still queued on {held}", behaviours=[INVARIANT]
                )
            )
            continue
        holders = run.copy_holders(ref)
        failed = {node: why for node in holders if (why := run.copy_lost(node, msg.sent_t))}
        excerpt = run.excerpt(run.history.now(), msg.links(all_nodes=True), before=settle + 5)
        if holders and len(failed) == len(holders):
            why = ", ".join(f"{n} {w}" for n, w in failed.items())
            results.append(
                CheckResult(
                    name,
                    Status.OUTSIDE_GUARANTEE,
                    expected,
                    f"{ref} lost, but every node holding a copy failed ({why}): "
                    "primary and shadow failing together is outside the guarantee (PR-4)",
                    excerpt=excerpt,
                )
            )
        else:
            alive = [n for n in holders if n not in failed]
            results.append(
                CheckResult(
                    name,
                    Status.FAIL,
                    expected,
                    f"{ref} was acknowledged ({msg.code} {msg.text}) and never delivered "
                    f"within {settle:g}s; copies were on {', '.join(holders)} "
                    f"({', '.join(alive)} still up)",
                    excerpt=excerpt,
                )
            )
    return results
