"""Creating the shadow copy and discarding it: CR-1..CR-10, DI-1..DI-6, XS-2, XS-5, TO-2, TO-4.

Multi-process clusters on loopback; the sink stands for the mailbox server.
"""

from __future__ import annotations

import smtplib
import socket
import threading
import time
from collections.abc import Callable

from clusterkit import (
    Blackhole,
    Cluster,
    Relay,
    Sink,
    closed_port,
    make_message,
    two_nodes,
    wait_until,
)

Factory = Callable[..., Cluster]


def test_copy_is_on_the_shadow_before_the_sender_gets_250(
    cluster_factory: Factory, sink: Sink
) -> None:
    """CR-1, CR-2, CR-3: with the shadow frozen, the sender waits; thawed, it gets 250."""
    cluster = cluster_factory(two_nodes(sink, SendConnectionInactivityTimeout=20))
    cluster.pause("mbx2")
    result: list[tuple[int, str, str]] = []
    sender = threading.Thread(
        target=lambda: result.append(cluster.send("mbx1", ["alice@corp.test"]))
    )
    sender.start()
    time.sleep(1.0)
    assert not result, "the primary acknowledged while its shadow could not have the copy"
    assert cluster.active("mbx1") == []
    cluster.resume("mbx2")
    sender.join(30)
    code, text, message_id = result[0]
    assert code == 250 and "Queued" in text
    stats = cluster.api("mbx1", "GET", "/stats")
    assert stats["shadow_copies_made"] == 1
    wait_until(lambda: sink.of(message_id))
    assert sink.of(message_id)[0].helo == "mbx1"


def test_discard_after_delivery_moves_copy_to_shadow_safety_net(
    cluster_factory: Factory, sink: Sink
) -> None:
    """DI-1, DI-2, DI-3, DI-4, SN-1, SN-2, XS-5."""
    cluster = cluster_factory(two_nodes(sink))
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    # XS-5: the sink offers no XSHADOW, and none was issued to it.
    assert not any("XSHADOW" in c for c in sink.commands)
    primary_sn = wait_until(lambda: cluster.safety_net("mbx1", "primary"))
    assert primary_sn[0]["message_id"] == message_id  # SN-1
    assert primary_sn[0]["databases"] == ["DB1"]
    events = cluster.api("mbx1", "GET", "/discard-events")
    assert [e["shadow_node"] for e in events] == ["mbx2"]  # DI-1
    shadow_sn = wait_until(lambda: cluster.safety_net("mbx2", "shadow"))  # DI-2 heartbeat
    assert shadow_sn[0]["message_id"] == message_id  # DI-4, SN-2
    assert cluster.shadows("mbx2") == []
    # DI-3: handed out once the shadow confirms it acted on it, which follows its move of
    # the copy (a loaded machine reads the primary in between)
    wait_until(lambda: cluster.api("mbx1", "GET", "/discard-events")[0]["handed_out_at"])
    assert cluster.active("mbx1") == []


def test_discard_query_rides_on_every_session_to_the_primary(
    cluster_factory: Factory, sink: Sink
) -> None:
    """DI-2: mbx2 learns of mbx1's discards when it opens a session for its own copy."""
    cluster = cluster_factory(two_nodes(sink, ShadowHeartbeatFrequency=3600))
    code, _, first = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(first))
    wait_until(lambda: cluster.api("mbx1", "GET", "/discard-events"))
    assert cluster.safety_net("mbx2", "shadow") == []  # no heartbeat for an hour
    code, _, _ = cluster.send("mbx2", ["alice@corp.test"])  # mbx2 -> mbx1 session
    assert code == 250
    shadow_sn = wait_until(lambda: cluster.safety_net("mbx2", "shadow"))
    assert shadow_sn[0]["message_id"] == first


def test_single_node_rejects_with_451(cluster_factory: Factory, sink: Sink) -> None:
    """CR-4 (single node): no copy possible, nothing queued."""
    spec = two_nodes(sink)
    spec["nodes"] = {"mbx1": {"site": "site-a"}}
    cluster = cluster_factory(spec)
    code, text, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert (code, text) == (451, "4.4.0 Message failed to be made redundant")
    assert cluster.active("mbx1") == []
    assert cluster.api("mbx1", "GET", "/stats")["received"] == 1


def test_shadow_killed_or_link_cut_rejects_with_451(cluster_factory: Factory, sink: Sink) -> None:
    """CR-4 (shadow down, link cut, retries used up)."""
    cluster = cluster_factory(two_nodes(sink, MaxRetriesForLocalSiteShadow=3))
    cluster.kill("mbx2")
    code, text, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert (code, text) == (451, "4.4.0 Message failed to be made redundant")
    attempts = cluster.api("mbx1", "GET", "/stats")["shadow_attempts"]
    assert [a["attempt"] for a in attempts] == [1, 2, 3]  # MaxRetriesForLocalSiteShadow
    cluster.restart("mbx2")
    cluster.api("mbx1", "PUT", "/topology/peers", {"mbx2": closed_port()})
    code, text, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 451
    assert cluster.active("mbx1") == []
    assert not sink.received


def test_shadow_session_timeout_is_a_failed_attempt(
    cluster_factory: Factory, sink: Sink, blackhole: Blackhole
) -> None:
    """TO-4 then CR-4: a shadow that never answers times out like a refusal."""
    cluster = cluster_factory(
        two_nodes(sink, SendConnectionInactivityTimeout=0.5, MaxRetriesForLocalSiteShadow=2)
    )
    cluster.api("mbx1", "PUT", "/topology/peers", {"mbx2": blackhole.address})
    started = time.monotonic()
    code, text, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert (code, text) == (451, "4.4.0 Message failed to be made redundant")
    assert time.monotonic() - started >= 1.0  # two attempts of 0.5 s each
    assert len(blackhole.conns) == 2


def test_no_shadow_accepts_without_redundancy(cluster_factory: Factory, sink: Sink) -> None:
    """CR-5."""
    cluster = cluster_factory(two_nodes(sink, RejectMessageOnShadowFailure=False))
    cluster.kill("mbx2")
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    assert cluster.api("mbx1", "GET", "/stats")["accepted_without_shadow"] == 1


def test_disabled_shadow_redundancy(cluster_factory: Factory, sink: Sink) -> None:
    """CR-6: no copy, no XSHADOW advertised (checked on the wire in test_protocol too)."""
    cluster = cluster_factory(two_nodes(sink, ShadowRedundancyEnabled=False))
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    assert cluster.api("mbx2", "GET", "/stats")["shadow_copies_stored"] == 0
    assert cluster.api("mbx1", "GET", "/stats")["shadow_copies_made"] == 0
    assert cluster.api("mbx1", "GET", "/discard-events") == []


def _placement_cluster(
    cluster_factory: Factory, sink: Sink, preference: str, dag: bool = True
) -> Cluster:
    spec = two_nodes(sink, ShadowMessagePreferenceSetting=preference)
    member = {"dag": "dag1"} if dag else {}
    spec["nodes"] = {
        "mbx1": {"site": "site-a", **member},
        "mbx2": {"site": "site-a", **member},
        "mbx3": {"site": "site-b", **member},
    }
    return cluster_factory(spec)


def _shadow_of(cluster: Cluster, message_id: str) -> list[str]:
    return [
        n
        for n in ("mbx2", "mbx3")
        if cluster.running(n) and any(s["message_id"] == message_id for s in cluster.shadows(n))
    ]


def test_prefer_remote_places_copy_in_the_other_site_then_falls_back(
    cluster_factory: Factory, sink: Sink
) -> None:
    """CR-7: PreferRemote: remote site first (4 tries), then the local site."""
    sink.deferred["*"] = "451 4.3.0 hold it"  # keep shadows in their queues
    cluster = _placement_cluster(cluster_factory, sink, "PreferRemote")
    code, _, first = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert _shadow_of(cluster, first) == ["mbx3"]
    cluster.kill("mbx3")
    code, _, second = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert _shadow_of(cluster, second) == ["mbx2"]
    attempts = [
        a
        for a in cluster.api("mbx1", "GET", "/stats")["shadow_attempts"]
        if a["message_id"] == second
    ]
    assert [a["peer"] for a in attempts] == ["mbx3"] * 4 + ["mbx2"]


def test_remote_only_and_local_only(cluster_factory: Factory, sink: Sink) -> None:
    """CR-7: RemoteOnly never uses the local site; LocalOnly never the remote one."""
    sink.deferred["*"] = "451 4.3.0 hold it"
    cluster = _placement_cluster(cluster_factory, sink, "RemoteOnly")
    cluster.kill("mbx3")
    code, text, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert (code, text) == (451, "4.4.0 Message failed to be made redundant")
    peers = {a["peer"] for a in cluster.api("mbx1", "GET", "/stats")["shadow_attempts"]}
    assert peers == {"mbx3"}
    cluster.restart("mbx3")
    cluster.api("mbx1", "PUT", "/settings", {"ShadowMessagePreferenceSetting": "LocalOnly"})
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert _shadow_of(cluster, message_id) == ["mbx2"]


def test_outside_a_dag_only_the_local_site_counts(cluster_factory: Factory, sink: Sink) -> None:
    """CR-7: no DAG: the boundary is the AD site, whatever the preference."""
    sink.deferred["*"] = "451 4.3.0 hold it"
    cluster = _placement_cluster(cluster_factory, sink, "RemoteOnly", dag=False)
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert _shadow_of(cluster, message_id) == ["mbx2"]


def test_sender_vanishing_after_the_copy_still_gets_delivered_and_may_resend(
    cluster_factory: Factory, sink: Sink
) -> None:
    """CR-8: the sender drops the session before reading the 250; the primary still
    delivers; the resent message is a new, unrelated shadow copy; both arrive."""
    cluster = cluster_factory(two_nodes(sink))
    message_id = "<resent@client.test>"
    sock = socket.create_connection(cluster.nodes["mbx1"].smtp, timeout=10)
    sock.sendall(
        b"EHLO client.test\r\nMAIL FROM:<a@ext.test>\r\nRCPT TO:<alice@corp.test>\r\nDATA\r\n"
    )
    time.sleep(0.3)
    sock.sendall(f"Message-ID: {message_id}\r\nSubject: x\r\n\r\nhi\r\n.\r\n".encode())
    sock.close()  # gone before the 250
    wait_until(lambda: sink.of(message_id))
    code, _, _ = cluster.send("mbx1", ["alice@corp.test"], message_id=message_id)
    assert code == 250
    wait_until(lambda: len(sink.of(message_id)) == 2)
    copies = cluster.api("mbx2", "GET", "/stats")["shadow_copies_stored"]
    assert copies == 2


def test_leaving_the_boundary_ends_tracking(
    cluster_factory: Factory, sink: Sink, sink2: Sink
) -> None:
    """CR-9: the next boundary gets no XSHADOW and the copy is released on its 250."""
    spec = two_nodes(sink)
    spec["next_hops"]["remote.test"] = {"address": sink2.address, "kind": "boundary"}
    cluster = cluster_factory(spec)
    code, _, message_id = cluster.send("mbx1", ["carol@remote.test"])
    assert code == 250
    wait_until(lambda: sink2.of(message_id))
    assert not any("XSHADOW" in c for c in sink2.commands)
    entry = wait_until(lambda: cluster.safety_net("mbx1", "primary"))[0]
    assert entry["crossed_boundary"] is True
    wait_until(lambda: cluster.safety_net("mbx2", "shadow"))


def test_relay_into_another_dag_restarts_tracking_there(
    cluster_factory: Factory, sink: Sink
) -> None:
    """CR-9: dag1 relays to a node of dag2 without XSHADOW and keeps no shadow of the
    relay; dag2's node makes its own copy inside dag2 before it acknowledges."""
    sink.deferred["*"] = "451 4.3.0 hold it"  # dag2 cannot deliver: m stays in dag2
    spec = two_nodes(sink)
    to_dag2 = {"remote.test": {"node": "mbx3"}}
    spec["nodes"] = {
        "mbx1": {"site": "site-a", "dag": "dag1", "next_hops": to_dag2},
        "mbx2": {"site": "site-a", "dag": "dag1", "next_hops": to_dag2},
        "mbx3": {"site": "site-b", "dag": "dag2"},
        "mbx4": {"site": "site-b", "dag": "dag2"},
    }
    spec["next_hops"]["remote.test"] = sink.address
    cluster = cluster_factory(spec)
    code, _, message_id = cluster.send("mbx1", ["carol@remote.test"])
    assert code == 250
    wait_until(lambda: [m for m in cluster.active("mbx3") if m["message_id"] == message_id])
    assert [s["message_id"] for s in cluster.shadows("mbx4")] == [message_id]
    wait_until(lambda: cluster.shadows("mbx2") == [])  # dag1's copy released
    assert cluster.shadows("mbx1") == []  # nothing tracked across the boundary
    assert cluster.shadows("mbx3") == []


def test_one_shadow_queue_per_next_hop_released_when_all_forks_are_done(
    cluster_factory: Factory, sink: Sink, sink2: Sink
) -> None:
    """CR-10: two next hops; the copy waits for the slower fork."""
    spec = two_nodes(sink)
    spec["next_hops"]["other.test"] = sink2.address
    cluster = cluster_factory(spec)
    sink2.deferred["*"] = "451 4.3.0 not yet"
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test", "dan@other.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    queues = cluster.api("mbx2", "GET", "/queues/shadow")
    assert sorted(queues) == ["mbx1/corp.test", "mbx1/other.test"]
    time.sleep(1.0)  # several heartbeats: still nothing to discard
    assert cluster.api("mbx1", "GET", "/discard-events") == []
    assert cluster.shadows("mbx2")
    del sink2.deferred["*"]
    wait_until(lambda: sink2.of(message_id))
    wait_until(lambda: cluster.safety_net("mbx2", "shadow"))
    assert cluster.api("mbx2", "GET", "/queues/shadow") == {}


def test_dsn_is_a_fork_the_copy_waits_for(cluster_factory: Factory, sink: Sink) -> None:
    """CR-10 (DSNs): a 5xx produces a DSN to the sender; discard only after it went out."""
    spec = two_nodes(sink)
    cluster = cluster_factory(spec)
    sink.deferred["nobody@corp.test"] = "550 5.1.1 no such user"
    code, _, message_id = cluster.send("mbx1", ["nobody@corp.test"], sender="sender@corp.test")
    assert code == 250
    dsn = wait_until(lambda: [r for r in sink.received if r.mail_from in ("", "<>")])
    assert dsn[0].rcpt_tos == ["sender@corp.test"]
    assert f"X-Original-Message-ID: {message_id}".encode() in dsn[0].content
    wait_until(lambda: cluster.api("mbx1", "GET", "/discard-events"))


def test_discard_events_survive_a_primary_restart(cluster_factory: Factory, sink: Sink) -> None:
    """DI-5: kill -9 the primary after delivery, before the shadow asked; same database."""
    cluster = cluster_factory(two_nodes(sink, ShadowHeartbeatFrequency=0.5))
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    cluster.pause("mbx2")  # the shadow cannot ask for a while
    wait_until(lambda: sink.of(message_id))
    wait_until(lambda: cluster.api("mbx1", "GET", "/discard-events"))
    cluster.kill("mbx1")
    cluster.restart("mbx1")
    cluster.resume("mbx2")
    shadow_sn = wait_until(lambda: cluster.safety_net("mbx2", "shadow"))
    assert shadow_sn[0]["message_id"] == message_id
    assert len(sink.of(message_id)) == 1


def test_unqueried_discard_events_expire(cluster_factory: Factory, sink: Sink) -> None:
    """DI-6: ShadowMessageAutoDiscardInterval (2 days, on the virtual clock)."""
    spec = two_nodes(sink, ShadowHeartbeatFrequency=600)
    spec["clock"] = {"mode": "virtual", "start": "2026-01-01T00:00:00Z"}
    cluster = cluster_factory(spec)
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    wait_until(lambda: cluster.api("mbx1", "GET", "/discard-events"))
    cluster.pause("mbx2")
    cluster.advance(2 * 86400 - 60, "mbx1")
    time.sleep(0.3)
    assert cluster.api("mbx1", "GET", "/discard-events")  # not yet
    cluster.advance(120, "mbx1")
    wait_until(lambda: cluster.api("mbx1", "GET", "/discard-events") == [])


def test_idle_outbound_session_is_closed(cluster_factory: Factory, sink: Sink) -> None:
    """TO-2: Send ConnectionInactivityTimeout (1 s) closes the session to the next hop."""
    cluster = cluster_factory(two_nodes(sink, SendConnectionInactivityTimeout=1.0))
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    delivered = wait_until(lambda: sink.of(message_id))[0]
    assert not sink.quits or sink.quits[-1] < delivered.at  # the session stays open at first
    quit_at = wait_until(lambda: [q for q in sink.quits if q > delivered.at])[0]
    assert quit_at - delivered.at >= 0.9


def test_idle_shadow_session_is_closed(cluster_factory: Factory, sink: Sink) -> None:
    """TO-2: the sender stays connected but silent after its message; the primary's
    session to the shadow is outbound, so it ends after SendConnectionInactivityTimeout."""
    cluster = cluster_factory(two_nodes(sink, SendConnectionInactivityTimeout=0.5))
    relay = Relay(str(cluster.nodes["mbx2"].info["smtp"]))
    try:
        cluster.api("mbx1", "PUT", "/topology/peers", {"mbx2": relay.address})
        client = smtplib.SMTP(*cluster.nodes["mbx1"].smtp, timeout=10)
        client.ehlo("client.test")
        client.sendmail("a@ext.test", ["alice@corp.test"], make_message())
        acknowledged = time.monotonic()
        assert len(relay.opened) == 1
        ended = wait_until(lambda: relay.ended, timeout=5)[0]
        assert 0.4 <= ended - acknowledged < 2.0
        client.quit()  # the sender was there all along
    finally:
        relay.close()
