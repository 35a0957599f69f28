"""What a check may read of a scenario run: the history, the scenario, the messages sent,
what the sinks received, and what the target can show. The engine's ``Run`` provides it;
checks depend on this protocol, not on the engine (data flows one way:
scenario -> engine -> history -> checks -> verdicts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from .history import History
    from .messages import Message
    from .network import MailSink
    from .progress import Progress
    from .scenario_model import Scenario
    from .targets.base import Target

__all__ = ["RunView"]


class RunView(Protocol):
    scenario: Scenario
    history: History
    progress: Progress
    #: the target, to ask what it can show (capabilities, its control API, a node's log)
    target: Target
    messages: dict[str, Message]
    sinks: dict[str, MailSink]

    def excerpt(
        self, around: float, links: list[str], before: float = 3.0, after: float = 2.0
    ) -> str: ...

    async def settled_message(self, ref: str, timeout: float = ...) -> Message: ...

    async def still_held(self, ref: str) -> str | None: ...

    def copy_holders(self, ref: str) -> list[str]: ...

    def copy_lost(self, node: str, since: float) -> str | None: ...
