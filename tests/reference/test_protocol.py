"""Protocol level: bytes in, exact replies out, against a real node process.

Covers XS-1, XS-3 (who sees and may use the shadow verbs), relaying rules,
bad input (overlong lines, bare LF, unknown and out-of-order commands,
oversize DATA, garbage, a client vanishing mid-DATA), TO-1 and TO-3.
"""

from __future__ import annotations

import base64
import socket
import subprocess
import sys
import time
from collections.abc import Callable

import pytest
import yaml
from clusterkit import Cluster, Sink, wait_until

from reference_impl.credentials import node_password

SECRET = "s3cret"


class Wire:
    """A raw SMTP connection: send exact bytes, read exact replies."""

    def __init__(self, address: tuple[str, int]) -> None:
        self.sock = socket.create_connection(address, timeout=10)
        self.buffer = b""
        self.greeting = self.reply()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> str:
        """One whole (possibly multi-line) reply, lines joined with newlines."""
        lines = []
        while True:
            while b"\r\n" not in self.buffer:
                chunk = self.sock.recv(65536)
                if not chunk:
                    raise ConnectionError(f"closed; got so far: {lines} {self.buffer!r}")
                self.buffer += chunk
            line, self.buffer = self.buffer.split(b"\r\n", 1)
            lines.append(line.decode())
            if len(line) < 4 or line[3:4] != b"-":
                return "\n".join(lines)

    def cmd(self, line: str) -> str:
        self.send(line.encode() + b"\r\n")
        return self.reply()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def close(self) -> None:
        self.sock.close()


def plain(user: str, password: str) -> str:
    return base64.b64encode(f"\0{user}\0{password}".encode()).decode()


@pytest.fixture
def node(cluster_factory: Callable[..., Cluster], sink: Sink) -> Cluster:
    return cluster_factory(
        {
            "boundary": "dag1",
            "secret": SECRET,
            "nodes": {"mbx1": {"site": "site-a"}, "mbx2": {"site": "site-a"}},
            "next_hops": {"corp.test": sink.address},
            "settings": {
                "MaxMessageSize": 2000,
                "ReceiveConnectionInactivityTimeout": 1.0,
                "ReceiveConnectionTimeout": 2.5,
                "RejectMessageOnShadowFailure": False,
            },
        }
    )


def connect(cluster: Cluster, name: str = "mbx1") -> Wire:
    return Wire(cluster.nodes[name].smtp)


def test_greeting_and_anonymous_ehlo_hide_shadow_verbs(node: Cluster) -> None:
    wire = connect(node)
    assert wire.greeting.startswith("220 mbx1 ")
    ehlo = wire.cmd("EHLO client.test")
    assert ehlo.splitlines()[0] == "250-mbx1"
    assert "XSHADOW" not in ehlo  # XS-1
    assert "AUTH PLAIN" in ehlo
    help_text = wire.cmd("HELP")
    assert help_text.startswith("250 Supported commands:")
    assert "XSHADOW" not in help_text and "XQDISCARD" not in help_text


@pytest.mark.parametrize(
    "verb", ["XSHADOW mbx2", "XQDISCARD", "XSHADOWCOPY a b c", "XRESUBMIT PRIMARY DB1 0 1"]
)
def test_anonymous_shadow_verbs_are_refused_like_unknown_ones(node: Cluster, verb: str) -> None:
    wire = connect(node)
    wire.cmd("EHLO client.test")
    word = verb.split()[0]
    assert wire.cmd(verb) == f'500 Error: command "{word}" not recognized'  # XS-3
    assert wire.cmd("FOOBAR") == '500 Error: command "FOOBAR" not recognized'


def test_wrong_secret_is_refused_and_grants_nothing(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO mbx2")
    assert wire.cmd(f"AUTH PLAIN {plain('mbx2', 'wrong')}").startswith("535 5.7.8")
    assert "XSHADOW" not in wire.cmd("EHLO mbx2")
    assert wire.cmd("XQDISCARD").startswith("500 ")


def test_authenticated_peer_sees_xshadow_with_queue_db_id(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO mbx2")
    assert wire.cmd(f"AUTH PLAIN {plain('mbx2', node_password(SECRET, 'mbx2'))}").startswith("235 ")
    ehlo = wire.cmd("EHLO mbx2")
    db_id = node.api("mbx1", "GET", "/queue-db")["id"]
    assert f"250-XSHADOW mbx1 {db_id}" in ehlo.splitlines()  # XS-1, PR-2's carrier
    discard = wire.cmd("XQDISCARD")
    assert discard.splitlines()[0] == f"250-DBID {db_id}"
    assert discard.splitlines()[-1] == "250 0 discard notifications for mbx2"


def test_an_anonymous_query_cannot_consume_discard_events(node: Cluster, sink: Sink) -> None:
    code, _, message_id = node.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
    events = wait_until(lambda: node.api("mbx1", "GET", "/discard-events"))
    assert events[0]["handed_out_at"] is None
    stranger = connect(node)
    stranger.cmd("EHLO evil.test")
    assert stranger.cmd("XQDISCARD").startswith("500 ")
    assert node.api("mbx1", "GET", "/discard-events")[0]["handed_out_at"] is None
    peer = connect(node)
    peer.cmd("EHLO mbx2")
    peer.cmd(f"AUTH PLAIN {plain('mbx2', node_password(SECRET, 'mbx2'))}")
    peer.cmd("EHLO mbx2")
    reply = peer.cmd("XQDISCARD")
    assert f"250-DISCARD {events[0]['message']}" in reply.splitlines()
    # handed over once the peer confirms it acted on them (ACK), never again after
    assert peer.cmd("XQDISCARD 1000 ACK").splitlines()[-1] == (
        "250 0 discard notifications for mbx2"
    )
    assert peer.cmd("XQDISCARD").splitlines()[-1] == "250 0 discard notifications for mbx2"


def test_no_open_relay(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO client.test")
    assert wire.cmd("MAIL FROM:<a@ext.test>").startswith("250")
    assert wire.cmd("RCPT TO:<someone@elsewhere.test>") == (
        "550 5.7.54 Unable to relay recipient in non-accepted domain"
    )
    assert wire.cmd("RCPT TO:<alice@corp.test>").startswith("250 2.1.5")


def test_out_of_order_commands(node: Cluster) -> None:
    wire = connect(node)
    assert wire.cmd("MAIL FROM:<a@ext.test>") == "503 Error: send HELO first"
    wire.cmd("EHLO client.test")
    assert wire.cmd("RCPT TO:<alice@corp.test>") == "503 Error: need MAIL command"
    assert wire.cmd("DATA") == "503 Error: need RCPT command"
    wire.cmd("MAIL FROM:<a@ext.test>")
    assert wire.cmd("MAIL FROM:<a@ext.test>") == "503 Error: nested MAIL command"


def test_overlong_command_line_and_garbage(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO client.test")
    assert wire.cmd("NOOP " + "x" * 5000) == "500 Command line too long"
    wire.send(b"\x00\xff\xfe garbage\r\n")
    assert wire.reply().startswith("500 ")
    assert wire.cmd("NOOP") == "250 OK"


def _data(wire: Wire, body: bytes) -> str:
    wire.cmd("MAIL FROM:<a@ext.test>")
    wire.cmd("RCPT TO:<alice@corp.test>")
    assert wire.cmd("DATA").startswith("354")
    wire.send(body)
    return wire.reply()


def test_bare_lf_is_refused_and_nothing_is_queued(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO client.test")
    reply = _data(wire, b"Subject: x\r\n\r\nline one\nline two\r\n.\r\n")
    assert reply == "550 5.6.11 Bare line feeds are not allowed"
    assert node.api("mbx1", "GET", "/stats")["received"] == 0


def test_oversize_data_is_refused(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO client.test")
    reply = _data(wire, b"Subject: big\r\n\r\n" + (b"y" * 70 + b"\r\n") * 60 + b".\r\n")
    assert reply == "552 Error: Too much mail data"
    assert node.api("mbx1", "GET", "/stats")["received"] == 0
    assert wire.cmd("NOOP") == "250 OK"


def test_client_vanishing_mid_data_queues_nothing(node: Cluster) -> None:
    wire = connect(node)
    wire.cmd("EHLO client.test")
    wire.cmd("MAIL FROM:<a@ext.test>")
    wire.cmd("RCPT TO:<alice@corp.test>")
    wire.cmd("DATA")
    wire.send(b"Subject: partial\r\n\r\nhalf a mess")
    wire.close()
    # The node stays up and has queued nothing.
    other = connect(node)
    assert other.cmd("EHLO client.test").startswith("250-mbx1")
    assert node.api("mbx1", "GET", "/stats")["received"] == 0
    assert node.api("mbx1", "GET", "/queues/active") == []


def test_idle_session_is_closed_with_421(node: Cluster) -> None:
    """TO-1: ReceiveConnectionInactivityTimeout (1 s here)."""
    wire = connect(node)
    wire.cmd("EHLO client.test")
    started = time.monotonic()
    assert wire.reply() == "421 4.4.2 Connection timed out"
    assert wire.closed()
    assert time.monotonic() - started >= 0.9


def test_busy_session_still_ends_at_connection_timeout(node: Cluster) -> None:
    """TO-1: ReceiveConnectionTimeout (2.5 s) bounds a session that is never idle."""
    wire = connect(node)
    started = time.monotonic()
    wire.cmd("EHLO client.test")

    def ended() -> bool:
        try:
            return wire.cmd("NOOP") != "250 OK"
        except (ConnectionError, OSError):
            return True

    wait_until(ended, timeout=10, interval=0.3)
    assert time.monotonic() - started >= 2.4


def test_inactivity_at_or_above_connection_timeout_is_rejected(node: Cluster, tmp_path) -> None:
    """TO-3, both at start and through the control API."""
    bad = node.api("mbx1", "PUT", "/settings", {"ReceiveConnectionInactivityTimeout": 5})
    assert bad["status"] == 400
    assert "must be less than ReceiveConnectionTimeout" in bad["error"]
    assert node.api("mbx1", "GET", "/settings")["ReceiveConnectionInactivityTimeout"] == 1.0
    config = tmp_path / "bad.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "nodes": {"n1": {}},
                "settings": {
                    "ReceiveConnectionInactivityTimeout": 600,
                    "ReceiveConnectionTimeout": 600,
                },
            }
        )
    )
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "reference_impl",
            "node",
            "--config",
            str(config),
            "--name",
            "n1",
            "--data",
            str(tmp_path / "d"),
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2
    assert "ReceiveConnectionInactivityTimeout" in result.stderr
