"""The 2010 profile: the sending hop keeps the shadow. XS-2, XS-4, XS-6, DI-7, PR-6.

Chicago -> New York -> London -> Dublin (the sink): three 2010 nodes of one
boundary, each relaying to the next through the peer table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from clusterkit import Cluster, Sink, wait_until

Factory = Callable[..., Cluster]
HOLD = "451 4.3.0 Dublin is busy"


def chain(sink: Sink, **settings: Any) -> dict[str, Any]:
    return {
        "boundary": "org",
        "profile": "2010",
        "nodes": {
            "chicago": {"site": "us", "next_hops": {"dublin.test": {"node": "newyork"}}},
            "newyork": {"site": "us", "next_hops": {"dublin.test": {"node": "london"}}},
            "london": {"site": "us", "next_hops": {"dublin.test": sink.address}},
        },
        "settings": {
            "ShadowHeartbeatFrequency": 0.3,
            "TransientFailureRetryInterval": 0.3,
            "SendConnectionInactivityTimeout": 3,
            "MaxAcknowledgementDelay": 1.0,
            **settings,
        },
    }


def test_chicago_discards_once_new_york_relayed_whatever_london_does(
    cluster_factory: Factory, sink: Sink
) -> None:
    """DI-7: London cannot deliver to Dublin; Chicago drops its shadow anyway,
    New York keeps its own (London has not relayed yet)."""
    sink.deferred["*"] = HOLD
    cluster = cluster_factory(chain(sink))
    code, _, message_id = cluster.send("chicago", ["paddy@dublin.test"])
    assert code == 250
    wait_until(lambda: cluster.active("london"))
    wait_until(lambda: cluster.shadows("chicago") == [])
    newyork_shadows = cluster.shadows("newyork")
    assert [(s["primary_node"], s["message_id"]) for s in newyork_shadows] == [
        ("london", message_id)
    ]
    del sink.deferred["*"]
    wait_until(lambda: sink.of(message_id))
    wait_until(lambda: cluster.shadows("newyork") == [])
    # XS-6: a 2010 querier deletes the shadows; nothing goes to a Safety Net.
    assert cluster.safety_net("chicago", "shadow") == []


def test_discard_exchange_closes_each_session(cluster_factory: Factory, sink: Sink) -> None:
    """XS-6: with heartbeats out of the way, the next relay session picks up the discard."""
    cluster = cluster_factory(chain(sink, ShadowHeartbeatFrequency=3600))
    code, _, first = cluster.send("chicago", ["paddy@dublin.test"])
    assert code == 250
    wait_until(lambda: sink.of(first))
    wait_until(lambda: cluster.api("newyork", "GET", "/discard-events"))
    assert [s["message_id"] for s in cluster.shadows("chicago")] == [first]
    code, _, second = cluster.send("chicago", ["paddy@dublin.test"])
    assert code == 250
    wait_until(lambda: sink.of(second))
    wait_until(lambda: first not in [s["message_id"] for s in cluster.shadows("chicago")])


def test_delayed_acknowledgement(cluster_factory: Factory, sink: Sink) -> None:
    """XS-4: a sender without shadow support waits for the next hop, or for
    MaxAcknowledgementDelay when the next hop cannot take the message."""
    spec = chain(sink, MaxAcknowledgementDelay=1.5)
    spec["nodes"] = {"london": spec["nodes"]["london"]}
    cluster = cluster_factory(spec)
    started = time.monotonic()
    code, _, message_id = cluster.send("london", ["paddy@dublin.test"])
    assert code == 250
    assert sink.of(message_id), "250 came before the next hop had the message"
    sink.deferred["*"] = HOLD
    started = time.monotonic()
    code, _, held = cluster.send("london", ["paddy@dublin.test"])
    waited = time.monotonic() - started
    assert code == 250
    assert waited >= 1.4
    assert sink.of(held) == []


def test_no_xshadow_towards_a_hop_that_does_not_offer_it(
    cluster_factory: Factory, sink: Sink
) -> None:
    """XS-2: New York has shadow redundancy off: Chicago sends plainly and keeps nothing."""
    sink.deferred["*"] = HOLD
    cluster = cluster_factory(chain(sink))
    cluster.api("newyork", "PUT", "/settings", {"ShadowRedundancyEnabled": False})
    code, _, _ = cluster.send("chicago", ["paddy@dublin.test"])
    assert code == 250
    wait_until(lambda: cluster.active("london"))
    # London delays its 250 to New York (no XSHADOW from it either), then all is handed on.
    wait_until(lambda: cluster.active("newyork") == [])
    assert cluster.shadows("chicago") == []


def test_heartbeat_retry_count_decides_failure(cluster_factory: Factory, sink: Sink) -> None:
    """PR-6: three consecutive heartbeat time-outs and the primary counts as failed."""
    sink.deferred["*"] = HOLD
    spec = chain(
        sink,
        ShadowHeartbeatTimeoutInterval=0.4,
        ShadowHeartbeatRetryCount=3,
        ShadowResubmitTimeSpan=3600,
    )
    cluster = cluster_factory(spec)
    code, _, message_id = cluster.send("chicago", ["paddy@dublin.test"])
    assert code == 250
    wait_until(lambda: cluster.shadows("chicago"))
    # an alternative route, past New York: without one the copy stays a shadow (PR-5)
    cluster.api("chicago", "PUT", "/topology/next_hops", {"dublin.test": {"node": "london"}})
    delivered_before = cluster.api("chicago", "GET", "/stats")["delivered"]
    cluster.pause("newyork")
    paused_at = time.monotonic()
    wait_until(lambda: cluster.api("chicago", "GET", "/stats")["promoted"] == 1)
    assert time.monotonic() - paused_at >= 3 * 0.4
    # No copy kept for New York is left (relaying the promoted message on to London
    # under the handshake may already have made a copy kept for London).
    assert [s for s in cluster.shadows("chicago") if s["primary_node"] == "newyork"] == []
    # the promoted copy goes on to London by the other route (it may already be gone
    # from Chicago's active queue by the time we look, so count the hand-over)
    wait_until(lambda: cluster.api("chicago", "GET", "/stats")["delivered"] == delivered_before + 1)
    assert any(m["message_id"] == message_id for m in cluster.active("london"))


def test_copy_with_no_route_but_the_failed_primary_waits_for_its_new_database(
    cluster_factory: Factory, sink: Sink
) -> None:
    """PR-5 (2010): Chicago reaches Dublin only through New York, which holds the message
    (Dublin defers). New York fails: the copy has no alternative route, so it stays a
    shadow; New York back with a new queue database is that route, and the copy goes."""
    sink.deferred["*"] = HOLD
    spec = chain(
        sink,
        ShadowHeartbeatTimeoutInterval=0.4,
        ShadowHeartbeatRetryCount=2,
        ShadowResubmitTimeSpan=3600,
    )
    del spec["nodes"]["london"]
    spec["nodes"]["newyork"]["next_hops"] = {"dublin.test": sink.address}
    cluster = cluster_factory(spec)
    code, _, message_id = cluster.send("chicago", ["paddy@dublin.test"])
    assert code == 250
    wait_until(lambda: cluster.shadows("chicago"))
    cluster.kill("newyork")
    waiting = wait_until(
        lambda: [s for s in cluster.shadows("chicago") if s["state"] == "awaiting_route"]
    )
    assert [s["message_id"] for s in waiting] == [message_id]
    assert cluster.active("chicago") == []
    assert cluster.api("chicago", "GET", "/stats")["promoted"] == 0
    del sink.deferred["*"]
    cluster.restart("newyork", wipe=True)
    delivered = wait_until(lambda: sink.of(message_id))
    assert [r.helo for r in delivered] == ["newyork"]
    assert cluster.api("chicago", "GET", "/stats")["promoted"] == 1
