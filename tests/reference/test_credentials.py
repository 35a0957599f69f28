"""Credentials: no built-in secret, per-node peer passwords, throttled AUTH, and a
control API that wants its token, JSON, its own Host and no foreign Origin.

Real node processes; the AUTH exchanges are raw bytes on a socket.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml
from clusterkit import Cluster, Sink, two_nodes, wait_until
from test_protocol import Wire, plain

from reference_impl.credentials import node_password

Factory = Callable[..., Cluster]
HOLD = "451 4.3.0 mailbox busy"


def _peer_login(cluster: Cluster, as_node: str, password: str) -> tuple[Wire, str]:
    wire = Wire(cluster.nodes["mbx1"].smtp)
    wire.cmd(f"EHLO {as_node}")
    return wire, wire.cmd(f"AUTH PLAIN {plain(as_node, password)}")


def test_no_builtin_secret_one_is_made_per_run(cluster_factory: Factory, sink: Sink) -> None:
    spec = two_nodes(sink)  # no secret: in the file; RejectMessageOnShadowFailure: true
    cluster = cluster_factory(spec)
    # the old built-in default, as the raw secret and as a derived password: refused
    for password in ("shadowcheck-dag1", node_password("shadowcheck-dag1", "mbx2")):
        wire, reply = _peer_login(cluster, "mbx2", password)
        assert reply.startswith("535 "), reply
        wire.close()
    credentials = cluster.config_path.with_name("cluster.yaml.credentials.json")
    assert stat.S_IMODE(credentials.stat().st_mode) == 0o600
    made = json.loads(credentials.read_text())
    assert len(made["secret"]) >= 32 and made["token"] == cluster.nodes["mbx1"].info["token"]
    # ...and the nodes use it: a copy is made, so the message is accepted
    code, text, _ = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250, text
    assert len(cluster.shadows("mbx2")) == 1
    wire, reply = _peer_login(cluster, "mbx2", node_password(made["secret"], "mbx2"))
    assert reply.startswith("235 "), reply


def test_a_peer_password_is_good_for_its_own_node_name_only(
    cluster_factory: Factory, sink: Sink
) -> None:
    cluster = cluster_factory({**two_nodes(sink), "secret": "s3cret"})
    assert _peer_login(cluster, "mbx2", "s3cret")[1].startswith("535 ")  # not the secret itself
    mbx3 = node_password("s3cret", "mbx3")
    assert _peer_login(cluster, "mbx2", mbx3)[1].startswith("535 ")
    assert _peer_login(cluster, "mbx2", node_password("s3cret", "mbx2"))[1].startswith("235 ")


def test_failed_auth_is_slowed_down_then_the_session_closed(
    cluster_factory: Factory, sink: Sink
) -> None:
    cluster = cluster_factory({**two_nodes(sink), "secret": "s3cret"})
    wire = Wire(cluster.nodes["mbx1"].smtp)
    wire.cmd("EHLO guesser.test")
    answers, took = [], []
    for guess in ("a", "b", "c"):
        started = time.monotonic()
        answers.append(wire.cmd(f"AUTH PLAIN {plain('mbx2', guess)}"))
        took.append(time.monotonic() - started)
    assert answers[0].startswith("535 ") and answers[1].startswith("535 ")
    assert answers[2].startswith("421 4.7.0"), answers[2]
    assert wire.closed()
    assert took[0] >= 0.2 and took[1] >= 0.45  # doubling per failure from this address
    # a new session from the same address starts slow: the failures are remembered
    wire = Wire(cluster.nodes["mbx1"].smtp)
    wire.cmd("EHLO guesser.test")
    started = time.monotonic()
    assert wire.cmd(f"AUTH PLAIN {plain('mbx2', 'd')}").startswith("535 ")
    assert time.monotonic() - started >= 1.5


def _call(
    cluster: Cluster,
    method: str,
    path: str,
    body: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, Any]:
    url = f"http://{cluster.nodes['mbx1'].info['control']}{path}"
    request = urllib.request.Request(url, data=body, method=method, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def test_control_api_wants_token_json_and_its_own_host(
    cluster_factory: Factory, sink: Sink
) -> None:
    cluster = cluster_factory(two_nodes(sink))
    token = cluster.nodes["mbx1"].info["token"]
    auth = {"Authorization": f"Bearer {token}"}
    body = json.dumps({"ShadowRedundancyEnabled": False}).encode()
    json_type = {"Content-Type": "application/json"}
    assert _call(cluster, "GET", "/settings")[0] == 401
    assert _call(cluster, "GET", "/settings", headers={"Authorization": "Bearer nope"})[0] == 401
    # what a cross-site form or fetch can send: refused, and nothing changed
    text_plain = {**auth, "Content-Type": "text/plain"}
    assert _call(cluster, "PUT", "/settings", body, text_plain)[0] == 415
    status, answer = _call(
        cluster, "PUT", "/settings", body, {**auth, **json_type, "Origin": "http://evil.test"}
    )
    assert status == 403, answer
    status, answer = _call(cluster, "GET", "/settings", headers={**auth, "Host": "evil.test:80"})
    assert status == 421, answer
    assert _call(cluster, "GET", "/settings", headers=auth)[1]["ShadowRedundancyEnabled"] is True
    status, answer = _call(cluster, "PUT", "/settings", body, {**auth, **json_type})
    assert status == 200 and answer["ShadowRedundancyEnabled"] is False


def test_control_api_without_token_refuses_to_listen_beyond_loopback(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "secret": "s3cret",
                "control_token": None,
                "nodes": {"mbx1": {"control": "0.0.0.0:0"}},
            }
        )
    )
    node = [sys.executable, "-m", "reference_impl", "node", "--config", str(config)]
    node += ["--name", "mbx1", "--data", str(tmp_path / "mbx1")]
    done = subprocess.run(
        node, capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": "."}
    )
    assert done.returncode == 2, done.stderr
    assert "without a token" in done.stderr


def test_lowering_expiration_never_drops_an_acknowledged_message(
    cluster_factory: Factory, sink: Sink
) -> None:
    cluster = cluster_factory(two_nodes(sink))
    sink.deferred["*"] = HOLD
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    answer = cluster.api("mbx1", "PUT", "/settings", {"MessageExpirationTimeout": 0})
    assert answer["MessageExpirationTimeout"] == 0
    time.sleep(1.0)  # a few retries (TransientFailureRetryInterval 0.3 s) under the new value
    assert [m["id"] for m in cluster.active("mbx1")], "the queued message is gone"
    del sink.deferred["*"]
    wait_until(lambda: sink.of(message_id))
    # a message received after the change does expire at once (no DSN: null sender)
    sink.deferred["*"] = HOLD
    code, _, later = cluster.send("mbx1", ["alice@corp.test"], sender="")
    assert code == 250
    wait_until(lambda: not cluster.active("mbx1"))
    assert not sink.of(later)


def test_failed_auth_count_is_in_the_log(tmp_path: Path) -> None:
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump({"secret": "s3cret", "nodes": {"mbx1": {}, "mbx2": {}}}))
    log = tmp_path / "mbx1.log"
    node = [sys.executable, "-m", "reference_impl", "node", "--config", str(config)]
    node += ["--name", "mbx1", "--data", str(tmp_path / "mbx1")]
    with log.open("w") as stderr:
        proc = subprocess.Popen(node, stdout=subprocess.PIPE, stderr=stderr, text=True)
    try:
        assert proc.stdout is not None
        host, _, port = json.loads(proc.stdout.readline())["smtp"].rpartition(":")
        wire = Wire((host, int(port)))
        wire.cmd("EHLO guesser.test")
        for guess in ("a", "b", "c"):
            wire.cmd(f"AUTH PLAIN {plain('mbx2', guess)}")
        assert wire.closed()
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()
    text = log.read_text()
    assert "refused AUTH as 'mbx2' from 127.0.0.1: failure 3 of 3 in this session" in text, text
