"""The plugin's state for one pytest process, owned here and kept in ``config.stash``.

Other modules (collection, JUnit properties, the certification) read it through
:func:`get_state`; only :mod:`.plugin` creates it.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import pluggy
import pytest

from .scenario_model import CAPABILITY_NEED, STEP_CAPABILITY, Scenario, Step
from .targets.base import Target, control_call
from .targets.registry import make_target
from .verdict import Status, Verdict

if TYPE_CHECKING:
    from .collect import ScenarioItem

__all__ = [
    "BASETEMP",
    "STATE_KEY",
    "ShadowcheckState",
    "get_state",
    "missing_capability_reason",
    "run_basetemp",
]

STATE_KEY = pytest.StashKey["ShadowcheckState"]()
#: how a kept workdir's place is named in verdicts: the report header says where it is
BASETEMP = "<basetemp>"


def run_basetemp(config: pytest.Config) -> Path | None:
    """The run's pytest basetemp (an xdist worker's is a directory below it), or None
    when pytest's tmp_path plugin is off."""
    factory = getattr(config, "_tmp_path_factory", None)
    if not isinstance(factory, pytest.TempPathFactory):
        return None
    base = factory.getbasetemp()
    return base.parent if hasattr(config, "workerinput") else base


def shown_workdir(config: pytest.Config, workdir: Path) -> str:
    """A kept workdir as a verdict names it: relative to the directory pytest was run
    from, else to the run's basetemp (``<basetemp>/popen-gw0/shadowcheck-x0``, the
    header names it), so committed reports carry no machine's temporary paths."""
    for base, prefix in ((config.invocation_params.dir, ""), (run_basetemp(config), BASETEMP)):
        if base is not None and workdir.resolve().is_relative_to(base.resolve()):
            relative = workdir.resolve().relative_to(base.resolve())
            return f"{prefix}/{relative}" if prefix else str(relative)
    return str(workdir)


def get_state(config: pytest.Config) -> ShadowcheckState:
    return config.stash[STATE_KEY]


def missing_capability_reason(scenario: Scenario, target: Target) -> str | None:
    """Why ``target`` cannot run ``scenario`` for want of a capability: which one, what it
    would show or do, and the step that needs it; None when it has them all."""

    def uncovered(capability: str) -> list[Step]:
        """Steps needing ``capability`` that the target cannot carry out (an admin
        adapter may answer a step's one control API call without the whole API)."""
        return [
            s
            for s in scenario.steps
            if STEP_CAPABILITY.get(s.kind) == capability
            and not target.can(capability, control_call(s.kind, s.arg))
        ]

    missing = [
        c
        for c in scenario.required_capabilities()
        if c not in target.capabilities
        and (c != "control_api" or "control_api" in scenario.requires or uncovered(c))
    ]
    if not missing:
        return None
    parts = []
    for capability in missing:
        needed_by = next(
            (f"step {s.kind} at line {s.where.line}" for s in uncovered(capability)),
            "the scenario's topology (virtual clock)"
            if capability == "virtual_clock" and scenario.topology.clock == "virtual"
            else "the scenario's requires:",
        )
        parts.append(f"{capability} - {CAPABILITY_NEED[capability]} - for {needed_by}")
    return f"target {target.label} lacks " + "; ".join(parts)


@dataclass
class ShadowcheckState:
    """Per-process state: options, the target, where reports go."""

    config: pytest.Config
    run_id: str
    target_spec: str
    manager: pluggy.PluginManager
    scenario_paths: list[Path]
    report_dir: Path | None
    history_dir: Path | None
    junit_properties_per_case: bool
    #: what the certification counts as the whole library (see plugin._library)
    library_paths: list[Path] = field(default_factory=list)
    _target: Target | None = None

    @property
    def target(self) -> Target:
        if self._target is None:
            self._target = make_target(self.manager, self.target_spec, self.run_id)
        return self._target

    def _workdir(self, name: str) -> Path:
        """A fresh directory for one scenario run under pytest's basetemp (--basetemp is
        honoured, old runs are pruned by pytest), or a plain temporary one without it."""
        factory = getattr(self.config, "_tmp_path_factory", None)
        if isinstance(factory, pytest.TempPathFactory):
            return factory.mktemp(f"shadowcheck-{name[:40]}", numbered=True)
        return Path(tempfile.mkdtemp(prefix=f"shadowcheck-{name[:40]}-"))

    def why_untestable(self, scenario: Scenario) -> str | None:
        """Why the target cannot run ``scenario`` at all (UNTESTABLE), or None."""
        target = self.target
        why = missing_capability_reason(scenario, target)
        if why is None and scenario.node_settings and not target.per_node_settings:
            why = (
                f"target {target.label} cannot give single nodes settings of their own "
                f"(node_settings for {', '.join(scenario.node_settings)})"
            )
        if why is None and (other := target.cannot_run(scenario)):
            why = f"target {target.label}: {other}"
        return why

    def run(self, item: ScenarioItem) -> Verdict:
        from .engine import run_scenario
        from .progress import Progress

        scenario = item.scenario
        target = self.target
        verdict = Verdict(
            scenario=scenario.name,
            behaviours=scenario.behaviours,
            source=str(scenario.where),
            title=scenario.title,
        )
        why = self.why_untestable(scenario)
        if why:
            verdict.untestable(why)
            return verdict
        workdir = self._workdir(scenario.name)
        history_file = None
        if self.history_dir is not None:
            safe = item.nodeid.replace("/", "_").replace("::", "__")
            history_file = self.history_dir / f"{safe}.json"
        run_scenario(
            scenario,
            target,
            workdir=workdir,
            progress=Progress(self.config, scenario.name),
            hooks=self.manager.hook,
            history_file=history_file,
            verdict=verdict,
            workload_scale=self.config.getoption("shadowcheck_workload_scale", 1.0),
            workload_seed=self.config.getoption("shadowcheck_workload_seed", None),
            timeline_dir=self.report_dir,
        )
        if verdict.status in (Status.PASS, Status.NOT_APPLICABLE, Status.UNTESTABLE):
            shutil.rmtree(workdir, ignore_errors=True)
        else:
            # keep the workdir: node data and logs are evidence
            verdict.reason += (
                f" (node data and logs kept in {shown_workdir(self.config, workdir)})"
            )
        return verdict
