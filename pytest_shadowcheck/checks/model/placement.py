"""CR-7: where a shadow copy may be, by the primary's site, DAG and
ShadowMessagePreferenceSetting - judged on the shadow queues the harness looked at.

Outside a DAG, or in a single-site DAG, only a node of the primary's own site (and
boundary) may hold the copy, whatever the preference; in a DAG spanning sites, LocalOnly
keeps it in the primary's site, RemoteOnly out of it, and PreferRemote tries the remote
site first, so while a remote-site shadow is surely up and reachable the copy is there.
Decided only while nothing among the nodes changed from the send to the look (an
outage or promotion lets copies move), with no resubmission in the run. The attempts
per site are counted where every one of them must fail (:func:`attempts_rule`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent, Snapshot
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.history import History

__all__ = ["attempts_rule", "placement_rule"]


def placement_rule(j: Judge) -> None:
    """CR-7: the copy is on a node the placement allows, on the remote site first."""
    if any(s.step.kind == "resubmit" for s in j.tl.steps):
        return
    nodes = set(j.tl.scenario.topology.nodes)
    for m in j.obs.sent.values():
        if not m.accepted or m.t_reply is None:
            continue
        for snap in j.obs.snapshots:
            if snap.queue != "shadow" or snap.t <= m.t_reply or m.ref not in snap.refs:
                continue
            if snap.node == m.via or j.tl.changed(m.t_send, snap.t, nodes, hops=False):
                continue
            if _judge(j, m, snap):
                return


def _judge(j: Judge, m: Sent, snap: Snapshot) -> bool:
    """Judge one look at a shadow queue holding ``m``; True when it diverged."""
    topo = j.tl.scenario.topology
    me, holder = topo.nodes[m.via], topo.nodes[snap.node]
    allowed = j.candidates(m.via, m.t_send, m.t_reply or m.t_send)
    preferences = j.tl.setting(m.via, "ShadowMessagePreferenceSetting", m.t_send, snap.t)
    said = " or ".join(sorted(str(p) for p in preferences))
    j.exercised["CR-7"] += 1
    where = f"{snap.node} (site {holder.site}" + (f", DAG {holder.dag})" if holder.dag else ")")
    if snap.node not in allowed:
        if me.dag is None:
            why = f"{m.via} is in no DAG: only a node of its own site ({me.site}) may hold it"
        else:
            why = f"{m.via}'s ShadowMessagePreferenceSetting is {said}"
        j.diverged(
            "CR-7",
            f"the shadow copy of {m.ref} on {' or '.join(sorted(allowed)) or 'no node'}: {why}",
            f"the shadow queue of {where} held it at {j.when(snap.t)}",
            snap.t,
        )
        return True
    if preferences != {"PreferRemote"} or me.dag is None or holder.site != me.site:
        return False
    b = m.t_reply or m.t_send
    remote = sorted(
        n
        for n in allowed
        if topo.nodes[n].site != me.site
        and j.tl.node_states(n, m.t_send - j.slack, b) == {"up"}
        and j.tl.link_states(f"{m.via}->{n}", m.t_send - j.slack, b) == {"ok"}
    )
    if not remote:
        return False
    j.diverged(
        "CR-7",
        f"the shadow copy of {m.ref} on {' or '.join(remote)}: {m.via} prefers the remote "
        f"site (PreferRemote) and tries it first, and {' and '.join(remote)} was up and "
        f"reachable",
        f"the shadow queue of {where}, in {m.via}'s own site, held it at {j.when(snap.t)}",
        snap.t,
    )
    return True


#: how long before a send an outage or a request may still make a primary open sessions
#: to another node (s): its heartbeats and requests of then
_RECENT = 10.0

#: Exchange's defaults for the attempts per site (the catalogue names the settings only)
_TRIES = {"MaxRetriesForRemoteSiteShadow": 4, "MaxRetriesForLocalSiteShadow": 2}


def attempts_rule(j: Judge, history: History) -> None:
    """CR-7: every attempt on a site failing (each of its shadows up, its link cut from
    the send to the reply), the primary tries it MaxRetriesFor{Remote,Local}SiteShadow
    times before the next site or its reply: at least that many sessions (cycling over
    the site's nodes) open towards its nodes between the send and the reply. A lower
    bound only: heartbeats and discard queries share the links."""
    topo = j.tl.scenario.topology
    opened: dict[str, list[float]] = {}
    for event in history.events():
        if event.kind == "connect" and event.link:
            opened.setdefault(event.link, []).append(event.t)
    for m in j.obs.sent.values():
        if m.t_reply is None or m.code not in (250, 451):
            continue
        a, b = m.t_send, m.t_reply
        if j.tl.setting(m.via, "ShadowRedundancyEnabled", a, b) != {True}:
            continue
        preference = j.tl.one_setting(m.via, "ShadowMessagePreferenceSetting", a, b)
        if preference is None:
            continue
        me = topo.nodes[m.via]
        allowed = j.candidates(m.via, a, b)
        local = sorted(n for n in allowed if topo.nodes[n].site == me.site)
        remote = sorted(n for n in allowed if topo.nodes[n].site != me.site)
        sites: list[tuple[str, list[str]]] = [("MaxRetriesForLocalSiteShadow", local)]
        if me.dag is not None and remote:
            if preference == "PreferRemote":
                sites.insert(0, ("MaxRetriesForRemoteSiteShadow", remote))
            elif preference == "RemoteOnly":
                sites = [("MaxRetriesForRemoteSiteShadow", remote)]
        for setting, names in sites:
            if not names:
                continue
            failing = all(
                j.tl.node_states(n, a, b) == {"up"}
                and j.tl.link_states(f"{m.via}->{n}", a, b) == {"cut"}
                for n in names
            )
            # changed live between the send and the reply: at least the fewest tries in
            # force, at most the most
            tries_range = j.tl.setting_range(m.via, setting, a, b, _TRIES[setting])
            if not failing or tries_range is None:
                break  # a copy may have been made here: later sites are not tried
            fewest, tries = int(tries_range[0]), int(tries_range[1])
            least = fewest // len(names)
            if not any(a <= t <= b for n in names for t in opened.get(f"{m.via}->{n}", [])):
                break  # no attempt at all: whether one was owed is CR-1/CR-4's question
            if _too_many(j, m, names, tries, setting, opened):
                return
            for n in names:
                seen = sum(1 for t in opened.get(f"{m.via}->{n}", []) if a <= t <= b)
                j.exercised["CR-7"] += 1
                if seen >= least:
                    continue
                j.diverged(
                    "CR-7",
                    f"{m.via} tries {' and '.join(names)} {setting} ({fewest}) times in all "
                    f"before giving up on that site for {m.ref}: {least} session(s) or more "
                    f"to {n}, whose link was cut",
                    f"{m.via} opened {seen} session(s) to {n} between the send at "
                    f"{j.when(a)} and its reply at {j.when(b)}",
                    b,
                )
                return


def _too_many(
    j: Judge, m: Sent, names: list[str], tries: int, setting: str, opened: dict[str, list[float]]
) -> bool:
    """CR-7's upper bound: a site of one node is tried at most ``tries`` times, judged
    only where ``m.via`` had no other cause to open a session to it - no copy of that
    node's messages to ask about (XQDISCARD), no resubmission, no outage or restart
    about. True when it diverged."""
    if len(names) != 1:
        return False  # "a remote-site node up to N times": per node or per site, unsaid
    (node,) = names
    a, b = m.t_send, m.t_reply
    assert b is not None
    if any(j.tl.node_states(n, a - j.slack, b) != {"up"} for n in j.tl.scenario.topology.nodes):
        return False
    if any(
        s.step.kind in ("resubmit", "kill", "restart", "wipe", "power_cut")
        and a - _RECENT <= s.t <= b
        for s in j.tl.steps
    ):
        return False  # a restarted node may ask about what it held; a request goes about
    for other in j.tl.steps:
        if other.step.kind != "send" or other.step.arg.via != node or other.t > b:
            continue
        x = j.obs.sent.get(other.step.arg.id)
        done = x.fully_delivered_at() if x is not None else None
        told_by = None if done is None else done + j.slack + _longest_beat(j, m.via)
        if told_by is None or told_by >= a:
            return False  # m.via may hold its copy, and ask node about it
        if j.tl.changed(other.t, told_by, {m.via, node}, hops=False):
            # m.via may have missed the discard (down, cut off): the primary keeps it only
            # ShadowMessageAutoDiscardInterval, and a copy never told goes on being asked
            # about (seed 6006's scenario 646: a heartbeat among a1's placement attempts)
            return False
    seen = sum(1 for t in opened.get(f"{m.via}->{node}", []) if a <= t <= b)
    j.exercised["CR-7"] += 1
    if seen <= tries:
        return False
    j.diverged(
        "CR-7",
        f"{m.via} tries {node}, alone in its site, {setting} ({tries}) times at most for "
        f"{m.ref}, then the next site or its reply",
        f"{m.via} opened {seen} sessions to {node}, whose link was cut, between the send at "
        f"{j.when(a)} and its reply at {j.when(b)}, with no copy of {node}'s to ask about",
        b,
    )
    return True


def _longest_beat(j: Judge, node: str) -> float:
    beats = j.tl.setting(node, "ShadowHeartbeatFrequency", 0.0, j.tl.end)
    return max((float(v) for v in beats if isinstance(v, int | float)), default=60.0)
