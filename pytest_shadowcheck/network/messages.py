"""The messages a scenario sent, and what their senders were told (read by the checks)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pytest_shadowcheck.network.client import SendResult

__all__ = ["Message"]


@dataclass
class Message:
    """A message the scenario sent, and what the sender was told."""

    ref: str
    message_id: str
    via: str
    sent_t: float
    nodes: list[str]
    result: SendResult | None = None
    task: asyncio.Task[SendResult] | None = None
    #: what the sender sent (empty when the harness did not compose it): the integrity
    #: invariant compares every delivered copy with it
    content: bytes = b""
    mail_from: str | None = None
    rcpt_to: list[str] = field(default_factory=list)
    #: why the content was never sent (a raw session ended before it), else None: no
    #: check judges a message that never left the sender
    unsent: str | None = None
    #: the harness's identity of the message (its ``X-Shadowcheck-Trace`` header):
    #: unlike the Message-ID, never shared with another message
    trace: str = ""

    def carried_in(self, data: Mapping[str, Any]) -> bool:
        """Whether a recorded content (a ``data`` or ``delivery`` event's data) is this
        message's: by its trace; by its Message-ID only for a copy that lost the trace."""
        trace = data.get("trace")
        if trace:
            return bool(trace == self.trace)
        return bool(data.get("message_id") == self.message_id)

    @property
    def code(self) -> int | None:
        return self.result.code if self.result else None

    @property
    def enhanced(self) -> str | None:
        return self.result.enhanced if self.result else None

    @property
    def text(self) -> str:
        return self.result.text if self.result else ""

    @property
    def error(self) -> str | None:
        if self.result is None:
            return "still waiting for a reply"
        return self.result.error

    @property
    def reply_t(self) -> float | None:
        # The reply that accepted or refused the message, not the QUIT answer after it.
        if self.result is None or self.result.deciding_reply is None:
            return None
        return self.result.deciding_reply.t

    def links(self, all_nodes: bool = False) -> list[str]:
        """Links worth showing for this message: the sender's, and the primary's."""
        out = [f"client->{self.via}"]
        for other in self.nodes:
            if other != self.via:
                out += [f"{self.via}->{other}", f"{other}->{self.via}"]
        if all_nodes:
            out = [f"client->{self.via}"] + [
                f"{a}->{b}" for a in self.nodes for b in [*self.nodes, "*"] if a != b
            ]
        return out
