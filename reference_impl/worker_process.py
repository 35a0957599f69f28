"""One SMTP-in worker process: its node and its life (the design is in workers.py).

A worker runs the node's own code, with state pushed from the owner and no
timers of its own: ``WorkerNode`` is a ``Node`` whose delivery and heartbeats
forward to the owner over the channel. Being a ``Node``, it is the one part of
the worker machinery that must import node.py; it lives apart from the owner's
side (workers.py) so that workers.py, which node.py imports (``Node.workers``),
does not, and there is no import circle.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import signal
import socket
from pathlib import Path
from typing import Any

from .clock import VirtualClock
from .config import ClusterConfig
from .delivery import Delivery
from .node import Node
from .ports import DeliveryNode, ShadowingNode
from .shadowing import Shadowing
from .worker_channel import Channel, ChannelClosed
from .workers import WorkerState


class _ForwardQueue:
    """Stands for delivery's queue of one domain: hands the message to the owner."""

    def __init__(self, channel: Channel, domain: str) -> None:
        self.channel = channel
        self.domain = domain

    def put_nowait(self, message_id: str) -> None:
        self.channel.note("submit", self.domain, message_id)


class ForwardingDelivery(Delivery):
    """A worker delivers nothing itself: a queued message goes to the owner's delivery."""

    def __init__(self, node: DeliveryNode, channel: Channel) -> None:
        super().__init__(node)
        self.channel = channel

    def queue_for(self, domain: str) -> Any:
        return _ForwardQueue(self.channel, domain)

    async def wait_processed(self, message_id: str, timeout: float) -> bool:
        return bool(await self.channel.call("wait_processed", message_id, timeout))


class ForwardingShadowing(Shadowing):
    """Heartbeats to the primaries this node shadows for run in the owner."""

    def __init__(self, node: ShadowingNode, channel: Channel) -> None:
        super().__init__(node)
        self.channel = channel

    def ensure_heartbeat(self, primary: str) -> None:
        self.channel.note("watch", primary)


class WorkerNode(Node):
    """One SMTP-in worker's node: same code, state from the owner, no timers of its own."""

    def __init__(self, cluster: ClusterConfig, name: str, data_dir: Path, channel: Channel) -> None:
        super().__init__(cluster, name, data_dir)
        self.channel = channel
        self.delivery = ForwardingDelivery(self, channel)
        self.shadowing = ForwardingShadowing(self, channel)

    def apply(self, state: WorkerState) -> None:
        self.settings = state.settings
        self.directory = state.directory
        self.routes = state.routes
        self.peers = state.peers
        clock, now = self.clock, state.virtual_now
        if now is not None and isinstance(clock, VirtualClock) and now > clock.now():
            clock.set(now)

    async def answer_resubmit(self, requester: str, words: list[str]) -> str:
        return str(await self.channel.call("resubmit", requester, words))

    def counters(self) -> tuple[dict[str, int], list[dict[str, Any]]]:
        return dict(self.stats), list(self.shadowing.attempt_log)


async def run_worker(
    cluster: ClusterConfig, name: str, data: Path, listening: socket.socket, sock: socket.socket
) -> None:
    """A worker's life: wait for the owner's state, serve SMTP until told to stop."""
    channel = Channel(sock, {})
    node: WorkerNode | None = None

    async def on_state(state: WorkerState) -> bool:
        nonlocal node
        if node is None:
            # The owner made the queue database (schema, ID) before its first push.
            node = WorkerNode(cluster, name, data, channel)
            node.apply(state)
            await node.serve_smtp(sock=listening)
            # As the owner does (cli.run_node): what start-up made lives as long as
            # the process, so the cyclic collector need not scan it again and again.
            gc.freeze()
        else:
            node.apply(state)
        return True

    def on_stats() -> tuple[dict[str, int], list[dict[str, Any]]]:
        return node.counters() if node is not None else ({}, [])

    channel.on("state", on_state)
    channel.on("stats", on_stats)
    await channel.open()
    serving = asyncio.ensure_future(channel.serve())
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    closed = asyncio.ensure_future(channel.closed.wait())
    stopping = asyncio.ensure_future(stop.wait())
    await asyncio.wait({closed, stopping}, return_when=asyncio.FIRST_COMPLETED)
    closed.cancel()
    stopping.cancel()
    if stop.is_set():
        with contextlib.suppress(ChannelClosed):
            channel.note("stopping")
    if node is not None:
        with contextlib.suppress(ChannelClosed):
            await node.stop()
    channel.close()
    serving.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await serving
