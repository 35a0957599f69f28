"""CR-2: the copy travels over a new SMTP session from the primary to the shadow, opened
while the sender's session is still open - the shadow session belongs to the sender's
session: every message of one sender session copied to one shadow goes over that one
session (as the hand-written cr2_one_shadow_session_for_a_sender_session reads it).

Judged from the wire alone, for the harness's own sender sessions: a message's copy is
its content on a link from the node the sender talks to (the primary) to another node,
before the sender's reply to that content. The session carrying it must have opened
after the sender's session did, and before that reply. A later message of the same sender
session, copied to the same shadow over another session, is a divergence unless the first
one may rightly have ended: idle for the primary's SendConnectionInactivityTimeout, older
than the shadow's ReceiveConnectionTimeout, refused or ended by the shadow, or a fault or
outage of either node or the link between them meanwhile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.history import History

__all__ = ["shadow_session_rule"]

_FINAL = re.compile(r"^\d{3}(?:\s|$)")
#: a connector's session limit a scenario does not set: Exchange's 10 minutes
_DEFAULT_LIMIT = 600.0


@dataclass
class _Conn:
    link: str
    conn: int | None
    opened: float
    closed: float | None = None
    #: who ended it, as the proxy saw it
    reason: str = ""
    #: (t, kind, direction, text or ref): every line and content, in order
    events: list[tuple[float, str, str, str]] = field(default_factory=list)

    @property
    def ends(self) -> tuple[str, str]:
        client, _, server = self.link.partition("->")
        return client, server


def _conns(history: History) -> list[_Conn]:
    out: dict[tuple[str, int | None], _Conn] = {}
    for e in history.events():
        if e.kind not in ("connect", "line", "data", "close") or not e.link:
            continue
        c = out.setdefault((e.link, e.conn), _Conn(e.link, e.conn, e.t))
        if e.kind == "close":
            c.closed = e.t if c.closed is None else c.closed
            c.reason = str(e.data.get("reason", ""))
        elif e.kind == "line":
            c.events.append((e.t, "line", e.direction or "", str(e.data.get("text", ""))))
        elif e.kind == "data":
            trace = str(e.data.get("trace") or "")
            c.events.append((e.t, "data", e.direction or "", trace.rsplit(".", 1)[0]))
    return sorted(out.values(), key=lambda c: c.opened)


@dataclass
class _Message:
    ref: str
    #: when its content arrived, and the sender's reply to it
    t_data: float
    t_reply: float
    #: shadow -> (its first copy's time, the connection carrying it)
    copies: dict[str, tuple[float, _Conn]] = field(default_factory=dict)


def _accepted(c: _Conn) -> list[_Message]:
    """The messages a sender's session carried and got a 250 for."""
    out: list[_Message] = []
    pending: tuple[float, str] | None = None
    for t, kind, direction, text in c.events:
        if kind == "data" and text:
            pending = (t, text)
        elif pending and kind == "line" and direction == "s2c" and _FINAL.match(text):
            if text.startswith("250"):
                out.append(_Message(pending[1], pending[0], t))
            pending = None
    return out


def shadow_session_rule(j: Judge, history: History) -> None:
    nodes = set(j.tl.scenario.topology.nodes)
    conns = _conns(history)
    peer = [c for c in conns if c.ends[0] in nodes and c.ends[1] in nodes]
    for sender in conns:
        client, via = sender.ends
        if client != "client" or via not in nodes:
            continue
        messages = _accepted(sender)
        for m in messages:
            for c in peer:
                if c.ends[0] != via:
                    continue
                for t, kind, _d, ref in c.events:
                    if kind == "data" and ref == m.ref and t <= m.t_reply:
                        m.copies.setdefault(c.ends[1], (t, c))
                        break
        for m in messages:
            for shadow, (t, c) in m.copies.items():
                if _opened_outside(j, sender, m, shadow, t, c):
                    return
        for i, first in enumerate(messages):
            for later in messages[i + 1 :]:
                for shadow, (_t, c1) in first.copies.items():
                    if shadow in later.copies and _second_session(
                        j, sender, first, later, shadow, c1, later.copies[shadow][1]
                    ):
                        return


def _opened_outside(j: Judge, sender: _Conn, m: _Message, shadow: str, t: float, c: _Conn) -> bool:
    """The copy's session opened before the sender's (the copy is taken before the
    sender's reply, so its session opened before that too)."""
    j.exercised["CR-2"] += 1
    if sender.opened <= c.opened:
        return False
    via = sender.ends[1]
    j.diverged(
        "CR-2",
        f"{via} copies {m.ref} to {shadow} over a new session, opened while the sender's "
        f"session (opened at {j.when(sender.opened)}) is open",
        f"the copy of {m.ref} reached {shadow} at {j.when(t)} over the session {c.link} "
        f"opened at {j.when(c.opened)}, before the sender's session",
        t,
    )
    return True


def _second_session(
    j: Judge, sender: _Conn, first: _Message, later: _Message, shadow: str, c1: _Conn, c2: _Conn
) -> bool:
    if c1 is c2 or c2.opened <= c1.opened:
        return False
    via = sender.ends[1]
    if _may_have_ended(j, via, shadow, c1, c2.opened):
        return False
    j.exercised["CR-2"] += 1
    ended = (
        f"after {via} closed it at {j.when(c1.closed)}"
        if c1.closed is not None and c1.closed <= c2.opened
        else "while it was still open"
    )
    j.diverged(
        "CR-2",
        f"{via} copies every message of one sender session to {shadow} over the one shadow "
        f"session that belongs to it: {first.ref} went over {c1.link} opened at "
        f"{j.when(c1.opened)}, and nothing ended that session before {later.ref}'s copy",
        f"{via} copied {later.ref}, of the same sender session, over another session to "
        f"{shadow} opened at {j.when(c2.opened)}, {ended}",
        c2.opened,
    )
    return True


def _may_have_ended(j: Judge, via: str, shadow: str, c1: _Conn, at: float) -> bool:
    """Whether the session ``c1`` may rightly have ended by ``at``."""
    tl = j.tl
    a = c1.opened
    if (
        tl.node_states(via, a, at) != {"up"}
        or tl.node_states(shadow, a, at) != {"up"}
        or tl.link_states(c1.link, a, at) != {"ok"}
    ):
        return True
    said = [e for e in c1.events if e[0] <= at]
    quit_ = any(d == "c2s" and text.upper().startswith("QUIT") for _t, _k, d, text in said)
    if c1.closed is not None and c1.closed <= at and not quit_ and c1.reason != "client closed":
        return True  # the shadow ended it, or the link did, not the primary
    if any(d == "s2c" and text[:1] in ("4", "5") for _t, _k, d, text in said):
        return True
    last = max([a, *(e[0] for e in said)])
    _, most = tl.timer_elapsed(last, at)
    _, lived = tl.timer_elapsed(a, at)
    limits = (
        (via, "SendConnectionInactivityTimeout", most, last),
        (shadow, "ReceiveConnectionInactivityTimeout", most, last),
        (shadow, "ReceiveConnectionTimeout", lived, a),
    )
    for node, name, passed, since in limits:
        values = {_DEFAULT_LIMIT if v is None else v for v in tl.setting(node, name, since, at)}
        if not all(isinstance(v, int | float) for v in values) or passed >= min(values):
            return True
    return False
