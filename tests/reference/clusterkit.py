"""Real clusters of the reference MTA for tests: node processes, a sink, a client.

(Fixtures wrapping these live in conftest.py.)

Everything here is real: each node is a ``python -m reference_impl node``
process with its own SQLite file, the sink is an aiosmtpd server in a
thread, and the client speaks SMTP over loopback sockets.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import smtplib
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session

from pytest_shadowcheck.targets.docker.support import free_ports

# a node's process group: the node and its SMTP-in workers, signalled together
from pytest_shadowcheck.targets.node_process import signal_group

WAIT = 15.0  # generous upper bound for anything expected to happen "soon"


def wait_until(predicate: Callable[[], Any], timeout: float = WAIT, interval: float = 0.05) -> Any:
    """Poll until ``predicate`` returns something truthy; fail with a clear message."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


def make_message(message_id: str | None = None, subject: str = "test", body: str = "hello") -> str:
    message_id = message_id or f"<{uuid.uuid4().hex}@client.test>"
    return f"Message-ID: {message_id}\r\nSubject: {subject}\r\nFrom: a@ext.test\r\n\r\n{body}\r\n"


def message_id_of(content: bytes) -> str | None:
    for line in content.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
        if line.lower().startswith(b"message-id:"):
            return line.split(b":", 1)[1].strip().decode()
    return None


@dataclass
class Received:
    mail_from: str
    rcpt_tos: list[str]
    content: bytes
    helo: str
    message_id: str | None
    at: float


class _SinkHandler:
    def __init__(self, sink: Sink) -> None:
        self.sink = sink

    async def handle_EHLO(
        self,
        server: SMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        self.sink.commands.append(f"EHLO {hostname}")
        return responses

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        reply = self.sink.reply_for(address)
        if reply is not None:
            return reply
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_QUIT(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.sink.commands.append("QUIT")
        self.sink.quits.append(time.monotonic())
        return "221 Bye"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        self.sink.received.append(
            Received(
                mail_from=envelope.mail_from or "",
                rcpt_tos=list(envelope.rcpt_tos),
                content=content,
                helo=session.host_name or "",
                message_id=message_id_of(content),
                at=time.monotonic(),
            )
        )
        return "250 2.0.0 OK delivered"


@dataclass
class Sink:
    """A next hop that records what it gets and answers RCPT as scripted."""

    received: list[Received] = field(default_factory=list)
    commands: list[str] = field(default_factory=list)
    quits: list[float] = field(default_factory=list)
    deferred: dict[str, str] = field(default_factory=dict)  # address -> reply
    controller: Controller | None = None

    def reply_for(self, address: str) -> str | None:
        return self.deferred.get(address.lower()) or self.deferred.get("*")

    @property
    def address(self) -> str:
        assert self.controller is not None
        return f"127.0.0.1:{self.controller.port}"

    def of(self, message_id: str) -> list[Received]:
        return [r for r in self.received if r.message_id == message_id]


def start_sink() -> Iterator[Sink]:
    sink = Sink()
    # aiosmtpd's Controller probes its own port, so it needs a concrete one.
    port = int(closed_port().rpartition(":")[2])
    controller = Controller(_SinkHandler(sink), hostname="127.0.0.1", port=port)
    controller.start()
    sink.controller = controller
    try:
        yield sink
    finally:
        controller.stop()


@dataclass
class NodeProc:
    name: str
    data: Path
    proc: subprocess.Popen[str] | None = None
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def smtp(self) -> tuple[str, int]:
        host, _, port = str(self.info["smtp"]).rpartition(":")
        return host, int(port)


class Cluster:
    """A cluster file plus one process per node; peers wired through the control API."""

    def __init__(self, root: Path, spec: dict[str, Any]) -> None:
        self.root = root
        self.spec = spec
        self.config_path = root / "cluster.yaml"
        self.config_path.write_text(yaml.safe_dump(spec))
        self.nodes = {name: NodeProc(name, root / name) for name in spec["nodes"]}
        self.peer_overrides: dict[str, dict[str, str]] = {}
        self.paused: set[str] = set()

    # -- processes --------------------------------------------------------------

    def start(self, *names: str) -> None:
        for name in names or tuple(self.nodes):
            self._spawn(self.nodes[name])
        self.wire()

    def _popen(self, node: NodeProc, extra: list[str]) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "reference_impl",
                "node",
                "--config",
                str(self.config_path),
                "--name",
                node.name,
                "--data",
                str(node.data),
                *extra,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
            # a node and its SMTP-in workers are one process group: signals reach all
            process_group=0,
        )

    def _spawn(self, node: NodeProc) -> None:
        # a port below the kernel's ephemeral range: a node restarted on the same port
        # (``restart``) found one it had bound at port 0 taken meanwhile by some other
        # test's outgoing connection ("address already in use", CI under load)
        # Picked free, a port can still be taken before the node binds it: another test
        # process drew the same one from the pool (CI: "address already in use" on
        # 30930). A node that did not start gets two more tries, each on another port
        for _attempt in range(3):
            (port,) = free_ports(1)
            node.proc = self._popen(node, ["--smtp", f"127.0.0.1:{port}"])
            assert node.proc.stdout is not None
            line = node.proc.stdout.readline()
            if line:
                break
            code = node.proc.wait()
        assert line, f"node {node.name} did not start (exit code {code}, three ports tried)"
        node.info = json.loads(line)

    def wire(self) -> None:
        """Tell every running node where every other node listens now."""
        for node in self.nodes.values():
            if not self.running(node.name) or node.name in self.paused:
                continue  # a frozen node cannot answer; it keeps the addresses it had
            peers = {p: a for p, a in self.known_addresses().items() if p != node.name}
            peers.update(self.peer_overrides.get(node.name, {}))
            if peers:
                self.api(node.name, "PUT", "/topology/peers", peers)

    def known_addresses(self) -> dict[str, str]:
        return {n.name: str(n.info["smtp"]) for n in self.nodes.values() if n.info}

    def running(self, name: str) -> bool:
        proc = self.nodes[name].proc
        return proc is not None and proc.poll() is None

    def kill(self, name: str) -> None:
        proc = self.nodes[name].proc
        assert proc is not None
        signal_group(proc.pid, signal.SIGKILL)
        proc.wait()

    def pause(self, name: str) -> None:
        proc = self.nodes[name].proc
        assert proc is not None
        signal_group(proc.pid, signal.SIGSTOP)
        self.paused.add(name)

    def resume(self, name: str) -> None:
        proc = self.nodes[name].proc
        assert proc is not None
        signal_group(proc.pid, signal.SIGCONT)
        self.paused.discard(name)

    def restart(
        self,
        name: str,
        *,
        wipe: bool = False,
        port_same: bool = True,
        clock_start: float | None = None,
    ) -> None:
        """Start a stopped node again on the same SMTP port, with or without its queue."""
        node = self.nodes[name]
        if self.running(name):
            self.kill(name)
        if wipe:
            for path in sorted(node.data.glob("*")):
                path.unlink()
        extra = []
        if port_same:
            extra += ["--smtp", "{}:{}".format(*node.smtp)]
        if clock_start is not None:
            extra += ["--clock-start", repr(clock_start)]
        node.proc = self._popen(node, extra)
        assert node.proc.stdout is not None
        line = node.proc.stdout.readline()
        assert line, f"node {name} did not restart"
        node.info = json.loads(line)
        self.wire()

    def stop(self) -> None:
        for node in self.nodes.values():
            if node.proc is None:
                continue
            if node.proc.poll() is None:
                signal_group(node.proc.pid, signal.SIGCONT)
                signal_group(node.proc.pid, signal.SIGTERM)
                try:
                    node.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    signal_group(node.proc.pid, signal.SIGKILL)
                    node.proc.wait()
            if node.proc.stdout is not None:
                node.proc.stdout.close()

    # -- control API --------------------------------------------------------------

    def api(self, name: str, method: str, path: str, body: Any = None) -> Any:
        url = f"http://{self.nodes[name].info['control']}{path}"
        data = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        token = self.nodes[name].info.get("token")
        if token:
            headers["Authorization"] = f"Bearer {token}"
        request = urllib.request.Request(url, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return json.loads(response.read())
        except urllib.error.HTTPError as exc:
            return {"status": exc.code, **json.loads(exc.read())}

    def advance(self, seconds: float, *names: str) -> None:
        for name in names or tuple(self.nodes):
            if self.running(name):
                self.api(name, "POST", "/clock", {"advance": seconds})

    def set_clock(self, moment: float, *names: str) -> None:
        for name in names or tuple(self.nodes):
            if self.running(name):
                self.api(name, "POST", "/clock", {"set": moment})

    def shadows(self, name: str) -> list[dict[str, Any]]:
        queues = self.api(name, "GET", "/queues/shadow")
        seen: dict[str, dict[str, Any]] = {}
        for rows in queues.values():
            for row in rows:
                seen[row["id"]] = row
        return list(seen.values())

    def active(self, name: str) -> list[dict[str, Any]]:
        return list(self.api(name, "GET", "/queues/active"))

    def safety_net(self, name: str, kind: str) -> list[dict[str, Any]]:
        return list(self.api(name, "GET", f"/safetynet/{kind}"))

    # -- SMTP -------------------------------------------------------------------

    def send(
        self,
        name: str,
        recipients: list[str],
        message_id: str | None = None,
        sender: str = "a@ext.test",
        timeout: float = 30.0,
        body: str = "hello",
    ) -> tuple[int, str, str]:
        """Send one message; (code, text, message_id). Never raises on SMTP errors."""
        message_id = message_id or f"<{uuid.uuid4().hex}@client.test>"
        host, port = self.nodes[name].smtp
        client = smtplib.SMTP(host, port, timeout=timeout)
        try:
            code, text = self._transaction(client, sender, recipients, message_id, body)
        finally:
            try:
                client.quit()
            except (smtplib.SMTPException, OSError):
                client.close()
        return code, text, message_id

    @staticmethod
    def _transaction(
        client: smtplib.SMTP, sender: str, recipients: list[str], message_id: str, body: str
    ) -> tuple[int, str]:
        """MAIL, RCPT..., DATA step by step so that the deciding reply is kept."""
        client.ehlo("client.test")
        for command, arg in [("mail", sender), *(("rcpt", r) for r in recipients)]:
            code, raw = getattr(client, command)(arg)
            if code >= 400:
                return code, raw.decode()
        code, raw = client.data(make_message(message_id, body=body).encode())
        return code, raw.decode()


def two_nodes(sink: Sink, **settings: Any) -> dict[str, Any]:
    """The issue's example cluster: two nodes of one site, corp.test delivered to ``sink``."""
    return {
        "boundary": "dag1",
        "nodes": {"mbx1": {"site": "site-a"}, "mbx2": {"site": "site-a"}},
        "next_hops": {"corp.test": sink.address},
        "directory": {"recipients": {"alice@corp.test": "DB1", "bob@corp.test": "DB2"}},
        "settings": {
            "RejectMessageOnShadowFailure": True,
            "ShadowHeartbeatFrequency": 0.3,
            "ShadowResubmitTimeSpan": 60,
            "TransientFailureRetryInterval": 0.3,
            "SendConnectionInactivityTimeout": 3,
            **settings,
        },
    }


class Blackhole:
    """A listener that accepts connections and never says a word (a hung peer)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(64)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.sock.close()
        for conn in self.conns:
            conn.close()


class Relay:
    """A TCP forwarder to ``target`` that notes when each connection ended (a
    peer link the test can watch)."""

    def __init__(self, target: str) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.address = f"127.0.0.1:{self.sock.getsockname()[1]}"
        self.opened: list[float] = []
        self.ended: list[float] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            self.opened.append(time.monotonic())
            server = socket.create_connection(self.target)
            done = threading.Event()
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(a, b, done), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, done: threading.Event) -> None:
        try:
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        except OSError:
            pass
        if not done.is_set():
            done.set()
            self.ended.append(time.monotonic())
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)

    def close(self) -> None:
        self.sock.close()


def closed_port() -> str:
    """An address nothing listens on (a cut link: connection refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{sock.getsockname()[1]}"
