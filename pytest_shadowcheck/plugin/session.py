"""The ``--shadowcheck`` session: its state, the target, the scenario paths, and the
hooks that collect, run and report scenarios. Loaded by the entry point
(:mod:`pytest_shadowcheck.plugin`) only when the plugin is on.
"""

from __future__ import annotations

import os
import re
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.plugin.certification import CertificationRecorder
from pytest_shadowcheck.plugin.collect import ScenarioFile, ScenarioInconclusive, ScenarioItem
from pytest_shadowcheck.plugin.concurrency import register as register_concurrency
from pytest_shadowcheck.plugin.exploration import (
    EXPLORATION_PLUGIN,
    ExplorationHooks,
    XdistExploration,
    setup_exploration,
)
from pytest_shadowcheck.plugin.junit import JUnitProperties
from pytest_shadowcheck.plugin.lanes import register_lanes
from pytest_shadowcheck.plugin.library import library_paths, scenario_paths
from pytest_shadowcheck.plugin.state import (
    BASETEMP,
    STATE_KEY,
    ShadowcheckState,
    get_state,
    run_basetemp,
    target_manager,
    target_spec,
)
from pytest_shadowcheck.report.certification import is_scenario_file
from pytest_shadowcheck.report.rules import rule_sentences
from pytest_shadowcheck.scenario.loader import load_behaviours
from pytest_shadowcheck.scenario.replay import ReplayError, parse_selections
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec
from pytest_shadowcheck.targets import registry
from pytest_shadowcheck.targets.fit import why_untestable
from pytest_shadowcheck.verdict import Verdict
from pytest_shadowcheck.version import __version__

__all__ = ["SessionHooks", "configure", "list_targets"]


def _check_behaviour_markers(config: pytest.Config, catalogue: dict[str, Any]) -> None:
    """``-m CR-99`` or ``-m cr-4`` would select nothing, silently: name the known IDs."""
    expression = str(config.getoption("markexpr", "") or "")
    unknown = [
        word
        for word in re.findall(r"(?<![\w-])[A-Za-z]{2}-\d+(?![\w-])", expression)
        if word not in catalogue
    ]
    if unknown:
        hint = ", ".join(
            f"{w} (did you mean {w.upper()}?)" if w.upper() in catalogue else w for w in unknown
        )
        raise pytest.UsageError(
            f"-m names behaviour IDs the catalogue does not have: {hint}\n"
            f"known IDs: {', '.join(catalogue)}"
        )


def configure(config: pytest.Config) -> None:
    """Set the plugin up for a ``--shadowcheck`` session: the state, the target, the
    scenario paths, and the hooks that collect, run and report scenarios."""
    catalogue = load_behaviours()
    config.addinivalue_line("markers", "shadowcheck: a shadowcheck scenario")
    for bid, entry in catalogue.items():
        config.addinivalue_line("markers", f"{bid}: {entry['summary']}")
    workerinput = getattr(config, "workerinput", None)
    run_id = config.getoption("shadowcheck_run_id")
    if workerinput is not None and workerinput.get("shadowcheck_run_id"):
        run_id = workerinput["shadowcheck_run_id"]
    run_id = run_id or str(uuid.uuid4())
    spec = target_spec(config)
    report = config.getoption("shadowcheck_report") or config.getini("shadowcheck_report")
    history = config.getoption("shadowcheck_history")
    manager = target_manager(config)
    if spec == "help":
        return  # pytest_cmdline_main lists the targets and ends the run
    _check_behaviour_markers(config, catalogue)
    try:
        selections = parse_selections(config.getoption("shadowcheck_replay") or [])
    except ReplayError as exc:
        raise pytest.UsageError(str(exc)) from None
    family = str(config.getini("junit_family") or "xunit2")
    state = ShadowcheckState(
        config=config,
        run_id=run_id,
        target_spec=spec,
        manager=manager,
        scenario_paths=scenario_paths(config),
        report_dir=Path(report).resolve() if report else None,
        history_dir=Path(history).resolve() if history else None,
        junit_properties_per_case=family in ("xunit1", "legacy"),
        selections=selections,
    )
    try:
        registry.make_target(manager, spec, run_id)  # fail early on an unknown target
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE_KEY] = state
    # `pytest --shadowcheck` without paths collects the scenario library, not tests/.
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [str(p) for p in state.scenario_paths]
    elif config.getoption("shadowcheck_scenarios"):
        config.args = [*config.args, *(str(p) for p in state.scenario_paths)]
    state.library_paths = library_paths(config, state.scenario_paths)
    exploration = setup_exploration(config, state)
    if exploration is not None:
        files = [str(p) for p in exploration.files]
        config.args = files if exploration.only else [*config.args, *files]
        hooks = ExplorationHooks(exploration, workerinput is None, state.report_dir)
        config.pluginmanager.register(hooks, EXPLORATION_PLUGIN)
        if config.pluginmanager.hasplugin("xdist"):
            config.pluginmanager.register(
                XdistExploration(exploration), "shadowcheck-explore-xdist"
            )
    if workerinput is None:
        config.pluginmanager.register(JUnitProperties(state), "shadowcheck-junit")
        config.pluginmanager.register(CertificationRecorder(state), "shadowcheck-certification")
    config.pluginmanager.register(SessionHooks(), "shadowcheck-session")
    register_concurrency(config)
    register_lanes(config)
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistRunId(run_id), "shadowcheck-xdist")


def list_targets(config: pytest.Config) -> int | None:
    """``--shadowcheck-target help``: list the targets (like ``--markers``), exit 0;
    None for any other target."""
    if target_spec(config) != "help":
        return None
    print("shadowcheck targets (--shadowcheck-target NAME[:ARG]):")
    for name, description in registry.known_targets(target_manager(config)):
        print(f"  {name:<10} {description}")
    return 0


class _XdistRunId:
    """Hands the controller's run id to every xdist worker."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["shadowcheck_run_id"] = self.run_id


class SessionHooks:
    """The hooks of a ``--shadowcheck`` session, registered by :func:`configure`."""

    def pytest_collect_file(
        self, file_path: Path, parent: pytest.Collector
    ) -> pytest.Collector | None:
        if not is_scenario_file(file_path):
            return None
        return ScenarioFile.from_parent(parent, path=file_path)

    def pytest_collection_modifyitems(
        self, session: pytest.Session, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """A --shadowcheck-replay for a workload no selected scenario has would replay
        nothing, silently: name the workloads there are."""
        wanted = get_state(config).selections
        if not wanted:
            return
        names = {
            step.arg.name
            for item in items
            if isinstance(item, ScenarioItem)
            for step in item.scenario.steps
            if isinstance(step.arg, WorkloadSpec)
        }
        unknown = sorted(set(wanted) - names)
        if unknown:
            raise pytest.UsageError(
                f"--shadowcheck-replay names workload {', '.join(map(repr, unknown))}, which no "
                "selected scenario has; workloads of the selected scenarios: "
                + (", ".join(sorted(names)) or "none")
            )

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
        report = yield
        verdict = getattr(item, "verdict", None)
        if not isinstance(verdict, Verdict):
            return report
        inconclusive = call.when == "setup" and isinstance(
            call.excinfo and call.excinfo.value, ScenarioInconclusive
        )
        if inconclusive:
            # pytest shows a setup error as a traceback; the admin needs the verdict's text
            report.longrepr = verdict.render(rule_sentences())
        if call.when == "call" or inconclusive:
            data = verdict.to_dict()
            data["file"] = str(item.path)
            report.shadowcheck = data
        return report

    def pytest_report_header(self, config: pytest.Config) -> list[str] | None:
        if STATE_KEY not in config.stash:
            return None
        state = get_state(config)
        try:
            version = state.target.version()
        except TargetError as exc:  # an empty version names the description's line
            raise pytest.UsageError(str(exc)) from None
        return [
            f"shadowcheck {__version__}: target {state.target_spec} "
            f"({version}), run {state.run_id}",
            "shadowcheck scenarios: " + scenario_paths_text(config.args),
            # failures name their kept workdirs relative to it (reports carry no machine path)
            f"shadowcheck workdirs: {BASETEMP} is {run_basetemp(config) or 'not used'}",
        ]

    def pytest_report_collectionfinish(
        self, config: pytest.Config, start_path: Path, items: Sequence[pytest.Item]
    ) -> list[str] | None:
        """With --collect-only: which scenarios the target can run, and what each other one
        needs (a capability, a relay, a setting) - before anything runs."""
        if not config.option.collectonly or STATE_KEY not in config.stash:
            return None
        state = get_state(config)
        scenarios = [item for item in items if isinstance(item, ScenarioItem)]
        budget = config.getoption("shadowcheck_stretch_budget")
        needs = {
            item.nodeid: why_untestable(item.scenario, state.target, budget) for item in scenarios
        }
        runnable = sum(1 for why in needs.values() if why is None)
        lines = [f"target {state.target.label}: {runnable} of {len(scenarios)} scenario(s) can run"]
        for nodeid, why in needs.items():
            lines.append(
                f"  runs        {nodeid}" if why is None else f"  UNTESTABLE  {nodeid}: {why}"
            )
        return lines


def scenario_paths_text(paths: Sequence[str]) -> str:
    """The scenario paths of the run, a directory's many files as one entry (a deep
    exploration writes hundreds: the header names their directory, not each)."""
    by_dir: dict[str, list[str]] = {}
    for path in paths:
        by_dir.setdefault(os.path.dirname(path), []).append(path)
    parts: list[str] = []
    for directory, files in by_dir.items():
        if len(files) > 3:
            parts.append(f"{len(files)} files in {directory or '.'}")
        else:
            parts.extend(files)
    return ", ".join(parts)
