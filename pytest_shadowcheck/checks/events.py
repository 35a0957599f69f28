"""Finding things in a run's history, shared by the checks: the first event a matcher
names, how a matcher reads in prose, the copies a sink received, waiting for an event,
and a check's result with the SMTP lines around it.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

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
    "matcher_text",
    "poll",
    "result",
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


def deliveries(run: Run, ref: str, sink: str | None = None, by: str | None = None) -> list[Any]:
    msg = run.messages[ref]
    out = []
    for name, s in run.sinks.items():
        if sink and name != sink:
            continue
        for d in s.deliveries_for(msg.message_id):
            if by and not helo_is(d.helo, by):
                continue
            out.append((name, d))
    return out


def helo_is(helo: str | None, node: str) -> bool:
    if not helo:
        return False
    return helo == node or helo.split(".")[0] == node


def describe_deliveries(found: list[Any]) -> str:
    if not found:
        return "not delivered"
    parts = [f"{sink} at +{d.t:.2f}s by {d.helo} rcpt={','.join(d.rcpt_tos)}" for sink, d in found]
    return f"delivered {len(found)}x: " + "; ".join(parts)


def find_event(run: Run, matcher: dict[str, Any]) -> tuple[float, str] | None:
    """First history event matching ``matcher``: (t, description) or None."""
    if "any_of" in matcher:
        hits = [hit for each in matcher["any_of"] if (hit := find_event(run, each))]
        return min(hits, default=None)
    if "reply" in matcher:
        msg = run.messages[matcher["reply"]]
        if msg.reply_t is None:
            return None
        return msg.reply_t, f"the sender got {msg.code} {msg.text} for {matcher['reply']}"
    if "delivered" in matcher:
        found = deliveries(run, matcher["delivered"], matcher.get("to"))
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
    if matcher.get("opened"):
        opened = run.history.events(kind="connect", link=link)
        return (opened[0].t, f"{link} #{opened[0].conn} opened") if opened else None
    events = run.history.events(link=link)
    pattern = re.compile(matcher.get("line", ".*"))
    direction = matcher.get("direction")
    conns: dict[Any, float] | None = None
    if "message" in matcher:
        conns = conns_with_content(events, run.messages[matcher["message"]].message_id)
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


def conns_with_content(events: list[Event], message_id: str) -> dict[Any, float]:
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


def matcher_text(matcher: dict[str, Any]) -> str:
    if "any_of" in matcher:
        return " or ".join(matcher_text(each) for each in matcher["any_of"])
    if "reply" in matcher:
        return f"the sender's reply for {matcher['reply']}"
    if "delivered" in matcher:
        return f"delivery of {matcher['delivered']}"
    if "step" in matcher:
        return f"step /{matcher['step']}/"
    if "closed" in matcher:
        who = "" if matcher["closed"] == "any" else f" by the {matcher['closed']}"
        text = f"a connection on {matcher['link']} closed{who}"
    elif matcher.get("opened"):
        text = f"a connection opened on {matcher['link']}"
    else:
        text = f"/{matcher.get('line', '.*')}/ on {matcher['link']}"
    if "message" in matcher:
        text += f" after the content of {matcher['message']}"
    return text


def matcher_links(run: Run, *matchers: dict[str, Any]) -> list[str]:
    links: list[str] = []
    for m in matchers:
        if "any_of" in m:
            links += matcher_links(run, *m["any_of"])
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
        run.progress.waiting(within, f"for {matcher_text(matcher)}")
        await poll(seen, within)
