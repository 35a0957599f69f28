"""SMTP-in limits that an abusive or just unusual client meets: SIZE with the
primary's headers, a slow DATA sender, the connection cap and its peers' reserve,
NUL in addresses, the shared limit on unknown and refused verbs, and XQDISCARD from
a node of another DAG. Raw sockets against real node processes."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from clusterkit import Cluster, Sink, make_message, two_nodes, wait_until
from test_protocol import Wire, plain

from reference_impl.credentials import node_password

Factory = Callable[..., Cluster]


def _message_of(size: int, message_id: str) -> bytes:
    """A message whose DATA (dot-stuffed lines, without the final dot) is ``size`` bytes."""
    head = make_message(message_id, body="").encode()
    lines, left = [], size - len(head)
    while left > 0:
        take = min(78, left - 2) if left > 80 else left - 2
        lines.append(b"x" * max(take, 0))
        left -= len(lines[-1]) + 2
    return head + b"".join(line + b"\r\n" for line in lines)


def _data(wire: Wire, content: bytes) -> str:
    assert wire.cmd("DATA").startswith("354")
    wire.send(content + b".\r\n")
    return wire.reply()


def test_message_just_under_size_gets_its_shadow_copy(cluster_factory: Factory, sink: Sink) -> None:
    """The primary adds a Received header; the shadow must still take the copy."""
    cluster = cluster_factory(two_nodes(sink, MaxMessageSize=4000))
    wire = Wire(cluster.nodes["mbx1"].smtp)
    wire.cmd("EHLO client.test")
    assert wire.cmd("MAIL FROM:<a@ext.test> SIZE=3990").startswith("250")
    assert wire.cmd("RCPT TO:<alice@corp.test>").startswith("250")
    reply = _data(wire, _message_of(3990, "<big@test>"))
    assert reply.startswith("250 "), reply  # not 451 4.4.0: the copy was made
    assert [s["message_id"] for s in cluster.shadows("mbx2")] == ["<big@test>"]
    wait_until(lambda: sink.of("<big@test>"))


def test_a_slow_steady_data_sender_is_not_idle(cluster_factory: Factory, sink: Sink) -> None:
    cluster = cluster_factory(
        two_nodes(sink, ReceiveConnectionInactivityTimeout=1.0, ReceiveConnectionTimeout=6)
    )
    wire = Wire(cluster.nodes["mbx1"].smtp)
    wire.cmd("EHLO client.test")
    wire.cmd("MAIL FROM:<a@ext.test>")
    wire.cmd("RCPT TO:<alice@corp.test>")
    assert wire.cmd("DATA").startswith("354")
    wire.send(b"Message-ID: <slow@test>\r\n\r\n")
    for _ in range(8):  # 3.2 s of DATA, two lines a second: never 1 s without bytes
        time.sleep(0.4)
        wire.send(b"a line\r\n")
    wire.send(b".\r\n")
    assert wire.reply().startswith("250 ")


@pytest.fixture
def capped(cluster_factory: Factory, sink: Sink) -> Iterator[Cluster]:
    # cap 12: ten for anyone, the last two (reserve_for_peers) for peers only
    yield cluster_factory(two_nodes(sink, MaxInboundConnection=12))


def test_connection_cap_keeps_a_reserve_for_peers(capped: Cluster, sink: Sink) -> None:
    strangers = [Wire(capped.nodes["mbx1"].smtp) for _ in range(10)]
    assert all(w.greeting.startswith("220 ") for w in strangers)
    in_reserve = Wire(capped.nodes["mbx1"].smtp)
    assert in_reserve.greeting.startswith("220 ")
    in_reserve.cmd("EHLO stranger.test")
    assert in_reserve.cmd("MAIL FROM:<a@ext.test>").startswith("421 4.3.2")
    # a peer still gets in: mbx2 makes its copy on mbx1 (RejectMessageOnShadowFailure)
    code, text, message_id = capped.send("mbx2", ["alice@corp.test"])
    assert code == 250, text
    assert capped.shadows("mbx1")
    assert capped.api("mbx1", "GET", "/health")["status"] == "ok"  # and the control API
    # 10 strangers open (the one in the reserve was closed): two more fit, the
    # third is beyond the cap and gets 421 instead of the greeting
    over = [Wire(capped.nodes["mbx1"].smtp) for _ in range(3)]
    assert over[0].greeting.startswith("220 ")
    assert over[-1].greeting.startswith("421 4.3.2"), over[-1].greeting
    for wire in [*strangers, *over]:
        wire.close()
    # the places free up again
    wait_until(lambda: Wire(capped.nodes["mbx1"].smtp).greeting.startswith("220 "))
    wait_until(lambda: sink.of(message_id))


@pytest.fixture
def node(cluster_factory: Factory, sink: Sink) -> Cluster:
    spec: dict[str, Any] = {**two_nodes(sink), "secret": "s3cret"}
    spec["nodes"] = {
        "mbx1": {"site": "site-a", "dag": "dag1"},
        "mbx2": {"site": "site-a", "dag": "dag1"},
        "cr9": {"site": "site-a", "dag": "dag9"},
    }
    return cluster_factory(spec)


def test_nul_in_an_address_is_refused_at_mail_and_rcpt(node: Cluster) -> None:
    wire = Wire(node.nodes["mbx1"].smtp)
    wire.cmd("EHLO client.test")
    assert wire.cmd("MAIL FROM:<a\0b@ext.test>").startswith("553 5.1.3")
    assert wire.cmd("MAIL FROM:<a@ext.test>").startswith("250")
    assert wire.cmd("RCPT TO:<ali\0ce@corp.test>").startswith("553 5.1.3")
    assert wire.cmd('RCPT TO:<"ali\0ce"@corp.test>').startswith("553 5.1.3")


@pytest.mark.parametrize("verb", ["XQDISCARD", "XSHADOW mbx2", "FOOBAR"])
def test_refused_shadow_verbs_count_like_unknown_ones(node: Cluster, verb: str) -> None:
    """A stranger repeating a shadow verb is closed after as many tries as one
    repeating an unknown verb: the count does not tell the verbs exist."""
    wire = Wire(node.nodes["mbx1"].smtp)
    wire.cmd("EHLO stranger.test")
    word = verb.split()[0]
    for _ in range(4):
        assert wire.cmd(verb) == f'500 Error: command "{word}" not recognized'
    assert wire.cmd(verb) == "502 5.5.1 Too many unrecognized commands, goodbye."
    assert wire.closed()


def test_mixed_refused_and_unknown_verbs_share_one_limit(node: Cluster) -> None:
    wire = Wire(node.nodes["mbx1"].smtp)
    wire.cmd("EHLO stranger.test")
    for verb in ("XQDISCARD", "FOO", "XSHADOW x", "BAR"):
        assert wire.cmd(verb).startswith("500 ")
    assert wire.cmd("XRESUBMIT").startswith("502 5.5.1")
    assert wire.closed()


def test_xqdiscard_from_a_node_of_another_dag_gets_nothing(node: Cluster) -> None:
    wire = Wire(node.nodes["mbx1"].smtp)
    wire.cmd("EHLO cr9")
    assert wire.cmd(f"AUTH PLAIN {plain('cr9', node_password('s3cret', 'cr9'))}")[:3] == "235"
    assert wire.cmd("XQDISCARD") == "250 0 discard notifications for cr9"  # not even DBID
    member = Wire(node.nodes["mbx1"].smtp)
    member.cmd("EHLO mbx2")
    member.cmd(f"AUTH PLAIN {plain('mbx2', node_password('s3cret', 'mbx2'))}")
    assert member.cmd("XQDISCARD").startswith("250-DBID ")


def test_a_peer_gets_the_headroom_and_no_more(cluster_factory: Factory, sink: Sink) -> None:
    """A boundary peer may send MaxMessageSize plus PEER_SIZE_HEADROOM (16 KiB, for the
    headers it adds): well inside is taken, a little past it is refused."""
    spec: dict[str, Any] = {**two_nodes(sink, MaxMessageSize=4000), "secret": "s3cret"}
    cluster = cluster_factory(spec)
    limit = 4000 + 16 * 1024
    for size, accepted in ((limit - 300, True), (limit + 300, False)):
        wire = Wire(cluster.nodes["mbx1"].smtp)
        wire.cmd("EHLO mbx2")
        assert wire.cmd(f"AUTH PLAIN {plain('mbx2', node_password('s3cret', 'mbx2'))}")[:3] == "235"
        assert wire.cmd("MAIL FROM:<a@ext.test>").startswith("250")
        assert wire.cmd("RCPT TO:<alice@corp.test>").startswith("250")
        reply = _data(wire, _message_of(size, f"<peer-{size}@test>"))
        assert reply.startswith("250 " if accepted else "552 "), (size, reply)
        wire.close()


def test_xresubmit_syntax_is_exact(node: Cluster) -> None:
    """XRESUBMIT SHADOW takes exactly five words; a sixth is a syntax error, not ignored."""
    wire = Wire(node.nodes["mbx1"].smtp)
    wire.cmd("EHLO mbx2")
    assert wire.cmd(f"AUTH PLAIN {plain('mbx2', node_password('s3cret', 'mbx2'))}")[:3] == "235"
    assert wire.cmd("XRESUBMIT SHADOW DB1 0 1 mbx2") == "250 2.0.0 RESUBMITTED 0"
    for bad in ("XRESUBMIT SHADOW DB1 0 1 mbx2 extra", "XRESUBMIT SHADOW DB1 0 1"):
        assert wire.cmd(bad).startswith("501 5.5.4 Syntax: XRESUBMIT"), bad
