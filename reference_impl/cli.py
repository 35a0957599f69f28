"""Command line: ``node`` runs one node, ``cluster`` runs one process per node.

Both print one JSON line per node once it listens (the harness reads them)
and run until SIGINT/SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import json
import logging
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Coroutine, Mapping
from pathlib import Path
from typing import Any

import uvloop

from .config import ClusterConfig, ConfigError, load_cluster, parse_address, parse_time
from .node import Node
from .workers import ForkedWorker, WorkerPool, fork_workers, listen, run_worker


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
    node.add_argument("--log-level", default=os.environ.get("SHADOWCHECK_LOG", "WARNING"))
    cluster = sub.add_parser("cluster", help="run every node of a cluster as its own process")
    cluster.add_argument("config", help="the cluster YAML file")
    cluster.add_argument("--data", required=True, help="directory; one subdirectory per node")
    cluster.add_argument("--log-level", default=os.environ.get("SHADOWCHECK_LOG", "WARNING"))
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(
        level=args.log_level.upper(),
        stream=sys.stderr,
        format="%(asctime)s %(name)s %(levelname)s %(message)s",
    )
    try:
        if args.command == "node":
            cluster = load_cluster(args.config)
            cluster.node(args.name)
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
            return run_cluster(Path(args.config), Path(args.data), args.log_level)
    except ConfigError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        pass
    return 0


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


def run_cluster(config_path: Path, data: Path, log_level: str) -> int:
    """Start every node, then tell each where its peers listen."""
    cluster = load_cluster(config_path)
    processes: dict[str, subprocess.Popen[str]] = {}
    lines: dict[str, dict[str, object]] = {}
    try:
        for name in cluster.nodes:
            proc = subprocess.Popen(
                [
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
                    "--log-level",
                    log_level,
                ],
                stdout=subprocess.PIPE,
                text=True,
            )
            processes[name] = proc
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line:
                print(f"error: node {name} did not start (exit {proc.wait()})", file=sys.stderr)
                return 1
            lines[name] = json.loads(line)
        peers = {name: str(info["smtp"]) for name, info in lines.items()}
        for name, info in lines.items():
            # Addresses given in the file win: they may be proxies in between.
            wanted = {
                p: a for p, a in peers.items() if p != name and p not in cluster.node(name).peers
            }
            if wanted:
                _put(f"http://{info['control']}/topology/peers", wanted)
        for info in lines.values():
            print(json.dumps(info), flush=True)
        signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
        while all(p.poll() is None for p in processes.values()):
            with contextlib.suppress(subprocess.TimeoutExpired):
                next(iter(processes.values())).wait(timeout=1.0)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for proc in processes.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in processes.values():
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()


def _put(url: str, body: Mapping[str, object]) -> None:
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        method="PUT",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        response.read()
