"""Command line: ``node`` runs one node, ``cluster`` runs one process per node.

Both print one JSON line per node once it listens (the harness reads them:
addresses, pid, queue database ID and the control API's token) and run until
SIGINT/SIGTERM. ``cluster`` keeps the others running when one node dies and
reports it as a JSON line (``"event": "exited"``); with ``--restart`` it starts
the node again on the same data directory (``"event": "restarted"``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import faulthandler
import gc
import json
import logging
import os
import resource
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import uvloop

from .config import ClusterConfig, ConfigError, load_cluster, parse_address, parse_time
from .credentials import default_path, resolve, write_fresh
from .node import Node
from .worker_process import run_worker
from .workers import ForkedWorker, WorkerPool, fork_workers, listen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m reference_impl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    node = sub.add_parser("node", help="run one node of a cluster")
    node.add_argument("--config", required=True, help="the cluster YAML file")
    node.add_argument("--name", required=True, help="which node of the file this is")
    node.add_argument("--data", required=True, help="directory for the queue database")
    node.add_argument("--smtp", help="HOST:PORT to listen on for SMTP (default from the file)")
    node.add_argument("--control", help="HOST:PORT for the control API (default from the file)")
    node.add_argument(
        "--clock-start", help="virtual clock only: start at this time (epoch or ISO 8601)"
    )
    node.add_argument(
        "--credentials",
        help="the run's credentials file, made if missing (default: CONFIG.credentials.json)",
    )
    node.add_argument("--log-level", default=os.environ.get("SHADOWCHECK_LOG", "WARNING"))
    cluster = sub.add_parser("cluster", help="run every node of a cluster as its own process")
    cluster.add_argument("config", help="the cluster YAML file")
    cluster.add_argument("--data", required=True, help="directory; one subdirectory per node")
    cluster.add_argument("--log-level", default=os.environ.get("SHADOWCHECK_LOG", "WARNING"))
    cluster.add_argument(
        "--restart",
        action="store_true",
        help="start a node that died again, on the same data directory and addresses",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    # kill -USR1 <pid> writes every thread's stack to the log: a hung node can say where
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    _raise_descriptor_limit()
    try:
        if args.command == "node":
            cluster = load_cluster(args.config)
            cluster.node(args.name)
            credentials = resolve(
                cluster,
                Path(args.credentials) if args.credentials else default_path(Path(args.config)),
            )
            cluster = dataclasses.replace(
                cluster, secret=credentials.secret, control_token=credentials.token or ""
            )
            if args.clock_start:
                cluster = dataclasses.replace(
                    cluster, clock_start=parse_time(args.clock_start, "--clock-start")
                )
            smtp = parse_address(args.smtp, "--smtp") if args.smtp else None
            control = parse_address(args.control, "--control") if args.control else None
            data = Path(args.data)
            processes = cluster.settings_for(args.name).SmtpInProcesses
            if processes == 1:
                return _run(run_node(cluster, args.name, data, smtp, control))
            # Forked before the owner has a loop or a thread (workers.py).
            listening = listen(*(smtp or cluster.node(args.name).smtp))
            forked = fork_workers(
                processes,
                lambda _n, channel: _run(run_worker(cluster, args.name, data, listening, channel)),
            )
            return _run(run_node(cluster, args.name, data, smtp, control, listening, forked))
        else:
            return run_cluster(Path(args.config), Path(args.data), args.log_level, args.restart)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


def _raise_descriptor_limit() -> None:
    """Up to the hard limit: every SMTP session is a descriptor, and running out
    makes SMTP and the control API unusable (the connection cap stays below it)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _run(main: Coroutine[Any, Any, int | None]) -> int:
    # uvloop: the same asyncio API at roughly half the transport overhead
    # (benchmarks/bench_transport.py; the node is bound by its sockets).
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main) or 0


async def run_node(
    cluster: ClusterConfig,
    name: str,
    data: Path,
    smtp: tuple[str, int] | None,
    control: tuple[str, int] | None,
    listening: socket.socket | None = None,
    forked: list[ForkedWorker] | None = None,
) -> int:
    """The node process; with ``forked`` workers, their owner (exit 1 if one was lost)."""
    from .control_api import start_control

    node = Node(cluster, name, data)
    stop = asyncio.Event()
    lost: list[bool] = []

    def worker_lost() -> None:
        lost.append(True)
        stop.set()

    if forked and listening is not None:
        node.workers = WorkerPool(node, forked, on_lost=worker_lost, on_stop=stop.set)
        await node.start(serve_smtp=False)
        host, port = listening.getsockname()[:2]
        node.smtp_address = (host, port)
        await node.workers.start()
    else:
        await node.start(smtp)
    runner, control_address = await start_control(node, *(control or node.config.control))
    # What start-up made (modules, configuration) lives as long as the process:
    # keep the cyclic collector from scanning it again and again under load.
    gc.freeze()
    print(
        json.dumps(
            {
                "node": name,
                "smtp": f"{node.smtp_address[0]}:{node.smtp_address[1]}",
                "control": f"{control_address[0]}:{control_address[1]}",
                "pid": os.getpid(),
                "queue_db_id": node.db.db_id,
                # the control API's bearer token (credentials.py); null: none needed
                "token": node.cluster.control_token or None,
            }
        ),
        flush=True,
    )
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()
    if node.workers is not None:
        await node.workers.stop()
    await node.stop()
    return 1 if lost else 0


def _node_argv(
    config_path: Path, name: str, data: Path, log_level: str, credentials: Path
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "reference_impl",
        "node",
        "--config",
        str(config_path),
        "--name",
        name,
        "--data",
        str(data / name),
        "--credentials",
        str(credentials),
        "--log-level",
        log_level,
    ]


class _Supervised:
    """One node process of ``cluster`` and what it said when it started."""

    def __init__(self, name: str, argv: list[str]) -> None:
        self.name = name
        self.argv = argv
        self.proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}
        self.started_at = 0.0
        self.quick_deaths = 0  # deaths soon after a start, in a row
        self.wanted = False  # dead, and to be started again

    def start(self, extra: list[str]) -> bool:
        self.proc = subprocess.Popen([*self.argv, *extra], stdout=subprocess.PIPE, text=True)
        self.started_at = time.monotonic()
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            self.proc.wait()
            return False
        self.info = json.loads(line)
        return True

    def same_addresses(self) -> list[str]:
        # A restarted node listens where it did, so its peers need not be told.
        return ["--smtp", str(self.info["smtp"]), "--control", str(self.info["control"])]


#: a node that dies this soon after (re)starting, RESTART_GIVE_UP times in a
#: row, is not restarted again (it would only crash in a loop)
QUICK_DEATH = 10.0
RESTART_GIVE_UP = 5


def run_cluster(config_path: Path, data: Path, log_level: str, restart: bool = False) -> int:
    """Start every node, tell each where its peers listen, then supervise: a node
    that dies is reported (a JSON line) and, with ``restart``, started again on
    the same data directory and addresses; the others keep running."""
    cluster = load_cluster(config_path)
    credentials_path = data / "credentials.json"
    write_fresh(credentials_path, cluster)  # a new secret and token for each run
    token = resolve(cluster, credentials_path).token
    nodes = {
        name: _Supervised(name, _node_argv(config_path, name, data, log_level, credentials_path))
        for name in cluster.nodes
    }
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    try:
        for node in nodes.values():
            if not node.start([]):
                code = node.proc.returncode if node.proc else None
                print(f"error: node {node.name} did not start (exit {code})", file=sys.stderr)
                return 1
        for node in nodes.values():
            _tell_peers(cluster, node, nodes, token)
        for node in nodes.values():
            print(json.dumps(node.info), flush=True)
        while True:
            for node in nodes.values():
                if node.proc is not None and node.proc.poll() is not None:
                    _node_died(node, restart)
                if node.proc is None and node.wanted:
                    _restart(cluster, node, nodes, token)
            if all(node.proc is None and not node.wanted for node in nodes.values()):
                return 1  # every node is gone for good
            time.sleep(0.2)
    except KeyboardInterrupt:
        return 0
    finally:
        for node in nodes.values():
            if node.proc is not None and node.proc.poll() is None:
                node.proc.terminate()
        for node in nodes.values():
            if node.proc is None:
                continue
            try:
                node.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                node.proc.kill()


def _node_died(node: _Supervised, restart: bool) -> None:
    assert node.proc is not None
    code = node.proc.returncode
    node.proc = None
    event: dict[str, Any] = {"node": node.name, "event": "exited", "exit_code": code}
    node.wanted = restart and _worth_restarting(node, event)
    print(json.dumps(event), flush=True)


def _worth_restarting(node: _Supervised, event: dict[str, Any]) -> bool:
    # Killed from outside (an operator, a chaos test) is no crash loop, however often.
    killed = event.get("exit_code") in (-signal.SIGKILL, -signal.SIGTERM, -signal.SIGINT)
    quick = not killed and time.monotonic() - node.started_at < QUICK_DEATH
    node.quick_deaths = node.quick_deaths + 1 if quick else 0
    if node.quick_deaths >= RESTART_GIVE_UP:
        event["restart"] = (
            f"given up: died within {QUICK_DEATH:g}s of starting, {RESTART_GIVE_UP} times"
        )
        return False
    return True


def _restart(
    cluster: ClusterConfig, node: _Supervised, nodes: dict[str, _Supervised], token: str | None
) -> None:
    """Start ``node`` again where it listened; a failed start is retried next round."""
    if not node.start(node.same_addresses()):
        code = node.proc.returncode if node.proc else None
        node.proc = None
        event = {"node": node.name, "event": "restart failed", "exit_code": code}
        node.wanted = _worth_restarting(node, event)
        print(json.dumps(event), flush=True)
        return
    node.wanted = False
    try:
        _tell_peers(cluster, node, nodes, token)
    except OSError as exc:
        # It listens where it did, so its peers still reach it; it may lack their
        # addresses until the next restart: say so, keep supervising.
        print(f"warning: could not tell {node.name} where its peers are: {exc}", file=sys.stderr)
    print(json.dumps({**node.info, "event": "restarted"}), flush=True)


def _tell_peers(
    cluster: ClusterConfig, node: _Supervised, nodes: dict[str, _Supervised], token: str | None
) -> None:
    # Addresses given in the file win: they may be proxies in between.
    wanted = {
        p: str(other.info["smtp"])
        for p, other in nodes.items()
        if p != node.name and other.info and p not in cluster.node(node.name).peers
    }
    if wanted:
        _put(f"http://{node.info['control']}/topology/peers", wanted, token)


def _put(url: str, body: Mapping[str, object], token: str | None) -> None:
    headers = {"Content-Type": "application/json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), method="PUT", headers=headers
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
