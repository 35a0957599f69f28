"""Exploration's operations for placement and forks (CR-7, CR-10, bounces): topologies
spanning AD sites and DAGs with a drawn ShadowMessagePreferenceSetting, a next hop that
refuses an unknown address for good (550, or 500 at the edge of the 5xx class) with a
message to it and to a known recipient, and a bounce (the null reverse path) sent in
like any message.

Plain functions of a random generator and the topology's names, returning an operation's
fields (``Operation(*drawn)``); generator.plan() draws them by weight (engine/generator.py
owns the drawing).
"""

from __future__ import annotations

import random
from typing import Any

#: an operation as generator.Operation takes it: (label, steps, effect, behaviours)
Drawn = tuple[str, tuple[dict[str, Any], ...], tuple[str, str], tuple[str, ...]]

__all__ = [
    "TOPOLOGIES",
    "AttemptsDrawer",
    "Drawn",
    "bounce_send",
    "forks",
    "placement_send",
    "placement_vias",
    "refuse_for_good",
    "single_site_preference",
    "split_discards",
    "splits",
    "start_settings",
    "unrouted",
    "without_route",
]

#: bundled topologies that place copies by site and DAG (a DAG over two AD sites; three
#: servers in no DAG over two sites, two boundaries), fork a message over next hops,
#: and give one node a route the other lacks (PR-5)
TOPOLOGIES = ("creation-two-site-dag", "creation-ad-site", "creation-forks", "outages-one-route")

_PREFERENCES = ("PreferRemote", "PreferRemote", "LocalOnly", "RemoteOnly")
#: refusals for good a next hop gives an address it does not know
_PERMANENT = ("550 5.1.1 no such user", "500 5.0.0 refused")
#: the domain of the harness's default sender, where DSNs go, and its next hop deferring
_SENDERS_DOMAIN = "ext.test"
_DEFER = "451 4.3.0 the sender's server is busy"


def start_settings(rng: random.Random, topology: dict[str, Any]) -> dict[str, Any]:
    """A ShadowMessagePreferenceSetting for a topology whose nodes span sites (nothing,
    and no draw, for the others)."""
    sites = {spec.get("site") for spec in topology["nodes"].values()}
    if len(sites) < 2:
        return {}
    return {"ShadowMessagePreferenceSetting": rng.choice(_PREFERENCES)}


def single_site_preference(rng: random.Random, topology: dict[str, Any]) -> dict[str, Any]:
    """Now and then a site preference where it must change nothing: a DAG within one AD
    site keeps its copies there "whatever the preference" (CR-7) - an MTA applying
    RemoteOnly finds no shadow at all. Its own stream: the other draws stay as they were."""
    nodes = topology["nodes"].values()
    dags = {spec.get("dag") for spec in nodes}
    sites = {spec.get("site") for spec in nodes}
    if len(sites) != 1 or None in dags or rng.random() >= 0.25:
        return {}
    return {"ShadowMessagePreferenceSetting": rng.choice(("RemoteOnly", "LocalOnly"))}


def forks(topology: dict[str, Any]) -> bool:
    """Whether a message may fork over two next hops inside the boundary's reach: two
    domains with sinks of their own (not the boundary's way out)."""
    hops = topology.get("next_hops", {})
    return len([d for d, h in hops.items() if h.get("sink") and h.get("kind") != "boundary"]) > 1


def refuse_for_good(rng: random.Random, ref: str, via: str, topology: dict[str, Any]) -> Drawn:
    """A next hop refusing an address it does not know for good, until it is told to
    accept, and a message to it and to a recipient of the directory (so that every
    message keeps a recipient to deliver to: the no-loss invariant's due). Where the
    senders' domain has a next hop of its own (DSNs go there), half the time that one
    defers too, holding the DSN back."""
    hops = topology.get("next_hops", {})
    domains = sorted(d for d, h in hops.items() if h.get("sink") and h.get("kind") != "boundary")
    if len(domains) > 1 and rng.random() < 0.5:
        return _fork_deferred(rng, ref, via, topology, domains)
    domain = rng.choice(domains)
    sink, unknown = hops[domain]["sink"], f"nobody@{domain}"
    reply = rng.choice(_PERMANENT)
    to = [rng.choice(sorted(topology["directory"]["recipients"])), unknown]
    send = {"send": {"id": ref, "via": via, "to": to, "timeout": "20s"}}
    # time for a heartbeat or two: the look after the operation sees what the shadow kept
    after = {"wait": "2s"}
    steps: tuple[dict[str, Any], ...] = ({"sink": {"name": sink, "rcpt": {unknown: reply}}},)
    effect = sink
    dsn = hops.get(_SENDERS_DOMAIN, {}).get("sink")
    if dsn and dsn != sink and rng.random() < 0.5:
        steps += ({"sink": {"name": dsn, "data": _DEFER}},)
        effect = f"{sink},{dsn}"  # both sinks scripted (generator._State splits it)
    label = f"{sink} refuses {unknown} with {reply[:3]}" + (
        f", {dsn} defers the DSN" if "," in effect else ""
    )
    return (
        label + f"; send {ref} via {via}",
        (*steps, send, after),
        ("script", effect),
        ("CR-10",),
    )


def _fork_deferred(
    rng: random.Random, ref: str, via: str, topology: dict[str, Any], domains: list[str]
) -> Drawn:
    """A message forking over two next hops, one of which defers its recipient (4xx)
    until it is told to accept: the shadow keeps its copy meanwhile (CR-10)."""
    hops = topology["next_hops"]
    known = sorted(topology["directory"]["recipients"])
    held, other = rng.sample(domains, 2)
    rcpt = rng.choice([r for r in known if r.endswith("@" + held)] or [f"nobody@{held}"])
    to = [rng.choice([r for r in known if r.endswith("@" + other)] or known), rcpt]
    sink = hops[held]["sink"]
    script: dict[str, Any] = {"name": sink, "rcpt": {rcpt: "451 4.3.0 mailbox busy, try later"}}
    label = f"{sink} defers {rcpt}"
    if rng.random() < 0.4:
        # the fork fails whole at the end of DATA, once: a 500, the edge of the 5xx class
        script = {"name": sink, "data": {"reply": "500 5.0.0 refused", "times": 1}}
        label = f"{sink} refuses the next message with 500"
    steps = (
        {"sink": script},
        {"send": {"id": ref, "via": via, "to": to, "timeout": "20s"}},
        {"wait": "2s"},
    )
    return f"{label}; send {ref} via {via} to {', '.join(to)}", steps, ("script", sink), ("CR-10",)


def bounce_send(
    rng: random.Random,
    ref: str,
    answering: list[str],
    recipients: tuple[str, ...],
    topology: dict[str, Any],
) -> Drawn:
    """A bounce sent in: MAIL FROM:<>, accepted and copied like any message - to one
    recipient, now and then three (a null reverse-path with several recipients is rare
    and valid, an envelope a queue may misread), each of a domain the node it goes
    through has a route for (another node's own domain it would rightly refuse as a
    relay)."""
    via = rng.choice(answering)
    foreign = {domain for node, domain in unrouted(topology) if node != via}
    routed = [r for r in recipients if r.rpartition("@")[2] not in foreign] or list(recipients)
    to = [rng.choice(routed)]
    if rng.random() < 0.25:
        # the topologies name two recipients or so: the others of its domain's mailbox
        domain = to[0].rpartition("@")[2]
        to = [*routed, *(f"owner{n}@{domain}" for n in (1, 2))][:3]
    spec = {"id": ref, "via": via, "from": "", "to": to, "timeout": "20s"}
    return f"send bounce {ref} via {spec['via']}", ({"send": spec},), ("", ""), ("CR-1",)


def placement_vias(topology: dict[str, Any], answering: list[str]) -> list[str]:
    """The answering nodes with an answering peer in their own AD site and another in a
    different one: where a copy goes tells the site preference (or its absence outside
    a DAG) from a wrong one."""
    nodes = topology["nodes"]
    out = []
    for via in answering:
        site = nodes[via].get("site")
        others = [n for n in answering if n != via]
        if any(nodes[n].get("site") == site for n in others) and any(
            nodes[n].get("site") != site for n in others
        ):
            out.append(via)
    return out


def placement_send(
    rng: random.Random, ref: str, vias: list[str], recipients: tuple[str, ...]
) -> Drawn:
    """A message through a node of a site with a local and a remote candidate, every
    node up and linked: the look after it sees which site took the copy (CR-7)."""
    via = rng.choice(vias)
    spec = {"id": ref, "via": via, "to": [rng.choice(recipients)], "timeout": "20s"}
    return f"send {ref} via {via} (placement)", ({"send": spec},), ("", ""), ("CR-7",)


def splits(topology: dict[str, Any], answering: list[str]) -> list[str]:
    """The nodes whose copies can be split over two shadows: in a DAG over two AD sites,
    with a peer in the node's own site and one in another (placement_vias)."""
    if any(spec.get("dag") is None for spec in topology["nodes"].values()):
        return []
    return placement_vias(topology, answering)


def split_discards(
    rng: random.Random, ref: str, vias: list[str], topology: dict[str, Any], preference: str
) -> list[Drawn]:
    """DI-3: a primary with copies on two shadows whose notifications fall due at once,
    one shadow frozen: the other's queries must get only its own. The next hop defers
    everything; a message's copy goes to the remote-site shadow, the link to it is cut
    for a second message, whose copy falls back to the local one; the link healed, the
    local shadow paused, the next hop accepting: the remote shadow asks alone while both
    notifications are due. Everything is back as it was at the end, ``preference`` too
    (the drill sets PreferRemote while the cluster runs where another is in force)."""
    nodes = topology["nodes"]
    via = rng.choice(vias)
    site = nodes[via].get("site")
    local = rng.choice(sorted(n for n in nodes if n != via and nodes[n].get("site") == site))
    remote = rng.choice(sorted(n for n in nodes if nodes[n].get("site") != site))
    hops = topology["next_hops"]
    rcpt = rng.choice(
        sorted(
            r
            for r in topology["directory"]["recipients"]
            if hops.get(r.rsplit("@", 1)[-1], {}).get("sink")
            and hops[r.rsplit("@", 1)[-1]].get("kind") != "boundary"
        )
    )
    sink = hops[rcpt.rsplit("@", 1)[-1]]["sink"]
    first, second = ref, f"{ref}b"
    link = f"{via}->{remote}"
    prefer: tuple[dict[str, Any], ...] = ()
    restore: tuple[dict[str, Any], ...] = ()
    if preference != "PreferRemote":
        name = "ShadowMessagePreferenceSetting"
        prefer = ({"set_settings": {"values": {name: "PreferRemote"}}}, {"wait": "2s"})
        restore = ({"set_settings": {"values": {name: preference}}}, {"wait": "2s"})
    copies: tuple[dict[str, Any], ...] = (
        *prefer,
        {"sink": {"name": sink, "reply": "451 4.3.0 mailbox busy, try later"}},
        {"send": {"id": first, "via": via, "to": [rcpt], "timeout": "20s"}},
        {"wait": "1s"},
        {"fault": {"link": link, "kind": "cut"}},
        {"send": {"id": second, "via": via, "to": [rcpt], "timeout": "20s"}},
        {"heal": link},
        {"wait": "1s"},
    )
    release: tuple[dict[str, Any], ...] = (
        {"pause": local},
        {"sink": {"name": sink, "reply": "accept"}},
        {"wait": "4s"},
        {"resume": local},
        {"wait": "3s"},
        *restore,
    )
    return [
        (
            f"split copies: {first} via {via} to {remote}, {second} to {local} ({link} cut)",
            copies,
            # the next hop holds mail back until the second operation (or the ending)
            ("script", sink),
            ("CR-7",),
        ),
        (
            f"discards due, {local} paused: {remote} asks alone",
            release,
            ("unscript", sink),
            ("DI-3",),
        ),
    ]


def unrouted(topology: dict[str, Any]) -> list[tuple[str, str]]:
    """(node, domain) where the node alone has a route for the domain: a copy of its mail
    there has no route on any other node."""
    out = []
    for name, spec in topology["nodes"].items():
        for domain in (spec or {}).get("next_hops", {}):
            if domain not in topology.get("next_hops", {}):
                out.append((name, domain))
    return sorted(out)


def without_route(
    rng: random.Random, ref: str, recovery: float, topology: dict[str, Any], hold: bool = True
) -> list[Drawn]:
    """PR-5: a message for a domain only its primary routes, held back by the next hop
    (4xx), then the primary killed for longer than a promotion takes: the copy has no
    route and waits in the shadow queue. Two operations: the next hop deferring (not
    when ``hold`` is false: a next-hop fault is on already), and the send and the kill
    (the primary restarts when the node fault ends)."""
    node, domain = rng.choice(unrouted(topology))
    hop = topology["nodes"][node]["next_hops"][domain]
    rcpt = next(r for r in sorted(topology["directory"]["recipients"]) if r.endswith("@" + domain))
    sink = hop["sink"]
    defer = {"sink": {"name": sink, "rcpt": {rcpt: "451 4.3.0 mailbox busy, try later"}}}
    held: Drawn = (f"{sink} refuses RCPT {rcpt} with 451", (defer,), ("script", sink), ())
    steps = (
        {"send": {"id": ref, "via": node, "to": [rcpt], "timeout": "20s"}},
        {"wait": "1s"},
        {"kill": node},
        {"wait": f"{recovery + 1:g}s"},
    )
    label = f"send {ref} via {node} to {rcpt}, kill {node}"
    return [held, (label, steps, ("down", node), ("PR-5",))][0 if hold else 1 :]


#: after each operation in a quiet cluster of a deep scenario, the chance of the attempts
#: drill (at most once a scenario)
ATTEMPTS_SHARE = 0.08
#: how long the attempts drill first lets the cluster be (s): past the slowest heartbeat
#: (4 s) and the model's slack (2 s) after the last delivery, no node holds a copy of
#: another's messages, so none has a cause to open a session to another but a copy
_UNHELD = 7.5


def hop_recipients(topology: dict[str, Any]) -> tuple[str, ...]:
    """The directory's recipients whose domain a next hop of the topology takes."""
    hops = set(topology.get("next_hops", {}))
    return tuple(r for r in topology["directory"]["recipients"] if r.rpartition("@")[2] in hops)


class AttemptsDrawer:
    """CR-7's count of attempts: once no node holds another's copies, a node cut from
    every other node is sent a message; its sessions towards each site are then its copy
    attempts alone, which MaxRetriesFor{Remote,Local}SiteShadow bounds from both sides.
    Drawn from a stream of its own, in deep scenarios on a real clock."""

    def __init__(self, rng: random.Random, topology: dict[str, Any], *, length: int) -> None:
        self.rng = rng
        self.nodes = tuple(topology["nodes"])
        self.deep = length >= 16 and topology.get("clock", "real") != "virtual"
        self.recipients = hop_recipients(topology)
        self.drawn = 0

    def after(
        self, *, quiet: bool, answering: list[str]
    ) -> tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]] | None:
        if not (self.deep and quiet and self.recipients and self.drawn < 1):
            return None
        if len(answering) != len(self.nodes) or len(self.nodes) < 2:
            return None
        if self.rng.random() >= ATTEMPTS_SHARE:
            return None
        self.drawn += 1
        via = self.rng.choice(self.nodes)
        to = self.rng.choice(self.recipients)
        steps: list[dict[str, Any]] = [{"wait": f"{_UNHELD:g}s"}]
        steps += [{"fault": {"link": f"{via}->{n}", "kind": "cut"}} for n in self.nodes if n != via]
        send = {"id": "a1", "via": via, "to": [to], "timeout": "20s"}
        steps += [{"send": send}, {"heal": "all"}, {"wait": "1s"}]
        label = f"attempts: a1 via {via}, cut from every node once none holds another's copies"
        return label, tuple(steps), ("CR-7", "CR-4", "CR-5")
