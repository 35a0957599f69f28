"""Promotion and outages: PR-1..PR-5, kill -9 mid-transaction, restarts same and wiped.

The sink defers (4xx) while the primary is meant to hold the message, so a
killed primary takes an undelivered message with it and only the shadow's
copy can save it.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from clusterkit import Cluster, Sink, two_nodes, wait_until

Factory = Callable[..., Cluster]
HOLD = "451 4.3.0 mailbox busy"


def _accepted_then_primary_killed(cluster: Cluster, sink: Sink) -> str:
    sink.deferred["*"] = HOLD
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert cluster.shadows("mbx2")
    cluster.kill("mbx1")
    del sink.deferred["*"]
    return message_id


def test_shadow_promotes_after_resubmit_time_span(cluster_factory: Factory, sink: Sink) -> None:
    """PR-1: the primary is unreachable for ShadowResubmitTimeSpan (2 s)."""
    cluster = cluster_factory(
        two_nodes(sink, ShadowResubmitTimeSpan=2, ShadowHeartbeatFrequency=0.3)
    )
    message_id = _accepted_then_primary_killed(cluster, sink)
    killed_at = time.monotonic()
    delivered = wait_until(lambda: sink.of(message_id))[0]
    assert delivered.helo == "mbx2"
    assert delivered.at - killed_at >= 1.9
    assert cluster.api("mbx2", "GET", "/stats")["promoted"] == 1
    assert cluster.shadows("mbx2") == []


def test_a_shadow_back_from_its_own_outage_counts_the_span_from_its_return(
    cluster_factory: Factory, sink: Sink
) -> None:
    """PR-1 counts the time the shadow could not open a session to the primary: while it
    was down itself it tried nothing, so a shadow back after an outage longer than
    ShadowResubmitTimeSpan whose first heartbeat fails does not promote at once."""
    cluster = cluster_factory(
        two_nodes(sink, ShadowResubmitTimeSpan=2, ShadowHeartbeatFrequency=0.3)
    )
    sink.deferred["*"] = HOLD
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert cluster.shadows("mbx2")
    cluster.kill("mbx2")
    time.sleep(2.5)  # the shadow's own outage, longer than the span
    cluster.kill("mbx1")
    del sink.deferred["*"]
    cluster.restart("mbx2")
    back_at = time.monotonic()
    delivered = wait_until(lambda: sink.of(message_id))[0]
    assert delivered.helo == "mbx2"
    assert delivered.at - back_at >= 1.9


def test_new_queue_database_promotes_at_once(cluster_factory: Factory, sink: Sink) -> None:
    """PR-2: the primary returns wiped; the shadow notices the new ID on its next heartbeat."""
    cluster = cluster_factory(
        two_nodes(sink, ShadowResubmitTimeSpan=3600, ShadowHeartbeatFrequency=0.3)
    )
    old_id = cluster.api("mbx1", "GET", "/queue-db")["id"]
    message_id = _accepted_then_primary_killed(cluster, sink)
    cluster.restart("mbx1", wipe=True)
    assert cluster.api("mbx1", "GET", "/queue-db")["id"] != old_id
    returned_at = time.monotonic()
    delivered = wait_until(lambda: sink.of(message_id), timeout=10)[0]
    assert delivered.helo == "mbx2"
    assert delivered.at - returned_at < 5  # nowhere near the hour of ShadowResubmitTimeSpan


def test_primary_back_with_same_database_after_promotion_delivers_again(
    cluster_factory: Factory, sink: Sink
) -> None:
    """PR-3: duplicates are expected (and visible to the next hop)."""
    cluster = cluster_factory(
        two_nodes(sink, ShadowResubmitTimeSpan=1, ShadowHeartbeatFrequency=0.3)
    )
    message_id = _accepted_then_primary_killed(cluster, sink)
    wait_until(lambda: sink.of(message_id))
    cluster.restart("mbx1")
    both = wait_until(lambda: len(sink.of(message_id)) == 2 and sink.of(message_id))
    assert sorted(r.helo for r in both) == ["mbx1", "mbx2"]


def test_primary_back_with_same_database_in_time_delivers_once(
    cluster_factory: Factory, sink: Sink
) -> None:
    """Durability: kill -9 and restart on the same queue, before the shadow promotes."""
    cluster = cluster_factory(two_nodes(sink, ShadowResubmitTimeSpan=3600))
    message_id = _accepted_then_primary_killed(cluster, sink)
    cluster.restart("mbx1")
    wait_until(lambda: sink.of(message_id))
    wait_until(lambda: cluster.safety_net("mbx2", "shadow"))
    time.sleep(0.5)
    assert len(sink.of(message_id)) == 1


def test_primary_and_shadow_lost_together_lose_the_message(
    cluster_factory: Factory, sink: Sink
) -> None:
    """PR-4: both copies gone (primary wiped, shadow killed): outside the guarantee."""
    cluster = cluster_factory(two_nodes(sink, ShadowResubmitTimeSpan=1))
    message_id = _accepted_then_primary_killed(cluster, sink)
    cluster.kill("mbx2")
    cluster.restart("mbx2", wipe=True)
    cluster.restart("mbx1", wipe=True)
    time.sleep(2.0)
    assert sink.of(message_id) == []


def test_promoted_copy_without_route_waits_for_one(cluster_factory: Factory, sink: Sink) -> None:
    """PR-5: mbx2 has no route to only1.test until one is configured."""
    spec = two_nodes(sink, ShadowResubmitTimeSpan=0.5)
    spec["nodes"]["mbx1"]["next_hops"] = {"only1.test": sink.address}
    cluster = cluster_factory(spec)
    sink.deferred["*"] = HOLD
    code, _, message_id = cluster.send("mbx1", ["erin@only1.test"])
    assert code == 250
    cluster.kill("mbx1")
    del sink.deferred["*"]
    waiting = wait_until(
        lambda: [s for s in cluster.shadows("mbx2") if s["state"] == "awaiting_route"]
    )
    assert waiting[0]["message_id"] == message_id
    time.sleep(1.0)
    assert sink.of(message_id) == []
    cluster.api("mbx2", "PUT", "/topology/next_hops", {"only1.test": sink.address})
    delivered = wait_until(lambda: sink.of(message_id))[0]
    assert delivered.helo == "mbx2"


def test_kill_during_data_loses_nothing_acknowledged(cluster_factory: Factory, sink: Sink) -> None:
    """kill -9 mid-transaction: the unacknowledged message is not queued anywhere
    after restart; an acknowledged one is delivered."""
    cluster = cluster_factory(two_nodes(sink))
    code, _, acked = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    sock = socket.create_connection(cluster.nodes["mbx1"].smtp, timeout=10)
    sock.sendall(
        b"EHLO c\r\nMAIL FROM:<a@ext.test>\r\nRCPT TO:<alice@corp.test>\r\nDATA\r\n"
        b"Message-ID: <half@client.test>\r\n\r\npart"
    )
    time.sleep(0.3)
    cluster.kill("mbx1")
    sock.close()
    cluster.restart("mbx1")
    wait_until(lambda: sink.of(acked))
    time.sleep(0.5)
    assert sink.of("<half@client.test>") == []
    assert cluster.active("mbx1") == []
    assert all(s["message_id"] != "<half@client.test>" for s in cluster.shadows("mbx2"))
