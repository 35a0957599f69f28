"""A node with SMTP-in workers (SmtpInProcesses >= 2, workers.py) is still one node.

Real clusters on loopback: the workers share the node's port, queue database
and state (pushed by the node process before a control API change returns);
a kill of the node's pid alone, or the loss of one worker, leaves no process
of the node accepting mail; a stop of the node's process group freezes all.
"""

from __future__ import annotations

import os
import signal
import smtplib
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml
from clusterkit import Cluster, Sink, two_nodes, wait_until

from pytest_shadowcheck.targets.node_process import signal_group

Factory = Callable[..., Cluster]
WORKERS = 3


def _state(pid: int) -> str:
    """The process's state letter (S, R, T stopped, Z zombie), or "gone"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return "gone"


def _dead(pid: int) -> bool:
    return _state(pid) in ("Z", "gone")


def _workers(cluster: Cluster, name: str) -> list[int]:
    """The node process's children: its SMTP-in workers."""
    proc = cluster.nodes[name].proc
    assert proc is not None
    children = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()
            except FileNotFoundError:
                continue
            if int(fields[1]) == proc.pid and fields[0] != "Z":
                children.append(int(entry))
    return sorted(children)


def _refuses(address: tuple[str, int]) -> bool:
    try:
        with socket.create_connection(address, timeout=1.0) as sock:
            sock.settimeout(1.0)
            return sock.recv(100) == b""  # accepted by nobody: closed at once
    except OSError:
        return True


def _cluster(cluster_factory: Factory, sink: Sink) -> Cluster:
    cluster = cluster_factory(two_nodes(sink, SmtpInProcesses=WORKERS))
    assert len(_workers(cluster, "mbx1")) == WORKERS
    return cluster


def test_workers_take_sessions_with_the_state_the_node_was_given(
    cluster_factory: Factory, sink: Sink
) -> None:
    """A route added through the control API holds in every session at once after the
    call returns, whichever worker takes it; counters add up over the workers."""
    cluster = _cluster(cluster_factory, sink)
    cluster.api("mbx1", "PUT", "/topology/next_hops", {"new.test": sink.address})
    host, port = cluster.nodes["mbx1"].smtp
    # Sessions open together, so that they are spread over the waiting workers.
    clients = [smtplib.SMTP(host, port, timeout=30) for _ in range(2 * WORKERS)]
    ids = []
    for number, client in enumerate(clients):
        message_id = f"<w{number}@client.test>"
        code, text = Cluster._transaction(client, "a@ext.test", ["x@new.test"], message_id, "hi")
        assert code == 250, text
        ids.append(message_id)
        client.quit()
    wait_until(lambda: all(sink.of(m) for m in ids))
    stats = cluster.api("mbx1", "GET", "/stats")
    assert stats["received"] == stats["shadow_copies_made"] == len(ids)
    assert {a["outcome"] for a in stats["shadow_attempts"]} == {"ok"}
    assert cluster.api("mbx2", "GET", "/stats")["shadow_copies_stored"] == len(ids)
    # Discards reach the shadow (heartbeats run in mbx2's node process).
    wait_until(lambda: not cluster.shadows("mbx2"))


def test_start_only_setting_is_refused_at_run_time(cluster_factory: Factory, sink: Sink) -> None:
    cluster = _cluster(cluster_factory, sink)
    answer = cluster.api("mbx1", "PUT", "/settings", {"SmtpInProcesses": 1})
    assert answer["status"] == 400
    assert "SmtpInProcesses" in answer["error"]
    assert cluster.api("mbx1", "GET", "/settings")["SmtpInProcesses"] == WORKERS


def test_kill_of_the_node_pid_alone_takes_its_workers_down(
    cluster_factory: Factory, sink: Sink
) -> None:
    """``kill -9 PID`` of the node process (not its group): no worker keeps accepting."""
    cluster = _cluster(cluster_factory, sink)
    workers = _workers(cluster, "mbx1")
    proc = cluster.nodes["mbx1"].proc
    assert proc is not None
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(10)
    wait_until(lambda: all(_dead(pid) for pid in workers))
    assert _refuses(cluster.nodes["mbx1"].smtp)


def test_a_lost_worker_stops_the_node(cluster_factory: Factory, sink: Sink) -> None:
    """A worker that dies alone is a failed node, not a node with less capacity."""
    cluster = _cluster(cluster_factory, sink)
    workers = _workers(cluster, "mbx1")
    os.kill(workers[0], signal.SIGKILL)
    proc = cluster.nodes["mbx1"].proc
    assert proc is not None
    assert proc.wait(10) == 1
    wait_until(lambda: all(_dead(pid) for pid in workers))
    assert _refuses(cluster.nodes["mbx1"].smtp)


def test_a_paused_node_is_frozen_whole_and_keeps_its_mail(
    cluster_factory: Factory, sink: Sink
) -> None:
    """SIGSTOP of the node's group freezes the node process and every worker; after
    SIGCONT a message sent meanwhile is taken and delivered."""
    cluster = _cluster(cluster_factory, sink)
    proc = cluster.nodes["mbx1"].proc
    assert proc is not None
    pids = [proc.pid, *_workers(cluster, "mbx1")]
    cluster.pause("mbx1")
    wait_until(lambda: all(_state(pid) == "T" for pid in pids))
    host, port = cluster.nodes["mbx1"].smtp
    with socket.create_connection((host, port), timeout=5) as sock:
        sock.settimeout(0.5)
        try:
            greeting = sock.recv(100)
        except TimeoutError:
            greeting = b""
        assert greeting == b"", "a worker of a paused node greeted a client"
    time.sleep(0.2)
    cluster.resume("mbx1")
    wait_until(lambda: all(_state(pid) != "T" for pid in pids))
    code, text, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250, text
    wait_until(lambda: sink.of(message_id))


def test_setting_of_one_node_over_the_cluster_s(cluster_factory: Factory, sink: Sink) -> None:
    """``nodes.NAME.settings`` overrides ``settings:`` for that node alone."""
    spec = two_nodes(sink, SmtpInProcesses=1)
    spec["nodes"]["mbx1"]["settings"] = {"SmtpInProcesses": 2}
    cluster = cluster_factory(spec)
    assert len(_workers(cluster, "mbx1")) == 2
    assert _workers(cluster, "mbx2") == []
    assert cluster.api("mbx1", "GET", "/settings")["SmtpInProcesses"] == 2
    assert cluster.api("mbx2", "GET", "/settings")["SmtpInProcesses"] == 1
    code, text, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250, text
    wait_until(lambda: sink.of(message_id))


def test_bad_setting_of_one_node_is_named(tmp_path: Path, sink: Sink) -> None:
    spec = two_nodes(sink)
    spec["nodes"]["mbx2"]["settings"] = {"SmtpInProcesses": 0}
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(spec))
    command = ["node", "--config", str(config), "--name", "mbx1", "--data", str(tmp_path / "m")]
    done = subprocess.run(
        [sys.executable, "-m", "reference_impl", *command],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "nodes.mbx2.settings: SmtpInProcesses must be 1 to 64" in done.stderr


def test_sigterm_to_the_node_group_is_an_orderly_stop(cluster_factory: Factory, sink: Sink) -> None:
    """The workers get the signal too (maybe first): the node still stops cleanly, exit 0."""
    cluster = _cluster(cluster_factory, sink)
    workers = _workers(cluster, "mbx1")
    proc = cluster.nodes["mbx1"].proc
    assert proc is not None
    signal_group(proc.pid, signal.SIGTERM)
    assert proc.wait(10) == 0
    wait_until(lambda: all(_dead(pid) for pid in workers))
