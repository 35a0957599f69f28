"""Per-session peer state: what the client of an inbound session said about itself.

A domain type, not part of the SMTP adapter: ``smtp_in`` fills it in as the
verbs arrive, the node's receive path and ``shadowing`` read it (who sent the
message, who keeps its shadow) and keep the session's own shadow session in it.
It lives here so that neither of them has to import the other.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any


@dataclass
class PeerState:
    """What a session has said about itself beyond plain SMTP."""

    peer_node: str | None = None  # authenticated node of this boundary
    sender_keeps_shadow: bool = False  # XSHADOW handshake: the sending hop is the shadow
    pending_copy: dict[str, Any] | None = None  # XSHADOWCOPY for the next transaction
    shadow_link: Any = None  # this session's own session to its shadow (CR-2)
    shadow_idle: asyncio.TimerHandle | None = None  # closes shadow_link when idle (TO-2)
    offered_discards: list[str] = field(default_factory=list)  # XQDISCARD page, unconfirmed
