"""Exploration's operations for placement and forks (CR-7, CR-10, bounces): topologies
spanning AD sites and DAGs with a drawn ShadowMessagePreferenceSetting, a next hop that
refuses one recipient for good (550, or 500 at the edge of the 5xx class), and a
bounce (the null reverse path) sent in like any message.

Plain functions of a random generator and the topology's names, returning an operation's
fields (``Operation(*drawn)``); generator.plan() draws them by weight (engine/generator.py
owns the drawing).
"""

from __future__ import annotations

import random
from typing import Any

#: an operation as generator.Operation takes it: (label, steps, effect, behaviours)
Drawn = tuple[str, tuple[dict[str, Any], ...], tuple[str, str], tuple[str, ...]]

__all__ = ["TOPOLOGIES", "Drawn", "bounce_send", "refuse_for_good", "start_settings"]

#: bundled topologies that place copies by site and DAG (a DAG over two AD sites; three
#: servers in no DAG over two sites, two boundaries) and fork a message over next hops
TOPOLOGIES = ("creation-two-site-dag", "creation-ad-site", "creation-forks")

_PREFERENCES = ("PreferRemote", "PreferRemote", "LocalOnly", "RemoteOnly")
#: refusals for good a next hop gives one recipient
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


def refuse_for_good(rng: random.Random, topology: dict[str, Any]) -> Drawn:
    """A next hop refusing one recipient's RCPT for good, until it is told to accept;
    where the senders' domain has a next hop of its own (DSNs go there), sometimes that
    one defers too, for as long: the DSN is held."""
    hops = topology.get("next_hops", {})
    recipients = sorted(topology["directory"]["recipients"])
    rcpt = rng.choice(recipients)
    sink = hops.get(rcpt.rsplit("@", 1)[-1], {}).get("sink") or "mailbox"
    reply = rng.choice(_PERMANENT)
    dsn = hops.get(_SENDERS_DOMAIN, {}).get("sink")
    if dsn and dsn != sink and rng.random() < 0.5:
        steps = (
            {"sink": {"name": sink, "rcpt": {rcpt: reply}}},
            {"sink": {"name": dsn, "data": _DEFER}},
        )
        label = f"{sink} refuses RCPT {rcpt} with {reply[:3]}, {dsn} defers the DSN"
        # both sinks scripted: the effect names them both (generator._State splits it)
        return label, steps, ("script", f"{sink},{dsn}"), ("CR-10",)
    step = {"sink": {"name": sink, "rcpt": {rcpt: reply}}}
    label = f"{sink} refuses RCPT {rcpt} with {reply[:3]}"
    return label, (step,), ("script", sink), ("CR-10",)


def bounce_send(
    rng: random.Random, ref: str, answering: list[str], recipients: tuple[str, ...]
) -> Drawn:
    """A bounce sent in: MAIL FROM:<>, accepted and copied like any message."""
    spec = {
        "id": ref,
        "via": rng.choice(answering),
        "from": "",
        "to": [rng.choice(recipients)],
        "timeout": "20s",
    }
    return f"send bounce {ref} via {spec['via']}", ({"send": spec},), ("", ""), ("CR-1",)
