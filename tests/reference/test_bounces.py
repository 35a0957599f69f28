"""Bounces (null reverse-path, ``MAIL FROM:<>``): accepted, shadowed, promoted and
delivered with the null reverse-path intact; never a reason for a hop to stop.

The sink is an aiosmtpd server: it records ``MAIL FROM:<>`` as ``"<>"``.
"""

from __future__ import annotations

from collections.abc import Callable

from clusterkit import Cluster, Sink, closed_port, two_nodes, wait_until

Factory = Callable[..., Cluster]
HOLD = "451 4.3.0 mailbox busy"


def test_bounce_is_shadowed_and_delivered_with_null_path(
    cluster_factory: Factory, sink: Sink
) -> None:
    cluster = cluster_factory(two_nodes(sink))  # RejectMessageOnShadowFailure: true
    code, text, message_id = cluster.send("mbx1", ["alice@corp.test"], sender="")
    assert code == 250, text  # a copy was made: the 250 depends on it
    delivered = wait_until(lambda: sink.of(message_id))[0]
    assert delivered.mail_from == "<>"
    assert delivered.helo == "mbx1"


def test_promoted_bounce_keeps_null_path(cluster_factory: Factory, sink: Sink) -> None:
    cluster = cluster_factory(two_nodes(sink, ShadowResubmitTimeSpan=1))
    sink.deferred["*"] = HOLD
    code, text, message_id = cluster.send("mbx1", ["alice@corp.test"], sender="")
    assert code == 250, text
    shadows = cluster.shadows("mbx2")
    assert [s["sender"] for s in shadows] == [""]
    cluster.kill("mbx1")
    del sink.deferred["*"]
    delivered = wait_until(lambda: sink.of(message_id))[0]
    assert delivered.helo == "mbx2"
    assert delivered.mail_from == "<>"


def test_bounces_without_shadow_do_not_stop_the_next_hop(
    cluster_factory: Factory, sink: Sink
) -> None:
    """Accepted without a copy (shadow unreachable, RejectMessageOnShadowFailure false):
    more bounces than the hop has delivery workers, then an ordinary message; all
    are delivered, also after a restart."""
    spec = two_nodes(sink, RejectMessageOnShadowFailure=False)
    cluster = cluster_factory(spec, start=False)
    cluster.start("mbx1")
    cluster.peer_overrides["mbx1"] = {"mbx2": closed_port()}
    cluster.wire()
    sink.deferred["*"] = HOLD
    bounces = []
    for _ in range(6):
        code, text, message_id = cluster.send("mbx1", ["alice@corp.test"], sender="")
        assert code == 250, text
        bounces.append(message_id)
    cluster.restart("mbx1")
    del sink.deferred["*"]
    code, _, plain = cluster.send("mbx1", ["bob@corp.test"])
    assert code == 250
    wait_until(lambda: all(sink.of(m) for m in [*bounces, plain]))
    assert {r.mail_from for m in bounces for r in sink.of(m)} == {"<>"}
    assert cluster.active("mbx1") == []
