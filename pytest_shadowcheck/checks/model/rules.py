"""The catalogue's rules as predictions over a run, each citing its behaviour ID.

Each rule looks at one kind of observation (a reply, a delivery, a queue the harness
looked at) and asks: is it among the outcomes the catalogue allows, given every state the
run may have been in (:mod:`.state`)? When the states leave several outcomes open, any of
them is accepted; a rule only decides when the states pin the prediction down, and only
then counts as having exercised its behaviour.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.replay import COPY_LINE
from pytest_shadowcheck.scenario.loader import load_behaviours

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Observations, Sent
    from pytest_shadowcheck.checks.model.state import Timeline

__all__ = [
    "DELIVERY_ALLOWANCE",
    "Divergence",
    "Judge",
    "catalogue_rule",
    "disabled_rule",
    "reply_rule",
]

#: a delivery once promoted: the shadow opens a session to the next hop at once
DELIVERY_ALLOWANCE = 1.0


@dataclass
class Divergence:
    """The first observation no allowed state explains."""

    behaviour: str
    rule: str
    expected: str
    observed: str
    t: float
    operations: list[str]
    #: for an event that missed its deadline ``t``: when it came, or None when it had
    #: not come by ``run_end`` (how much later it came decides whether the harness's
    #: own lateness can account for it: checks/model/check.py)
    missed: bool = False
    came: float | None = None
    run_end: float = 0.0

    def late_beyond(self, grace: float) -> bool:
        """Whether the awaited event was still missing ``grace`` seconds past the
        deadline (False for a divergence that is not a missed deadline)."""
        if not self.missed:
            return False
        return (self.came if self.came is not None else self.run_end) > self.t + grace


def catalogue_rule(behaviour: str) -> str:
    entry = load_behaviours().get(behaviour, {})
    return str(entry.get("text", "")).replace("*", "")


class Judge:
    """The rules applied to one run: what they decided, and the divergences found."""

    def __init__(self, timeline: Timeline, obs: Observations) -> None:
        self.tl = timeline
        self.obs = obs
        self.slack = timeline.slack
        self.exercised: Counter[str] = Counter()
        self.divergences: list[Divergence] = []

    def diverged(self, behaviour: str, expected: str, observed: str, t: float) -> None:
        self.divergences.append(
            Divergence(
                behaviour,
                catalogue_rule(behaviour),
                expected,
                observed,
                t,
                self.tl.applied_before(t),
            )
        )

    def missed_deadline(
        self, behaviour: str, expected: str, observed: str, deadline: float, came: float | None
    ) -> None:
        """A divergence of an event (``came``, None if never) that was due by
        ``deadline``."""
        self.diverged(behaviour, expected, observed, deadline)
        found = self.divergences[-1]
        found.missed, found.came, found.run_end = True, came, self.tl.end

    # -- shared reasoning -------------------------------------------------------------

    def candidates(self, via: str, a: float, b: float) -> set[str]:
        """The nodes that may hold ``via``'s shadow copies (CR-7: inside its DAG, the
        sites its preference allows; outside a DAG or in a one-site DAG, its own site)."""
        topo = self.tl.scenario.topology
        me = topo.nodes[via]
        if me.dag is None:
            return {
                n for n, s in topo.nodes.items() if n != via and s.dag is None and s.site == me.site
            }
        members = {n: s for n, s in topo.nodes.items() if n != via and s.dag == me.dag}
        sites = {s.site for s in members.values()} | {me.site}
        out: set[str] = set()
        for preference in self.tl.setting(via, "ShadowMessagePreferenceSetting", a, b):
            for name, spec in members.items():
                local = spec.site == me.site
                if (
                    len(sites) == 1
                    or preference == "PreferRemote"
                    or (preference == "LocalOnly") == local
                ):
                    out.add(name)
        return out

    def copy_possible(self, via: str, a: float, b: float) -> set[bool]:
        """Whether a shadow copy could be made over ``[a, b]``: some candidate up, not
        frozen, its link from ``via`` not cut."""
        out: set[bool] = set()
        reach = [self.tl.reachable(via, c, a, b) for c in self.candidates(via, a, b)]
        if any(True in r for r in reach):
            out.add(True)
        if all(False in r for r in reach):
            out.add(False)
        return out

    def redundant(self, m: Sent) -> set[bool]:
        """Whether the accepted message ``m`` has a shadow copy (CR-1/CR-4: a 250 with a
        shadow reachable, or with RejectMessageOnShadowFailure claiming one)."""
        if not m.accepted or m.t_reply is None:
            return {False}
        a, b = m.t_send, m.t_reply
        enabled = self.tl.setting(m.via, "ShadowRedundancyEnabled", a, b)
        out: set[bool] = set()
        if False in enabled:
            out.add(False)
        if True in enabled:
            possible = self.copy_possible(m.via, a, b)
            reject = self.tl.setting(m.via, "RejectMessageOnShadowFailure", a, b)
            if True in possible or True in reject:
                out.add(True)
            if False in possible and False in reject:
                out.add(False)
        return out

    def holders(self, m: Sent) -> set[str]:
        """The nodes that may hold ``m``'s shadow copy: those seen holding it, else those
        the wire shows it copied to, else its candidates."""
        seen = {s.node for s in self.obs.snapshots if s.queue == "shadow" and m.ref in s.refs}
        return seen or self.copied_to(m) or self.candidates(m.via, m.t_send, m.t_reply or m.t_send)

    def copied_to(self, m: Sent) -> set[str]:
        """The nodes ``m``'s primary sent its content to in an ``XSHADOWCOPY`` session
        (empty where the harness does not see the primary's links). Of two candidates,
        only these can hold the copy (seed 8008, scenario 69: PreferRemote, the copy on
        mbx3, mbx1's Shadow Safety Net rightly without it)."""
        out: set[str] = set()
        for _t, link, conn, ref in self.obs.contents:
            client, _, server = link.partition("->")
            if ref != m.ref or client != m.via or server not in self.tl.scenario.topology.nodes:
                continue
            lines = self.obs.sessions.get((link, conn), [])
            if any(d == "c2s" and COPY_LINE.match(text) for _, d, text in lines):
                out.add(server)
        return out

    def span_bounds(self, node: str, a: float, b: float) -> tuple[float, float] | None:
        """(least, most) ShadowResubmitTimeSpan - / + ShadowHeartbeatFrequency on
        ``node`` over ``[a, b]``: the promotion window after the last contact."""
        spans = self.tl.setting(node, "ShadowResubmitTimeSpan", a, b)
        beats = self.tl.setting(node, "ShadowHeartbeatFrequency", a, b)
        if not all(isinstance(v, int | float) for v in spans | beats):
            return None
        return min(spans) - max(beats), max(spans) + max(beats)

    def sink_of(self, m: Sent) -> set[str]:
        topo = self.tl.scenario.topology
        out = set()
        for rcpt in m.to:
            hop = topo.hops_of(m.via).get(rcpt.rsplit("@", 1)[-1].lower())
            if hop is None or hop.sink is None:
                return set()
            out.add(hop.sink)
        return out

    def can_deliver(self, node: str, m: Sent, a: float, b: float) -> bool:
        """Whether ``node`` surely could deliver ``m`` over ``[a, b]``: up, its links to
        the sinks healthy, the sinks accepting."""
        sinks = self.sink_of(m)
        if not sinks or self.tl.node_states(node, a, b) != {"up"}:
            return False
        hops = self.tl.scenario.topology.hops_of(node)
        if any(r.rsplit("@", 1)[-1].lower() not in hops for r in m.to):
            return False  # PR-5: a node without a route of its own waits for one
        return all(
            self.tl.link_states(f"{node}->{s}", a, b) == {"ok"}
            and self.tl.sink_states(s, a, b) == {"accepting"}
            for s in sinks
        )

    def copy_kept(
        self, m: Sent, shadow: str, until: float, *, while_switched_off: bool = False
    ) -> bool:
        """Whether ``shadow`` surely still keeps ``m``'s copy and acts on it until
        ``until``: never wiped or power cut since the 250, shadow redundancy on at both
        ends throughout (a transport may drop its copies when it is switched off), or
        ``while_switched_off``: whatever the setting became after the copy was made."""
        since = m.t_reply if m.t_reply is not None else m.t_send
        lost = any(
            s.step.kind in ("wipe", "power_cut") and s.step.arg.node == shadow and s.t >= since
            for s in self.tl.steps
            if s.t <= until
        )
        if while_switched_off:
            return not lost
        on = all(
            self.tl.setting(n, "ShadowRedundancyEnabled", m.t_send, until) == {True}
            for n in (m.via, shadow)
        )
        return on and not lost

    def when(self, t: float) -> str:
        return f"+{t:.1f}s"


# -- CR-4, CR-5, CR-6, CR-1: the reply to the sender --------------------------------


def reply_rule(j: Judge, m: Sent) -> None:
    """CR-4 / CR-5 / CR-6 / CR-1: a 250 or a ``451 4.4.0`` by whether a copy can be made."""
    if m.t_reply is None or m.code not in (250, 451):
        return  # no reply, or a refusal for another reason: not the model's to judge
    if m.code == 451 and m.enhanced not in (None, "4.4.0"):
        return
    a, b = m.t_send, m.t_reply
    enabled = j.tl.setting(m.via, "ShadowRedundancyEnabled", a, b)
    reject = j.tl.setting(m.via, "RejectMessageOnShadowFailure", a, b)
    possible = j.copy_possible(m.via, a, b)
    allowed: set[int] = set()
    if False in enabled:
        allowed.add(250)
    if True in enabled:
        for r in reject:
            for p in possible:
                allowed.add(250 if p or not r else 451)
    decided = (
        "CR-6"
        if enabled == {False}
        else "CR-1"
        if possible == {True}
        else ("CR-4" if reject == {True} else "CR-5" if reject == {False} else "")
    )
    if len(allowed) != 1 or not decided:
        return
    j.exercised[decided] += 1
    if m.code in allowed:
        return
    why = _why_copy(j, m)
    if m.code == 250:
        j.diverged(
            "CR-4",
            f"{m.via} refuses {m.ref} with 451 4.4.0 (message failed to be made redundant): "
            f"RejectMessageOnShadowFailure is true and {why}",
            f"{m.via} accepted {m.ref} with `250 {m.text}` at {j.when(b)}",
            b,
        )
        return
    expected = {
        "CR-6": "ShadowRedundancyEnabled is false: no copy is attempted",
        "CR-1": f"{why}, so a copy can be made",
        "CR-5": f"RejectMessageOnShadowFailure is false and {why}: accept without redundancy",
    }.get(decided, "")
    j.diverged(
        decided,
        f"{m.via} accepts {m.ref} with 250: {expected}",
        f"{m.via} refused {m.ref} with `451 {m.text}` at {j.when(b)}",
        b,
    )


def _why_copy(j: Judge, m: Sent) -> str:
    b = m.t_reply or m.t_send
    shadows = sorted(j.candidates(m.via, m.t_send, b))
    if not shadows:
        return f"{m.via} has no other node in its boundary to copy to"
    states = []
    for c in shadows:
        node = j.tl.node_states(c, m.t_send, b)
        link = j.tl.link_states(f"{m.via}->{c}", m.t_send, b)
        if node == {"up"} and link == {"ok"}:
            states.append(f"{c} was up and reachable")
        elif node != {"up"}:
            states.append(f"{c} was {' or '.join(sorted(node - {'up'}))}")
        else:
            states.append(f"the link {m.via}->{c} was cut")
    return " and ".join(states)


# -- CR-6: no XSHADOW while disabled -------------------------------------------------

_ADVERTISED = re.compile(r"^250[- ]XSHADOW\b", re.IGNORECASE)
_ISSUED = re.compile(r"^XSHADOW\b", re.IGNORECASE)


def disabled_rule(j: Judge) -> None:
    """CR-6: ShadowRedundancyEnabled=false: no XSHADOW in EHLO, no XSHADOW issued."""
    for t, link, direction, text, began in j.obs.peer_lines:
        client, _, server = link.partition("->")
        who = server if direction == "s2c" else client
        # off for the whole session: one opened before the change may keep its terms
        off = j.tl.setting(who, "ShadowRedundancyEnabled", began, t) == {False}
        if not off:
            continue
        if direction == "s2c" and text.upper().startswith("250"):
            j.exercised["CR-6"] += 1
        if direction == "s2c" and _ADVERTISED.match(text):
            j.diverged(
                "CR-6",
                f"{server} does not advertise XSHADOW: its ShadowRedundancyEnabled is false",
                f"{server} answered {client}'s EHLO with `{text}` at {j.when(t)}",
                t,
            )
        elif direction == "c2s" and _ISSUED.match(text):
            j.diverged(
                "CR-6",
                f"{client} issues no XSHADOW: its ShadowRedundancyEnabled is false",
                f"{client} sent `{text}` to {server} at {j.when(t)}",
                t,
            )
