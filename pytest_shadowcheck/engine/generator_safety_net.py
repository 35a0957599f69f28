"""Exploration's Safety Net drills: sequences of operations, on a virtual clock, that put
a message where only a Shadow Safety Net or an expiring shadow copy decides its fate.

- ``broadcast`` (SN-7): a message delivered and seen in its shadow's Shadow Safety Net;
  its primary killed; a resubmission asked of the shadow; the clock moved to just short
  of PrimarySafetyNetUnavailableTimeout (nothing may come back yet), then past it (the
  broadcast must bring it back); sometimes the coordinating node restarted in between.
- ``recreated`` (SN-8): a message delivered before its primary's queue database is
  recreated, one after; a resubmission of the hour before: the first comes back from the
  Shadow Safety Net, the second from the primary alone.
- ``expiry`` (SN-4): the primary's link to the next hop cut, the primary keeping its
  message (MessageExpirationTimeout 7 days); the clock moved to 30 seconds short of
  the shadow's SafetyNetHoldTime + MessageExpirationTimeout: its copy is still there.
- ``window`` (SN-5): four messages, the second processed a second after the first and
  the fourth a second after the third, the clock standing still at each delivery; a
  resubmission of the window from the second's moment to the fourth's: the second and
  the third come back; the first (a second early) and the fourth (at the window's end,
  which is excluded) do not.
- ``taken`` (SN-5): a message for two recipients of two databases, the next hop
  deferring the first (451) until told to accept and taking the second; after the retry,
  a resubmission for the second's database must bring its copy back: the Safety Net
  keeps a message for every recipient it was delivered to, not only those of the attempt
  that completed it.

Each drill is several :class:`Drawn` operations, so that shrinking can keep a part of it;
the snapshots of the Shadow Safety Net it takes are the model's evidence.
"""

from __future__ import annotations

import random
from typing import Any, NamedTuple

from pytest_shadowcheck.checks.model.check import DEFAULT_SLACK

__all__ = ["DRILLS", "SAFETY_NET_CAPABILITIES", "Drawn", "safety_net_drill"]


class Drawn(NamedTuple):
    """One operation of a drill, the fields of generator.Operation in its order (this
    module does not import the generator, which imports it)."""

    label: str
    steps: tuple[dict[str, Any], ...]
    effect: tuple[str, str] = ("", "")
    behaviours: tuple[str, ...] = ()


#: what any drill needs of the target
SAFETY_NET_CAPABILITIES = frozenset({"virtual_clock", "control_api", "set_settings"})
#: drill -> the further capabilities it needs
DRILLS: dict[str, frozenset[str]] = {
    "broadcast": frozenset({"kill", "restart"}),
    "recreated": frozenset({"kill", "wipe_queue_db"}),
    "expiry": frozenset(),
    "window": frozenset(),
    "taken": frozenset(),
}


def _seconds(value: float) -> str:
    return f"{value:g}s"


def _delivered(ref: str, via: str, rcpt: str, shadow: str, ids: tuple[str, ...]) -> Drawn:
    """Send ``ref`` through ``via``, wait for its delivery, move the clock one heartbeat's
    worth so that the shadow learns of it, and look at the shadow's Shadow Safety Net."""
    steps: tuple[dict[str, Any], ...] = (
        {"send": {"id": ref, "via": via, "to": [rcpt], "timeout": "20s"}},
        {"wait": "3s"},
        {"advance": "2m"},
        {"wait": "2s"},
        {"snapshot": {"node": shadow, "queue": "safetynet_shadow"}},
    )
    return Drawn(f"send {ref} via {via}, delivered, seen by {shadow}", steps, behaviours=ids)


def _processed(ref: str, via: str, rcpt: str, then: float) -> Drawn:
    """Send ``ref`` through ``via`` and wait for its delivery, the virtual clock standing
    still (the moment it was processed is exact), then move the clock ``then`` seconds."""
    steps: tuple[dict[str, Any], ...] = (
        {"send": {"id": ref, "via": via, "to": [rcpt], "timeout": "20s"}},
        {"wait": {"delivered": ref, "timeout": "10s"}},
        # the model places a processing up to half a second after the sink's reply: an
        # advance in that time would leave the moment uncertain against the window's edges
        {"wait": "1s"},
        {"advance": _seconds(then)},
    )
    return Drawn(
        f"send {ref} via {via}, delivered; advance {_seconds(then)}", steps, behaviours=("SN-5",)
    )


def _window_drill(
    rng: random.Random, ref: str, primary: str, other: str, rcpt: str, database: str
) -> list[Drawn]:
    """Messages processed at T, T+1s, T+1s+gap and T+2s+gap; a resubmission for
    [T+1s, T+2s+gap), asked a minute later: its edges fall on the second and fourth."""
    gap = float(rng.choice((60, 600, 1800)))
    refs = [ref, f"{ref}b", f"{ref}c", f"{ref}d"]
    # settled before the first send: the model judges no redelivery across a change
    day = ({"set_settings": {"values": {"SafetyNetHoldTime": "1d"}}}, {"wait": "3s"})
    ops = [Drawn("SafetyNetHoldTime=1d", day, behaviours=("SN-3",))]
    ops += [
        _processed(r, primary, rcpt, then)
        for r, then in zip(refs, (1.0, gap, 1.0, 60.0), strict=True)
    ]
    start, end = _seconds(60.0 + gap + 1.0), _seconds(60.0)
    # asked of the primary, or of another node that must ask the primary, once
    asked = rng.choice((primary, other))
    request = {
        "resubmit": {"node": asked, "database": database, "start": f"-{start}", "end": f"-{end}"}
    }
    ops.append(
        Drawn(
            f"resubmit {database} on {asked}, {refs[1]} to {refs[3]}",
            # until the request is served and its copies delivered (5 s at most, as the
            # fixed wait it was; the 3 s after the advance keep the run past SN-5's
            # deadline), then heartbeats on the moving clock: a request asked again would
            # be served again
            (
                request,
                {"wait": {"until": "quiet", "timeout": "5s"}},
                {"advance": "5m"},
                {"wait": "3s"},
            ),
            behaviours=("SN-5",),
        )
    )
    return ops


def _taken_first_drill(
    rng: random.Random, ref: str, primary: str, databases: dict[str, str], sink: str
) -> list[Drawn]:
    """The next hop defers one recipient and takes another of another database; after
    the retry, a resubmission for the taken one's database must bring its copy back."""
    deferred, taken = rng.sample(sorted(databases), 2)
    while databases[deferred] == databases[taken]:
        deferred, taken = rng.sample(sorted(databases), 2)
    day = ({"set_settings": {"values": {"SafetyNetHoldTime": "1d"}}}, {"wait": "3s"})
    busy = "451 4.2.1 mailbox busy, try later"
    steps: tuple[dict[str, Any], ...] = (
        {"sink": {"name": sink, "rcpt": {deferred: busy}}},
        {"send": {"id": ref, "via": primary, "to": [deferred, taken], "timeout": "20s"}},
        {"wait": {"delivered": ref, "timeout": "10s"}},
        {"wait": "1s"},
        {"sink": {"name": sink, "reply": "accept"}},
        # on a virtual clock the retry waits for the clock
        {"advance": "1m"},
        {"wait": "3s"},
    )
    database = databases[taken]
    # a minute on again: the message's last delivery (the retry) is inside the window too
    request = {"resubmit": {"node": primary, "database": database, "start": "-1h", "end": "now"}}
    return [
        Drawn("SafetyNetHoldTime=1d", day, behaviours=("SN-3",)),
        Drawn(f"{sink} defers {deferred}; send {ref} via {primary}", steps, behaviours=("SN-5",)),
        Drawn(
            f"resubmit {database} on {primary}, {taken} taken first",
            ({"advance": "1m"}, request, {"wait": "5s"}),
            behaviours=("SN-5",),
        ),
    ]


def safety_net_drill(
    rng: random.Random,
    *,
    kinds: list[str],
    nodes: tuple[str, ...],
    databases: dict[str, str],
    sinks: tuple[str, ...],
    ref: str,
    recovery: float,
    hold: float,
    beat: float = 1.0,
) -> list[Drawn]:
    """The operations of one drill of a kind among ``kinds`` (those the target can do):
    ``ref`` names its first message (a second gets ``ref`` + "b"); ``databases`` maps a
    recipient to its mailbox database; ``hold`` is SafetyNetHoldTime and ``beat``
    ShadowHeartbeatFrequency in force."""
    kind = rng.choice(kinds)
    primary = rng.choice(nodes)
    shadow = rng.choice([n for n in nodes if n != primary])
    rcpt = rng.choice(sorted(databases))
    database = databases[rcpt]
    # after a node's return: until the cluster holds nothing, the recovery at most
    wait = {"wait": {"until": "quiet", "timeout": _seconds(recovery)}}
    day = {"set_settings": {"values": {"SafetyNetHoldTime": "1d"}}}
    # a minute on, so that the window's end (now, excluded) is past the entries' stamps
    request = {"resubmit": {"node": shadow, "database": database, "start": "-1h", "end": "now"}}
    ask: tuple[dict[str, Any], ...] = ({"advance": "1m"}, request)
    if kind == "broadcast":
        ops = [
            Drawn("SafetyNetHoldTime=1d", (day,), behaviours=("SN-3",)),
            _delivered(ref, primary, rcpt, shadow, ("SN-2",)),
            Drawn(f"kill {primary}", ({"kill": primary},), ("down", primary), ("SN-7",)),
        ]
        asked = ask
        if rng.random() < 0.5:
            # the request must survive a restart of the node coordinating it
            asked += ({"restart": shadow}, wait)
        ops += [
            Drawn(f"resubmit {database} on {shadow}", asked, behaviours=("SN-7",)),
            Drawn(
                "advance 11h50m",
                ({"advance": "11h + 50m"}, {"wait": "2s"}),
                behaviours=("SN-7",),
            ),
            # the broadcast's due (a heartbeat, twice the model's slack and a delivery)
            # and 3 s more before the primary is back, so that the harness's own
            # lateness, which the model grants, leaves the window judged
            Drawn(
                "advance 20m",
                ({"advance": "20m"}, {"wait": _seconds(beat + 2 * DEFAULT_SLACK + 1.0 + 3.0)}),
                behaviours=("SN-7",),
            ),
            Drawn(f"restart {primary}", ({"restart": primary}, wait), ("up", primary)),
        ]
        return ops
    if kind == "taken":
        return _taken_first_drill(rng, ref, primary, databases, sinks[0])
    if kind == "window":
        return _window_drill(rng, ref, primary, shadow, rcpt, database)
    if kind == "recreated":
        request["resubmit"]["node"] = primary
        return [
            Drawn("SafetyNetHoldTime=1d", (day,), behaviours=("SN-3",)),
            _delivered(ref, primary, rcpt, shadow, ("SN-2",)),
            Drawn(
                f"wipe {primary}",
                # waits of more than the model's slack around the second advance: the
                # new database's creation is then known to be before it, and the message
                # after it is not sent at the node's return (SN-8 judges it)
                (
                    {"advance": "5m"},
                    {"wipe": primary},
                    wait,
                    {"wait": "3s"},
                    {"advance": "5m"},
                    {"wait": "3s"},
                ),
                ("up", primary),
                ("SN-8",),
            ),
            _delivered(f"{ref}b", primary, rcpt, shadow, ("SN-2",)),
            Drawn(
                f"resubmit {database} on {primary}", (*ask, {"wait": "5s"}), behaviours=("SN-8",)
            ),
        ]
    # expiry: the primary keeps its message a week; its shadow's copy must outlive
    # SafetyNetHoldTime + MessageExpirationTimeout (2 days) less 30 seconds (a copy
    # dropped a minute early is gone by then)
    link = f"{primary}->{rng.choice(sinks)}"
    settings = (
        # first the retries due: on a virtual clock a message waiting for its next
        # attempt waits for an advance, and one still queued when the clock passes 2
        # days would expire (rightly, but the no-loss invariant counts it lost)
        {"advance": "1m"},
        wait,
        {"set_settings": {"nodes": [primary], "values": {"MessageExpirationTimeout": "7d"}}},
        {"set_settings": {"nodes": [shadow], "values": {"MessageExpirationTimeout": "2d"}}},
        {"fault": {"link": link, "kind": "cut"}},
        # the changes settled before the send (the model judges no copy across a change)
        {"wait": "3s"},
    )
    kept = _seconds(hold + 2 * 86400.0 - 30.0)
    return [
        Drawn(f"cut {link}, expiry 7d/2d", settings, ("cut", link), ("SN-4",)),
        Drawn(
            f"send {ref} via {primary}",
            ({"send": {"id": ref, "via": primary, "to": [rcpt], "timeout": "20s"}}, {"wait": "1s"}),
            behaviours=("CR-1",),
        ),
        Drawn(f"advance {kept}", ({"advance": kept}, {"wait": "2s"}), behaviours=("SN-4",)),
        Drawn("advance 4m", ({"advance": "4m"}, {"wait": "2s"}), behaviours=("SN-4",)),
        Drawn(f"heal {link}", ({"heal": link}, wait), ("heal", link)),
    ]
