"""XQDISCARD hand-out: paged to fit aiosmtplib's 32 KiB reply limit, and a
notification counts as handed over only once the shadow confirmed it (ACK)."""

from __future__ import annotations

import smtplib
import time
from collections.abc import Callable

from clusterkit import Cluster, Sink, make_message, two_nodes, wait_until
from test_protocol import Wire, plain

from reference_impl.credentials import node_password

Factory = Callable[..., Cluster]
HOLD = "451 4.3.0 mailbox busy"


def _as_mbx2(cluster: Cluster) -> Wire:
    wire = Wire(cluster.nodes["mbx1"].smtp)
    wire.cmd("EHLO mbx2")
    assert wire.cmd(f"AUTH PLAIN {plain('mbx2', node_password('s3cret', 'mbx2'))}")[:3] == "235"
    return wire


def _discards(reply: str) -> list[str]:
    return [line.split()[1] for line in reply.splitlines() if line.startswith("250-DISCARD ")]


def test_a_notification_is_handed_over_once_the_shadow_confirms_it(
    cluster_factory: Factory, sink: Sink
) -> None:
    # mbx2's own heartbeat stays away (an hour), so only this test's sessions ask
    cluster = cluster_factory(
        {**two_nodes(sink, ShadowHeartbeatFrequency=3600), "secret": "s3cret"}
    )
    for _ in range(3):
        assert cluster.send("mbx1", ["alice@corp.test"])[0] == 250
    wait_until(lambda: len(cluster.api("mbx1", "GET", "/discard-events")) == 3)
    first = _discards(_as_mbx2(cluster).cmd("XQDISCARD"))
    assert len(first) == 3
    # that reply never reached the shadow (the session ended): offered again
    wire = _as_mbx2(cluster)
    assert _discards(wire.cmd("XQDISCARD")) == first
    events = cluster.api("mbx1", "GET", "/discard-events")
    assert [e["handed_out_at"] for e in events] == [None] * 3
    # the shadow acted on them: ACK confirms, and the next page is empty
    confirmed = wire.cmd("XQDISCARD 1000 ACK")
    assert confirmed.splitlines()[-1] == "250 0 discard notifications for mbx2"
    events = cluster.api("mbx1", "GET", "/discard-events")
    assert all(e["handed_out_at"] is not None for e in events)
    assert _discards(_as_mbx2(cluster).cmd("XQDISCARD")) == []
    assert wire.cmd("XQDISCARD x ACK").startswith("501 5.5.4 Syntax: XQDISCARD [max] [ACK]")


def test_many_notifications_reach_the_shadow_in_pages(cluster_factory: Factory, sink: Sink) -> None:
    """800 notifications at once (a shadow that was away): more than one XQDISCARD
    reply can carry; every copy still moves to the Shadow Safety Net."""
    count = 800
    cluster = cluster_factory(
        two_nodes(sink, TransientFailureRetryInterval=1, ShadowHeartbeatFrequency=0.5)
    )
    sink.deferred["*"] = HOLD
    host, port = cluster.nodes["mbx1"].smtp
    with smtplib.SMTP(host, port, timeout=60) as client:
        for _ in range(count):
            client.sendmail("a@ext.test", ["alice@corp.test"], make_message().encode())
    assert len(cluster.shadows("mbx2")) == count
    cluster.pause("mbx2")  # away while the primary delivers everything
    del sink.deferred["*"]
    wait_until(lambda: len(sink.received) >= count, timeout=120)
    wait_until(lambda: not cluster.active("mbx1"), timeout=60)
    cluster.resume("mbx2")
    wait_until(lambda: not cluster.shadows("mbx2"), timeout=30)
    assert len(cluster.safety_net("mbx2", "shadow")) == count
    # handed out once the shadow confirms it acted on them, which follows its moves
    wait_until(
        lambda: all(e["handed_out_at"] for e in cluster.api("mbx1", "GET", "/discard-events"))
    )
    assert len(cluster.api("mbx1", "GET", "/discard-events")) == count
    time.sleep(1.0)  # a few more heartbeats: nothing is promoted, nothing delivered twice
    assert len(sink.received) == count
