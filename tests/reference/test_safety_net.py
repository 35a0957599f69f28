"""Safety Net on the virtual clock, with the real day-long parameter values: SN-1..SN-12.

Virtual time starts at 2026-01-01T00:00Z; ``at(h)`` is that day's hour h.
Heartbeats and retries only happen when the test moves the clocks.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from clusterkit import Cluster, Sink, two_nodes, wait_until

Factory = Callable[..., Cluster]
DAY0 = 1767225600.0  # 2026-01-01T00:00:00Z
HOUR = 3600.0
DAY = 24 * HOUR


def at(hour: float) -> float:
    return DAY0 + hour * HOUR


def virtual_cluster(cluster_factory: Factory, sink: Sink, **settings: Any) -> Cluster:
    spec = two_nodes(
        sink,
        ShadowHeartbeatFrequency=120,
        ShadowResubmitTimeSpan=3 * HOUR,
        SafetyNetHoldTime=2 * DAY,
        MessageExpirationTimeout=2 * DAY,
        **settings,
    )
    spec["directory"]["recipients"].update(
        {"carol@corp.test": "DB1", "dave@corp.test": "DB1", "carol@remote.test": "DB9"}
    )
    spec["clock"] = {"mode": "virtual", "start": "2026-01-01T00:00:00Z"}
    return cluster_factory(spec)


def deliver_at(cluster: Cluster, sink: Sink, hour: float, rcpts: list[str]) -> str:
    """Send at virtual ``hour``, wait for the delivery, let a heartbeat fetch the discard."""
    cluster.set_clock(at(hour))
    code, _, message_id = cluster.send("mbx1", rcpts)
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    wait_until(
        lambda: any(
            e["message_id"] == message_id for e in cluster.api("mbx1", "GET", "/discard-events")
        )
    )
    cluster.advance(121)  # one ShadowHeartbeatFrequency: the shadow asks
    wait_until(
        lambda: any(e["message_id"] == message_id for e in cluster.safety_net("mbx2", "shadow"))
    )
    return message_id


def resubmit(cluster: Cluster, node: str, database: str, start: float, end: float) -> str:
    answer = cluster.api(
        node, "POST", "/safetynet/resubmit", {"database": database, "start": start, "end": end}
    )
    return str(answer["request_id"])


def request_done(cluster: Cluster, node: str, request_id: str) -> bool:
    return any(
        r["request_id"] == request_id and r["state"] == "done"
        for r in cluster.api(node, "GET", "/safetynet/requests")
    )


def test_safety_net_holds_for_hold_time_then_lets_go(cluster_factory: Factory, sink: Sink) -> None:
    """SN-1, SN-2, SN-3: both Safety Nets keep the message for SafetyNetHoldTime (2 days)."""
    cluster = virtual_cluster(cluster_factory, sink)
    message_id = deliver_at(cluster, sink, 1, ["alice@corp.test"])
    assert [e["message_id"] for e in cluster.safety_net("mbx1", "primary")] == [message_id]
    cluster.advance(2 * DAY - 10 * 60)
    time.sleep(0.3)
    assert cluster.safety_net("mbx1", "primary") and cluster.safety_net("mbx2", "shadow")
    cluster.advance(20 * 60)
    wait_until(lambda: cluster.safety_net("mbx1", "primary") == [])
    wait_until(lambda: cluster.safety_net("mbx2", "shadow") == [])


def test_unacknowledged_shadow_expires_after_hold_plus_expiration(
    cluster_factory: Factory, sink: Sink
) -> None:
    """SN-4: a copy never discarded leaves after SafetyNetHoldTime + MessageExpirationTimeout."""
    cluster = virtual_cluster(cluster_factory, sink)
    sink.deferred["*"] = "451 4.3.0 busy"
    code, _, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    assert cluster.shadows("mbx2")
    cluster.advance(4 * DAY - 10 * 60, "mbx2")
    time.sleep(0.3)
    assert cluster.shadows("mbx2")
    cluster.advance(20 * 60, "mbx2")
    wait_until(lambda: cluster.shadows("mbx2") == [])


def test_resubmission_by_database_and_window(cluster_factory: Factory, sink: Sink) -> None:
    """SN-5: every message of the database inside the window, none outside; no manual step."""
    cluster = virtual_cluster(cluster_factory, sink)
    before = deliver_at(cluster, sink, 1, ["alice@corp.test"])
    inside = deliver_at(cluster, sink, 2, ["alice@corp.test"])
    other_db = deliver_at(cluster, sink, 2.5, ["bob@corp.test"])
    after = deliver_at(cluster, sink, 4, ["alice@corp.test"])
    request_id = resubmit(cluster, "mbx1", "DB1", at(1.5), at(3))
    wait_until(lambda: request_done(cluster, "mbx1", request_id))
    wait_until(lambda: len(sink.of(inside)) == 2)
    time.sleep(0.5)
    assert [len(sink.of(m)) for m in (before, other_db, after)] == [1, 1, 1]


def test_replay_lag_longer_than_hold_time_is_flagged(cluster_factory: Factory, sink: Sink) -> None:
    """SN-6."""
    cluster = virtual_cluster(cluster_factory, sink)
    assert cluster.api("mbx1", "GET", "/config/warnings") == []
    cluster.api("mbx1", "PUT", "/settings", {"ReplayLagTime": 3 * DAY})
    warnings = cluster.api("mbx1", "GET", "/config/warnings")
    assert [w["code"] for w in warnings] == ["SN-6"]
    assert "ReplayLagTime" in warnings[0]["message"]


def test_dead_primary_safety_net_is_replaced_by_a_broadcast_after_12_hours(
    cluster_factory: Factory, sink: Sink
) -> None:
    """SN-7: the shadow answers for a primary that has not answered for 12 hours."""
    cluster = virtual_cluster(cluster_factory, sink)
    message_id = deliver_at(cluster, sink, 1, ["alice@corp.test"])
    cluster.kill("mbx1")
    request_id = resubmit(cluster, "mbx2", "DB1", at(0), at(2))
    cluster.advance(12 * HOUR - 10 * 60, "mbx2")
    time.sleep(0.5)
    assert len(sink.of(message_id)) == 1
    cluster.advance(20 * 60, "mbx2")
    resent = wait_until(lambda: len(sink.of(message_id)) == 2 and sink.of(message_id)[1])
    assert resent.helo == "mbx2"
    wait_until(lambda: request_done(cluster, "mbx2", request_id))


def test_partial_window_after_queue_database_was_recreated(
    cluster_factory: Factory, sink: Sink
) -> None:
    """SN-8: primary recreated at 07:00; 01:00-09:00 = 07-09 from it, 01-07 from the shadow."""
    cluster = virtual_cluster(cluster_factory, sink)
    early = deliver_at(cluster, sink, 2, ["alice@corp.test"])
    cluster.set_clock(at(7), "mbx2")
    cluster.restart("mbx1", wipe=True, clock_start=at(7))
    assert cluster.api("mbx1", "GET", "/queue-db")["created_at"] == at(7)
    late = deliver_at(cluster, sink, 8, ["alice@corp.test"])
    request_id = resubmit(cluster, "mbx1", "DB1", at(1), at(9))
    wait_until(lambda: request_done(cluster, "mbx1", request_id))
    early_copies = wait_until(lambda: len(sink.of(early)) == 2 and sink.of(early))
    late_copies = wait_until(lambda: len(sink.of(late)) == 2 and sink.of(late))
    assert early_copies[1].helo == "mbx2"  # from the Shadow Safety Net
    assert late_copies[1].helo == "mbx1"  # from the new Primary Safety Net
    log = cluster.api("mbx1", "GET", "/safetynet/requests")[0]["log"]
    assert any(f"UNCOVERED {at(1)!r} {at(7)!r}" in entry["answer"] for entry in log)


def test_resubmission_never_produces_a_dsn(cluster_factory: Factory, sink: Sink) -> None:
    """SN-9: the resubmitted copy is refused for good; nobody hears of it."""
    cluster = virtual_cluster(cluster_factory, sink)
    message_id = deliver_at(cluster, sink, 1, ["alice@corp.test"])
    sink.deferred["alice@corp.test"] = "550 5.1.1 mailbox gone"
    request_id = resubmit(cluster, "mbx1", "DB1", at(0), at(2))
    wait_until(lambda: request_done(cluster, "mbx1", request_id))
    wait_until(lambda: cluster.active("mbx1") == [])
    time.sleep(0.5)
    assert not [r for r in sink.received if r.mail_from in ("", "<>")]
    assert cluster.api("mbx1", "GET", "/stats")["dsns"] == 0
    assert len(sink.of(message_id)) == 1


def test_shadow_copy_is_expanded_and_categorised_afresh(
    cluster_factory: Factory, sink: Sink
) -> None:
    """SN-10, SN-11: the group changed since delivery; the shadow's copy has no trace of
    the primary's categorisation and is categorised on the node that resubmits it."""
    cluster = virtual_cluster(cluster_factory, sink)
    for node in ("mbx1", "mbx2"):
        cluster.api(
            node,
            "PUT",
            "/directory/groups/team@corp.test",
            {"members": ["alice@corp.test", "bob@corp.test"]},
        )
    message_id = deliver_at(cluster, sink, 1, ["team@corp.test"])
    first = sink.of(message_id)[0]
    assert sorted(first.rcpt_tos) == ["alice@corp.test", "bob@corp.test"]
    assert b"X-Categorized-By: mbx1" in first.content
    shadow_entry = cluster.safety_net("mbx2", "shadow")[0]
    assert shadow_entry["recipients"] == ["team@corp.test"]
    cluster.api(
        "mbx2",
        "PUT",
        "/directory/groups/team@corp.test",
        {"members": ["alice@corp.test", "carol@corp.test"]},
    )
    cluster.kill("mbx1")
    resubmit(cluster, "mbx2", "DB1", at(0), at(2))
    cluster.advance(12 * HOUR + 60, "mbx2")
    again = wait_until(lambda: len(sink.of(message_id)) == 2 and sink.of(message_id)[1])
    assert sorted(again.rcpt_tos) == ["alice@corp.test", "carol@corp.test"]
    assert b"X-Categorized-By: mbx2" in again.content
    assert b"X-Categorized-By: mbx1" not in again.content


def test_message_that_left_the_boundary_is_never_resubmitted(
    cluster_factory: Factory, sink: Sink, sink2: Sink
) -> None:
    """SN-12."""
    spec_cluster = virtual_cluster(cluster_factory, sink)
    spec_cluster.api(
        "mbx1",
        "PUT",
        "/topology/next_hops",
        {"remote.test": {"address": sink2.address, "kind": "boundary"}},
    )
    spec_cluster.set_clock(at(1))
    code, _, message_id = spec_cluster.send("mbx1", ["carol@remote.test"])
    assert code == 250
    wait_until(lambda: sink2.of(message_id))
    entry = wait_until(lambda: spec_cluster.safety_net("mbx1", "primary"))[0]
    assert entry["crossed_boundary"] and entry["databases"] == ["DB9"]
    request_id = resubmit(spec_cluster, "mbx1", "DB9", at(0), at(2))
    wait_until(lambda: request_done(spec_cluster, "mbx1", request_id))
    time.sleep(0.5)
    assert len(sink2.of(message_id)) == 1


def test_a_message_without_a_route_is_not_counted_as_resubmitted(
    cluster_factory: Factory, sink: Sink
) -> None:
    """SN-5's answer counts what was resubmitted: a message whose recipients have lost
    their route is logged and left out, not counted."""
    cluster = virtual_cluster(cluster_factory, sink)
    deliver_at(cluster, sink, 2, ["alice@corp.test"])
    cluster.api("mbx1", "PUT", "/topology/next_hops", {"corp.test": None})
    request_id = resubmit(cluster, "mbx1", "DB1", at(1), at(3))
    wait_until(lambda: request_done(cluster, "mbx1", request_id))
    requests = cluster.api("mbx1", "GET", "/safetynet/requests")
    (request,) = [r for r in requests if r["request_id"] == request_id]
    answers = {entry["node"]: entry["answer"] for entry in request["log"]}
    assert answers["mbx1"].startswith("2.0.0 RESUBMITTED 0 "), answers
