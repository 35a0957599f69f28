"""What each component needs of its node: one narrow interface (a Protocol) each.

``node.Node`` builds the components and hands itself to each of them. Each
component types that node against its protocol here, never against ``Node``,
and never imports ``node.py``: the components see only the members they use,
and the import graph has no circle (node.py imports the components, not the
other way round). ``Node`` satisfies every protocol structurally; mypy checks
it where the node hands itself over.

Read-only members are properties, so that the node may hold a subclass of the
type named here (a Protocol's plain attribute is invariant under mypy).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, Protocol

from .clock import Clock
from .config import ClusterConfig, NextHop, NodeConfig
from .directory import Directory
from .peers import PeerState
from .queue_db import Message, QueueDB
from .settings import Settings

#: what categorisation makes of recipients: next-hop domain -> (recipients, mailbox
#: databases); here, not in node.py, because the components queue plans too
Plan = dict[str, tuple[list[str], list[str]]]

# -- SMTP in (smtp_in.py) ----------------------------------------------------------------


class ShadowCopyStore(Protocol):
    """The shadow side of XSHADOWCOPY: keeps the copy a primary hands over."""

    def store_copy(
        self,
        primary: str,
        copy: dict[str, Any],
        sender: str,
        recipients: list[str],
        content: bytes,
    ) -> str: ...


class FlushWaiter(Protocol):
    """The queue database, as far as a reply waits for what it wrote to be on disk."""

    async def flushed(self) -> None: ...


class SmtpInNode(Protocol):
    """The node as the SMTP adapter sees it: limits and counters of inbound sessions,
    peer authentication, the extra verbs' answers, and the receive path."""

    #: open SMTP sessions of this process; the adapter counts them in and out
    inbound_connections: int

    @property
    def name(self) -> str: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def auth_failures(self) -> dict[str, tuple[int, float]]: ...
    @property
    def shadowing(self) -> ShadowCopyStore: ...
    @property
    def db(self) -> FlushWaiter: ...

    def background(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...
    def connection_cap(self) -> int: ...
    def is_boundary_peer(self, login: str, password: bytes) -> bool: ...
    def same_boundary(self, other: str) -> bool: ...
    def shadow_advertisement(self) -> str | None: ...
    def accepts(self, address: str) -> bool: ...
    def answer_discard_query(self, shadow: str, limit: int) -> tuple[list[str], list[str]]: ...
    def confirm_discards(self, shadow: str, messages: list[str]) -> None: ...
    async def answer_resubmit(self, requester: str, words: list[str]) -> str: ...
    async def receive(
        self,
        *,
        sender: str,
        recipients: list[str],
        content: bytes,
        helo: str,
        peer: str,
        state: PeerState,
    ) -> str: ...


# -- shadowing, delivery, Safety Net ---------------------------------------------------------


class QueueingNode(Protocol):
    """What shadowing, delivery and Safety Net all use: the node's identity, clock,
    settings, queue database and peers, its background tasks, and the way into its
    queue (categorise, then enqueue)."""

    @property
    def name(self) -> str: ...
    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def db(self) -> QueueDB: ...
    @property
    def cluster(self) -> ClusterConfig: ...
    @property
    def stats(self) -> dict[str, int]: ...

    def background(self, work: Coroutine[Any, Any, Any]) -> asyncio.Task[Any]: ...
    def peer_address(self, node: str) -> tuple[str, int] | None: ...
    def categorise(self, recipients: list[str]) -> tuple[Plan, list[str]]: ...
    def enqueue(self, message: Message, plan: Plan, *, categorise: bool = True) -> None: ...


class ShadowingNode(QueueingNode, Protocol):
    """The node as shadowing sees it: also its place in the boundary (config,
    profile, same_boundary), the directory, and routes (promotion, Safety Net
    entries of discarded copies)."""

    @property
    def config(self) -> NodeConfig: ...
    @property
    def profile(self) -> str: ...
    @property
    def directory(self) -> Directory: ...

    def same_boundary(self, other: str) -> bool: ...
    def route(self, domain: str) -> NextHop | None: ...


class DiscardListener(Protocol):
    """Shadowing's handler of the discard notifications any peer session brings (DI-2)."""

    async def on_discards(self, primary: str, db_id: str | None, ids: list[str]) -> None: ...


class RelayShadows(DiscardListener, Protocol):
    """Shadowing, as a relay to another node keeps a shadow of what it handed over."""

    def keep_shadow_of_relay(
        self,
        primary: str,
        primary_msg: str,
        db_id: str,
        message: Message,
        hops: list[str],
        recipients: list[str],
    ) -> None: ...


class DeliveryNode(QueueingNode, Protocol):
    """The node as delivery sees it: also routes, expiry, the boundary and profile
    (the XSHADOW handshake of a relay), the shadowing it hands relays to, and the
    directory (the mailbox databases a Safety Net entry names)."""

    @property
    def profile(self) -> str: ...
    @property
    def directory(self) -> Directory: ...
    @property
    def shadowing(self) -> RelayShadows: ...

    def route(self, domain: str) -> NextHop | None: ...
    def same_boundary(self, other: str) -> bool: ...
    def expiration_for(self, received_at: float) -> float: ...


class SafetyNetNode(QueueingNode, Protocol):
    """The node as Safety Net sees it: also the directory (resubmission by mailbox
    database) and the discard handler of the peer sessions it opens."""

    @property
    def directory(self) -> Directory: ...
    @property
    def shadowing(self) -> ExpiringShadows: ...


class ExpiringShadows(DiscardListener, Protocol):
    """Shadowing, as Safety Net asks a primary before its copies expire (SN-4)."""

    async def heartbeat(self, primary: str) -> None: ...


# -- the owner of SMTP-in workers (workers.py) -------------------------------------------------


class HeartbeatShadows(Protocol):
    """Shadowing, as the owner runs its workers' heartbeats and reports their attempts."""

    @property
    def attempt_log(self) -> list[dict[str, Any]]: ...

    def ensure_heartbeat(self, primary: str) -> None: ...


class DeliveryQueues(Protocol):
    """Delivery, as the owner takes its workers' queued messages and 2010 waits (XS-4)."""

    def queue_for(self, domain: str) -> asyncio.Queue[str]: ...
    async def wait_processed(self, message_id: str, timeout: float) -> bool: ...


class WorkerOwnerNode(Protocol):
    """The owner's node as its WorkerPool sees it: the state pushed to the workers,
    the counters added up with theirs, and what the workers forward to it."""

    @property
    def clock(self) -> Clock: ...
    @property
    def settings(self) -> Settings: ...
    @property
    def directory(self) -> Directory: ...
    @property
    def routes(self) -> dict[str, NextHop]: ...
    @property
    def peers(self) -> dict[str, tuple[str, int]]: ...
    @property
    def stats(self) -> dict[str, int]: ...
    @property
    def shadowing(self) -> HeartbeatShadows: ...
    @property
    def delivery(self) -> DeliveryQueues: ...

    async def answer_resubmit(self, requester: str, words: list[str]) -> str: ...
