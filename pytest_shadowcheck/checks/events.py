"""Finding things in a run's history, shared by the checks: the first event a matcher
names (said in words, :mod:`.prose`), the copies a sink received, waiting for an event,
and a check's result with the SMTP lines around it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.prose import Phrase, describe_event, describe_matcher, session_fact
from pytest_shadowcheck.history import Event
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.scenario.model import Step

__all__ = [
    "POLL",
    "await_event",
    "conns_with_content",
    "deliveries",
    "describe_deliveries",
    "find_event",
    "helo_is",
    "matcher_links",
    "matcher_phrase",
    "matcher_text",
    "node_of",
    "poll",
    "result",
    "times",
    "why_not",
]

POLL = 0.05


def result(
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


async def poll(condition: Callable[[], Awaitable[bool]], within: float) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while True:
        if await condition():
            return True
        if loop.time() >= deadline:
            return False
        await asyncio.sleep(POLL)


def deliveries(
    run: Run, ref: str, sink: str | None = None, by: str | None = None, *, exact: bool = False
) -> list[Any]:
    """(sink, delivery) of every copy of message ``ref`` delivered.

    A copy is the message's by the harness's trace. Messages to which the scenario gave
    one Message-ID are one message to its expectations, as to a recipient's duplicate
    detection (a sender's resend, CR-8); ``exact``: this message's own copies only, as
    the no-loss and integrity invariants count them. A copy that lost its trace is
    matched by its Message-ID."""
    msg = run.messages[ref]
    traces = {msg.trace} if exact else {
        m.trace for m in run.messages.values() if m.message_id == msg.message_id
    }  # fmt: skip
    out = []
    for name, s in run.sinks.items():
        if sink and name != sink:
            continue
        for d in s.deliveries:
            if d.trace not in traces and (d.trace or d.message_id != msg.message_id):
                continue
            if by and not helo_is(d.helo, by):
                continue
            out.append((name, d))
    return out


def helo_is(helo: str | None, node: str) -> bool:
    if not helo:
        return False
    return helo == node or helo.split(".")[0] == node


def describe_deliveries(found: list[Any]) -> str:
    """The copies a sink received, in words: "delivered once: mbx1 delivered it to
    mailbox for alice@corp.test at +1.44s"."""
    if not found:
        return "not delivered"
    parts = [
        f"{node_of(d.helo)} delivered it to {sink} for {', '.join(d.rcpt_tos)} at +{d.t:.2f}s"
        for sink, d in found
    ]
    return f"delivered {times(len(found))}: " + "; ".join(parts)


def node_of(helo: str | None) -> str:
    """The node a delivering MTA named itself in EHLO (its first label)."""
    return (helo or "an unnamed client").split(".")[0]


def times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def find_event(run: Run, matcher: dict[str, Any]) -> tuple[float, str] | None:
    """First history event matching ``matcher`` (the last before its ``last_before``
    event, or the first after its ``first_after`` event, when it names one): (t, what
    happened in words) or None."""
    if "any_of" in matcher:
        hits = [hit for each in matcher["any_of"] if (hit := find_event(run, each))]
        return min(hits, default=None)
    if "last_of" in matcher:
        hits = [hit for each in matcher["last_of"] if (hit := find_event(run, each))]
        return max(hits, default=None)
    if "reply" in matcher:
        ref = matcher["reply"]
        msg = run.messages[ref]
        if msg.reply_t is None:
            return None
        said = f"{msg.code} {msg.text}".strip().replace("\n", " | ")
        return msg.reply_t, f"{msg.via} told the sender `{said}` for {ref}"
    if "delivered" in matcher:
        found = deliveries(run, matcher["delivered"], matcher.get("to"))
        if not found:
            return None
        sink, first = min(found, key=lambda item: item[1].t)
        return first.t, f"{node_of(first.helo)} delivered {matcher['delivered']} to {sink}"
    if "step" in matcher:
        for event in run.history.events(kind="step"):
            if re.search(matcher["step"], str(event.data.get("text", ""))):
                return event.t, describe_event(run, event)
        return None
    link = matcher["link"]
    if matcher.get("opened"):
        opened = run.history.events(kind="connect", link=link)
        return (opened[0].t, describe_event(run, opened[0])) if opened else None
    events = run.history.events(link=link)
    if "last_before" in matcher:
        # the last such line before another event: the last contact before a kill
        bound = find_event(run, matcher["last_before"])
        if bound is None:
            return None
        events = [e for e in events if e.t <= bound[0]][::-1]
    if "first_after" in matcher:
        # the first such line at or after another event: what a node did once a node
        # came back
        bound = find_event(run, matcher["first_after"])
        if bound is None:
            return None
        events = [e for e in events if e.t >= bound[0]]
    pattern = re.compile(matcher.get("line", ".*"))
    direction = matcher.get("direction")
    conns: dict[Any, float] | None = None
    if "message" in matcher:
        conns = conns_with_content(events, run.messages[matcher["message"]].message_id)
    if "closed" in matcher:
        return _find_close(run, events, matcher["closed"], conns)
    for event in events:
        if event.kind != "line":
            continue
        if direction and event.direction != direction:
            continue
        if conns is not None and (event.conn not in conns or event.t < conns[event.conn]):
            continue
        if pattern.search(str(event.data.get("text", ""))):
            return event.t, describe_event(run, event)
    return None


def conns_with_content(events: list[Event], message_id: str) -> dict[Any, float]:
    """Connection number -> when it carried the content of ``message_id``."""
    conns: dict[Any, float] = {}
    for event in events:
        if event.kind == "data" and event.data.get("message_id") == message_id:
            conns.setdefault(event.conn, event.t)
    return conns


def _find_close(
    run: Run, events: list[Event], by: str, conns: dict[Any, float] | None
) -> tuple[float, str] | None:
    """The first close of a proxied connection on the events' link (by ``server``,
    ``client`` or ``any`` side), only of the connections in ``conns`` if given."""
    for event in events:
        # the proxy's own record; the harness client notes its closes too (side=...)
        if event.kind != "close" or "side" in event.data:
            continue
        if conns is not None and event.conn not in conns:
            continue
        reason = str(event.data.get("reason", ""))
        if by == "any" or reason.startswith(by):
            return event.t, describe_event(run, event)
    return None


def matcher_text(matcher: dict[str, Any], run: Run | None = None) -> str:
    """The event a matcher names, in words ("mbx1 sent XSHADOW to mbx2")."""
    return describe_matcher(matcher, run).text


def matcher_phrase(matcher: dict[str, Any], run: Run | None = None) -> Phrase:
    """The event a matcher names: that it happened, never happened, had not yet."""
    return describe_matcher(matcher, run)


def why_not(run: Run, *matchers: dict[str, Any]) -> str:
    """What the links of matchers that never matched did see, once per link: "mbx1
    never opened an SMTP session to mbx2" (empty when no link is involved)."""
    facts: list[str] = []
    for matcher in matchers:
        if _members(matcher):
            fact = why_not(run, *_members(matcher))
        elif "link" in matcher and not matcher.get("opened") and find_event(run, matcher) is None:
            direction = matcher.get("direction") if "line" in matcher else None
            fact = session_fact(run, matcher["link"], direction)
        else:
            fact = ""
        if fact and fact not in facts:
            facts.append(fact)
    return "; ".join(facts)


def _members(matcher: dict[str, Any]) -> list[dict[str, Any]]:
    """The matchers an ``any_of`` or ``last_of`` groups; [] for any other matcher."""
    return list(matcher.get("any_of") or matcher.get("last_of") or [])


def matcher_links(run: Run, *matchers: dict[str, Any]) -> list[str]:
    links: list[str] = []
    for m in matchers:
        links += matcher_links(run, *_members(m))
        # the event a line is the first after (or last before) is part of the story
        links += matcher_links(run, *(m[k] for k in ("first_after", "last_before") if k in m))
        if "link" in m:
            links.append(m["link"])
        for key in ("reply", "delivered", "message"):
            if key in m:
                links += run.messages[m[key]].links(all_nodes=key != "reply")
    return sorted(set(links))


async def await_event(run: Run, matcher: dict[str, Any], within: float) -> None:
    """Wait (up to ``within``) for an event the history may not have yet: the steps do
    not wait for what the wire shows later, so a check must."""

    async def seen() -> bool:
        return find_event(run, matcher) is not None

    if not await seen():
        run.progress.waiting(within, f"until {matcher_text(matcher, run)}")
        await poll(seen, within)
