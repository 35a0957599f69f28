"""Exploration's durability drills: a power cut (the storage fault a target with a lazy
filesystem offers) on a node right after it acknowledged something only it holds.

A 250 promises that what it acknowledges is on disk: a node that loses power a moment
later and comes back on what its disk kept still has it. The generator's own node faults
never cut the power of a node holding mail alone (one node fault at a time), so these
drills do, in a quiet cluster, as one self-contained operation that ends healed:

- **unsynced ack**: the primary, cut from every other node (no shadow reachable,
  RejectMessageOnShadowFailure false) and from its next hops (the message stays
  queued), acknowledges a message and loses power at once; back on its queue database
  it must still deliver it (PR-3; the no-loss invariant FAILs a loss).
- **unsynced copy**: the primary, cut from its next hops, acknowledges a message whose
  copy a shadow acknowledged; every other node loses power at once and comes back, then
  the primary is killed and kept down past the promotion window: the shadow's copy,
  acknowledged before the primary's 250, must be on its disk and be promoted (PR-1).
  The primary then comes back on a new queue database (when the target can wipe), so
  that a copy the shadow lost is a lost message, not one the primary delivers late.
- **full disk** (only in deep exploration's scenarios, from a stream of its own): the
  primary, cut from every other node (RejectMessageOnShadowFailure false), its queue
  disk full, is sent a message: it must refuse what it cannot store (a 250 for a message
  its queue never held is a loss the no-loss invariant FAILs). The model leaves the
  messages sent until the disk is freed to the invariants and judges the others.

Their draws come from a random stream of their own, after the generator's operations,
so that the other operations are drawn as without them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

__all__ = [
    "DISK_SHARE",
    "DURABILITY_SHARE",
    "DurabilityDrawer",
    "DurabilityOperation",
    "Routes",
]

#: an operation as generator.Operation takes it (label, action steps, behaviour IDs):
#: plain, so that the generator imports this module and not the other way round
DurabilityOperation = tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]]

#: after each of the generator's operations in a quiet cluster, the chance of a drill
DURABILITY_SHARE = 0.12

#: at most this many drills a scenario: each waits a recovery or two
_MOST = 1

#: after each operation in a quiet cluster, the chance of a full-disk drill
DISK_SHARE = 0.05
#: the full-disk drill only in scenarios this long (deep exploration's): its unmodelled
#: steps leave the model's rules out, which the bounded slice keeps
DISK_MIN_LENGTH = 16


def _seconds(value: float) -> str:
    return f"{value:g}s"


class Routes:
    """What a topology says of a node's mail: where its shadow copies may go, the sinks
    its next hops are, the recipients it routes; and how to hold its mail back."""

    def __init__(self, topology: dict[str, Any], preference: str = "PreferRemote") -> None:
        self.nodes = tuple(topology["nodes"])
        #: node -> the nodes its shadow copies may go to
        self.shadows = {n: _shadows(topology["nodes"], n, preference) for n in self.nodes}
        hops = topology.get("next_hops", {})
        node_hops = {
            n: {**hops, **((spec or {}).get("next_hops") or {})}
            for n, spec in topology["nodes"].items()
        }
        self.sinks = tuple(
            sorted({h["sink"] for hs in node_hops.values() for h in hs.values() if h.get("sink")})
        )
        recipients = tuple(topology["directory"]["recipients"])
        #: node -> the recipients it has a route for (a node-level next hop only its own)
        self.routed = {
            n: tuple(r for r in recipients if r.rpartition("@")[2] in node_hops[n])
            for n in self.nodes
        }
        #: recipients every node routes: a promoted copy has a route
        self.everywhere = tuple(
            r for r in recipients if all(r in self.routed[n] for n in self.nodes)
        )

    def hold(self, via: str) -> list[dict[str, Any]]:
        """Cut ``via`` from every next hop: what it accepts stays queued on it."""
        return [{"fault": {"link": f"{via}->{s}", "kind": "cut"}} for s in self.sinks]


class DurabilityDrawer:
    """Draws durability drills on a topology (its scenario-file dict); ``can`` says
    which step kinds the target performs."""

    def __init__(
        self,
        rng: random.Random,
        topology: dict[str, Any],
        can: Callable[[str], bool],
        preference: str = "PreferRemote",
        disk_rng: random.Random | None = None,
        bounce_rng: random.Random | None = None,
    ) -> None:
        self.rng = rng
        #: whether an unsynced-ack drill of a deep scenario sends a bounce to three
        #: recipients (its own stream; None: never)
        self.bounce_rng = bounce_rng
        #: the full-disk drill's own stream (None: no such drill)
        self.disk_rng = disk_rng
        self.disk_drawn = 0
        self.routes = Routes(topology, preference)
        self.nodes = self.routes.nodes
        self.shadows = self.routes.shadows
        self.virtual = topology.get("clock") == "virtual"
        self.sinks = self.routes.sinks
        self.routed = self.routes.routed
        self.everywhere = self.routes.everywhere
        self.can = can
        self.sent = 0
        #: power-cut drills drawn so far
        self.cuts = 0

    @property
    def drawn(self) -> int:
        """Drills drawn so far, of every kind."""
        return self.cuts + self.disk_drawn

    def possible(self) -> bool:
        # a virtual clock moves only by `advance`: promotions and retries would wait
        return (
            not self.virtual
            and len(self.nodes) > 1
            and all(self.can(k) for k in ("power_cut", "restart", "kill"))
        )

    def after(
        self, *, quiet: bool, reject: bool, redundancy: bool, recovery: float, length: int = 0
    ) -> DurabilityOperation | None:
        """Now and then (:data:`DURABILITY_SHARE`), a drill after one of the generator's
        operations, in a quiet cluster (no fault on): it ends healed, every node up, as
        the cluster was."""
        drawn = self._power_cut(
            quiet=quiet, reject=reject, redundancy=redundancy, recovery=recovery, length=length
        )
        if drawn is None and length >= DISK_MIN_LENGTH:
            # drawn only when no power cut was: the power cuts' stream stays as it was
            drawn = self._full_disk(quiet=quiet, reject=reject, recovery=recovery)
        return drawn

    def _power_cut(
        self, *, quiet: bool, reject: bool, redundancy: bool, recovery: float, length: int
    ) -> DurabilityOperation | None:
        if not (quiet and self.possible() and self.cuts < _MOST):
            return None
        if self.rng.random() >= DURABILITY_SHARE:
            return None
        kinds = []
        if not reject or self.can("set_settings"):
            kinds.append("ack")
        if redundancy and self.everywhere and any(self.shadows.values()):
            kinds.append("copy")
        if not kinds:
            return None
        kind = self.rng.choice(kinds)
        # in deep scenarios, half the time the lone message is a bounce to three recipients
        # (a rare, valid envelope a queue's loader may misread when it reads it back)
        bounce = (
            self.bounce_rng is not None
            and length >= DISK_MIN_LENGTH
            and self.bounce_rng.random() < 0.5
        )
        drawn = (
            self.unsynced_ack(reject, recovery, bounce=bounce)
            if kind == "ack"
            else self.unsynced_copy(recovery)
        )
        self.cuts += 1
        return drawn

    def _full_disk(
        self, *, quiet: bool, reject: bool, recovery: float
    ) -> DurabilityOperation | None:
        """A message sent to a node whose queue disk is full, no shadow reachable."""
        rng = self.disk_rng
        if rng is None or not (quiet and not self.virtual and self.disk_drawn < _MOST):
            return None
        if not all(self.can(k) for k in ("disk_full", "disk_ok")) or len(self.nodes) < 2:
            return None
        if rng.random() >= DISK_SHARE or (reject and not self.can("set_settings")):
            return None
        vias = [n for n in self.nodes if self.routed[n]]
        if not vias:
            return None
        self.disk_drawn += 1
        via = rng.choice(vias)
        steps: list[dict[str, Any]] = []
        if reject:  # a 451 for want of a copy would hide the full disk's answer
            steps.append({"set_settings": {"values": {"RejectMessageOnShadowFailure": False}}})
        steps += [{"fault": {"link": f"{via}->{n}", "kind": "cut"}} for n in self.nodes if n != via]
        ref, send = self._send(via, self.routed[via], rng)
        steps += [{"disk_full": via}, send, {"disk_ok": via}, {"heal": "all"}]
        if reject:
            steps.append({"set_settings": {"values": {"RejectMessageOnShadowFailure": True}}})
        steps.append({"wait": _seconds(recovery)})
        label = f"durability: {ref} via {via} alone, its queue disk full"
        return (label, tuple(steps), ("PR-3",))

    def _send(
        self, via: str, choices: Sequence[str], rng: random.Random | None = None
    ) -> tuple[str, dict[str, Any]]:
        rng = rng or self.rng
        self.sent += 1
        ref = f"d{self.sent}"
        to = rng.sample(list(choices), min(rng.choice((1, 2)), len(choices)))
        spec: dict[str, Any] = {"id": ref, "via": via, "to": to, "timeout": "20s"}
        size = rng.choice((None, 4_000, 40_000))
        if size:
            spec["size"] = size
        return ref, {"send": spec}

    def unsynced_ack(
        self, reject: bool, recovery: float, *, bounce: bool = False
    ) -> DurabilityOperation | None:
        """PR-3: a message only the primary holds, its power cut right after the 250
        (``bounce``: a bounce, the null reverse-path, to three recipients)."""
        vias = [n for n in self.nodes if self.routed[n]]
        if not vias:
            return None
        via = self.rng.choice(vias)
        steps: list[dict[str, Any]] = []
        if reject:  # a 451 would leave nothing to keep
            steps.append({"set_settings": {"values": {"RejectMessageOnShadowFailure": False}}})
        steps += [{"fault": {"link": f"{via}->{n}", "kind": "cut"}} for n in self.nodes if n != via]
        steps += self.routes.hold(via)
        ref, send = self._send(via, self.routed[via])
        if bounce:
            # the node's recipients, then others of the first's domain (a sink takes any)
            domain = send["send"]["to"][0].rpartition("@")[2]
            others = [f"owner{n}@{domain}" for n in (1, 2, 3)]
            send["send"]["to"] = [*self.routed[via], *others][:3]
            send["send"]["from"] = ""
        steps += [send, {"power_cut": via}, {"restart": via}, {"heal": "all"}]
        if reject:
            steps.append({"set_settings": {"values": {"RejectMessageOnShadowFailure": True}}})
        steps.append({"wait": _seconds(recovery)})
        what = "bounce " if bounce else ""
        label = f"durability: {what}{ref} via {via} alone, power cut after its 250"
        return (label, tuple(steps), ("PR-3", "CR-5"))

    def unsynced_copy(self, recovery: float) -> DurabilityOperation:
        """PR-1: the nodes that may hold the copy lose power right after it was
        acknowledged; the primary then dies and stays down past the promotion window."""
        via = self.rng.choice([n for n in self.nodes if self.shadows[n]])
        others = sorted(self.shadows[via])
        steps = self.routes.hold(via)
        ref, send = self._send(via, self.everywhere)
        steps.append(send)
        steps += [{"power_cut": n} for n in others]
        steps += [{"restart": n} for n in others]
        steps += [{"kill": via}, {"wait": _seconds(round(recovery + 1.0, 1))}]
        # back on a new queue database: only the shadow's copy can deliver the message
        steps.append({"wipe": via} if self.can("wipe") else {"restart": via})
        steps += [{"heal": "all"}, {"wait": _seconds(recovery)}]
        label = f"durability: {ref} via {via}, its shadows' power cut after the copy"
        return (label, tuple(steps), ("PR-1", "CR-1"))


def _shadows(nodes: dict[str, Any], via: str, preference: str) -> set[str]:
    """The nodes ``via``'s shadow copies may go to (CR-7): its DAG's members the
    preference allows, or outside a DAG the nodes of its own site; empty: no copy."""
    me = nodes[via] or {}
    others = {n: spec or {} for n, spec in nodes.items() if n != via}
    if me.get("dag") is None:
        return {
            n
            for n, spec in others.items()
            if spec.get("dag") is None and spec.get("site") == me.get("site")
        }
    members = {n: spec for n, spec in others.items() if spec.get("dag") == me["dag"]}
    if len({spec.get("site") for spec in members.values()} | {me.get("site")}) == 1:
        return set(members)
    local = {n for n, spec in members.items() if spec.get("site") == me.get("site")}
    if preference == "LocalOnly":
        return local
    if preference == "RemoteOnly":
        return set(members) - local
    return set(members)
