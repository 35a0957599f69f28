"""Hook specifications for shadowcheck targets (pluggy, eggsample style).

A *target* turns a scenario's topology and settings into running nodes of the
system under test. Targets are plugins of the ``shadowcheck`` plugin manager:

* built in: ``reference`` (the bundled MTA as local processes, the default),
  ``external`` (nodes already running; proxy faults only) and ``docker`` (an
  MTA image as one container per node, from a target description);
* third party: a module named in the ``shadowcheck.targets`` entry point group
  of its distribution, or given with ``--shadowcheck-target-plugin MODULE``.

A plugin module implements any of the hooks below, decorated with
``pytest_shadowcheck.hookimpl``::

    from pytest_shadowcheck import Target, hookimpl

    @hookimpl
    def shadowcheck_describe_targets():
        return [("mymta", "MyMTA nodes: mymta:CLUSTER_DIR")]

    @hookimpl
    def shadowcheck_make_target(name, argument, options):
        if name == "mymta":
            return MyMtaTarget(argument, options)
        return None

See ``docs/targets.md`` for the :class:`~pytest_shadowcheck.targets.base.Target`
interface and the capabilities.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pluggy

if TYPE_CHECKING:
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.scenario.model import Scenario
    from pytest_shadowcheck.targets.base import Target
    from pytest_shadowcheck.verdict import Verdict

__all__ = ["PROJECT", "hookimpl", "hookspec"]

PROJECT = "shadowcheck"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def shadowcheck_describe_targets() -> list[tuple[str, str]] | None:
    """Return ``(name, one-line description)`` for every target this plugin provides.

    Used to list the known targets (``--shadowcheck-target=help``) and in the
    error for an unknown target name.
    """


@hookspec(firstresult=True)
def shadowcheck_make_target(
    name: str, argument: str | None, options: dict[str, Any]
) -> Target | None:
    """Create the target called ``name``, or return None if it is not yours.

    ``--shadowcheck-target NAME[:ARGUMENT]`` is split at the first colon:
    ``docker:targets/postfix.yaml`` gives ``name="docker"``,
    ``argument="targets/postfix.yaml"``.
    ``options`` holds harness options a target may use (``workdir`` base,
    ``run_id``). The first non-None result wins. Creating a target must not
    start anything: nodes start per scenario in ``Target.start``.
    """


@hookspec
def shadowcheck_scenario_started(scenario: Scenario, target: Target, history: History) -> None:
    """Called once the target's nodes run and every link is proxied, before the first step."""


@hookspec
def shadowcheck_scenario_finished(
    scenario: Scenario, target: Target, history: History, verdict: Verdict
) -> None:
    """Called after the checks, before the nodes are stopped (e.g. to collect node logs)."""
