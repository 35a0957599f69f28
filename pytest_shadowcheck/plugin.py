"""The pytest plugin: ``pytest --shadowcheck``.

Registered through the ``pytest11`` entry point. Without ``--shadowcheck``
(or ``shadowcheck = true`` in the ini file) it does nothing at all.

One concern per module: options and wiring here; YAML collection in
:mod:`.collect`; the run in :mod:`.engine`; JUnit properties in
:mod:`.results`; the certification report in :mod:`.certification`;
terminal notes in :mod:`.progress`.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from . import __version__
from .certification import is_scenario_file
from .collect import ScenarioFile, ScenarioInconclusive
from .scenario import load_behaviours
from .state import BASETEMP, STATE_KEY, ShadowcheckState, get_state, run_basetemp
from .targets.registry import known_targets, make_target, target_manager
from .verdict import Verdict

__all__ = ["enabled"]

BUNDLED = "bundled"


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


def bundled_scenarios() -> Path:
    return Path(str(resources.files("scenarios")))


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


def _library(config: pytest.Config, scenario_paths: list[Path]) -> list[Path]:
    """The library a certification is measured against: the configured scenario paths
    holding what was asked to run, or what was asked itself when it lies outside them
    (a file or node id of the bundled library still counts the whole library, so that
    running part of it gives a PARTIAL certification, not a PASS)."""
    out: list[Path] = []
    for arg in config.args:
        path = (config.invocation_params.dir / str(arg).split("::")[0]).resolve()
        home = next((p for p in scenario_paths if p == path or p in path.parents), path)
        if home not in out:
            out.append(home)
    return out


def _scenario_paths(config: pytest.Config) -> list[Path]:
    given = config.getoption("shadowcheck_scenarios")
    if given:
        return [bundled_scenarios() if p == BUNDLED else Path(p).resolve() for p in given]
    configured = config.getini("shadowcheck_scenarios")
    if configured:
        return [Path(p) for p in configured]
    return [bundled_scenarios()]


@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    if not enabled(config):
        return
    catalogue = load_behaviours()
    config.addinivalue_line("markers", "shadowcheck: a shadowcheck scenario")
    for bid, entry in catalogue.items():
        config.addinivalue_line("markers", f"{bid}: {entry['summary']}")
    workerinput = getattr(config, "workerinput", None)
    run_id = config.getoption("shadowcheck_run_id")
    if workerinput is not None and workerinput.get("shadowcheck_run_id"):
        run_id = workerinput["shadowcheck_run_id"]
    run_id = run_id or str(uuid.uuid4())
    spec = _target_spec(config)
    report = config.getoption("shadowcheck_report") or config.getini("shadowcheck_report")
    history = config.getoption("shadowcheck_history")
    manager = target_manager(config)
    if spec == "help":
        return  # pytest_cmdline_main lists the targets and ends the run
    _check_behaviour_markers(config, catalogue)
    family = str(config.getini("junit_family") or "xunit2")
    state = ShadowcheckState(
        config=config,
        run_id=run_id,
        target_spec=spec,
        manager=manager,
        scenario_paths=_scenario_paths(config),
        report_dir=Path(report).resolve() if report else None,
        history_dir=Path(history).resolve() if history else None,
        junit_properties_per_case=family in ("xunit1", "legacy"),
    )
    make_target(manager, spec, run_id)  # fail early on an unknown target
    config.stash[STATE_KEY] = state
    # `pytest --shadowcheck` without paths collects the scenario library, not tests/.
    if config.args_source != pytest.Config.ArgsSource.ARGS:
        config.args = [str(p) for p in state.scenario_paths]
    elif config.getoption("shadowcheck_scenarios"):
        config.args = [*config.args, *(str(p) for p in state.scenario_paths)]
    state.library_paths = _library(config, state.scenario_paths)
    from .certification import CertificationRecorder
    from .results import JUnitProperties

    if workerinput is None:
        config.pluginmanager.register(JUnitProperties(state), "shadowcheck-junit")
        config.pluginmanager.register(CertificationRecorder(state), "shadowcheck-certification")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistRunId(run_id), "shadowcheck-xdist")


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    """``--shadowcheck-target help``: list the targets (like ``--markers``), exit 0."""
    if not enabled(config) or _target_spec(config) != "help":
        return None
    print("shadowcheck targets (--shadowcheck-target NAME[:ARG]):")
    for name, description in known_targets(target_manager(config)):
        print(f"  {name:<10} {description}")
    return 0


def _target_spec(config: pytest.Config) -> str:
    return str(config.getoption("shadowcheck_target") or config.getini("shadowcheck_target"))


class _XdistRunId:
    """Hands the controller's run id to every xdist worker."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["shadowcheck_run_id"] = self.run_id


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not enabled(parent.config) or not is_scenario_file(file_path):
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    verdict = getattr(item, "verdict", None)
    if not isinstance(verdict, Verdict):
        return report
    inconclusive = call.when == "setup" and isinstance(
        call.excinfo and call.excinfo.value, ScenarioInconclusive
    )
    if inconclusive:
        # pytest shows a setup error as a traceback; the admin needs the verdict's text
        report.longrepr = verdict.render()
    if call.when == "call" or inconclusive:
        data = verdict.to_dict()
        data["file"] = str(item.path)
        report.shadowcheck = data
    return report


def pytest_report_header(config: pytest.Config) -> list[str] | None:
    if not enabled(config) or STATE_KEY not in config.stash:
        return None
    state = get_state(config)
    return [
        f"shadowcheck {__version__}: target {state.target_spec} "
        f"({state.target.version()}), run {state.run_id}",
        "shadowcheck scenarios: " + ", ".join(str(p) for p in config.args),
        # failures name their kept workdirs relative to it (reports carry no machine path)
        f"shadowcheck workdirs: {BASETEMP} is {run_basetemp(config) or 'not used'}",
    ]


def pytest_report_collectionfinish(
    config: pytest.Config, start_path: Path, items: Sequence[pytest.Item]
) -> list[str] | None:
    """With --collect-only: which scenarios the target can run, and what each other one
    needs (a capability, a relay, a setting) - before anything runs."""
    if not enabled(config) or not config.option.collectonly or STATE_KEY not in config.stash:
        return None
    from .collect import ScenarioItem

    state = get_state(config)
    scenarios = [item for item in items if isinstance(item, ScenarioItem)]
    needs = {item.nodeid: state.why_untestable(item.scenario) for item in scenarios}
    runnable = sum(1 for why in needs.values() if why is None)
    lines = [f"target {state.target.label}: {runnable} of {len(scenarios)} scenario(s) can run"]
    for nodeid, why in needs.items():
        lines.append(f"  runs        {nodeid}" if why is None else f"  UNTESTABLE  {nodeid}: {why}")
    return lines
