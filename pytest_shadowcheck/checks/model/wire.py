"""Rules read from what the wire shows of sessions and discard answers: the idle and
absolute session limits (TO-1, TO-2, TO-4), a message acknowledged in a session the
node then ends (CR-8), a stranger's shadow verbs (XS-3), and the discard notifications a
primary hands out (DI-1, DI-3).

A session is known by its link and connection number; its activity is every line, every
message content and its opening and closing, each recorded by the proxy on one clock. A
discard notification names the primary's own message id, which the primary gave the
shadow in ``XSHADOWCOPY <id> ...`` on the copy's session (docs/protocol.md), so the wire
alone says which message and which shadow a notification is for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.replay import COPY_LINE, Delivery, Sent

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.scenario.model import Step

__all__ = [
    "COPY_LINE",
    "KNOWN_SETTINGS",
    "OUTAGES",
    "QUERY_LINE",
    "DiscardPage",
    "Session",
    "discard_pages",
    "modelled_step",
    "sessions_of",
    "wire_rules",
]

#: the settings these rules read; a scenario giving them leaves the model's other rules
#: as they are (an inactivity limit ends idle sessions only)
KNOWN_SETTINGS = frozenset({"ReceiveConnectionInactivityTimeout", "ReceiveConnectionTimeout"})

_FINAL = re.compile(r"^\d{3}(?:\s|$)")
_SHADOW_VERB = re.compile(r"^(XSHADOW|XSHADOWCOPY|XQDISCARD)\b", re.IGNORECASE)
QUERY_LINE = re.compile(r"^XQDISCARD\b", re.IGNORECASE)
_ACK = re.compile(r"^XQDISCARD\b.*\bACK\s*$", re.IGNORECASE)
_DISCARD = re.compile(r"^250[- ]DISCARD\s+(\S+)", re.IGNORECASE)
#: the steps after which a node may have lost what it held (its queue or its memory)
OUTAGES = frozenset({"kill", "power_cut", "wipe", "restart"})


def modelled_step(step: Step) -> bool:
    """Whether the model follows ``step`` beyond the kinds it models: a harness session
    (its lines are judged here; its own message, if any, the model leaves to the
    invariants, and a control twin says only stand-in verbs)."""
    return step.kind == "session"


@dataclass
class Session:
    link: str
    conn: int | None
    #: (t, what, direction, text): what is connect, line, data, shutdown (the client
    #: ended its side; the proxy sees the close only once the server answers) or close
    events: list[tuple[float, str, str, str]] = field(default_factory=list)

    @property
    def ends(self) -> tuple[str, str]:
        client, _, server = self.link.partition("->")
        return client, server

    def closed(self) -> bool:
        return any(what == "close" for _, what, _, _ in self.events)


def sessions_of(history: History) -> list[Session]:
    out: dict[tuple[str, int | None], Session] = {}
    for e in history.events():
        if e.kind not in ("connect", "line", "data", "shutdown", "close") or not e.link:
            continue
        s = out.setdefault((e.link, e.conn), Session(e.link, e.conn))
        text = str(e.data.get("text", e.data.get("trace", "")))
        s.events.append((e.t, e.kind, e.direction or "", text))
    return sorted(out.values(), key=lambda s: s.events[0][0])


def wire_rules(j: Judge, history: History) -> list[Session]:
    """Apply the rules; the sessions, for the rules of other modules."""
    sessions = sessions_of(history)
    idle_rule(j, sessions)
    stranger_rule(j, sessions)
    discard_rules(j, sessions)
    session_message_rule(j, sessions, history)
    return sessions


# -- TO-1, TO-2, TO-4: idle and absolute session limits ------------------------------


def _limit(j: Judge, node: str, name: str, a: float, b: float) -> float | None:
    values = j.tl.setting(node, name, a, b)
    if not values or not all(isinstance(v, int | float) for v in values):
        return None
    return float(max(values))


def _steady(j: Judge, node: str, link: str, a: float, b: float) -> bool:
    """``node`` up and ``link`` healthy over ``[a, b]``: any silence is the node's."""
    return j.tl.node_states(node, a, b) == {"up"} and j.tl.link_states(link, a, b) == {"ok"}


def idle_rule(j: Judge, sessions: list[Session]) -> None:
    """TO-2: a node's outbound session, idle after the other end's reply longer than its
    SendConnectionInactivityTimeout (plus the slack), is closed by it. TO-4: while a
    sender waits on a primary, a shadow that does not answer the copy's session is a
    failed attempt, not a wait: by then the primary closed the session, tried again or
    answered its sender. TO-1: the harness's inbound session is closed when the sender
    is silent longer than ReceiveConnectionInactivityTimeout, and no session lasts
    longer than ReceiveConnectionTimeout."""
    nodes = set(j.tl.scenario.topology.nodes)
    for s in sessions:
        client, server = s.ends
        if client in nodes:
            _outbound(j, sessions, s, client, server, nodes)
        elif client == "client" and server in nodes:
            _inbound(j, s, server)


def _silences(j: Judge, s: Session) -> list[tuple[tuple[float, str, str, str], float]]:
    """Each event of the session with when the next one came (the run's end if none)."""
    out = []
    for i, event in enumerate(s.events):
        if event[1] == "close":
            break
        nxt = s.events[i + 1][0] if i + 1 < len(s.events) else j.tl.end
        out.append((event, nxt))
    return out


def _outbound(
    j: Judge, sessions: list[Session], s: Session, client: str, server: str, nodes: set[str]
) -> None:
    judged = copying = False
    for (t, what, direction, text), nxt in _silences(j, s):
        if what == "shutdown":
            break  # the client ended the session: it waits on nothing more
        limit = _limit(j, client, "SendConnectionInactivityTimeout", t, nxt)
        if limit is None or not _steady(j, client, s.link, t, nxt):
            continue
        due = t + limit + j.slack
        if what == "line" and direction == "s2c":
            # the client's turn: it has nothing more to say, so it closes the session
            judged = True
            if nxt <= due:
                continue
            j.diverged(
                "TO-2",
                f"{client} closes its session to {server} once it has been idle "
                f"SendConnectionInactivityTimeout ({limit:g} s)",
                f"after {server} said `{text}` at {j.when(t)} the session {s.link} stayed "
                + (
                    "open and silent until the run ended"
                    if not s.closed() and nxt >= j.tl.end
                    else f"silent to {j.when(nxt)}"
                ),
                due,
            )
            break
        if server in nodes and _sending(j, client, t):
            # the shadow's turn while the sender waits: the copy attempt must be given up
            copying = True
            if not _stalled(j, sessions, client, server, t, nxt, due):
                continue
            after = "the connection opened" if what == "connect" else f"`{text}`"
            j.diverged(
                "TO-4",
                f"{client} gives up the copy's session to {server} once {server} has not "
                f"answered for SendConnectionInactivityTimeout ({limit:g} s), and counts it "
                f"as a failed shadow attempt (then CR-4 / CR-5)",
                f"{server} said nothing after {after} at {j.when(t)}, and {client} neither "
                f"closed the session, nor tried again, nor answered its sender by "
                f"{j.when(due)}",
                due,
            )
            j.exercised["TO-4"] += 1
            return
    if judged:
        j.exercised["TO-2"] += 1
    if copying:
        j.exercised["TO-4"] += 1


def _stalled(
    j: Judge, sessions: list[Session], client: str, server: str, t: float, nxt: float, due: float
) -> bool:
    """Whether ``client``, waiting on its copy session to ``server`` since ``t``, still
    did nothing by ``due``: no word on the session, no end to it, no session to another
    node (a copy tried elsewhere), no reply to a sender. A new session to the silent
    server is no sign: heartbeats to it go on, and a retry would end this one first."""
    if nxt <= due or due >= j.tl.end:
        return False
    if any(
        m.via == client and m.t_reply is not None and t <= m.t_reply <= due
        for m in j.obs.sent.values()
    ):
        return False
    elsewhere = {
        f"{client}->{n}" for n in j.tl.scenario.topology.nodes if n not in (client, server)
    }
    return not any(t < o.events[0][0] <= due for o in sessions if o.link in elsewhere)


def _sending(j: Judge, node: str, t: float) -> bool:
    """Whether a sender was waiting on ``node`` at ``t`` (a copy's session)."""
    return any(
        m.via == node and m.t_send <= t <= (m.t_reply if m.t_reply is not None else m.t_next)
        for m in j.obs.sent.values()
    )


def _inbound(j: Judge, s: Session, server: str) -> None:
    silences = _silences(j, s)
    judged = False
    for (t, _what, direction, text), nxt in silences:
        if direction != "s2c":
            continue  # the node's turn: not the sender's silence
        limit = _limit(j, server, "ReceiveConnectionInactivityTimeout", t, nxt)
        if limit is None or not _steady(j, server, s.link, t, nxt):
            continue
        judged = True
        if nxt - t <= limit + j.slack:
            continue
        j.exercised["TO-1"] += 1
        j.diverged(
            "TO-1",
            f"{server} closes a session whose sender stays silent longer than "
            f"ReceiveConnectionInactivityTimeout ({limit:g} s)",
            f"after {server} said `{text}` at {j.when(t)} the sender said nothing, and the "
            f"session was still open at {j.when(nxt)}",
            t + limit + j.slack,
        )
        return
    if silences:
        began, end = s.events[0][0], silences[-1][1]
        limit = _limit(j, server, "ReceiveConnectionTimeout", began, end)
        if limit is not None and _steady(j, server, s.link, began, end):
            judged = True
            if end - began > limit + j.slack:
                j.exercised["TO-1"] += 1
                j.diverged(
                    "TO-1",
                    f"{server} ends every session within ReceiveConnectionTimeout "
                    f"({limit:g} s), busy or not",
                    f"the session {s.link} opened at {j.when(began)} was still open at "
                    f"{j.when(end)}",
                    began + limit + j.slack,
                )
                return
    if judged:
        j.exercised["TO-1"] += 1


# -- CR-8: a message acknowledged in a session that then times out ---------------------

_RCPT = re.compile(r"^RCPT TO:\s*<([^>]*)>", re.IGNORECASE)


def session_message_rule(j: Judge, sessions: list[Session], history: History) -> None:
    """CR-8: a message a ``session`` step's sender got a 250 for, after its primary made
    a shadow copy, is processed and delivered by its primary at once though the sender
    never ends the session (kept open, then ended by a timeout): delivered by the 250 +
    TransientFailureRetryInterval + slack + 1s when the primary could deliver
    throughout (up, its links to the next hops healthy, the next hops accepting)."""
    nodes = set(j.tl.scenario.topology.nodes)
    for applied in j.tl.steps:
        if applied.step.kind != "session":
            continue
        via = applied.step.arg.via
        refs = [i.message for i in applied.step.arg.say if i.message]
        for s in sessions:
            if s.link != f"client->{via}" or not applied.t <= s.events[0][0] <= applied.t_next:
                continue
            rcpts: list[str] = []
            content: str | None = None
            for t, what, direction, text in s.events:
                found = _RCPT.match(text) if what == "line" and direction == "c2s" else None
                if found:
                    rcpts.append(found.group(1).lower())
                elif what == "data" and text.rsplit(".", 1)[0] in refs:
                    content = text.rsplit(".", 1)[0]
                elif content and what == "line" and direction == "s2c" and _FINAL.match(text):
                    if (
                        text.startswith("250")
                        and _abandoned(s, t)
                        and _copied(history, via, content, nodes)
                    ):
                        m = Sent(content, via, tuple(rcpts), applied.t, applied.t_next, 250)
                        m.t_reply = t
                        m.deliveries = [
                            Delivery(
                                e.t,
                                "",
                                str(e.data.get("sink")),
                                tuple(str(r).lower() for r in e.data.get("rcpt_tos") or ()),
                            )
                            for e in history.events()
                            if e.kind == "delivery"
                            and str(e.data.get("trace", "")).rsplit(".", 1)[0] == content
                        ]
                        _processed(j, m)
                    content, rcpts = None, []
                elif what == "line" and direction == "c2s" and text.upper().startswith("MAIL"):
                    rcpts = []


def _abandoned(s: Session, replied: float) -> bool:
    """The sender did not end the session itself after the reply at ``replied``: it stayed
    silent, or kept it open, until the node's timeout or its own broke it off (CR-8's
    premise: a sender session that times out)."""
    return not any(
        t > replied and direction == "c2s" and text.upper().startswith("QUIT")
        for t, _, direction, text in s.events
    )


def _copied(history: History, via: str, content: str, nodes: set[str]) -> bool:
    """``via`` sent the message's content to another node (a shadow copy): CR-8 is about
    a session that times out *after* the copy was made."""
    return any(
        (e.link or "").partition("->")[0] == via
        and (e.link or "").partition("->")[2] in nodes
        and str(e.data.get("trace", "")).rsplit(".", 1)[0] == content
        for e in history.events(kind="data")
    )


def _processed(j: Judge, m: Sent) -> None:
    assert m.t_reply is not None
    retry = j.tl.setting(m.via, "TransientFailureRetryInterval", m.t_reply, m.t_reply)
    if not m.to or not all(isinstance(v, int | float) for v in retry):
        return
    due = m.t_reply + max(retry) + j.slack + 1.0
    if due > j.tl.end or not j.can_deliver(m.via, m, m.t_reply, due):
        return
    j.exercised["CR-8"] += 1
    done = m.fully_delivered_at()
    if done is not None and done <= due:
        return
    j.diverged(
        "CR-8",
        f"{m.via} processes and delivers {m.ref} once it has told its sender 250, whatever "
        f"becomes of the sender's session: by {j.when(due)}, {m.via} and its next hops able "
        f"to take it",
        f"{m.via} told the sender 250 for {m.ref} at {j.when(m.t_reply)}, and "
        + (f"delivered it only at {j.when(done)}" if done else "never delivered it"),
        due,
    )


# -- XS-3: a stranger's shadow verbs ----------------------------------------------------


def stranger_rule(j: Judge, sessions: list[Session]) -> None:
    """XS-3: on a session of the harness that did not authenticate, XSHADOW, XSHADOWCOPY
    and XQDISCARD are refused (a 4xx or 5xx, or the session ended) and no discard
    notification is handed out."""
    for s in sessions:
        client, server = s.ends
        if client != "client":
            continue
        authorised = False
        asked: tuple[float, str] | None = None
        for t, what, direction, text in s.events:
            if what != "line":
                continue
            if direction == "s2c" and text.startswith("235"):
                authorised = True
            if authorised:
                break
            if direction == "c2s":
                asked = (t, text) if _SHADOW_VERB.match(text) else None
                continue
            leak = _DISCARD.match(text)
            if asked is None and not leak:
                continue
            if leak or _FINAL.match(text):
                j.exercised["XS-3"] += 1
                if leak or text[:1] in ("2", "3"):
                    verb = asked[1] if asked else "a command"
                    j.diverged(
                        "XS-3",
                        f"{server} refuses `{verb}` from a sender that did not authenticate "
                        f"as a peer, and tells it nothing",
                        f"{server} answered `{verb}` with `{text}` at {j.when(t)}",
                        t,
                    )
                    return
                asked = None


# -- DI-1, DI-3: the discard notifications a primary hands out ------------------------


@dataclass
class DiscardPage:
    t: float
    primary: str
    shadow: str
    ids: list[str]
    #: when the querier confirmed it (XQDISCARD ... ACK answered), if it did
    confirmed: float | None = None


def discard_pages(sessions: list[Session], nodes: set[str]) -> list[DiscardPage]:
    """Every XQDISCARD answer a primary gave a shadow, in order."""
    pages: list[DiscardPage] = []
    for s in sessions:
        shadow, primary = s.ends
        if shadow not in nodes or primary not in nodes:
            continue
        current: DiscardPage | None = None
        last: DiscardPage | None = None
        acking = False
        for t, what, direction, text in s.events:
            if what != "line":
                continue
            if direction == "c2s":
                current = DiscardPage(t, primary, shadow, []) if QUERY_LINE.match(text) else None
                acking = bool(_ACK.match(text))
                continue
            if current is None:
                continue
            found = _DISCARD.match(text)
            if found:
                current.ids.append(found.group(1))
            if _FINAL.match(text):
                if acking and last is not None and text.startswith("250"):
                    last.confirmed = t
                if text.startswith("250"):
                    current.t = t
                    pages.append(current)
                    last = current
                current = None
    return sorted(pages, key=lambda p: p.t)


def _copies(
    j: Judge, sessions: list[Session], nodes: set[str]
) -> dict[tuple[str, str], tuple[set[str], str | None]]:
    """(primary, its message id) -> (the shadows it sent XSHADOWCOPY to, the message's
    ref when its content followed on that session)."""
    out: dict[tuple[str, str], tuple[set[str], str | None]] = {}
    for s in sessions:
        primary, shadow = s.ends
        if primary not in nodes or shadow not in nodes:
            continue
        pending: str | None = None
        for _t, what, direction, text in s.events:
            found = COPY_LINE.match(text) if what == "line" and direction == "c2s" else None
            if found:
                pending = found.group(1)
                shadows, ref = out.setdefault((primary, pending), (set(), None))
                shadows.add(shadow)
            elif what == "data" and pending is not None:
                shadows, ref = out[(primary, pending)]
                named = text.rsplit(".", 1)[0] if "." in text else None
                out[(primary, pending)] = (shadows, ref or (named if named in j.obs.sent else None))
                pending = None
    return out


def discard_rules(j: Judge, sessions: list[Session]) -> None:
    """DI-3: a primary answers a shadow's XQDISCARD only with notifications for copies it
    gave that shadow, and a notification the shadow confirmed is not handed out again
    (unless the primary went down in between). DI-1: a notification is recorded only once
    the next hop acknowledged the message: never before every recipient's delivery."""
    nodes = set(j.tl.scenario.topology.nodes)
    copies = _copies(j, sessions, nodes)
    handed: dict[tuple[str, str, str], float] = {}
    for page in discard_pages(sessions, nodes):
        for mid in page.ids:
            shadows, ref = copies.get((page.primary, mid), (set(), None))
            before = len(j.divergences)
            _judge_one(j, page, mid, shadows, ref, handed)
            if len(j.divergences) > before:
                return
        if page.confirmed is not None:
            for mid in page.ids:
                handed.setdefault((page.primary, page.shadow, mid), page.confirmed)


def _judge_one(
    j: Judge,
    page: DiscardPage,
    mid: str,
    shadows: set[str],
    ref: str | None,
    handed: dict[tuple[str, str, str], float],
) -> None:
    if shadows:
        j.exercised["DI-3"] += 1
        if page.shadow not in shadows:
            j.diverged(
                "DI-3",
                f"{page.primary} hands {page.shadow} only the discard notifications of copies "
                f"it gave {page.shadow}; message {mid} was copied to {', '.join(sorted(shadows))}",
                f"{page.primary} answered {page.shadow}'s XQDISCARD with `DISCARD {mid}` at "
                f"{j.when(page.t)}",
                page.t,
            )
            return
    confirmed = handed.get((page.primary, page.shadow, mid))
    # offered again before it was confirmed (two sessions asking at once): still owed
    if (
        confirmed is not None
        and confirmed < page.t
        and not any(
            s.step.kind in OUTAGES
            and getattr(s.step.arg, "node", None) == page.primary
            and s.t <= page.t
            and s.t_next >= confirmed - j.slack
            for s in j.tl.steps
        )
    ):
        j.exercised["DI-3"] += 1
        j.diverged(
            "DI-3",
            f"{page.primary} hands {page.shadow} each discard notification once: "
            f"{page.shadow} confirmed {mid} at {j.when(confirmed)} (XQDISCARD ACK)",
            f"{page.primary} handed `DISCARD {mid}` to {page.shadow} again at {j.when(page.t)}",
            page.t,
        )
        return
    m = j.obs.sent.get(ref or "")
    if m is None or not j.sink_of(m) or j.obs.bounces or _refusing_for_good(j):
        return
    j.exercised["DI-1"] += 1
    done = m.fully_delivered_at()
    if done is not None and done <= page.t:
        return
    got = sorted({r for d in m.deliveries if d.t <= page.t for r in d.recipients})
    j.diverged(
        "DI-1",
        f"{page.primary} records the discard status of {m.ref} only once the next hop "
        f"acknowledged it for every recipient ({', '.join(m.to)})",
        f"{page.primary} handed {page.shadow} `DISCARD {mid}` ({m.ref}) at {j.when(page.t)}, "
        + (f"when only {', '.join(got)} had it" if got else "before any next hop had it"),
        page.t,
    )


def _refusing_for_good(j: Judge) -> bool:
    """A next hop scripted with a permanent refusal: a bounce ends a recipient without
    a delivery."""
    return any(
        s.step.kind == "sink" and re.search(r"\b5\d\d\b", str(s.step.arg)) for s in j.tl.steps
    )
