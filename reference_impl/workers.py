"""SMTP in on more than one process: a node's owner and its forked SMTP-in workers.

A node process is one asyncio loop, so it gets one core at most. With
``SmtpInProcesses: N`` (N >= 2) the node process (the *owner*) binds the SMTP
socket and forks N workers before it starts its loop; every worker accepts on
that one inherited socket and runs whole inbound sessions: aiosmtpd, the
shadow copy (its own session to the shadow, CR-2), queueing into the node's
queue database (the same SQLite file, WAL, each worker with its own group
commit) and the 250 once on disk. The owner keeps everything else: the
control API, the clock, settings, directory, routes and peers, delivery,
heartbeats, promotion on timers and Safety Net.

What the workers need of the owner's memory is pushed to them (settings,
directory, routes, peers, virtual time) and acknowledged before the control
API call that changed it returns; what the owner needs of theirs comes over
the channel: a queued message to deliver, a primary to heartbeat, a Safety Net
request to answer, a 2010 sender waiting for delivery (XS-4), and their
counters for ``/stats``.

One node, one fate: the workers are forked from the owner after any patch of
the node's code (conformance variants) is applied, so they carry it; each asks
the kernel for SIGKILL when the owner dies (PR_SET_PDEATHSIG), so a lone
``kill -9`` of the node's pid takes them down too; the reference target also
starts each node as a process-group leader and signals the group, so that a
kill, a SIGSTOP and a SIGCONT reach every process of the node at once.

This module holds the forking and the owner's side (``WorkerPool``, which sees
the node only as ``ports.WorkerOwnerNode``); the worker's side, whose node is a
``Node`` subclass, is ``worker_process.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import logging
import os
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .clock import VirtualClock

# The owner's node as its pool sees it (ports.py): no import of node.py, which imports this.
from .ports import WorkerOwnerNode
from .worker_channel import Channel

if TYPE_CHECKING:
    from .directory import Directory

log = logging.getLogger(__name__)

PR_SET_PDEATHSIG = 1
STOP_TIMEOUT = 5.0
LISTEN_BACKLOG = 512
BIND_PATIENCE = 3.0


def listen(host: str, port: int) -> socket.socket:
    """The node's SMTP socket, bound and listening before the fork (all workers accept on it)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    deadline = time.monotonic() + BIND_PATIENCE
    while True:
        try:
            sock.bind((host, port))
            break
        except OSError as exc:
            # A node restarted on its port right after a kill: the killed node's
            # workers may take a moment longer than it to let go of the socket.
            if exc.errno != errno.EADDRINUSE or port == 0 or time.monotonic() > deadline:
                sock.close()
                raise
            time.sleep(0.05)
    sock.listen(LISTEN_BACKLOG)
    sock.setblocking(False)
    return sock


def _die_with_parent(parent: int) -> None:
    """Ask for SIGKILL when the owner dies; if it died already, go now."""
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os._exit(1)


@dataclass
class ForkedWorker:
    number: int
    pid: int
    sock: socket.socket  # the owner's end of the channel


def fork_workers(count: int, run: Callable[[int, socket.socket], object]) -> list[ForkedWorker]:
    """Fork ``count`` workers, each running ``run(number, channel_end)``, then exiting.

    Call it before the owner starts an event loop or a thread: a fork copies
    only the calling thread, and a loop's selector must not be shared."""
    owner = os.getpid()
    forked: list[ForkedWorker] = []
    for number in range(1, count + 1):
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the worker
            code = 1
            try:
                _die_with_parent(owner)
                mine.close()
                for other in forked:
                    other.sock.close()
                # Only the owner speaks on stdout (the line the harness reads).
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1)
                os.close(devnull)
                run(number, theirs)
                code = 0
            except BaseException:  # a worker must never return into the owner's code
                log.exception("SMTP-in worker %d failed", number)
            finally:
                logging.shutdown()
                os._exit(code)
        theirs.close()
        forked.append(ForkedWorker(number, pid, mine))
    return forked


# -- the owner's side ----------------------------------------------------------------------


@dataclass
class WorkerState:
    """What SMTP in reads from the owner's memory."""

    settings: Any
    directory: Directory
    routes: dict[str, Any]
    peers: dict[str, tuple[str, int]]
    virtual_now: float | None


def state_of(node: WorkerOwnerNode) -> WorkerState:
    clock = node.clock
    return WorkerState(
        settings=node.settings,
        directory=node.directory,
        routes=dict(node.routes),
        peers=dict(node.peers),
        virtual_now=clock.now() if isinstance(clock, VirtualClock) else None,
    )


class WorkerPool:
    """The owner's view of its workers: push state, collect counters, stop them."""

    def __init__(
        self,
        node: WorkerOwnerNode,
        forked: list[ForkedWorker],
        on_lost: Callable[[], None],
        on_stop: Callable[[], None],
    ) -> None:
        self.node = node
        self.forked = forked
        self.on_lost = on_lost  # a worker died: the node fails
        self.on_stop = on_stop  # a worker was told to stop (SIGTERM/SIGINT): the node stops
        self.channels: list[Channel] = []
        self._serving: list[asyncio.Task[Any]] = []
        self.stopping = False

    async def start(self) -> None:
        node = self.node
        handlers: dict[str, Callable[..., Any]] = {
            "submit": self._submit,
            "watch": node.shadowing.ensure_heartbeat,
            "resubmit": node.answer_resubmit,
            "wait_processed": node.delivery.wait_processed,
            "stopping": self._worker_stopping,
        }
        for worker in self.forked:
            channel = Channel(worker.sock, handlers)
            await channel.open()
            self.channels.append(channel)
            task = asyncio.ensure_future(channel.serve())
            task.add_done_callback(self._lost_callback(worker.number))
            self._serving.append(task)
        await self.sync()

    def _submit(self, domain: str, message_id: str) -> None:
        # Delivery.submit already ran in the worker (a variant may have patched it).
        self.node.delivery.queue_for(domain).put_nowait(message_id)

    def _worker_stopping(self) -> None:
        # (A signal to the node's group reaches the workers too, maybe first.)
        self.stopping = True
        self.on_stop()

    def _lost_callback(self, number: int) -> Callable[[asyncio.Task[Any]], None]:
        def lost(_task: asyncio.Task[Any]) -> None:
            if not self.stopping:
                log.error("SMTP-in worker %d is gone: stopping the node", number)
                self.on_lost()

        return lost

    async def sync(self) -> None:
        """Push the owner's state to every worker; return once each has it."""
        state = state_of(self.node)
        await asyncio.gather(*(channel.call("state", state) for channel in self.channels))

    async def stats(self) -> tuple[dict[str, int], list[dict[str, Any]]]:
        """Counters and shadow attempts of the owner and every worker, together."""
        totals = dict(self.node.stats)
        attempts = list(self.node.shadowing.attempt_log)
        for counters, log_ in await asyncio.gather(*(c.call("stats") for c in self.channels)):
            for key, value in counters.items():
                totals[key] = totals.get(key, 0) + value
            attempts.extend(log_)
        attempts.sort(key=lambda a: a["at"])
        return totals, attempts

    async def stop(self) -> None:
        self.stopping = True
        for worker in self.forked:
            with contextlib.suppress(ProcessLookupError):
                os.kill(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for worker in self.forked:
            while time.monotonic() < deadline:
                pid, _ = os.waitpid(worker.pid, os.WNOHANG)
                if pid:
                    break
                await asyncio.sleep(0.02)
            else:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(worker.pid, signal.SIGKILL)
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(worker.pid, 0)
        for channel in self.channels:
            channel.close()
        for task in self._serving:
            task.cancel()
