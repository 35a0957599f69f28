"""What the workload checker reads a history into: each message's :class:`Fate`, the
nemesis' fault :class:`Window` s and the :class:`Entry` s of the last queue snapshots."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["Entry", "Fate", "Window"]


@dataclass
class Fate:
    ref: str
    message_id: str
    via: str
    fate: str
    sent: float
    acked_t: float | None
    deliveries: list[tuple[float, str, str]] = field(default_factory=list)
    cause: str = ""
    #: nodes the content was relayed to (shadow copies), from the node-to-node links
    copied_to: set[str] = field(default_factory=set)
    #: node -> when it last received the content (a copy made after a wipe survives it)
    copied_at: dict[str, float] = field(default_factory=dict)
    #: node -> when it received each copy from the primary (an exchange the primary saw
    #: interrupted is offered again: two copies, each promoted once)
    offered: dict[str, list[float]] = field(default_factory=dict)
    #: the harness's identity of the message (its trace header)
    trace: str = ""
    #: the recipients never delivered (accounting is per message and recipient)
    missing: list[str] = field(default_factory=list)
    recipients: int = 0
    #: where a queued message was held when the settle ended ("mbx2's active queue")
    held_on: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class Entry:
    """One entry of a queue snapshot taken after the settle."""

    node: str
    queue: str
    t: float
    message_id: str
    #: the harness's trace, when the target's listing shows it
    trace: str = ""
    #: for a shadow copy, the primary it is kept for (when the listing names it)
    primary: str = ""
    #: the entry's own id in its queue (one message listed once per next hop keeps it)
    id: str = ""


@dataclass
class Window:
    """A nemesis fault from start to end (end None: never ended)."""

    index: int
    kind: str
    nodes: list[str]
    links: list[str]
    start: float
    end: float | None

    def touches(self, node: str) -> bool:
        return node in self.nodes or any(node in link.split("->") for link in self.links)

    def meets(self, since: float, until: float) -> bool:
        return self.start <= until and (self.end is None or self.end >= since)
