"""The pytest plugin: ``pytest --shadowcheck``.

Registered through the ``pytest11`` entry point. Without ``--shadowcheck``
(or ``shadowcheck = true`` in the ini file) it does nothing at all.

One concern per module: options and wiring here; YAML collection in
:mod:`.collect`; the run in :mod:`.engine`; JUnit properties in
:mod:`.results`; the certification report in :mod:`.certification`;
terminal notes in :mod:`.progress`.
"""

from __future__ import annotations

import importlib
import shutil
import tempfile
import uuid
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy
import pytest

from . import __version__, hookspecs
from .collect import ScenarioFile
from .scenario import load_behaviours
from .targets.base import Target, TargetError
from .verdict import Status, Verdict

if TYPE_CHECKING:
    from .collect import ScenarioItem

__all__ = ["ShadowcheckState", "get_state"]

BUNDLED = "bundled"
TARGET_ENTRY_POINT_GROUP = "shadowcheck.targets"
STATE_KEY = pytest.StashKey["ShadowcheckState"]()


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


@dataclass
class ShadowcheckState:
    """Per-process state, kept in ``config.stash``."""

    config: pytest.Config
    run_id: str
    target_spec: str
    manager: pluggy.PluginManager
    scenario_paths: list[Path]
    report_dir: Path | None
    history_dir: Path | None
    junit_properties_per_case: bool
    _target: Target | None = None
    verdicts: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = make_target(self.manager, self.target_spec, self.run_id)
        return self._target

    def run(self, item: ScenarioItem) -> Verdict:
        from .engine import run_scenario
        from .progress import Progress

        scenario = item.scenario
        target = self.target
        base = Verdict(
            scenario=scenario.name,
            behaviours=scenario.behaviours,
            source=str(scenario.where),
            title=scenario.title,
        )
        missing = [c for c in scenario.required_capabilities() if c not in target.capabilities]
        if missing:
            base.status = Status.UNTESTABLE
            base.reason = f"target {target.name} lacks capability {', '.join(missing)}"
            return base
        why = target.cannot_run(scenario)
        if why:
            base.status = Status.UNTESTABLE
            base.reason = f"target {target.name}: {why}"
            return base
        workdir = Path(tempfile.mkdtemp(prefix=f"shadowcheck-{scenario.name[:40]}-"))
        history_file = None
        if self.history_dir is not None:
            safe = item.nodeid.replace("/", "_").replace("::", "__")
            history_file = self.history_dir / f"{safe}.json"
        verdict = run_scenario(
            scenario,
            target,
            workdir=workdir,
            progress=Progress(self.config, scenario.name),
            hooks=self.manager.hook,
            history_file=history_file,
            verdict=base,
        )
        if verdict.status in (Status.PASS, Status.UNTESTABLE):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            # keep the workdir: node data and logs are evidence
            verdict.reason += f" (node data and logs kept in {workdir})"
        return verdict


def get_state(config: pytest.Config) -> ShadowcheckState:
    return config.stash[STATE_KEY]


def target_manager(config: pytest.Config) -> pluggy.PluginManager:
    """The ``shadowcheck`` plugin manager: built-in targets, entry points, named modules."""
    from .targets import docker, external, reference

    manager = pluggy.PluginManager(hookspecs.PROJECT)
    manager.add_hookspecs(hookspecs)
    manager.register(reference, "shadowcheck-reference")
    manager.register(external, "shadowcheck-external")
    manager.register(docker, "shadowcheck-docker")
    manager.load_setuptools_entrypoints(TARGET_ENTRY_POINT_GROUP)
    modules = list(config.getini("shadowcheck_target_plugins"))
    modules += config.getoption("shadowcheck_target_plugin") or []
    for name in modules:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:
            raise pytest.UsageError(f"--shadowcheck-target-plugin {name}: {exc}") from None
        if manager.get_plugin(name) is None:
            manager.register(module, name)
    return manager


def known_targets(manager: pluggy.PluginManager) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    for result in manager.hook.shadowcheck_describe_targets():
        out.extend(result or [])
    return sorted(out)


def make_target(manager: pluggy.PluginManager, spec: str, run_id: str) -> Target:
    name, _, argument = spec.partition(":")
    try:
        target = manager.hook.shadowcheck_make_target(
            name=name, argument=argument or None, options={"run_id": run_id}
        )
    except TargetError as exc:
        raise pytest.UsageError(f"--shadowcheck-target {spec}: {exc}") from None
    if target is None:
        listing = "\n".join(f"  {n:<10} {d}" for n, d in known_targets(manager))
        raise pytest.UsageError(f"unknown shadowcheck target {spec!r}; known targets:\n{listing}")
    assert isinstance(target, Target)
    return target


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
    spec = config.getoption("shadowcheck_target") or config.getini("shadowcheck_target")
    report = config.getoption("shadowcheck_report") or config.getini("shadowcheck_report")
    history = config.getoption("shadowcheck_history")
    manager = target_manager(config)
    if spec == "help":
        listing = "\n".join(f"  {n:<10} {d}" for n, d in known_targets(manager))
        raise pytest.UsageError(f"shadowcheck targets:\n{listing}")
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
    from .certification import CertificationRecorder
    from .results import JUnitProperties

    if workerinput is None:
        config.pluginmanager.register(JUnitProperties(state), "shadowcheck-junit")
        config.pluginmanager.register(CertificationRecorder(state), "shadowcheck-certification")
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_XdistRunId(run_id), "shadowcheck-xdist")


class _XdistRunId:
    """Hands the controller's run id to every xdist worker."""

    def __init__(self, run_id: str) -> None:
        self.run_id = run_id

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput["shadowcheck_run_id"] = self.run_id


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if not enabled(parent.config) or file_path.suffix not in (".yaml", ".yml"):
        return None
    if "topologies" in file_path.parts or file_path.name.startswith(("_", ".")):
        return None
    if file_path.name == "behaviours.yaml" and file_path.parent.name == "pytest_shadowcheck":
        return None
    return ScenarioFile.from_parent(parent, path=file_path)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    report = yield
    verdict = getattr(item, "verdict", None)
    if call.when == "call" and isinstance(verdict, Verdict):
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
    ]
