"""How many scenarios run at once, and in which order.

A scenario mostly waits: on timers, on next hops, on a node coming back. One scenario
per core leaves the machine idle most of the time, so ``pytest --shadowcheck`` with no
``-n`` of its own runs several at once (never more than there are scenarios): in
:data:`LANES_PER_CORE` lanes per core of its own process (plugin/lanes.py) when the
target can run clusters side by side in one process (``Target.lanes``), else in
:data:`WORKERS_PER_CORE` pytest-xdist workers per core. ``--shadowcheck-concurrency N``
(lanes or workers, as the target allows) or pytest-xdist's own ``-n``, ``--dist`` or
``--tx`` choose otherwise; ``--shadowcheck-concurrency 1`` and ``-n 0`` run serially.

With several workers the run lasts at least as long as its longest scenario, so the
longest ones must start first: the workers sort their collection by how long each
scenario took last time (pytest's cache), or by an estimate from its waits and workloads,
and :class:`LongestFirstScheduling` hands each worker one scenario at a time in that
order. A deep exploration's scenarios come after them, in the seed's order: its
deadline leaves the end of that list unrun, and longest first would spend it on the
slowest scenarios. The durations travel from the controller to the workers in
``workerinput``, so every worker sorts alike even while another session rewrites the
cache.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.plugin.state import LANES_KEY

__all__ = [
    "LANES_PER_CORE",
    "WORKERS_PER_CORE",
    "DurationOrder",
    "LongestFirst",
    "choose_workers",
    "default_lanes",
    "default_workers",
    "estimated_seconds",
    "register",
]

#: measured on 2 cores (docs/suite-speed.md): the suite's wall time falls up to about
#: 4 workers per core; more gain nothing (the longest scenario and the workers' start set it)
WORKERS_PER_CORE = 4
#: a lane costs no interpreter of its own, so more of them fit: on 2 cores, with
#: session 30's 104 scenarios, 16 lanes ran the suite in 28.6 s (median of 5) and 12 in
#: 33.8 s; 20 runs beside a second suite at 16 lanes failed none (docs/suite-speed.md)
LANES_PER_CORE = 8
_CACHE_KEY = "shadowcheck/durations"
_WORKERINPUT_KEY = "shadowcheck_durations"
#: rate assumed for a workload that sends as fast as the target takes it
_ASSUMED_RATE = 40.0


def cores() -> int:
    """The cores this process may run on (a container's or taskset's limit included)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def default_workers(cores: int, scenarios: int) -> int:
    """Workers for ``scenarios`` I/O-bound scenarios on ``cores`` cores; 0 runs serially."""
    if scenarios <= 1:
        return 0
    return min(WORKERS_PER_CORE * cores, scenarios)


def choose_workers(config: pytest.Config) -> None:
    """Choose the lanes (``config.stash[LANES_KEY]``) or set pytest-xdist's
    ``numprocesses`` before xdist reads it (``pytest_cmdline_main`` runs before any
    ``pytest_configure``), unless the user chose a distribution or asked for something a
    concurrent run cannot give (``--pdb``, ``-s``, collection only)."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker runs its scenarios itself
    asked = config.getoption("shadowcheck_concurrency", None)
    has_xdist = config.pluginmanager.hasplugin("xdist")
    chosen = has_xdist and (
        config.option.numprocesses is not None
        or bool(config.option.tx)
        or config.option.dist != "no"
    )
    if not chosen and (asked is not None or not _serial_only(config)) and _lanes_fit(config):
        lanes = _lanes(config, asked)
        if lanes > 1:
            config.stash[LANES_KEY] = lanes
        return
    if not has_xdist:
        if asked is not None and asked > 1:
            raise pytest.UsageError(
                f"--shadowcheck-concurrency {asked} runs scenarios in pytest-xdist workers, "
                "and pytest-xdist is not installed (or is disabled with -p no:xdist): "
                "install it (pip install pytest-xdist) or leave the option out"
            )
        return
    if chosen:
        if asked is not None:
            raise pytest.UsageError(
                "--shadowcheck-concurrency and pytest-xdist's -n/--dist/--tx both choose how "
                "many scenarios run at once: give one of them"
            )
        return
    if asked is None:
        if _serial_only(config):
            return
        workers = default_workers(cores(), _scenario_count(config))
    else:
        workers = _asked(asked)
    config.option.numprocesses = workers


def _serial_only(config: pytest.Config) -> bool:
    """Asked for what runs best one scenario at a time, when nobody said otherwise."""
    return bool(
        config.option.usepdb
        or config.option.capture == "no"
        or config.option.collectonly
        or config.getoption("shadowcheck_target", None) == "help"
    )


def _asked(asked: int) -> int:
    if asked < 1:
        raise pytest.UsageError(
            f"--shadowcheck-concurrency {asked}: give how many scenarios may run at once "
            "(1 runs them one after another)"
        )
    return asked if asked > 1 else 0


def _lanes(config: pytest.Config, asked: int | None) -> int:
    if asked is not None:
        return _asked(asked)
    scenarios = _scenario_count(config)  # the caller ruled out a serial-only run
    if scenarios <= 1:
        return 0  # no need to sample how busy the machine is
    return default_lanes(cores(), scenarios, _busy())


def default_lanes(cores: int, scenarios: int, busy: float) -> int:
    """Lanes for ``scenarios`` on ``cores`` cores, ``busy`` of them in use by others at
    the start; 0 runs serially. On a machine already busy (CI running other tests
    beside), as many as there would be workers: more scenarios at once there stretch
    the timers' windows (a 250 ms heartbeat judged with 0.5 s of slack failed at 12
    lanes under a load of 10) for no gain, the cores being taken."""
    if scenarios <= 1:
        return 0
    per_core = WORKERS_PER_CORE if busy >= 0.75 * cores else LANES_PER_CORE
    return min(per_core * cores, scenarios)


def _busy(sample: float = 0.2) -> float:
    """How many cores other processes keep busy now (``/proc/stat`` over ``sample``
    seconds): the 1-minute load average would still count a run just ended."""

    def times() -> tuple[int, int]:
        with open("/proc/stat", encoding="ascii") as stat:
            fields = [int(x) for x in stat.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]  # all, idle + iowait

    try:
        total, idle = times()
        time.sleep(sample)
        total2, idle2 = times()
    except (OSError, ValueError, IndexError):  # no /proc here
        return 0.0
    spent = total2 - total
    return 0.0 if spent <= 0 else cores() * (1 - (idle2 - idle) / spent)


def _lanes_fit(config: pytest.Config) -> bool:
    """Whether the session's target runs clusters side by side in one process (a
    throwaway instance is asked; a target that cannot be made is the session's to
    report, so it gets no lanes here)."""
    from pytest_shadowcheck.errors import TargetError
    from pytest_shadowcheck.plugin.state import target_manager, target_spec
    from pytest_shadowcheck.targets.registry import make_target

    spec = target_spec(config)
    if spec == "help":
        return False
    try:
        return bool(make_target(target_manager(config), spec, "lanes-probe").lanes)
    except (TargetError, pytest.UsageError):
        return False


def _scenario_count(config: pytest.Config) -> int:
    """How many scenarios the run would collect (``-k`` and ``-m`` applied to their names
    and behaviour IDs): enough to never start more workers than there is work for."""
    from pytest_shadowcheck.engine.exploration_plan import explored_name
    from pytest_shadowcheck.plugin.exploration import SLICE_SCENARIOS, SLICE_SEED, explores
    from pytest_shadowcheck.plugin.library import scenario_paths
    from pytest_shadowcheck.scenario.loader import load_behaviours

    found: list[tuple[list[str], list[str]]] = []
    paths = list(scenario_paths(config)) if config.getoption("shadowcheck_scenarios") else []
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        for arg in config.args:
            file, _, name = arg.partition("::")
            if name:
                wanted = name.split("[", 1)[0]
                in_file = _scenarios_in(config.invocation_params.dir / file)
                found += [s for s in in_file if s[0][-1] == wanted] or [([wanted], [])]
            else:
                paths.append(config.invocation_params.dir / arg)
    else:
        paths = list(scenario_paths(config))
    for path in paths:
        found += _scenarios_in(path)
    if explores(config):
        # an explored scenario is marked with every behaviour its model may judge; a deep
        # exploration collects enough to keep every lane busy to its deadline. Their
        # names are known when the seed is (the slice's always): a -k naming one of them
        # counts it
        every = list(load_behaviours())
        deep = config.getoption("shadowcheck_explore", None) is not None
        seed = config.getoption("shadowcheck_explore_seed", None)
        if seed is None and not deep:
            seed = SLICE_SEED
        for index in range(LANES_PER_CORE * cores() if deep else SLICE_SCENARIOS):
            name = "explore" if seed is None else explored_name(int(seed), index)
            found.append(([f"{name}.yaml", name], every))
    return sum(1 for names, behaviours in found if _selected(config, names, behaviours))


def _scenarios_in(path: Path) -> list[tuple[list[str], list[str]]]:
    """(name, behaviour IDs) of each scenario in a file or under a directory, read as
    plain YAML: the loader (validation, topologies) would cost the controller a second
    before any worker starts. A file that does not load counts once (its error is one
    item)."""
    import yaml

    from pytest_shadowcheck.report.certification import is_scenario_file
    from pytest_shadowcheck.scenario.marked_yaml import SAFE_LOADER

    files = sorted(path.rglob("*")) if path.is_dir() else [path]
    found: list[tuple[list[str], list[str]]] = []
    for file in files:
        if not (file.is_file() and is_scenario_file(file)):
            continue
        try:
            # the loader's parser (libyaml's where PyYAML has it): the pure-Python one
            # took 0.2 s of CPU for the bundled library, before any worker or lane starts
            doc = yaml.load(file.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            found.append(([file.name], []))
            continue
        scenarios = doc.get("scenarios") if isinstance(doc, dict) else None
        if not isinstance(scenarios, list):
            found.append(([file.name], []))
            continue
        defaults = doc.get("defaults")
        shared = defaults.get("behaviours") if isinstance(defaults, dict) else None
        for scenario in scenarios:
            entry = scenario if isinstance(scenario, dict) else {}
            behaviours = entry.get("behaviours", shared)  # the loader's merge of defaults
            found.append(
                (
                    [file.name, str(entry.get("name", ""))],
                    [str(b) for b in behaviours] if isinstance(behaviours, list) else [],
                )
            )
    return found


def _selected(config: pytest.Config, names: list[str], behaviours: list[str]) -> bool:
    """``-k`` and ``-m`` as pytest applies them, on what a scenario item is named and
    marked with; an expression this cannot read selects the scenario (a worker too many
    is better than one too few)."""
    marks = {"shadowcheck", *behaviours}

    def named(sub: str, /, **_: str | int | bool | None) -> bool:
        return any(sub.lower() in name.lower() for name in names)

    def marked(mark: str, /, **_: str | int | bool | None) -> bool:
        return mark in marks

    try:
        from _pytest.mark.expression import Expression  # pytest's own -k/-m grammar

        keyword, markexpr = config.option.keyword, config.option.markexpr
        if keyword and not Expression.compile(keyword).evaluate(named):
            return False
        return not markexpr or Expression.compile(markexpr).evaluate(marked)
    except Exception:  # a private API of pytest's: count rather than fail
        return True


def estimated_seconds(scenario: Any) -> float:
    """A scenario's duration before it ever ran: the waits it states and its workloads'
    messages at their rate (a guess; the cache replaces it after one run)."""
    from pytest_shadowcheck.scenario.steps import WaitSpec
    from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec

    total = 1.0
    for step in scenario.steps:
        arg = step.arg
        if isinstance(arg, WaitSpec) and arg.delivered is None and arg.reply is None:
            total += arg.timeout
        elif isinstance(arg, WorkloadSpec):
            total += arg.messages / (arg.rate or _ASSUMED_RATE) + arg.settle / 4
        else:
            total += 0.05
    return total


def _key(nodeid: str) -> str:
    # the behaviour IDs in brackets change with the catalogue; the scenario does not
    return nodeid.split("[", 1)[0]


class DurationOrder:
    """Registered for every ``--shadowcheck`` session: workers sort their collection
    longest first, and the controller records how long each scenario took."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.workerinput: dict[str, Any] | None = getattr(config, "workerinput", None)
        self.took: dict[str, float] = {}

    def known(self) -> dict[str, float]:
        """Seconds each scenario took when it last ran, by node id without parameters."""
        if self.workerinput is not None:
            return dict(json.loads(self.workerinput.get(_WORKERINPUT_KEY, "{}")))
        cache = getattr(self.config, "cache", None)
        known = cache.get(_CACHE_KEY, {}) if cache is not None else {}
        return {str(k): float(v) for k, v in known.items()} if isinstance(known, dict) else {}

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        if self.workerinput is None and self.config.stash.get(LANES_KEY, 0) <= 1:
            return  # serially, the file order reads best
        from pytest_shadowcheck.plugin.exploration import explored_index, get_exploration

        known = self.known()
        exploration = get_exploration(self.config)
        deep = exploration is not None and exploration.deadline is not None

        def order(item: pytest.Item) -> tuple[int, float]:
            scenario = getattr(item, "scenario", None)
            found = explored_index(scenario.name) if deep and scenario is not None else None
            if found is not None:
                # a deep exploration's deadline cuts its list: in the seed's order, the
                # short scenarios first (plugin/exploration.py DEEP_RAMP), after the
                # hand-written ones, which all run whatever the deadline
                return (1, found[1])
            if _key(item.nodeid) in known:
                return (0, -known[_key(item.nodeid)])
            return (0, -estimated_seconds(scenario) if scenario is not None else 0.0)

        items.sort(key=order)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if self.workerinput is None:
            key = _key(report.nodeid)
            self.took[key] = self.took.get(key, 0.0) + report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        cache = getattr(self.config, "cache", None)
        if self.workerinput is not None or cache is None or not self.took:
            return
        known = self.known()
        known.update({k: round(v, 2) for k, v in self.took.items()})
        cache.set(_CACHE_KEY, known)


class LongestFirst:
    """pytest-xdist's hooks on the controller (registered only with xdist): the
    durations go to every worker, and scenarios are handed out one at a time."""

    def __init__(self, order: DurationOrder) -> None:
        self.order = order

    def pytest_configure_node(self, node: Any) -> None:
        node.workerinput[_WORKERINPUT_KEY] = json.dumps(self.order.known())

    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: Any) -> Any:
        if config.getoption("dist") != "load":
            return None
        from pytest_shadowcheck.plugin.scheduling import LongestFirstScheduling

        return LongestFirstScheduling(config, log)


def register(config: pytest.Config) -> None:
    """The ordering hooks of a ``--shadowcheck`` session."""
    order = DurationOrder(config)
    config.pluginmanager.register(order, "shadowcheck-duration-order")
    if config.pluginmanager.hasplugin("xdist") and getattr(config, "workerinput", None) is None:
        config.pluginmanager.register(LongestFirst(order), "shadowcheck-longest-first")
