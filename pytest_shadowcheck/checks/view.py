"""What a check may read of a scenario run: the history, the scenario, the messages sent,
what the sinks received, and what the target can show. The engine's ``Run`` provides it;
checks depend on these protocols, never on the engine or a target (data flows one way:
scenario -> engine -> history -> checks -> verdicts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.network.messages import Message
    from pytest_shadowcheck.network.sink import MailSink
    from pytest_shadowcheck.progress import Progress
    from pytest_shadowcheck.scenario.model import Scenario

__all__ = ["RunView", "TargetView"]


class TargetView(Protocol):
    """What a check may ask of the system under test: what it can show, and the looks
    themselves (its control API, a node's log). Never an action on a node."""

    name: str
    #: header fields the MTA adds to every message beyond the trace fields
    added_headers: frozenset[str]

    def can(self, capability: str, call: tuple[str, str] | None = None) -> bool: ...

    async def control(self, node: str, method: str, path: str, body: Any = None) -> Any: ...

    def node_log(self, node: str) -> str | None: ...


class RunView(Protocol):
    scenario: Scenario
    history: History
    progress: Progress

    @property
    def target(self) -> TargetView:
        """The target, to ask what it can show (capabilities, its control API, a log)."""
        ...

    messages: dict[str, Message]
    sinks: dict[str, MailSink]

    def excerpt(
        self, around: float, links: list[str], before: float = 3.0, after: float = 2.0
    ) -> str: ...

    async def settled_message(self, ref: str, timeout: float = ...) -> Message: ...

    async def still_held(self, ref: str) -> str | None: ...

    async def until_quiet(self, timeout: float) -> float | None: ...

    def copy_holders(self, ref: str) -> list[str]: ...

    def copy_lost(self, node: str, since: float) -> str | None: ...
