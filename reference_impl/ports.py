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

from .peers import PeerState
from .settings import Settings

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
