"""One transport node: receives, shadows, queues, delivers, keeps Safety Net.

The node owns the durable state (queue database), the clock, the routes and
the directory, and wires the concerns that live in their own modules:
``shadowing`` (making and keeping shadow copies, heartbeats, promotion),
``delivery`` (next hops), ``safety_net`` (hold, expiry, resubmission),
``smtp_in`` (the SMTP server) and ``control_api`` (HTTP/JSON).

The components this module builds (shadowing, delivery, safety_net, smtp_in,
and the owner's ``workers.WorkerPool``) get the node itself but see it only
through their own protocols in ``ports`` (``SmtpInNode``, ``ShadowingNode``,
...), which ``Node`` satisfies structurally; none of them imports this module,
so imports run one way only. ``control_api`` and ``cli`` sit above the node and
use ``Node`` itself.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import resource
import socket
from collections.abc import Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import messages
from .admin_changes import AdminChanges
from .clock import Clock, RealClock, VirtualClock
from .config import ClusterConfig, ConfigError, NextHop, parse_next_hop
from .credentials import node_password
from .delivery import Delivery
from .directory import Directory
from .peers import PeerState
from .ports import Plan  # defined with the protocols; node.Plan is still used by variants
from .queue_db import Message, QueueDB, new_id
from .safety_net import SafetyNet
from .settings import Settings, SettingsError
from .shadowing import Shadowing
from .smtp_in import NodeSMTP

if TYPE_CHECKING:
    from .workers import WorkerPool

log = logging.getLogger(__name__)

REPLY_NOT_REDUNDANT = "451 4.4.0 Message failed to be made redundant"
#: discard notifications per XQDISCARD reply: 300 lines of ~50 bytes, well under
#: aiosmtplib's 32 KiB reply limit even with longer queue ids (docs/protocol.md 5)
DISCARD_PAGE = 300
#: descriptors kept back from SMTP-in sessions for everything else the node opens
FD_RESERVE = 128


class Node:
    def __init__(self, cluster: ClusterConfig, name: str, data_dir: Path) -> None:
        if not cluster.secret:
            raise ConfigError(
                "no secret for the peers: give secret: in the cluster file, or start the "
                "node with the command line, which makes one per run (credentials.py)"
            )
        self.cluster = cluster
        self.config = cluster.node(name)
        self.name = name
        self.profile = self.config.profile
        # what an admin changed through the control API before a restart or a wipe
        self.admin = AdminChanges.beside(data_dir)
        try:
            self.settings: Settings = Settings.from_mapping(
                self.admin.settings, base=cluster.settings_for(name)
            )
        except SettingsError as exc:
            raise ConfigError(f"{self.admin.path}: {exc}") from None
        self.clock: Clock = (
            VirtualClock(cluster.clock_start or 1767225600.0)
            if cluster.clock_mode == "virtual"
            else RealClock()
        )
        self.db = QueueDB(data_dir / "queue.db", self.clock.now())
        if isinstance(self.clock, VirtualClock):
            # A restarted node carries on from where its clock stood.
            saved = self.db.meta("virtual_now")
            if saved is not None and float(saved) > self.clock.now():
                self.clock.set(float(saved))
        self.directory = Directory(
            dict(cluster.recipients), {k: list(v) for k, v in cluster.groups.items()}
        )
        self.routes: dict[str, NextHop] = cluster.next_hops_for(name)
        for domain, raw in self.admin.routes.items():
            if raw is None:
                self.routes.pop(domain, None)
            else:
                self.routes[domain] = parse_next_hop(domain, raw, f"{self.admin.path}: {domain}")
        self.peers: dict[str, tuple[str, int]] = dict(self.config.peers)
        self.stats: dict[str, int] = {
            "received": 0,
            "rejected_not_redundant": 0,
            "accepted_without_shadow": 0,
            "shadow_copies_made": 0,
            "shadow_copies_stored": 0,
            "delivered": 0,
            "promoted": 0,
            "resubmitted": 0,
            "dsns": 0,
        }
        #: failed AUTH per client address: (count, loop time of the last) (smtp_in)
        self.auth_failures: dict[str, tuple[int, float]] = {}
        self.inbound_connections = 0  # open SMTP sessions of this process (smtp_in)
        self.expiration_history: list[tuple[float, float]] = []
        self._note_expiration()
        self.shadowing = Shadowing(self)
        self.delivery = Delivery(self)
        self.safety_net = SafetyNet(self)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._servers: list[asyncio.AbstractServer] = []
        self.smtp_address: tuple[str, int] = self.config.smtp
        # SMTP-in worker processes (SmtpInProcesses >= 2; workers.py), owner side.
        self.workers: WorkerPool | None = None

    # -- lifecycle ------------------------------------------------------------

    async def start(self, smtp: tuple[str, int] | None = None, *, serve_smtp: bool = True) -> None:
        """Start the timers and delivery; and SMTP in, unless workers serve it."""
        # a risky configuration is flagged where any admin looks first: the log (SN-6)
        for warning in self.settings.warnings():
            log.warning("configuration warning %s: %s", warning["code"], warning["message"])
        if serve_smtp:
            await self.serve_smtp(smtp or self.config.smtp)
        self.background(self.delivery.run())
        self.background(self.safety_net.run())
        self.shadowing.start()

    async def serve_smtp(
        self, address: tuple[str, int] | None = None, *, sock: socket.socket | None = None
    ) -> None:
        """Accept SMTP on ``address``, or on an already listening ``sock`` (a worker's)."""
        loop = asyncio.get_running_loop()
        if sock is not None:
            server = await loop.create_server(lambda: NodeSMTP(self), sock=sock)
        else:
            host, port = address or self.config.smtp
            server = await loop.create_server(lambda: NodeSMTP(self), host, port)
        self._servers.append(server)
        bound = server.sockets[0].getsockname()
        self.smtp_address = (bound[0], bound[1])

    async def stop(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.db.close()

    def background(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._task_done)
        return task

    def _task_done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("background task failed", exc_info=task.exception())

    # -- identity and routing ---------------------------------------------------

    def is_boundary_peer(self, login: str, password: bytes) -> bool:
        """AUTH PLAIN of a node of this cluster: its name and its own password."""
        return (
            login in self.cluster.nodes
            and login != self.name
            and hmac.compare_digest(password, node_password(self.cluster.secret, login).encode())
        )

    def connection_cap(self) -> int:
        """Inbound SMTP sessions allowed at once: MaxInboundConnection, but never so many
        that the process runs out of descriptors for its peers, next hops, database and
        control API (FD_RESERVE of them)."""
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        limit = self.settings.MaxInboundConnection
        if soft != resource.RLIM_INFINITY:
            limit = min(limit, max(1, soft - FD_RESERVE))
        return limit

    def same_boundary(self, other: str) -> bool:
        """Whether ``other`` is in this node's boundary: its DAG, or its AD site outside a DAG."""
        peer = self.cluster.nodes.get(other)
        if peer is None or other == self.name:
            return False
        if self.config.dag is not None:
            return peer.dag == self.config.dag
        return peer.dag is None and peer.site == self.config.site

    def shadow_advertisement(self) -> str | None:
        if not self.settings.ShadowRedundancyEnabled:
            return None
        return f"XSHADOW {self.name} {self.db.db_id}"

    def peer_address(self, node: str) -> tuple[str, int] | None:
        return self.peers.get(node)

    def accepts(self, address: str) -> bool:
        return messages.domain_of(address) in self.routes

    def route(self, domain: str) -> NextHop | None:
        return self.routes.get(domain)

    def categorise(self, recipients: list[str]) -> tuple[Plan, list[str]]:
        """Expand groups and split recipients by next hop; also the unroutable ones."""
        plan: Plan = {}
        unroutable = []
        for rcpt in self.directory.expand(recipients):
            domain = messages.domain_of(rcpt)
            if domain not in self.routes:
                unroutable.append(rcpt)
                continue
            rcpts, dbs = plan.setdefault(domain, ([], []))
            rcpts.append(rcpt)
            database = self.directory.database(rcpt)
            if database and database not in dbs:
                dbs.append(database)
        return plan, unroutable

    # -- receiving ------------------------------------------------------------

    async def receive(
        self,
        *,
        sender: str,
        recipients: list[str],
        content: bytes,
        helo: str,
        peer: str,
        state: PeerState,
    ) -> str:
        now = self.clock.now()
        name, value = messages.received_header(self.name, helo, peer, now)
        content = messages.prepend_header(content, name, value)
        self.stats["received"] += 1
        plan, _ = self.categorise(recipients)
        message = Message(
            id=new_id(),
            message_id=messages.header(content, "Message-ID"),
            sender=sender,
            recipients=recipients,
            content=content,
            received_at=now,
            origin="received",
        )
        redundant = self.settings.ShadowRedundancyEnabled
        if redundant and state.sender_keeps_shadow:
            # The sending hop of this boundary keeps the shadow (XSHADOW handshake).
            message.shadow_hop = state.peer_node
        elif redundant and self.profile == "2013":
            message.shadow_node = await self.shadowing.make_copy(message, list(plan), state)
            if message.shadow_node is None:
                if self.settings.RejectMessageOnShadowFailure:
                    self.stats["rejected_not_redundant"] += 1
                    return REPLY_NOT_REDUNDANT
                self.stats["accepted_without_shadow"] += 1
        self.enqueue(message, plan)
        await self.db.flushed()
        if redundant and self.profile == "2010" and message.shadow_hop is None:
            # XS-4: a sender that cannot keep a shadow waits for the next hops.
            await self.delivery.wait_processed(message.id, self.settings.MaxAcknowledgementDelay)
        return f"250 2.6.0 {message.id} Queued mail for delivery"

    def enqueue(self, message: Message, plan: Plan, *, categorise: bool = True) -> None:
        """Queue durably: on disk once ``db.flushed()`` returns (then it may be acknowledged)."""
        if categorise:
            message.content = messages.categorised(message.content, self.name, self.clock.now())
        self.db.enqueue(message, plan, self.clock.now())
        # Handed to delivery once on disk, as when every commit was fsynced in place.
        domains = list(plan)
        self.db.when_flushed(lambda: self.delivery.submit(message.id, domains))

    def answer_discard_query(self, shadow: str, limit: int) -> tuple[list[str], list[str]]:
        """XQDISCARD reply lines (DBID, one DISCARD line per message, a count) and the
        messages offered. At most DISCARD_PAGE a reply: aiosmtplib refuses a reply
        over 32 KiB, and a refused reply once orphaned the copies it named."""
        taken = self.db.take_discards(shadow, self.clock.now(), min(limit, DISCARD_PAGE))
        lines = [f"DBID {self.db.db_id}"]
        lines += [f"DISCARD {message}" for message in taken]
        lines.append(f"{len(taken)} discard notifications for {shadow}")
        return lines, taken

    def confirm_discards(self, shadow: str, messages: list[str]) -> None:
        self.db.confirm_discards(shadow, messages, self.clock.now())

    async def answer_resubmit(self, requester: str, words: list[str]) -> str:
        return await self.safety_net.answer(requester, words)

    # -- clock ------------------------------------------------------------------

    def advance_clock(self, seconds: float | None = None, moment: float | None = None) -> float:
        if not isinstance(self.clock, VirtualClock):
            raise RuntimeError("this node runs on a real clock")
        now = (
            self.clock.advance(seconds)
            if seconds is not None
            else self.clock.set(float(moment if moment is not None else self.clock.now()))
        )
        self.db.set_meta("virtual_now", repr(now))
        return now

    def update_settings(self, values: dict[str, Any]) -> Settings:
        settings = Settings.from_mapping(values, base=self.settings)
        if settings.SmtpInProcesses != self.settings.SmtpInProcesses:
            raise SettingsError("SmtpInProcesses is read at start only (the cluster file)")
        beat = self.settings.ShadowHeartbeatFrequency
        self.admin.record_settings(values)
        self.settings = settings
        self._note_expiration()
        if settings.ShadowHeartbeatFrequency != beat:
            self.shadowing.retime_heartbeats()
        return self.settings

    def _note_expiration(self) -> None:
        """Keep, on disk, when MessageExpirationTimeout took which value (expiration_for)."""
        raw = self.db.meta("expiration_timeouts")
        history = [(float(a), float(b)) for a, b in json.loads(raw)] if raw else []
        value = self.settings.MessageExpirationTimeout
        if not history or history[-1][1] != value:
            history.append((self.clock.now(), value))
            del history[:-100]  # old enough entries only matter for long-gone messages
            self.db.set_meta("expiration_timeouts", json.dumps(history))
        self.expiration_history = history

    def expiration_for(self, received_at: float) -> float:
        """MessageExpirationTimeout of a message received at ``received_at``: the value in
        force then, or the current one if longer. A change never shortens the life of
        a message already acknowledged (lowering it to 0 once made queued mail vanish)."""
        then = self.expiration_history[0][1]
        for since, value in self.expiration_history:
            if since > received_at:
                break
            then = value
        return max(then, self.settings.MessageExpirationTimeout)
