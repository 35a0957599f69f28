"""What a step of the engine may use of the scenario run it belongs to.

The run (:class:`pytest_shadowcheck.engine.run.Run`) carries the steps out and so
imports every step module; the step modules type against this protocol instead, so the
dependency runs one way.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from pytest_shadowcheck.checks.view import RunView

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from pytest_shadowcheck.checks.workload import WorkloadReport
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.network.messages import Message
    from pytest_shadowcheck.network.proxy import FaultProxy
    from pytest_shadowcheck.scenario.model import Step
    from pytest_shadowcheck.targets.base import Target
    from pytest_shadowcheck.verdict import Verdict

__all__ = ["StepContext"]


class StepContext(RunView, Protocol):
    """All a check may read (:class:`~pytest_shadowcheck.checks.view.RunView`), and what
    a step needs to act: the target itself, the proxies, the run's token, and the run's
    own operations on the state it keeps (nodes down or frozen, configuration changes)."""

    #: the whole target, not only what a check may ask of it
    target: Target
    token: str
    proxies: dict[str, FaultProxy]
    #: nodes killed and not back, and frozen nodes: neither answers its control API
    down: set[str]
    paused: set[str]
    workload_scale: float
    workload_seed: int | None
    timeline_writer: Callable[[History, WorkloadReport, str], Path] | None
    #: the nodes' virtual clock after the last advance (None: no advance yet)
    virtual_now: float | None
    #: configuration changed during the run, with the nodes it was for (None: all): a
    #: node that comes back gets it again
    changes: list[tuple[list[str] | None, tuple[Any, ...]]]
    #: a Safety Net resubmission was asked for (until_quiet then reads the requests)
    resubmitted: bool

    @property
    def peer_secret(self) -> str: ...

    def excerpt(
        self, around: float, links: list[str], before: float = 3.0, after: float = 2.0
    ) -> str: ...

    def register_message(
        self,
        ref: str,
        message_id: str,
        via: str,
        content: bytes = b"",
        mail_from: str | None = None,
        rcpt_to: list[str] | None = None,
    ) -> Message: ...

    async def do(self, step: Step, verdict: Verdict) -> None:
        """Carry out one step, as the scenario would (the nemesis plays through it)."""

    async def until_quiet(self, timeout: float) -> float | None:
        """Wait until the cluster holds nothing, ``timeout`` at most: the seconds it took,
        None if it never did (or could not be seen)."""

    def running(self, nodes: Sequence[str] = ()) -> list[str]:
        """The nodes (none named: every node) neither down nor frozen."""
        ...

    async def kill(self, node: str) -> None: ...

    async def pause(self, node: str) -> None: ...

    async def resume(self, node: str) -> None: ...

    async def power_cut(self, node: str) -> None:
        """The node loses power (its disk keeps only what was fsynced)."""

    async def disk(self, node: str, mode: str | None, budget: int = 0) -> None:
        """The node's queue disk full (ENOSPC), failing (EIO) or (None) working again."""

    async def bring_back(self, node: str, how: str) -> None:
        """Restart (``how`` restart) or wipe a node, and bring it level with the others."""

    def restarted_for_change(self, node: str, answer: Any) -> None:
        """Record that a target restarted ``node`` to apply a change, if it says so."""
