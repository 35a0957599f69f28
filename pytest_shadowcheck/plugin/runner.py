"""Running one collected scenario: the target's fitness first (UNTESTABLE), then the
engine in a fresh workdir, kept as evidence when the verdict is not a clean one; with
``--shadowcheck-shrink``, a failing workload shrunk by re-running it
(:mod:`pytest_shadowcheck.plugin.shrinking`)."""

from __future__ import annotations

import hashlib
import shlex
import shutil
from pathlib import Path
from typing import TYPE_CHECKING

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.history import History
from pytest_shadowcheck.plugin.exploration import explored_index, shrink_explored
from pytest_shadowcheck.plugin.shrinking import shrink_failure
from pytest_shadowcheck.plugin.state import ShadowcheckState, shown_workdir
from pytest_shadowcheck.plugin.terminal import note_writer
from pytest_shadowcheck.progress import Progress
from pytest_shadowcheck.report.timeline import write_timeline
from pytest_shadowcheck.targets.fit import DEFAULT_STRETCH_BUDGET, stretch, why_untestable
from pytest_shadowcheck.verdict import Status, Verdict

if TYPE_CHECKING:
    import pytest

    from pytest_shadowcheck.checks.workload import WorkloadReport
    from pytest_shadowcheck.scenario.model import Scenario

__all__ = ["history_name", "replay_command", "retried", "run_item"]


def replay_command(config: pytest.Config, target_spec: str, location: str) -> str:
    """The command line that runs the item at ``location`` (``path::name`` from the
    directory pytest was run in) again, against the same target with the same plugins;
    a workload adds its seed and selection."""
    args = ["pytest", "--shadowcheck", "--shadowcheck-target", target_spec]
    for module in config.getoption("shadowcheck_target_plugin") or []:
        args += ["--shadowcheck-target-plugin", module]
    budget = config.getoption("shadowcheck_stretch_budget", DEFAULT_STRETCH_BUDGET)
    if budget != DEFAULT_STRETCH_BUDGET:
        args += ["--shadowcheck-stretch-budget", f"{budget:g}"]
    return shlex.join([*args, location])


#: a file name's longest on common filesystems is 255 bytes; ".json" and room to spare
_LONGEST_NAME = 200


def history_name(nodeid: str) -> str:
    """The file name (without ``.json``) of an item's history: its node id with ``/`` and
    ``::`` made safe; one too long for a filesystem (an explored scenario's id lists
    every behaviour its model judges) is cut, with a digest of the whole id."""
    safe = nodeid.replace("/", "_").replace("::", "__")
    if len(safe.encode()) <= _LONGEST_NAME:
        return safe
    digest = hashlib.sha1(nodeid.encode()).hexdigest()[:12]
    return safe.encode()[: _LONGEST_NAME - 13].decode(errors="ignore") + "-" + digest


def run_item(
    state: ShadowcheckState,
    scenario: Scenario,
    nodeid: str,
    location: str = "",
    *,
    again: bool = True,
) -> Verdict:
    """Run the scenario of the item ``nodeid`` against the configured target and return
    its verdict; ``location`` selects the item on a command line (for replay commands).
    A verdict INCONCLUSIVE only because the harness itself ran late is run once more
    (``again``; lanes run it again themselves, alone: plugin/lanes.py), and the second
    verdict stands, saying so."""
    verdict = _run_once(state, scenario, nodeid, location)
    if again and verdict.harness_late:
        verdict = retried(_run_once(state, scenario, nodeid, location), verdict, "")
    return verdict


def retried(again: Verdict, first: Verdict, how: str) -> Verdict:
    """``again``, the verdict of a second run, saying why there was one (``how``: in
    what conditions it ran, or "")."""
    again.retried = (
        f"run a second time{how}: its first run was INCONCLUSIVE because the harness "
        f"itself ran late ({first.summary()})"
    )
    return again


def _run_once(state: ShadowcheckState, scenario: Scenario, nodeid: str, location: str) -> Verdict:
    target = state.target
    verdict = Verdict(
        scenario=scenario.name,
        behaviours=scenario.behaviours,
        source=str(scenario.where),
        title=scenario.title,
        named_evidence=scenario.named_evidence,
    )
    budget = state.config.getoption("shadowcheck_stretch_budget", DEFAULT_STRETCH_BUDGET)
    why = why_untestable(scenario, target, budget)
    if why:
        verdict.untestable(why)
        return verdict
    # windows counted from a timer the MTA has compiled in: held to that timer instead
    scenario = stretch(scenario, target)
    verdict.title = scenario.title
    workdir = state.workdir(scenario.name)
    history_file = None
    if state.history_dir is not None:
        history_file = state.history_dir / f"{history_name(nodeid)}.json"
    report_dir = state.report_dir

    def timeline(history: History, report: WorkloadReport, name: str) -> Path:
        assert report_dir is not None
        # named as the report links it, beside certification.html: no machine path in a
        # page that gets committed and published
        return Path(write_timeline(report_dir, history, report, name).name)

    config = state.config
    replay = replay_command(config, state.target_spec, location) if location else ""
    run_scenario(
        scenario,
        target,
        workdir=workdir,
        progress=Progress(scenario.name, note_writer(config)),
        hooks=state.manager.hook,
        history_file=history_file,
        verdict=verdict,
        workload_scale=config.getoption("shadowcheck_workload_scale", 1.0),
        workload_seed=config.getoption("shadowcheck_workload_seed", None),
        timeline_writer=timeline if report_dir is not None else None,
        workload_selection=state.selections,
        replay_command=replay,
        stop=state.stopping,
    )
    if verdict.status in (Status.PASS, Status.NOT_APPLICABLE, Status.UNTESTABLE):
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        # keep the workdir: node data and logs are evidence
        verdict.reason += f" (node data and logs kept in {shown_workdir(config, workdir)})"
    if verdict.status == Status.FAIL and config.getoption("shadowcheck_shrink", False):
        shrink_failure(state, scenario, verdict, replay)
    if verdict.status == Status.FAIL and explored_index(scenario.name) is not None:
        shrink_explored(
            state, scenario, verdict, lambda path: replay_command(config, state.target_spec, path)
        )
    return verdict
