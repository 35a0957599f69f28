"""Load under kill -9: does the reference MTA lose an acknowledged message?

    python benchmarks/bench_kill_durability.py [--messages 3000] [--sessions 6]
        [--rate 100] [--kill-every 3] [--max-kills 12] [--outage 0] [--time-limit 300]
        [--seed N]

Starts a 2-node reference cluster with ``python -m reference_impl cluster
--restart`` (one site, one DAG, shadow redundancy on, RejectMessageOnShadowFailure
true: a 250 means a shadow copy exists), a sink (aiosmtpd, in this process) as the
next hop, and ``--sessions`` client sessions (aiosmtplib) sending ``--messages``
messages with unique Message-IDs to either node, ``--rate`` a second at most.
Every ``--kill-every`` seconds (with jitter) one node, chosen at random, is killed
with SIGKILL; the cluster command starts it again on the same data directory.
``--outage S`` makes the next hop answer 451 for S seconds from the moment a third
of the messages were sent (a long next-hop outage: the discard notifications pile
up meanwhile).

The kills go on until ``--max-kills`` (while sending and after). Then it waits
for the active queues to drain and prints one JSON object:
acknowledged (250 to the client), delivered (distinct Message-IDs at the sink),
lost (acknowledged, never delivered), duplicates (deliveries beyond the first),
kills, and seconds. Exit status 1 if anything acknowledged was lost.

Bounded: at most ``--max-kills`` kills and ``--time-limit`` seconds in all.
Everything listens on 127.0.0.1 only; every process and directory it made is
removed at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import http.client
import itertools
import json
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiosmtplib
import yaml
from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session


class Sink:
    """The next hop: counts deliveries per Message-ID; answers 451 during an outage."""

    def __init__(self) -> None:
        self.seen: Counter[str] = Counter()
        self.outage_until = 0.0
        self.lock = threading.Lock()

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list[str]
    ) -> str:
        if time.monotonic() < self.outage_until:
            return "451 4.3.0 next hop unavailable (outage)"
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        for line in content.split(b"\r\n\r\n", 1)[0].split(b"\r\n"):
            if line.lower().startswith(b"message-id:"):
                with self.lock:
                    self.seen[line.split(b":", 1)[1].strip().decode()] += 1
        return "250 2.0.0 OK"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ClusterCommand:
    """``python -m reference_impl cluster --restart``; its JSON lines read by a thread."""

    def __init__(self, config: Path, data: Path) -> None:
        argv = [sys.executable, "-m", "reference_impl", "cluster", str(config)]
        self.proc = subprocess.Popen(
            [*argv, "--data", str(data), "--restart"],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
        self.nodes: dict[str, dict[str, Any]] = {}
        self.events: queue.Queue[dict[str, Any]] = queue.Queue()
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for text in self.proc.stdout:
            info = json.loads(text)
            if "pid" in info:
                with self.lock:
                    self.nodes[info["node"]] = info
            if "event" in info:
                shown = {k: v for k, v in info.items() if k not in ("token", "queue_db_id")}
                print(json.dumps(shown), file=sys.stderr, flush=True)
            self.events.put(info)

    def wait_nodes(self, count: int, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.nodes) < count:
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("the reference cluster did not start")
            time.sleep(0.05)

    def node(self, name: str) -> dict[str, Any]:
        with self.lock:
            return dict(self.nodes[name])

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def cluster_file(sink_port: int) -> dict[str, Any]:
    return {
        "boundary": "dag1",
        "nodes": {
            "mbx1": {"site": "site-a", "dag": "dag1"},
            "mbx2": {"site": "site-a", "dag": "dag1"},
        },
        "next_hops": {"corp.test": f"127.0.0.1:{sink_port}"},
        "settings": {
            "RejectMessageOnShadowFailure": True,
            "ShadowHeartbeatFrequency": 0.5,
            # a primary down this long has its copies promoted by the shadow
            "ShadowResubmitTimeSpan": 5,
            "TransientFailureRetryInterval": 0.5,
            "SendConnectionInactivityTimeout": 5,
        },
    }


def make_message(message_id: str) -> str:
    return (
        f"Message-ID: {message_id}\r\nFrom: load@ext.test\r\nTo: alice@corp.test\r\n"
        f"Subject: durability\r\n\r\nbody of {message_id}\r\n"
    )


async def client(
    cluster: ClusterCommand,
    todo: asyncio.Queue[str],
    acked: set[str],
    stats: Counter[str],
    rng: random.Random,
    pace: Callable[[], Awaitable[None]],
) -> None:
    """Send until ``todo`` is empty; a message whose 250 never came is not retried
    (it may or may not have been queued: only acknowledged ones are counted)."""
    smtp: aiosmtplib.SMTP | None = None
    while not todo.empty():
        message_id = todo.get_nowait()
        await pace()
        try:
            if smtp is None or not smtp.is_connected:
                host, _, port = str(cluster.node(rng.choice(["mbx1", "mbx2"]))["smtp"]).rpartition(
                    ":"
                )
                smtp = aiosmtplib.SMTP(hostname=host, port=int(port), timeout=30, start_tls=False)
                await smtp.connect()
            await smtp.sendmail("load@ext.test", ["alice@corp.test"], make_message(message_id))
            acked.add(message_id)
            stats["acknowledged"] += 1
        except (aiosmtplib.SMTPException, OSError) as exc:
            stats[f"refused: {type(exc).__name__}"] += 1
            if smtp is not None:
                smtp.close()
            smtp = None
            await asyncio.sleep(0.1)
        if rng.random() < 0.02 and smtp is not None:  # now and then a new session
            with contextlib.suppress(aiosmtplib.SMTPException, OSError):
                await smtp.quit()
            smtp = None
    if smtp is not None:
        with contextlib.suppress(aiosmtplib.SMTPException, OSError):
            await smtp.quit()


async def killer(
    cluster: ClusterCommand, args: argparse.Namespace, rng: random.Random, done: asyncio.Event
) -> int:
    kills = 0
    while kills < args.max_kills and not done.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(done.wait(), args.kill_every * rng.uniform(0.5, 1.5))
        if done.is_set():
            break
        name = rng.choice(["mbx1", "mbx2"])
        with contextlib.suppress(ProcessLookupError):
            os.kill(int(cluster.node(name)["pid"]), signal.SIGKILL)
            kills += 1
            print(f"kill -9 {name} ({kills}/{args.max_kills})", file=sys.stderr, flush=True)
    return kills


def queued(cluster: ClusterCommand, path: str = "/queues/active") -> int:
    """Messages in both nodes' active (or shadow) queues; -1 while one is restarting."""
    total = 0
    for name in ("mbx1", "mbx2"):
        info = cluster.node(name)
        request = urllib.request.Request(
            f"http://{info['control']}{path}",
            headers={"Authorization": f"Bearer {info['token']}"},
        )
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = json.loads(response.read())
        except (OSError, http.client.HTTPException):
            return -1  # a node restarting: not drained yet
        total += (
            len(body)
            if isinstance(body, list)
            else len({r["id"] for v in body.values() for r in v})
        )
    return total


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    work = Path(tempfile.mkdtemp(prefix="bench-kill-"))
    sink = Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=free_port())
    controller.start()
    config = work / "cluster.yaml"
    config.write_text(yaml.safe_dump(cluster_file(controller.port)))
    cluster = ClusterCommand(config, work / "data")
    started = time.monotonic()
    try:
        cluster.wait_nodes(2)
        todo: asyncio.Queue[str] = asyncio.Queue()
        for _ in range(args.messages):
            todo.put_nowait(f"<{uuid.uuid4().hex}@bench.test>")
        acked: set[str] = set()
        stats: Counter[str] = Counter()
        done = asyncio.Event()
        kill_task = asyncio.ensure_future(killer(cluster, args, rng, done))
        sending = itertools.count()

        async def pace() -> None:
            delay = started + next(sending) / args.rate - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)

        async def outage() -> None:
            while args.outage and todo.qsize() > args.messages * 2 // 3:
                await asyncio.sleep(0.1)
            if args.outage:
                print(f"next hop down for {args.outage:g}s", file=sys.stderr, flush=True)
                sink.outage_until = time.monotonic() + args.outage

        clients = [
            asyncio.ensure_future(
                client(cluster, todo, acked, stats, random.Random(rng.random()), pace)
            )
            for _ in range(args.sessions)
        ]
        outage_task = asyncio.ensure_future(outage())
        budget = args.time_limit - (time.monotonic() - started)
        _, pending = await asyncio.wait(clients, timeout=max(budget * 0.6, 1))
        for task in pending:
            task.cancel()
        sent_for = time.monotonic() - started
        # the kills go on while the queues drain, up to --max-kills (or half the time)
        while time.monotonic() < sink.outage_until:
            await asyncio.sleep(0.2)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(kill_task), args.time_limit / 2)
        done.set()
        kills = await kill_task
        outage_task.cancel()
        deadline = started + args.time_limit
        while time.monotonic() < deadline:
            if not (acked - set(sink.seen)) and queued(cluster) == 0:
                break
            await asyncio.sleep(0.5)
        await asyncio.sleep(2)  # late duplicates, if any, arrive too
        with sink.lock:
            seen = Counter(sink.seen)
        lost = sorted(acked - set(seen))
        return {
            "messages": args.messages,
            "sessions": args.sessions,
            "outage_s": args.outage,
            "acknowledged": len(acked),
            "delivered": len(seen),
            "lost": len(lost),
            "lost_ids": lost[:10],
            "duplicates": sum(n - 1 for n in seen.values() if n > 1),
            "kills": kills,
            "sending_s": round(sent_for, 1),
            "total_s": round(time.monotonic() - started, 1),
            "client_errors": {k: v for k, v in stats.items() if k != "acknowledged"},
            "still_queued": queued(cluster),
            # copies of messages a primary took in but died before acknowledging: the
            # shadow keeps them until ShadowMessageAutoDiscardInterval (no 250: not lost)
            "shadow_copies_left": queued(cluster, "/queues/shadow"),
        }
    finally:
        cluster.stop()
        controller.stop()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=3000)
    parser.add_argument("--sessions", type=int, default=6)
    parser.add_argument("--rate", type=float, default=100.0, help="messages per second at most")
    parser.add_argument("--kill-every", type=float, default=3.0, help="seconds, with jitter")
    parser.add_argument("--max-kills", type=int, default=12)
    parser.add_argument("--outage", type=float, default=0.0, help="next hop down, seconds")
    parser.add_argument("--time-limit", type=float, default=300.0)
    parser.add_argument("--seed", type=int, default=None)
    args = parser.parse_args()
    if args.seed is None:
        args.seed = random.randrange(1 << 30)
    result = asyncio.run(run(args))
    result["seed"] = args.seed
    print(json.dumps(result))
    return 1 if result["lost"] else 0


if __name__ == "__main__":
    sys.exit(main())
