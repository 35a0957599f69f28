"""Rules read from the SMTP sessions themselves: the order of the shadow's and the
sender's acknowledgements (CR-3), and who is offered XSHADOW in EHLO (XS-1).

Times come from one recording clock: a proxy records a line before it forwards it, so
a line recorded first was sent first.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["ack_order_rule", "advertisement_rule"]

_FINAL = re.compile(r"^\d{3}(?:\s|$)")
_XSHADOW = re.compile(r"^250[- ]XSHADOW\b", re.IGNORECASE)
_EHLO = re.compile(r"^EHLO\b", re.IGNORECASE)


def _reply_after(lines: list[tuple[float, str, str]], t: float) -> tuple[float, str] | None:
    """The server's first whole reply line at or after ``t`` (the last of a multi-line
    reply): what answered the command or content sent just before."""
    for at, direction, text in lines:
        if at >= t and direction == "s2c" and _FINAL.match(text):
            return at, text
    return None


def ack_order_rule(j: Judge, m: Sent) -> None:
    """CR-3: the shadow's 250 to the copy's final dot comes before the sender's 250.

    Judged for a copy whose session ``m.via`` opened to one of its shadows while the
    sender waited (or within the slack after its 250: a copy sent late is the fault),
    both ends up and linked throughout, no resubmission about (which copies anew)."""
    if not m.accepted or m.t_reply is None or not j.sink_of(m):
        return  # relayed through another node: its later sessions are not copies
    late = m.t_reply + j.slack
    if any(s.step.kind == "resubmit" and s.t <= late for s in j.tl.steps):
        return
    shadows = j.candidates(m.via, m.t_send, m.t_reply)
    copied = False
    unanswered: list[tuple[float, str]] = []
    for t, link, conn, ref in j.obs.contents:
        client, _, server = link.partition("->")
        if ref != m.ref or client != m.via or server not in shadows:
            continue
        lines = j.obs.sessions.get((link, conn), [])
        began = lines[0][0] if lines else t
        if not m.t_send <= began <= late:
            continue
        answer = _reply_after(lines, t)
        if answer is None:
            unanswered.append((t, server))  # a fault on the link is no excuse here
        if j.tl.changed(m.t_send, late, {m.via, server}, hops=False):
            continue
        copied = True
        if answer is None or not answer[1].startswith("250"):
            continue  # refused or never answered: no acknowledgement to order
        j.exercised["CR-3"] += 1
        if answer[0] < m.t_reply:
            continue
        j.diverged(
            "CR-3",
            f"{m.via} tells the sender 250 for {m.ref} only once {server} has acknowledged the "
            f"shadow copy",
            f"{m.via} told the sender `250 {m.text}` at +{m.t_reply:.3f}s, and {server} "
            f"acknowledged the copy only at +{answer[0]:.3f}s (`{answer[1]}`)",
            answer[0],
        )
        return
    if not copied:
        _no_copy_rule(j, m, m.t_reply, shadows, late)
    if unanswered:
        _unacknowledged_copy_rule(j, m, unanswered[0])


def _acknowledged(j: Judge, m: Sent) -> bool:
    """Whether a node acknowledged a copy of ``m`` (a 250 to its content) before the
    sender's 250, on any session ``m.via`` opened to another node."""
    for t, link, conn, ref in j.obs.contents:
        if ref != m.ref or link.partition("->")[0] != m.via or m.t_reply is None:
            continue
        answer = _reply_after(j.obs.sessions.get((link, conn), []), t)
        if answer is not None and answer[1].startswith("250") and answer[0] < m.t_reply:
            return True
    return False


def _unacknowledged_copy_rule(j: Judge, m: Sent, lost: tuple[float, str]) -> None:
    """CR-3 (and CR-4): a copy whose acknowledgement never came is not a copy the
    primary may count: with RejectMessageOnShadowFailure true it makes another, or
    answers 451, before a 250 (a shadow's reply lost on the wire)."""
    assert m.t_reply is not None
    a, b = m.t_send, m.t_reply
    if j.tl.node_states(m.via, a, b) != {"up"}:
        return
    if j.tl.setting(m.via, "RejectMessageOnShadowFailure", a, b) != {True}:
        return  # it may accept without a copy after failed attempts (CR-5)
    if j.tl.setting(m.via, "ShadowRedundancyEnabled", a, b) != {True}:
        return
    j.exercised["CR-3"] += 1
    if _acknowledged(j, m):
        return
    t, server = lost
    j.diverged(
        "CR-3",
        f"{m.via} tells the sender 250 for {m.ref} only once a shadow has acknowledged a "
        f"copy: RejectMessageOnShadowFailure is true, so a copy whose acknowledgement "
        f"never came is made again, or the sender is told 451",
        f"{m.via} sent {m.ref}'s copy to {server} (its final dot at {j.when(t)}), {server}'s "
        f"reply to it never came, and {m.via} told the sender `250 {m.text}` at "
        f"{j.when(b)} with no acknowledged copy",
        b,
    )


def _no_copy_rule(j: Judge, m: Sent, replied: float, shadows: set[str], late: float) -> None:
    """CR-1: a message acknowledged while a shadow was surely reachable, redundancy on
    and nothing changing, went to a shadow before the 250: its content on a session
    the primary opened to one while the sender waited (the wire is the one view of the
    copy every target gives)."""
    if not shadows or j.tl.changed(m.t_send, late, {m.via, *shadows}, hops=False):
        return
    if j.tl.setting(m.via, "ShadowRedundancyEnabled", m.t_send, late) != {True}:
        return
    if j.copy_possible(m.via, m.t_send, late) != {True}:
        return
    j.exercised["CR-1"] += 1
    j.diverged(
        "CR-1",
        f"{m.via} copies {m.ref} to {' or '.join(sorted(shadows))} before it tells the "
        f"sender 250: shadow redundancy is on and the shadow was up and reachable",
        f"{m.via} told the sender `250 {m.text}` at {j.when(replied)}, and by "
        f"{j.when(late)} it had sent no copy of {m.ref} to "
        f"{' or '.join(sorted(shadows))} in a session opened while the sender waited",
        replied,
    )


def _ehlo_replies(
    lines: list[tuple[float, str, str]],
) -> list[tuple[float, bool, list[str]]]:
    """Each EHLO's reply in a session: (t of its last line, whether a successful AUTH
    came before it, its lines)."""
    out: list[tuple[float, bool, list[str]]] = []
    authorised = asked = False
    block: list[str] = []
    for at, direction, text in lines:
        if direction == "c2s":
            asked = bool(_EHLO.match(text))
            block = []
            continue
        if text.startswith("235"):
            authorised = True
        if not asked:
            continue
        block.append(text)
        if _FINAL.match(text):
            if text.startswith("250"):
                out.append((at, authorised, block))
            asked, block = False, []
    return out


def _same_boundary(j: Judge, a: str, b: str) -> bool:
    """Whether nodes ``a`` and ``b`` share a shadow redundancy boundary: one DAG, or
    outside any DAG one site."""
    nodes = j.tl.scenario.topology.nodes
    x, y = nodes[a], nodes[b]
    return x.dag == y.dag if x.dag is not None else y.dag is None and x.site == y.site


def advertisement_rule(j: Judge) -> None:
    """XS-1: XSHADOW is advertised in EHLO only when shadow redundancy is enabled and the
    session is authorised: never to the harness's anonymous sender; to a peer node that
    authenticated, whenever the answering node's ShadowRedundancyEnabled is true (the
    other half, never while it is false, is CR-6's)."""
    nodes = j.tl.scenario.topology.nodes
    for (link, _conn), lines in sorted(j.obs.sessions.items(), key=lambda kv: kv[1][0][0]):
        client, _, server = link.partition("->")
        began = lines[0][0]
        for t, authorised, block in _ehlo_replies(lines):
            offered = any(_XSHADOW.match(text) for text in block)
            if client == "client" and not authorised:
                j.exercised["XS-1"] += 1
                if offered:
                    j.diverged(
                        "XS-1",
                        f"{server} does not advertise XSHADOW to an anonymous sender: the "
                        f"session is not authorised for it",
                        f"{server} answered the sender's EHLO with "
                        f"`{next(x for x in block if _XSHADOW.match(x))}` at {j.when(t)}",
                        t,
                    )
                    return
                continue
            if client not in nodes or not authorised or not _same_boundary(j, client, server):
                continue
            # a change made live reaches the node within the slack of its step
            enabled = j.tl.setting(server, "ShadowRedundancyEnabled", began - j.slack, t)
            if enabled != {True}:
                continue
            j.exercised["XS-1"] += 1
            if offered:
                continue
            j.diverged(
                "XS-1",
                f"{server} advertises XSHADOW to {client}, a peer authenticated in its "
                f"boundary: its ShadowRedundancyEnabled is true",
                f"{server} answered {client}'s EHLO after AUTH without XSHADOW at "
                f"{j.when(t)}: " + " | ".join(f"`{x}`" for x in block),
                t,
            )
            return
