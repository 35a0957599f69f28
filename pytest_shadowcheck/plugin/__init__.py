"""The pytest plugin: ``pytest --shadowcheck``.

Registered through the ``pytest11`` entry point, so pytest imports this module in every
session of a project that has the package installed. It therefore imports pytest and
nothing else: the options are declared here, and only when ``--shadowcheck`` (or
``shadowcheck = true`` in the ini file) is on does :func:`pytest_configure` load the rest
of the harness and register its hooks (:mod:`pytest_shadowcheck.plugin.session`).

The plugin's modules, one concern each: the session's hooks and state in
:mod:`.session` and :mod:`.state`; YAML collection in :mod:`.collect`; running one
scenario in :mod:`.runner`; JUnit properties in :mod:`.junit`; the certification report
in :mod:`.certification`; engine notes on the terminal in :mod:`.terminal`.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

__all__ = ["enabled", "pytest_cmdline_main_concurrency"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("shadowcheck", "shadow redundancy conformance (pytest-shadowcheck)")
    group.addoption(
        "--shadowcheck",
        action="store_true",
        default=False,
        help="run the shadowcheck scenarios (without it the plugin does nothing)",
    )
    group.addoption(
        "--shadowcheck-target",
        metavar="NAME[:ARG]",
        default=None,
        help="system under test: reference (default), external:NODES, or a plugin's target; "
        "'help' lists them",
    )
    group.addoption(
        "--shadowcheck-scenarios",
        metavar="DIR",
        nargs="+",
        action="extend",
        default=None,
        help="scenario directories or files, replacing the bundled library "
        "(the word 'bundled' stands for it)",
    )
    group.addoption(
        "--shadowcheck-report",
        metavar="DIR",
        default=None,
        help="write the certification report (certification.json, certification.html) to DIR",
    )
    group.addoption(
        "--shadowcheck-run-id", metavar="ID", default=None, help="run id (default: a new uuid)"
    )
    group.addoption(
        "--shadowcheck-history",
        metavar="DIR",
        default=None,
        help="write every scenario run's history as JSON to DIR",
    )
    group.addoption(
        "--shadowcheck-target-plugin",
        metavar="MODULE",
        action="append",
        default=None,
        help="import MODULE and register it as a target plugin (in addition to entry points)",
    )
    group.addoption(
        "--shadowcheck-workload-scale",
        metavar="X",
        type=float,
        default=1.0,
        help="multiply the messages of every workload step (and its scenario's timeout) by X, "
        "for soak runs",
    )
    group.addoption(
        "--shadowcheck-workload-seed",
        metavar="N",
        type=int,
        default=None,
        help="seed every workload and nemesis with N instead of the scenario's own seed "
        "(a failure prints the seed to replay)",
    )
    group.addoption(
        "--shadowcheck-replay",
        metavar="WORKLOAD:messages=N,..;faults=N,..",
        action="append",
        default=None,
        help="play only part of a workload's plan: the messages and faults numbered (from 0, "
        "ranges like 40-42, or none), each at its planned moment; what a shrunk "
        "reproduction prints, e.g. 'single:messages=69;faults=0'",
    )
    group.addoption(
        "--shadowcheck-shrink",
        action="store_true",
        default=False,
        help="when a workload scenario FAILs, re-run it to find the fewest messages and "
        "faults that still fail the same way, and print the command replaying them",
    )
    group.addoption(
        "--shadowcheck-shrink-attempts",
        metavar="N",
        type=int,
        default=40,
        help="at most N re-runs of a scenario while shrinking it (default 40)",
    )
    group.addoption(
        "--shadowcheck-shrink-time",
        metavar="SECONDS",
        type=float,
        default=1200.0,
        help="stop shrinking a scenario after SECONDS, keeping the smallest reproduction "
        "found (default 1200)",
    )
    group.addoption(
        "--shadowcheck-stretch-budget",
        metavar="SECONDS",
        type=float,
        default=150.0,  # targets.fit.DEFAULT_STRETCH_BUDGET (not imported: this module is light)
        help="how much longer a scenario may run when its windows stretch to a timer the "
        "target has compiled in (a docker description's timers:); beyond it the scenario is "
        "UNTESTABLE, naming the timer (default 150)",
    )
    group.addoption(
        "--shadowcheck-explore",
        metavar="DURATION",
        default=None,
        help="explore: generated scenarios (seeded operations on a bundled topology) from a "
        "fresh seed, printed, until DURATION (300s, 5m, 1h) is spent; without it a bounded "
        "slice from a fixed seed runs with the library",
    )
    group.addoption(
        "--shadowcheck-explore-seed",
        metavar="N",
        type=int,
        default=None,
        help="explore from seed N (the slice, or with --shadowcheck-explore the deep "
        "exploration): the same N generates the same scenarios",
    )
    group.addoption(
        "--shadowcheck-explore-only",
        action="store_true",
        default=False,
        help="run the explored scenarios alone, without the hand-written library",
    )
    group.addoption(
        "--shadowcheck-concurrency",
        metavar="N",
        type=int,
        default=None,
        help="run N scenarios at once (1: one after another): in lanes of this process "
        "where the target allows it (the reference), else in pytest-xdist workers; "
        "default: 6 lanes or 4 workers per core, at most one per scenario, unless "
        "-n/--dist/--tx is given",
    )
    parser.addini(
        "shadowcheck", "enable shadowcheck (like --shadowcheck)", type="bool", default=False
    )
    parser.addini("shadowcheck_target", "default for --shadowcheck-target", default="reference")
    parser.addini("shadowcheck_scenarios", "default for --shadowcheck-scenarios", type="paths")
    parser.addini("shadowcheck_report", "default for --shadowcheck-report", default="")
    parser.addini(
        "shadowcheck_target_plugins", "modules to register as target plugins", type="args"
    )


def enabled(config: pytest.Config) -> bool:
    return bool(config.getoption("shadowcheck", False) or config.getini("shadowcheck"))


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not enabled(config):
        return
    from pytest_shadowcheck.plugin.session import configure

    configure(config)


@pytest.hookimpl(wrapper=True, specname="pytest_cmdline_main")
def pytest_cmdline_main_concurrency(
    config: pytest.Config,
) -> Generator[None, int | None, int | None]:
    """Before pytest-xdist reads ``-n`` (a wrapper runs before every plain hook):
    choose how many scenarios run at once."""
    if enabled(config):
        from pytest_shadowcheck.plugin.concurrency import choose_workers

        choose_workers(config)
    return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--shadowcheck-target help``: list the targets (like ``--markers``), exit 0."""
    if not enabled(config):
        return None
    from pytest_shadowcheck.plugin.session import list_targets

    return list_targets(config)
