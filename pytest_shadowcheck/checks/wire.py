"""The wire checks: expectations over what the harness saw on the links and at the sinks.

Replies, deliveries, the order and timing of events, SMTP lines and connections.
Each checker returns a :class:`~pytest_shadowcheck.verdict.CheckResult` with
what was expected, what was observed and the history excerpt around it (the
SMTP lines on the links involved), so a failure reads like an incident report.
"""

from __future__ import annotations

import asyncio
import re
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import (
    POLL,
    await_event,
    conns_with_content,
    deliveries,
    describe_deliveries,
    find_event,
    matcher_links,
    matcher_phrase,
    node_of,
    poll,
    result,
    times,
    why_not,
)
from pytest_shadowcheck.checks.lateness import said
from pytest_shadowcheck.checks.prose import (
    describe_event,
    describe_matcher,
    link_sides,
    no,
    pattern_words,
    session_fact,
)
from pytest_shadowcheck.history import Event, Lateness
from pytest_shadowcheck.network.smtp_text import header_section
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.scenario.model import Step

__all__ = [
    "DEFAULT_TOLERANCE",
    "check_connections",
    "check_delivered",
    "check_lines",
    "check_not_delivered",
    "check_order",
    "check_reply",
    "check_timing",
]

DEFAULT_TOLERANCE = 0.5
#: how far before and after an interval's start the harness's lateness can have made
#: the interval look shorter than it was (seconds)
BEFORE_START = 1.0
STALL_ENDED = 0.1


# --------------------------------------------------------------------------- replies


async def check_reply(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    ref = arg["message"]
    msg = await run.settled_message(ref)
    code, enhanced, text = msg.code, msg.enhanced, msg.text
    wanted = arg["code"]
    expected = (f"a {wanted} reply" if isinstance(wanted, str) else f"{wanted}") + (
        f" {arg['enhanced']}" if "enhanced" in arg else ""
    )
    if wanted == "refused":
        expected = "a refusal (any 4xx or 5xx reply, or no reply at all): never a 250"
    if "text" in arg:
        expected += f" and {pattern_words(arg['text'], 'a text')}"
    if wanted == "refused":
        ok = code is None or code >= 400
    elif isinstance(wanted, str):  # "4xx": any reply of the class
        ok = code is not None and str(code)[0] == wanted[0]
    else:
        ok = code == wanted
    if "enhanced" in arg:
        ok = ok and enhanced == arg["enhanced"]
    if "text" in arg:
        ok = ok and bool(re.search(arg["text"], text or ""))
    said = f"{code} {text}".strip().replace("\n", " | ")
    observed = (
        f"{msg.via} answered `{said}`"
        if code is not None
        else f"the sender got no reply from {msg.via}: {msg.error}"
    )
    return result(
        step,
        f"reply to {ref}",
        ok,
        f"{msg.via} answers the content of {ref} with {expected}",
        observed,
        run.excerpt(msg.reply_t or msg.sent_t, msg.links()),
    )


# --------------------------------------------------------------------------- delivery


async def check_delivered(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    ref, sink, by = arg["message"], arg.get("to"), arg.get("by")
    within = arg.get("within", run.scenario.settle)
    duplicates = arg.get("duplicates", "forbidden")
    exactly: int | None = arg.get("count")
    recipient = arg.get("recipient")
    where = f" to {sink}" if sink else ""
    if by:
        where += f" by {by}"
    if recipient:
        where += f" for {recipient}"

    def counted() -> list[Any]:
        found = deliveries(run, ref, sink, by)
        if recipient:  # the copies that reached this recipient, not the others' copies
            found = [(s, d) for s, d in found if recipient.lower() in map(str.lower, d.rcpt_tos)]
        return found

    run.progress.waiting(within, f"for {ref} to be delivered{where}")
    enough = exactly or (2 if duplicates == "expected" else 1)

    async def arrived() -> bool:
        return len(counted()) >= enough

    began = run.history.now()
    late = 0.0
    if not await poll(arrived, within):
        # a delivery the harness itself took late to take: wait out its delay once more
        machine = run.history.lateness(began, run.history.now())
        late = machine.total
        if not (late > 0 and await poll(arrived, late)):
            late = 0.0
    found = counted()
    count = len(found)
    ok = count >= 1
    expected = f"{ref} delivered{where} within {within:g}s"
    if exactly is not None:
        # A copy too many is as wrong as one too few (e.g. a request answered twice).
        ok = count == exactly
        expected += f", exactly {times(exactly)}"
    elif duplicates == "forbidden":
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
    observed = describe_deliveries(found)
    if "headers" in arg:
        wanted, wrong = _check_headers(found, arg["headers"])
        expected += f", every copy with {wanted}"
        if wrong:
            ok = False
            observed += "; " + "; ".join(wrong)
    if not found:
        others = deliveries(run, ref)
        if others and (sink or by):
            observed = f"not delivered{where}; but {describe_deliveries(others)}"
    msg = run.messages[ref]
    around = found[0][1].t if found else run.history.now()
    timed_out = "" if found else _sessions_timed_out_on_the_harness(run, sink, by, msg.sent_t)
    if timed_out:
        return CheckResult(
            f"delivered {ref}",
            Status.INCONCLUSIVE,
            expected,
            f"{observed}: {timed_out}: the attempt failed on the machine's account, and no "
            "later one came within the window: no verdict on the MTA",
            where=str(step.where),
            excerpt=run.excerpt(around, msg.links(all_nodes=True)),
            harness_late=True,
        )
    if ok and late:
        return CheckResult(
            f"delivered {ref}",
            Status.INCONCLUSIVE,
            expected,
            f"{observed}: after the window, but within the {late:.3f}s the machine ran late "
            f"during it ({said(machine)}: an overloaded machine): no verdict on the MTA",
            where=str(step.where),
            excerpt=run.excerpt(around, msg.links(all_nodes=True)),
            harness_late=True,
        )
    return result(
        step,
        f"delivered {ref}",
        ok,
        expected,
        observed,
        run.excerpt(around, msg.links(all_nodes=True)),
    )


#: the timer a node's delivery session runs out on while it waits for the next hop (its
#: running out can also leave a next hop's 250 unread: a duplicate's cause)
SEND_TIMEOUT = "SendConnectionInactivityTimeout"


def _sessions_timed_out_on_the_harness(
    run: Run, sink: str | None, by: str | None, since: float
) -> str:
    """Why nothing reached ``sink`` may be the harness's doing, in words ("" if not): every
    delivery session a node opened to it since ``since`` was ended by the node itself
    while the harness, relaying it, stalled at least as long as the node's
    SendConnectionInactivityTimeout in one go. The node's timer ran out waiting for a
    line the harness held (CI once stalled 1.0 s inside a 0.5 s timeout, and a node
    whose retry is a minute away delivered nothing in a 5 s window)."""
    sinks = [sink] if sink else list(run.sinks)
    sessions: dict[tuple[str, int], list[Event]] = {}
    for event in run.history.events(since=since):
        if event.link is None or event.conn is None or "->" not in event.link:
            continue
        node, _, to = event.link.partition("->")
        if to in sinks and (by is None or node == by):
            sessions.setdefault((event.link, event.conn), []).append(event)
    stalls: list[str] = []
    for (link, _), events in sorted(sessions.items(), key=lambda s: s[1][0].t):
        node = link.partition("->")[0]
        timeout = run.scenario.node_setting(node, SEND_TIMEOUT)
        closed = next((e for e in events if e.kind == "close"), None)
        if not isinstance(timeout, int | float) or closed is None:
            return ""  # a session still open, or a timer the scenario does not give
        if closed.data.get("reason") != "client closed":
            return ""  # the next hop ended it: not the node's timer
        stall = max(
            (float(e.data.get("late", 0.0)) for e in
             run.history.events(kind="lag", since=events[0].t, until=closed.t)),
            default=0.0,
        )  # fmt: skip
        if stall < timeout:
            return ""
        stalls.append(
            f"{node} ended its session to {link.partition('->')[2]} at +{closed.t:.2f}s "
            f"just after the harness itself stalled {stall:.3f}s relaying it, longer than "
            f"its {SEND_TIMEOUT} of {timeout:g}s"
        )
    return "; ".join(stalls)


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
        wanted.append(pattern_words(rule["contains"], "a header line"))
    if "absent" in rule:
        wanted.append(no(pattern_words(rule["absent"], "a header line")))
    wrong = []
    for sink, delivery in found:
        lines = _header_lines(delivery.raw)
        copy = f"the copy {node_of(delivery.helo)} delivered to {sink} at +{delivery.t:.2f}s"
        if "contains" in rule and not any(re.search(rule["contains"], x) for x in lines):
            wrong.append(f"{copy} has {no(pattern_words(rule['contains'], 'a header line'))}")
        hits = [x for x in lines if "absent" in rule and re.search(rule["absent"], x)]
        if hits:
            wrong.append(f"{copy} has `{hits[0]}`")
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
    found = deliveries(run, ref, sink, by)
    where = (f" to {sink}" if sink else "") + (f" by {by}" if by else "")
    return result(
        step,
        f"not delivered {ref}",
        not found,
        f"{ref} not delivered{where}" + (f" in the {hold:g}s after it was sent" if hold else ""),
        describe_deliveries(found),
        run.excerpt(found[0][1].t if found else run.history.now(), msg.links(all_nodes=True)),
    )


# --------------------------------------------------------------------------- events


def _at(t: float) -> str:
    return f"(+{t:.3f}s)"


async def check_order(run: Run, step: Step) -> CheckResult:
    first, then = step.arg["first"], step.arg["then"]
    # once 'then' happened the order is decided, whatever comes later
    await await_event(run, then, step.arg.get("within", run.scenario.settle))
    a, b = find_event(run, first), find_event(run, then)
    said_first, said_then = matcher_phrase(first, run), matcher_phrase(then, run)
    expected = f"{said_first.text} before {said_then.text}"
    checked = f"(checked at +{run.history.now():.3f}s)"
    if a is None and b is not None:
        # 'then' came and 'first' had not: the order is broken whatever happens later
        fact = why_not(run, first)
        observed = (
            f"{b[1]} {_at(b[0])}; by then {said_first.not_yet}"
            + (f": {fact}" if fact else "")
            + f" {checked}"
        )
        ok = False
    elif a is None or b is None:
        missing = [said.never for said, e in ((said_first, a), (said_then, b)) if e is None]
        fact = why_not(run, *(m for m, e in ((first, a), (then, b)) if e is None))
        seen = f"{a[1]} {_at(a[0])}, but " if a is not None else ""
        observed = seen + " and ".join(missing) + (f": {fact}" if fact else "") + f" {checked}"
        ok = False
    else:
        ok = a[0] < b[0]
        if ok:
            observed = f"{a[1]} {_at(a[0])}, then {b[1]} {_at(b[0])}"
        else:
            observed = f"{b[1]} {_at(b[0])} first, and only then {a[1]} {_at(a[0])}"
    around = (a or b or (run.history.now(), ""))[0]
    return result(
        step, "order", ok, expected, observed, run.excerpt(around, matcher_links(run, first, then))
    )


def _bounds(arg: dict[str, Any]) -> str:
    low, high = arg.get("at_least"), arg.get("at_most")
    if low is not None and high is not None:
        return f"{low:g}s" if low == high else f"at least {low:g}s and at most {high:g}s"
    if low is not None:
        return f"at least {low:g}s"
    if high is not None:
        return f"at most {high:g}s"
    return "any time"


async def check_timing(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    tolerance = arg.get("tolerance", DEFAULT_TOLERANCE)
    within = arg.get("within", run.scenario.settle)
    await await_event(run, arg["from"], within)
    a = find_event(run, arg["from"])
    if a is not None:
        # the 'to' event can only count until the upper bound has passed
        limit = within
        if "at_most" in arg:
            limit = max(0.0, a[0] + arg["at_most"] + tolerance - run.history.now()) + POLL
        await await_event(run, arg["to"], limit)
        late = run.history.lateness(a[0], run.history.now()).total
        if "at_most" in arg and late > 0 and find_event(run, arg["to"]) is None:
            # what the harness relays or stamps is late by the harness's own delay
            await await_event(run, arg["to"], late)
    b = find_event(run, arg["to"])
    # "the first X after the start" needs no "after the start" twice in one sentence
    to = arg["to"]
    if to.get("first_after") == arg["from"]:
        to = {key: value for key, value in to.items() if key != "first_after"}
    said_from, said_to = matcher_phrase(arg["from"], run), matcher_phrase(to, run)
    expected = f"{said_to.text} {_bounds(arg)} after {said_from.text} (give or take {tolerance:g}s)"
    if a is None:
        # the clock never started: the behaviour timed here did not come into play
        fact = why_not(run, arg["from"])
        return CheckResult(
            "timing",
            Status.NOT_APPLICABLE,
            expected,
            f"{said_from.never}" + (f": {fact}" if fact else "") + ", so there was nothing to time",
            where=str(step.where),
        )
    if b is None:
        fact = why_not(run, arg["to"])
        return result(
            step,
            "timing",
            False,
            expected,
            f"{a[1]} {_at(a[0])}; after that {said_to.never}"
            + (f": {fact}" if fact else "")
            + f" (checked at +{run.history.now():.3f}s)",
            run.excerpt(run.history.now(), matcher_links(run, arg["from"], arg["to"])),
        )
    delta = b[0] - a[0]
    # an MTA can act on an event before the harness has stamped it (a container that
    # answered its peer before the harness's readiness probe returned)
    relation = f"{delta:.3f}s after" if delta >= 0 else f"{-delta:.3f}s before"
    observed = f"{b[1]} {relation} {a[1]} {_at(a[0])}"
    excerpt = run.excerpt(b[0], matcher_links(run, arg["from"], arg["to"]), before=delta + 1)
    miss, machine = 0.0, Lateness(0.0)
    if "at_least" in arg and delta < arg["at_least"] - tolerance:
        # too early: the start stamped late, or the MTA's own clock started at an event of
        # its own just before it (a heartbeat) that the overloaded machine ran early
        # relative to it; or the harness stood still inside the window, and what it
        # relays or says stopped meanwhile (a client's keepalives, so the MTA rightly
        # closed an idle session; a peer's replies, so it rightly gave up on it). The
        # second before the start, no further (a stall while the nodes started says
        # nothing of this window)
        miss = arg["at_least"] - tolerance - delta
        machine = run.history.lateness(a[0] - BEFORE_START, max(b[0], a[0] + STALL_ENDED))
    if "at_most" in arg and delta > arg["at_most"] + tolerance:
        miss = delta - arg["at_most"] - tolerance
        machine = run.history.lateness(a[0], b[0])
    if 0 < miss <= machine.total:
        return CheckResult(
            "timing",
            Status.INCONCLUSIVE,
            expected,
            f"{observed}: {miss:.3f}s outside the window, but {said(machine)} in that "
            "interval (an overloaded machine), which could explain the miss: no verdict "
            "on the MTA",
            where=str(step.where),
            excerpt=excerpt,
            harness_late=True,
        )
    return result(step, "timing", miss == 0, expected, observed, excerpt)


async def check_lines(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    link, direction = arg["link"], arg.get("direction")
    wanted_said = absent_said = None
    if "contains" in arg:
        wanted_said = describe_matcher(
            {"link": link, "line": arg["contains"], "direction": direction}, run
        )
    if "absent" in arg:
        absent_said = describe_matcher(
            {"link": link, "line": arg["absent"], "direction": direction}, run
        )
    if "within" in arg and "contains" in arg and wanted_said is not None:
        # wait for the wanted line first (e.g. the reply that ends an attempt)
        wanted = re.compile(arg["contains"])

        async def seen() -> bool:
            return any(
                wanted.search(str(e.data.get("text", "")))
                for e in run.history.events(kind="line", link=link)
                if not direction or e.direction == direction
            )

        run.progress.waiting(arg["within"], f"until {wanted_said.text}")
        await poll(seen, arg["within"])
    lines = [
        e
        for e in run.history.events(kind="line", link=link)
        if not direction or e.direction == direction
    ]
    texts = [str(e.data.get("text", "")) for e in lines]
    ok = True
    expected, observed = [], []
    hit: Event | None = None
    if "contains" in arg and wanted_said is not None:
        matches = [e for e, t in zip(lines, texts, strict=True) if re.search(arg["contains"], t)]
        expected.append(wanted_said.text)
        if matches:
            observed.append(f"{describe_event(run, matches[0])} {_at(matches[0].t)}")
        else:
            ok = False
            observed.append(f"{wanted_said.never}: {session_fact(run, link, direction)}")
        if arg.get("unique"):
            expected.append("each such line only once")
            first_at: dict[str, Event] = {}
            for event in matches:
                text = str(event.data.get("text", ""))
                if text in first_at:
                    ok = False
                    hit = event
                    observed.append(
                        f"the same line again at +{event.t:.3f}s (first at "
                        f"+{first_at[text].t:.3f}s): {describe_event(run, event)}"
                    )
                    break
                first_at[text] = event
    if "absent" in arg and absent_said is not None:
        matches = [e for e, t in zip(lines, texts, strict=True) if re.search(arg["absent"], t)]
        expected.append(absent_said.never)
        if matches:
            ok = False
            hit = matches[0]
            observed.append(f"{describe_event(run, hit)} {_at(hit.t)}")
        else:
            observed.append(f"{absent_said.never} ({session_fact(run, link, direction)})")
    around = hit.t if hit else (lines[-1].t if lines else run.history.now())
    return result(
        step,
        f"lines on {link}",
        ok,
        ", and ".join(expected)
        + (f" (waiting up to {arg['within']:g}s)" if "within" in arg else ""),
        "; ".join(observed),
        run.excerpt(around, [link]),
    )


async def check_connections(run: Run, step: Step) -> CheckResult:
    """How many connections were opened on a link (in a window, carrying a message)."""
    arg = step.arg
    link = arg["link"]
    client, server = link_sides(link)
    opened = run.history.events(kind="connect", link=link)
    wanted = [
        f"{word} {arg[key]}"
        for key, word in (("count", "exactly"), ("at_least", "at least"), ("at_most", "at most"))
        if key in arg
    ]
    expected = f"{client} opened {' and '.join(wanted)} SMTP session(s) to {server}"
    if "message" in arg:
        data = run.history.events(kind="data", link=link)
        conns = conns_with_content(data, run.messages[arg["message"]].message_id)
        opened = [e for e in opened if e.conn in conns]
        expected += f" that carried {arg['message']}'s content"
    window: dict[str, tuple[float, str] | None] = {}
    for key, word in (("from", "after"), ("to", "before")):
        if key in arg:
            window[key] = find_event(run, arg[key])
            expected += f", {word} {matcher_phrase(arg[key], run).text}"
    if window.get("from", ()) is None:
        fact = why_not(run, arg["from"])
        return CheckResult(
            f"connections on {link}",
            Status.NOT_APPLICABLE,
            expected,
            matcher_phrase(arg["from"], run).never
            + (f": {fact}" if fact else "")
            + ", so the window never opened",
            where=str(step.where),
        )
    missing = [matcher_phrase(arg[key], run).never for key, found in window.items() if not found]
    if missing:
        observed = "; ".join(missing) + ", so the window never closed"
        excerpt = run.excerpt(run.history.now(), [link])
        return result(step, f"connections on {link}", False, expected, observed, excerpt)
    start, end = window.get("from"), window.get("to")
    opened = [e for e in opened if (not start or e.t >= start[0]) and (not end or e.t <= end[0])]
    n = len(opened)
    ok = n == arg.get("count", n) and n >= arg.get("at_least", n) and n <= arg.get("at_most", n)
    observed = f"{n} opened"
    if opened:
        observed += ": " + ", ".join(f"#{e.conn} at +{e.t:.3f}s" for e in opened)
    around = opened[-1].t if opened else (end[0] if end else run.history.now())
    excerpt = run.excerpt(around, [link])
    return result(step, f"connections on {link}", ok, expected, observed, excerpt)
