"""Why a workload message was delivered more than once, from its history: a promotion
after a fault of the primary, a redelivery by a node after a fault of its own, or after a
reply to its first delivery it may never have read (RFC 5321 6.1). A duplicate with none
of these is the MTA's: the workload checker's FAIL."""

from __future__ import annotations

from collections import Counter, defaultdict
from itertools import pairwise
from math import inf
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.lateness import said

if TYPE_CHECKING:
    from collections.abc import Callable

    from pytest_shadowcheck.checks.workload_records import Fate, Window
    from pytest_shadowcheck.history import Event, History

__all__ = [
    "CLIENT_RESET",
    "LATE_REPLY",
    "cause_kind",
    "duplicate_cause",
    "unanswered_connection",
    "unread_reply",
]


def cause_kind(cause: str) -> str:
    """The cause without its particulars (the times, the figures in parentheses): what
    a workload's duplicates are counted by ("redelivery by mbx2 after a reply it may not
    have read; PR-1 promotion after mbx1 gave up on its connection to mbx2 while the
    machine ran late")."""
    return "; ".join(part.split(" (")[0] for part in cause.split("; "))


def duplicate_cause(
    fate: Fate,
    faults: list[Window],
    unread: Callable[[Fate, str], str | None],
    unanswered: Callable[[Fate, str], str | None],
) -> str:
    """Why the message was delivered more than once, from the faults during its life:
    copies from two nodes need a fault of the primary (a promotion); a node delivering
    one recipient twice needs a fault of its own (a restart, a broken next-hop link) or
    a reply to its first delivery it may never have read (RFC 5321 6.1)."""
    last = max(t for t, _, _ in fate.deliveries)
    during = [w for w in faults if w.meets(fate.sent, last)]
    per_node = Counter((helo.split(".")[0], rcpt) for _, helo, rcpt in fate.deliveries)
    by = sorted({node for node, _ in per_node})
    reasons = []
    if len(by) > 1:
        primary_faults = [w for w in during if w.touches(fate.via)]
        if primary_faults:
            w = primary_faults[0]
            reasons.append(
                f"{'PR-2' if w.kind == 'wipe' else 'PR-1'} promotion after {w.kind} of {fate.via}"
            )
        else:
            # no fault the nemesis made, but the shadow's own view of the primary counts:
            # a primary too slow to greet its shadow was unreachable to it (PR-1)
            seen = [why for node in by if node != fate.via and (why := unanswered(fate, node))]
            if not seen:
                return "delivered by " + " and ".join(by) + " with no fault of the primary"
            reasons.append(f"PR-1 promotion after {seen[0]}")
    for node in sorted({node for (node, _), n in per_node.items() if n > 1}):
        if node != fate.via and (why := _promoted_copies(fate, node, faults)) is not None:
            reasons.append(why)
            continue
        # a wiped node has no queue left to deliver from again: its wipe explains a copy
        # promoted by its peer, never a second delivery of its own; and a fault explains
        # a delivery again only when it met the exchange of the one before (a pause long
        # before the first delivery interrupted nothing that delivery ended)
        own = _between_deliveries(fate, node, [w for w in during if w.kind != "wipe"])
        restarts = [
            w for w in own if w.kind in ("kill", "restart", "power_cut") and node in w.nodes
        ]
        links = [w for w in own if w.links]
        if restarts:
            kind = restarts[0].kind
            reasons.append(f"PR-3 redelivery after {kind} of {node} (restart on the same queue)")
        elif links:
            reasons.append(
                f"redelivery by {node} after {links[0].kind} of {', '.join(links[0].links)}"
            )
        elif own:
            reasons.append(f"redelivery by {node} after {own[0].kind} of {node}")
        elif (why := unread(fate, node)) is not None:
            reasons.append(f"redelivery by {node} after {why}")
        else:
            return f"delivered twice by {node} with no fault"
    return "; ".join(reasons)


def _delivered_at(fate: Fate, node: str) -> dict[str, list[float]]:
    """When ``node`` delivered the message, by recipient."""
    per_rcpt: dict[str, list[float]] = defaultdict(list)
    for t, helo, rcpt in fate.deliveries:
        if helo.split(".")[0] == node:
            per_rcpt[rcpt].append(t)
    return per_rcpt


#: how long before a node's delivery a fault of its own can have met the exchange that
#: delivery ended (a pause as the content went out: the node then timed out the reply)
BEFORE_DELIVERY = 0.5


def _between_deliveries(fate: Fate, node: str, faults: list[Window]) -> list[Window]:
    """The faults touching ``node`` that can explain each of its deliveries after the
    first to one recipient: every such delivery needs one that met the span from just
    before the node's previous delivery to it; none if one delivery has none."""
    own = [w for w in faults if w.touches(node)]
    found: list[Window] = []
    for times in _delivered_at(fate, node).values():
        for earlier, later in pairwise(sorted(times)):
            met = [w for w in own if w.meets(earlier - BEFORE_DELIVERY, later)]
            if not met:
                return []
            found += [w for w in met if w not in found]
    return sorted(found, key=lambda w: w.start)


def _promoted_copies(fate: Fate, node: str, faults: list[Window]) -> str | None:
    """Why a shadow delivered one recipient more than once, when each delivery is the
    promotion of a copy of its own (PR-1): the primary offered the copy again after a
    fault of its own interrupted the exchange (its pause, say, while the 250 was on its
    way: it cannot know the copy was stored), the shadow had delivered the copy before
    (it holds no other copy of that message to match the new one with), and before each
    delivery a fault of the primary let the shadow promote the copy it then held. A copy
    offered again with no fault of the primary between, a copy offered again while the
    shadow still held one, or a copy delivered twice, is no cause."""
    offered = sorted(fate.offered.get(node, []))
    of_primary = [w for w in faults if w.touches(fate.via) and w.kind != "wipe"]

    def fault_between(since: float, until: float) -> Window | None:
        return next((w for w in of_primary if w.meets(since, until)), None)

    if len(offered) < 2 or any(fault_between(a, b) is None for a, b in pairwise(offered)):
        return None
    for times in _delivered_at(fate, node).values():
        last = -inf
        for delivered_t in sorted(times):
            # the copy this delivery promoted came after the previous delivery
            copy_t = next((c for c in offered if last < c < delivered_t), None)
            if copy_t is None or fault_between(copy_t, delivered_t) is None:
                return None
            last = delivered_t
    w = fault_between(offered[0], offered[-1])
    assert w is not None  # two copies or more, each later one after a fault
    return (
        f"PR-1 promotion by {node} of each of the {len(offered)} copies {fate.via} offered "
        f"it ({fate.via} offered it again after its {w.kind} interrupted the exchange)"
    )


#: the harness's own lateness (seconds) that makes an unanswered-looking reply plausible
LATE_REPLY = 0.1


def unread_reply(history: History, sent: Event, timeout: float | None = None) -> str | None:
    """Why the node may not have read the reply to the content ``sent`` (a ``data``
    event on its link to a next hop), when the history says so: it closed the connection
    before any reply, or the reply came while the harness itself ran late, or as the
    node's own ``timeout`` (its SendConnectionInactivityTimeout) ran out, and the node
    sent nothing more on that connection (it gave up waiting and dropped it)."""
    node = str(sent.link).partition("->")[0]
    on_conn = [
        e
        for e in history.events(link=sent.link, since=sent.t)
        if e.conn == sent.conn and e.kind in ("line", "close")
    ]
    reply = next((e for e in on_conn if e.kind == "line" and e.direction == "s2c"), None)
    closed = next((e for e in on_conn if e.kind == "close"), None)
    if reply is None or (closed is not None and closed.t < reply.t):
        return "a lost reply (the connection closed before any reply to its message content)"
    if not str(reply.data.get("text", "")).startswith("2"):
        return None
    if any(e.kind == "line" and e.direction == "c2s" and e.t >= reply.t for e in on_conn):
        return None  # the node went on with the session: it read the reply
    # the node may have sent its content as soon as it read the 354 (or the reply
    # before it): a harness late in between records the content late, and the node's
    # wait for the 250 began before that record
    before = [
        e
        for e in history.events(link=sent.link, until=sent.t)
        if e.conn == sent.conn and e.kind == "line" and e.direction == "s2c"
    ]
    began = before[-1].t if before else sent.t
    if (
        timeout is not None
        and closed is not None
        and closed.data.get("reason") == "client closed"
        and closed.t - began >= timeout
        and closed.t - reply.t <= LATE_REPLY
    ):
        # the node's wait began once it read the go-ahead (not before the harness relayed
        # it), so a close a timeout after it is that timer running out, the 250 then in
        # flight: a node slow to send its content (a loop blocked on the disk) counts
        # that time against the next hop too
        return (
            f"a reply that came as its SendConnectionInactivityTimeout ran out (the 250 "
            f"came {reply.t - began:.3f}s after the server's go-ahead for {node}'s message "
            f"content, its timeout {timeout:g}s, and {node} closed the connection "
            f"{closed.t - reply.t:.3f}s later without another command)"
        )
    late = history.lag(began, closed.t if closed is not None else reply.t)
    if late < LATE_REPLY:
        return None
    return (
        f"a reply it may not have read (the harness ran {late:.3f}s late between the "
        f"server's go-ahead for {node}'s message content and the 250 "
        f"{reply.t - began:.3f}s after it, and {node} sent nothing more on that connection)"
    )


#: how the proxy records a client that reset its connection (an SMTP client library
#: aborting on its read timeout does so: aiosmtplib's SMTPReadTimeoutError)
CLIENT_RESET = "client error: ConnectionResetError"


def unanswered_connection(
    history: History,
    link: str,
    since: float,
    until: float,
    timeout: float | None = None,
    client_down: Callable[[float], bool] = lambda t: False,
) -> str | None:
    """A connection on ``link`` (a shadow's to its primary) opened within ``[since,
    until]`` on which the client gave up waiting for the server: it closed it with no
    answer at all, or, while the machine ran late (the harness relaying late, a node
    waiting for a CPU), without another command after waiting for a reply (as long as
    its ``timeout``, its SendConnectionInactivityTimeout, when known). To that client the
    server was unreachable, whatever the nemesis did. A close is the client's when it
    closed or reset the connection, a reset only while ``client_down(t)`` is false (a
    node killed or losing power resets its connections too, and gave up on nothing)."""
    opened: dict[object, float] = {}
    asked: dict[object, tuple[float, str]] = {}  # the client's last command: when, what
    answered: dict[object, float] = {}  # the server's last line after that command
    for event in history.events(link=link, since=since, until=until):
        conn = event.conn
        if event.kind == "connect":
            opened[conn] = event.t
            asked[conn] = (event.t, "connection")
        elif event.kind == "line" and event.direction == "c2s" and conn in opened:
            asked[conn] = (event.t, str(event.data.get("text", "")).split(" ")[0])
            answered.pop(conn, None)
        elif event.kind == "data" and conn in opened:
            asked[conn] = (event.t, "message content")
            answered.pop(conn, None)
        elif event.kind == "line" and event.direction == "s2c" and conn in opened:
            answered[conn] = event.t
        elif (
            event.kind == "close"
            and conn in opened
            # a deliberate close after a wait, not a client killed as it connected
            and _closed_by_client(str(event.data.get("reason", "")), event.t, client_down)
        ):
            why = _gave_up(
                history, link, opened[conn], asked[conn], answered.get(conn), event.t, timeout
            )
            if why is not None:
                return why
    return None


def _closed_by_client(reason: str, t: float, client_down: Callable[[float], bool]) -> bool:
    return reason == "client closed" or (reason.startswith(CLIENT_RESET) and not client_down(t))


def _gave_up(
    history: History,
    link: str,
    opened: float,
    asked: tuple[float, str],
    answered: float | None,
    closed: float,
    timeout: float | None,
) -> str | None:
    """Why the client's close at ``closed`` was giving up on the server, if it was."""
    client, server = link.split("->")
    (t, what), began = asked, f"at +{opened:.3f}s"
    if answered is None and what == "connection":
        if closed - t < LATE_REPLY:
            return None
        return (
            f"{server} left {client}'s connection unanswered ({began} for "
            f"{closed - t:.3f}s, until {client} gave up: to {client}, {server} was "
            "unreachable)"
        )
    if what.upper() == "QUIT":
        return None  # the session's own end
    # a harness late before ``t`` stamped the command (or the connection) late, after
    # the client's timer had started
    late = history.lateness(t - (timeout or 0.0), closed)
    if late.total < LATE_REPLY:
        return None
    if timeout is not None and closed - t + late.total < timeout - LATE_REPLY:
        return None  # no timer of the client's ran out: it closed for a reason of its own
    waited = f"{server}'s greeting" if what == "connection" else "whose reply"
    after = "opening it" if what == "connection" else f"its {what}"
    came = "never came" if answered is None else f"came {answered - t:.3f}s after it"
    return (
        f"{client} gave up on its connection to {server} while the machine ran late "
        f"({began}: {client} closed it, without another command, {closed - t:.3f}s after "
        f"{after}, {waited} {came}, while {said(late)}: to {client}, {server} was "
        "unreachable)"
    )
