"""DI-2 read from the wire: "The shadow asks the primary for discard status with
XQDISCARD in every session it opens to the primary, for any reason, and at least once
every ShadowHeartbeatFrequency".

A node is the primary's shadow while it holds a copy the primary gave it: from the
``250`` after the copy's content on an ``XSHADOWCOPY`` session, until the primary names
that copy in a ``250-DISCARD`` line of an answer to the shadow's query (docs/protocol.md).
Only then is a query owed; an MTA that asks only while it holds copies is correct. Both
rules judge a stretch only when the two nodes were up and linked throughout, on the real
clock (a virtual clock moves the nodes' heartbeats, not the harness's). An admin's
change of ShadowHeartbeatFrequency takes effect when made: made shorter, the next query
is due that much after the change (if that is sooner); made longer, the later of the
two dues stands.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.wire import (
    COPY_LINE,
    OUTAGES,
    QUERY_LINE,
    Session,
    discard_pages,
)

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["heartbeat_rules"]

_ADVERT = re.compile(r"^250[- ]XSHADOW\b", re.IGNORECASE)
_QUIT = re.compile(r"^QUIT\b", re.IGNORECASE)
#: what a session says before it does anything: greeting, authentication, ending
_PREAMBLE = re.compile(r"^(EHLO|HELO|AUTH|NOOP|RSET|QUIT)\b", re.IGNORECASE)
#: a paused node is no outage of its queue, but it neither asks nor answers meanwhile
_INTERRUPTIONS = OUTAGES | {"pause"}


@dataclass(frozen=True)
class _Held:
    """A copy ``shadow`` held for ``primary`` over [since, until]."""

    primary: str
    shadow: str
    mid: str
    since: float
    until: float


def heartbeat_rules(j: Judge, sessions: list[Session]) -> None:
    if j.tl.scenario.topology.clock == "virtual":
        return
    nodes = set(j.tl.scenario.topology.nodes)
    held = _held(j, sessions, nodes)
    if not held:
        return
    if not _query_in_every_session(j, sessions, held):
        _query_every_heartbeat(j, sessions, held)


def _held(j: Judge, sessions: list[Session], nodes: set[str]) -> list[_Held]:
    """Every copy a shadow acknowledged, and until when it held it."""
    released: dict[tuple[str, str, str], float] = {}
    for page in discard_pages(sessions, nodes):
        for named in page.ids:
            released.setdefault((page.primary, page.shadow, named), page.t)
    out = []
    for s in sessions:
        primary, shadow = s.ends
        if primary not in nodes or shadow not in nodes:
            continue
        mid: str | None = None
        content = False
        for t, what, direction, text in s.events:
            found = COPY_LINE.match(text) if what == "line" and direction == "c2s" else None
            if found:
                mid, content = found.group(1), False
            elif what == "data" and mid is not None:
                content = True
            elif what == "line" and direction == "s2c" and mid is not None and content:
                if text.startswith("250"):
                    until = min(released.get((primary, shadow, mid), j.tl.end), _upset(j, s, t))
                    out.append(_Held(primary, shadow, mid, t, max(t, until)))
                mid = None
    return out


def _upset(j: Judge, s: Session, since: float) -> float:
    """When, after ``since``, either node of the session went down, froze or restarted,
    or a link between them was cut: from then on the shadow may rightly have promoted
    the copy, or lost it with its queue, so it is not known to hold it."""
    a, b = s.ends
    links = {f"{a}->{b}", f"{b}->{a}"}
    for applied in j.tl.steps:
        if applied.t < since:
            continue
        arg = applied.step.arg
        if applied.step.kind in _INTERRUPTIONS and getattr(arg, "node", None) in (a, b):
            return applied.t
        if applied.step.kind == "fault" and getattr(arg, "link", None) in links:
            return applied.t
    return j.tl.end


def _steady(j: Judge, shadow: str, primary: str, a: float, b: float) -> bool:
    """Both nodes up, not restarted, the shadow able to reach the primary over [a, b]."""
    if j.tl.node_states(shadow, a, b) != {"up"} or j.tl.reachable(shadow, primary, a, b) != {True}:
        return False
    return not any(
        s.step.kind in _INTERRUPTIONS
        and getattr(s.step.arg, "node", None) in (shadow, primary)
        and s.t <= b
        and s.t_next >= a
        for s in j.tl.steps
    )


def _offered(j: Judge, h: _Held, a: float, b: float) -> bool:
    """Whether the primary offered the shadow protocol over [a, b]: with
    ShadowRedundancyEnabled false it advertises no XSHADOW (CR-6), and a client uses no
    extension a server does not advertise, XQDISCARD included, so no query is owed."""
    return j.tl.setting(h.primary, "ShadowRedundancyEnabled", a, b) == {True}


def _query_in_every_session(j: Judge, sessions: list[Session], held: list[_Held]) -> bool:
    """Every session a shadow opens to its primary - a heartbeat, its own message's copy,
    a resubmission - asks for discard status. True when it found a divergence."""
    for s in sessions:
        shadow, primary = s.ends
        opened = s.events[0][0]
        holding = [
            h
            for h in held
            if h.shadow == shadow and h.primary == primary and h.since < opened < h.until
        ]
        if not holding or not _steady(j, shadow, primary, holding[0].since, opened):
            continue
        said = [text for _t, what, d, text in s.events if what == "line" and d == "c2s"]
        replies = [text for _t, what, d, text in s.events if what == "line" and d == "s2c"]
        # a whole session (it said QUIT), with a peer that offered XSHADOW, that did more
        # than greet: its purpose was something other than a query, or a query
        if not any(_ADVERT.match(r) for r in replies) or not any(_QUIT.match(c) for c in said):
            continue
        work = [c for c in said if not _PREAMBLE.match(c)]
        if not work:
            continue
        j.exercised["DI-2"] += 1
        if any(QUERY_LINE.match(c) for c in work):
            continue
        j.diverged(
            "DI-2",
            f"{shadow}, holding a shadow copy for {primary} (since {j.when(holding[0].since)}), "
            f"asks it for discard status with XQDISCARD in every session it opens to it, "
            f"for any reason",
            f"the session {s.link} opened at {j.when(opened)} said `{work[0]}`"
            + (f" and {len(work) - 1} more command(s)" if len(work) > 1 else "")
            + " but never XQDISCARD",
            opened,
        )
        return True
    return False


def _due(j: Judge, shadow: str, start: float) -> tuple[float, str] | None:
    """When a query is due at the latest after one at ``start``, and the frequency in
    words ("4 s", or "4 s, 0.5 s from +12.3s"); None when no number is in force."""
    name = "ShadowHeartbeatFrequency"
    beat = j.tl.one_setting(shadow, name, start, start)
    if not isinstance(beat, int | float):
        return None  # a change under way at ``start``: its query is not judged
    due, said = start + beat + j.slack, f"{beat:g} s"
    for change in j.tl.settings.get((shadow, name), []):
        if change.hi <= start or change.lo >= due:
            continue  # before the query, or after it was already owed
        if not isinstance(change.value, int | float):
            return None
        # the latest it could have taken effect, the new frequency from there
        then = change.hi + change.value + j.slack
        due = min(due, then) if change.value < beat else max(due, then)
        said += f", {change.value:g} s from {j.when(change.hi)}"
        beat = change.value
    return due, said


def _query_every_heartbeat(j: Judge, sessions: list[Session], held: list[_Held]) -> None:
    """While it holds a copy, a shadow asks its primary at least once every
    ShadowHeartbeatFrequency (plus the slack)."""
    queries: dict[tuple[str, str], list[float]] = {}
    for s in sessions:
        for t, what, direction, text in s.events:
            if what == "line" and direction == "c2s" and QUERY_LINE.match(text):
                queries.setdefault(s.ends, []).append(t)
    for h in sorted(held, key=lambda h: h.since):
        start = h.since
        asked = sorted(q for q in queries.get((h.shadow, h.primary), []) if q > h.since)
        for nxt in [*asked, h.until]:
            timed = _due(j, h.shadow, start)
            if timed is None:  # the frequency changing at ``start``: the next query on
                if nxt >= h.until:
                    break
                start = nxt
                continue
            due, beat = timed
            if due >= min(nxt, h.until):
                if nxt >= h.until:
                    break
                start = nxt
                continue
            if not _steady(j, h.shadow, h.primary, start, due) or not _offered(j, h, start, due):
                start = nxt
                continue
            j.exercised["DI-2"] += 1
            last = "the copy was acknowledged" if start == h.since else "it last asked"
            j.diverged(
                "DI-2",
                f"{h.shadow}, holding a shadow copy for {h.primary}, asks it for discard "
                f"status at least once every ShadowHeartbeatFrequency ({beat})",
                f"after {last} at {j.when(start)}, {h.shadow} did not ask "
                + (
                    f"until {j.when(nxt)}"
                    if nxt < h.until
                    else f"again while it held the copy (to {j.when(h.until)})"
                ),
                # shown when the silence ended: a harness that ran late in it (its proxy
                # holding the queries back) is counted in full (checks/model/check.py)
                min(nxt, h.until),
            )
            return
        if asked:
            j.exercised["DI-2"] += 1
