"""The plugin's state for one pytest process, owned here and kept in ``config.stash``.

Other modules of the plugin (collection, the runner, JUnit properties, the
certification) read it through :func:`get_state`; only :mod:`pytest_shadowcheck.plugin`
creates it.
"""

from __future__ import annotations

import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

import pluggy
import pytest

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.scenario.replay import Selection
from pytest_shadowcheck.targets import registry
from pytest_shadowcheck.targets.base import Target
from pytest_shadowcheck.targets.registry import make_target

__all__ = [
    "BASETEMP",
    "LANES_KEY",
    "STATE_KEY",
    "ShadowcheckState",
    "get_state",
    "run_basetemp",
    "shown_workdir",
    "target_manager",
    "target_spec",
]

STATE_KEY = pytest.StashKey["ShadowcheckState"]()
#: how many lanes the session runs (chosen by plugin/concurrency.py, run by
#: plugin/lanes.py); absent: none
LANES_KEY = pytest.StashKey[int]()
#: a lane's own target (plugin/lanes.py), seen by whatever the lane's thread runs
_LANE = threading.local()
_WORKDIRS = threading.Lock()
#: how a kept workdir's place is named in verdicts: the report header says where it is
BASETEMP = "<basetemp>"


def _tmp_path_factory(config: pytest.Config) -> pytest.TempPathFactory | None:
    """pytest's own temporary-directory factory (so --basetemp is honoured and old runs
    are pruned). pytest offers it to fixtures only; a plugin reaches it through the
    config, guarded: None when the tmp_path plugin is off or the attribute is gone."""
    factory = getattr(config, "_tmp_path_factory", None)
    return factory if isinstance(factory, pytest.TempPathFactory) else None


def run_basetemp(config: pytest.Config) -> Path | None:
    """The run's pytest basetemp (an xdist worker's is a directory below it), or None
    when pytest's tmp_path plugin is off."""
    factory = _tmp_path_factory(config)
    if factory is None:
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


def target_manager(config: pytest.Config) -> pluggy.PluginManager:
    """The target plugin manager, with the modules the options and the ini name."""
    modules = list(config.getini("shadowcheck_target_plugins"))
    modules += config.getoption("shadowcheck_target_plugin") or []
    try:
        return registry.target_manager(modules)
    except TargetError as exc:
        raise pytest.UsageError(str(exc)) from None


def target_spec(config: pytest.Config) -> str:
    return str(config.getoption("shadowcheck_target") or config.getini("shadowcheck_target"))


def get_state(config: pytest.Config) -> ShadowcheckState:
    return config.stash[STATE_KEY]


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
    #: what the certification counts as the whole library (see plugin.library.library_paths)
    library_paths: list[Path] = field(default_factory=list)
    #: --shadowcheck-replay: workload name -> the part of its plan to play
    selections: dict[str, Selection] = field(default_factory=dict)
    #: set when the session stops (-x, --maxfail): the scenarios still running in other
    #: lanes end at once, unjudged (plugin/lanes.py)
    stopping: threading.Event = field(default_factory=threading.Event)
    _target: Target | None = None

    @property
    def target(self) -> Target:
        """The session's target; in a lane's thread, that lane's own instance."""
        lane: Target | None = getattr(_LANE, "target", None)
        if lane is not None:
            return lane
        if self._target is None:
            try:
                self._target = make_target(self.manager, self.target_spec, self.run_id)
            except TargetError as exc:
                raise pytest.UsageError(str(exc)) from None
        return self._target

    def enter_lane(self) -> None:
        """Give the calling thread a target of its own (a lane of plugin/lanes.py): the
        runs, shrinks and checks that thread makes use it through :attr:`target`."""
        _LANE.target = make_target(self.manager, self.target_spec, self.run_id)

    def workdir(self, name: str) -> Path:
        """A fresh directory for one scenario run under pytest's basetemp, or a plain
        temporary one without it."""
        factory = _tmp_path_factory(self.config)
        if factory is not None:
            # pytest's factory makes its base directory on first use: not from two lanes
            with _WORKDIRS:
                return factory.mktemp(f"shadowcheck-{name[:40]}", numbered=True)
        return Path(tempfile.mkdtemp(prefix=f"shadowcheck-{name[:40]}-"))
