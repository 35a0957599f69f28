"""Target plugin ``workers:N``: the reference target with N processes per node.

Registered with ``--shadowcheck-target-plugin workers_target`` (this directory on
PYTHONPATH). Every node of every scenario runs with ``SmtpInProcesses: N`` (SMTP-in
worker processes beside the node process, docs/protocol.md section 11), so the
bundled suite checks that a node made of several processes keeps every behaviour
of a one-process node: a kill or a pause still takes all of it, a discard is
handed out once, a setting changed through the control API reaches every worker.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pytest_shadowcheck.targets.base import ClusterPlan, NodeHandle, Target, TargetError
from pytest_shadowcheck.targets.hookspecs import hookimpl
from pytest_shadowcheck.targets.reference import ReferenceTarget


class WorkersTarget(ReferenceTarget):
    def __init__(self, processes: int) -> None:
        super().__init__()
        self.processes = processes
        self.name = f"workers:{processes}"

    async def start(self, plan: ClusterPlan) -> dict[str, NodeHandle]:
        settings = {**plan.settings, "SmtpInProcesses": self.processes}
        return await super().start(dataclasses.replace(plan, settings=settings))


@hookimpl
def shadowcheck_describe_targets() -> list[tuple[str, str]]:
    return [("workers", "the reference MTA with N SMTP-in processes per node (tests/conformance)")]


@hookimpl
def shadowcheck_make_target(
    name: str, argument: str | None, options: dict[str, Any]
) -> Target | None:
    if name != "workers":
        return None
    if not argument or not argument.isdigit() or int(argument) < 2:
        raise TargetError("say how many processes per node, 2 or more: workers:N")
    return WorkersTarget(int(argument))
