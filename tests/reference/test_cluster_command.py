"""``python -m reference_impl cluster``: a node that dies is reported and the others
keep running; with ``--restart`` it comes back on the same data and addresses."""

from __future__ import annotations

import json
import os
import queue
import signal
import smtplib
import subprocess
import sys
import threading
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from clusterkit import Sink, two_nodes, wait_until


class ClusterCommand:
    def __init__(self, tmp_path: Path, sink: Sink, *extra: str) -> None:
        config = tmp_path / "cluster.yaml"
        config.write_text(yaml.safe_dump(two_nodes(sink)))
        argv = [sys.executable, "-m", "reference_impl", "cluster", str(config)]
        self.proc = subprocess.Popen(
            [*argv, "--data", str(tmp_path / "data"), *extra],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        # select() cannot see lines already in the pipe's buffer: a thread reads them
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.nodes = {}
        for _ in range(2):
            info = self.line()
            self.nodes[info["node"]] = info

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            self.lines.put(text)
        self.lines.put("")

    def line(self, timeout: float = 30.0) -> dict[str, Any]:
        try:
            text = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError("the cluster command printed nothing") from None
        assert text, f"the cluster command exited ({self.proc.wait()})"
        return dict(json.loads(text))

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=30)


@pytest.fixture
def command(tmp_path: Path, sink: Sink, request: pytest.FixtureRequest) -> Iterator[ClusterCommand]:
    running = ClusterCommand(tmp_path, sink, *request.param)
    yield running
    if running.proc.poll() is None:
        running.stop()


def _serves_smtp(info: dict[str, Any]) -> bool:
    host, _, port = str(info["smtp"]).rpartition(":")
    with smtplib.SMTP(host, int(port), timeout=10) as client:
        return client.noop()[0] == 250


def _health(info: dict[str, Any]) -> dict[str, Any]:
    request = urllib.request.Request(
        f"http://{info['control']}/health", headers={"Authorization": f"Bearer {info['token']}"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return dict(json.loads(response.read()))


@pytest.mark.parametrize("command", [()], indirect=True)
def test_a_dead_node_is_reported_and_the_others_keep_running(command: ClusterCommand) -> None:
    os.kill(command.nodes["mbx1"]["pid"], signal.SIGKILL)
    assert command.line() == {"node": "mbx1", "event": "exited", "exit_code": -signal.SIGKILL}
    mbx2 = command.nodes["mbx2"]
    assert _serves_smtp(mbx2)
    assert _health(mbx2)["node"] == "mbx2"
    assert command.proc.poll() is None
    assert command.stop() == 0


@pytest.mark.parametrize("command", [("--restart",)], indirect=True)
def test_restart_brings_a_node_back_on_its_data_and_addresses(
    command: ClusterCommand, sink: Sink
) -> None:
    before = command.nodes["mbx1"]
    os.kill(before["pid"], signal.SIGKILL)
    assert command.line()["event"] == "exited"
    after = command.line()
    assert after["event"] == "restarted" and after["node"] == "mbx1"
    assert after["pid"] != before["pid"]
    for key in ("smtp", "control", "queue_db_id", "token"):
        assert after[key] == before[key], key
    # peers wired again: the restarted node makes its copy on mbx2 and delivers
    host, _, port = str(after["smtp"]).rpartition(":")
    with smtplib.SMTP(host, int(port), timeout=30) as client:
        client.sendmail("a@ext.test", ["alice@corp.test"], b"Message-ID: <r1@test>\r\n\r\nhi\r\n")
    wait_until(lambda: sink.of("<r1@test>"))
    assert _health(command.nodes["mbx2"])["node"] == "mbx2"
