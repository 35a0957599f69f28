"""Exploration: seeded, generated scenarios run beside the hand-written ones.

``pytest --shadowcheck`` runs a bounded slice (:data:`SLICE_SCENARIOS` scenarios of
:data:`SLICE_OPERATIONS` operations from the fixed seed :data:`SLICE_SEED`);
``--shadowcheck-explore=DURATION`` explores from a fresh seed (printed) until the
duration is spent; ``--shadowcheck-explore-seed=N`` fixes the seed;
``--shadowcheck-explore-only`` leaves the hand-written scenarios out.

An explored scenario is an ordinary scenario file (engine/exploration_plan.py writes
it), so it is collected, run and reported as any other; its replay command names that
file. One that FAILs is shrunk (engine/shrink.shrink_operations: ddmin over its operations, each
attempt a fresh run), the shrunk scenario written as YAML (scenario/writer.py) to the
report directory (or the run's basetemp), and the failure shows it with the command
that replays it.
"""

from __future__ import annotations

import hashlib
import json
import random
import re
import shutil
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.checks.model.check import MODEL_CHECK
from pytest_shadowcheck.engine.generator import ExplorationPlan, plan, untestable_by_exploration
from pytest_shadowcheck.engine.shrink import Budget, shrink_operations
from pytest_shadowcheck.plugin.junit import junit_xml
from pytest_shadowcheck.plugin.shrinking import attempt_run
from pytest_shadowcheck.plugin.state import LANES_KEY, ShadowcheckState, run_basetemp
from pytest_shadowcheck.plugin.terminal import note_writer
from pytest_shadowcheck.progress import Progress
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES
from pytest_shadowcheck.scenario.model import Scenario
from pytest_shadowcheck.scenario.writer import scenario_yaml
from pytest_shadowcheck.verdict import Status, Verdict

__all__ = [
    "EXPLORATION_PLUGIN",
    "SLICE_OPERATIONS",
    "SLICE_SCENARIOS",
    "SLICE_SEED",
    "Exploration",
    "ExplorationHooks",
    "XdistExploration",
    "deep_length",
    "explored_index",
    "explores",
    "setup_exploration",
    "shrink_explored",
]

#: the bounded slice of every ``pytest --shadowcheck``: fixed, so runs compare
SLICE_SEED = 2027
SLICE_SCENARIOS = 3
SLICE_OPERATIONS = 10
#: operations of each scenario of a deep exploration, once past :data:`DEEP_RAMP`
DEEP_OPERATIONS = 16
#: a deep exploration's first scenarios are short, as QuickCheck's and Hypothesis's
#: sizes grow: (index below which, operations). Most defects show in a few operations,
#: and a short scenario ends in half a minute where a deep one takes two to five
#: (session 35: seed 11's longest ran 335 s); the deep ones come once the cheap, broad
#: ones have run. Fixed, not by lanes: a seed draws the same scenarios on any machine
DEEP_RAMP: tuple[tuple[int, int], ...] = ((16, 8), (32, 12))
#: about the shortest a deep explored scenario of DEEP_OPERATIONS runs (s), a shorter
#: one in proportion: a deep exploration collects enough scenarios for its duration at
#: this pace in every lane, and starts none after the deadline (session 17, 88
#: scenarios of seed 1001 in 12 lanes: 35 s at the least, 78 s the median; session 35,
#: seed 11 in 16 lanes: 8 operations 23 s the median, 16 operations 55 s; every file
#: written costs the start ~0.06 s)
_FASTEST = 30.0
_KEY = pytest.StashKey["Exploration"]()
_EXPLORED = re.compile(r"^explore_s(\d+)_(\d{3,})$")
#: the name the exploration hooks are registered under (the certification asks them)
EXPLORATION_PLUGIN = "shadowcheck-exploration"
#: the property an explored item's report carries (operations, verdict, behaviours)
PROPERTY = "shadowcheck.explored"


def explored_index(name: str) -> tuple[int, int] | None:
    """(seed, index) of an explored scenario's name, None for any other."""
    found = _EXPLORED.match(name)
    return (int(found.group(1)), int(found.group(2))) if found else None


@dataclass
class Exploration:
    seed: int
    count: int
    length: int
    capabilities: frozenset[str]
    directory: Path
    #: epoch seconds after which no explored scenario starts (deep exploration)
    deadline: float | None = None
    only: bool = False
    files: list[Path] = field(default_factory=list)
    #: epoch seconds when the exploration began (the controller's, in xdist workers)
    started: float = field(default_factory=time.time)

    def length_of(self, index: int) -> int:
        """The operations drawn for scenario ``index``: a deep exploration's grow."""
        return deep_length(index) if self.deadline is not None else self.length

    def plan(self, index: int) -> ExplorationPlan:
        length = self.length_of(index)
        return plan(self.seed, index, capabilities=self.capabilities, length=length)

    def lengths(self) -> str:
        """How long its scenarios are, in words (the header's)."""
        shortest = self.length_of(0)
        if shortest == self.length or self.count <= DEEP_RAMP[0][0]:
            return f"of {shortest} operations"
        return f"of {shortest} operations growing to {self.length_of(self.count - 1)}"

    def expired(self, name: str) -> bool:
        """Whether the scenario ``name`` is an explored one that must not start now: a
        deep exploration's deadline has passed."""
        return (
            self.deadline is not None
            and explored_index(name) is not None
            and time.time() >= self.deadline
        )


def deep_length(index: int) -> int:
    """The operations a deep exploration draws for its scenario ``index``."""
    return next((n for below, n in DEEP_RAMP if index < below), DEEP_OPERATIONS)


def _enough(lane_seconds: float) -> int:
    """How many deep explored scenarios fill ``lane_seconds`` at the fastest pace
    (:data:`_FASTEST`, the short ones of :data:`DEEP_RAMP` in proportion)."""
    count, filled = 0, 0.0
    while filled < lane_seconds or count == 0:
        filled += _FASTEST * deep_length(count) / DEEP_OPERATIONS
        count += 1
    return count


def _duration(text: str) -> float:
    found = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*(s|m|h)?\s*", text)
    if not found:
        raise pytest.UsageError(f"--shadowcheck-explore={text}: not a duration (e.g. 300s, 5m, 1h)")
    return float(found.group(1)) * {"s": 1, "m": 60, "h": 3600}[found.group(2) or "s"]


def explores(config: pytest.Config) -> bool:
    """Whether the session runs explored scenarios: asked for, or the slice of a run of
    the bundled library (a command line naming scenarios or paths runs only those)."""
    asked = (
        config.getoption("shadowcheck_explore", None) is not None
        or config.getoption("shadowcheck_explore_seed", None) is not None
        or bool(config.getoption("shadowcheck_explore_only", False))
    )
    if asked:
        return True
    if config.args_source == pytest.Config.ArgsSource.ARGS:
        return False
    return not config.getoption("shadowcheck_scenarios")  # one's own library: no slice


def setup_exploration(config: pytest.Config, state: ShadowcheckState) -> Exploration | None:
    """The session's exploration, its scenario files written; None when it is off
    (a command line naming scenarios or paths runs only those)."""
    if not explores(config):
        return None
    deep = config.getoption("shadowcheck_explore", None)
    seed = config.getoption("shadowcheck_explore_seed", None)
    only = bool(config.getoption("shadowcheck_explore_only", False))
    workerinput = getattr(config, "workerinput", None)
    shared = json.loads(workerinput.get("shadowcheck_explore", "{}")) if workerinput else {}
    deadline = shared.get("deadline")
    if deep is not None:
        seconds = _duration(str(deep))
        seed = shared.get("seed", seed if seed is not None else random.randrange(1, 10**6))
        deadline = deadline or time.time() + seconds
        # enough for every lane or worker to run its fastest until the deadline; every
        # xdist worker must collect the controller's list
        # (no numprocesses option at all under -p no:xdist)
        workers = getattr(config.option, "numprocesses", None) or 0
        at_once = max(1, config.stash.get(LANES_KEY, 0), workers)
        count = shared.get("count", _enough(seconds * at_once))
        length = DEEP_OPERATIONS
    else:
        seed = SLICE_SEED if seed is None else int(seed)
        count, length = SLICE_SCENARIOS, SLICE_OPERATIONS
    target = state.target
    capabilities = frozenset(c for c in CAPABILITIES if target.can(c))
    exploration = Exploration(
        int(seed), count, length, capabilities, Path(), deadline=deadline, only=only,
        started=shared.get("started", time.time()),
    )  # fmt: skip
    plans = [exploration.plan(index) for index in range(count)]
    texts = [explored.yaml() for explored in plans]
    # the same seed draws other scenarios for other capabilities, lengths or versions of
    # the generator: a directory of their own (named by what is in it, so that xdist's
    # workers agree on it), and two sessions never overwrite each other's files
    digest = hashlib.sha1(",".join(sorted(capabilities)).encode()).hexdigest()[:8]
    content = hashlib.sha1("".join(texts).encode()).hexdigest()[:8]
    ramp = "r" if deadline is not None else ""  # a deep one's first scenarios are shorter
    name = f"{target.label}-s{seed}-n{length}{ramp}-{digest}-{content}"
    exploration.directory = Path(tempfile.gettempdir()) / "shadowcheck-explore" / name
    for explored, text in zip(plans, texts, strict=True):
        exploration.files.append(explored.write(directory=exploration.directory, text=text))
    config.stash[_KEY] = exploration
    return exploration


def get_exploration(config: pytest.Config) -> Exploration | None:
    return config.stash.get(_KEY, None)


def shrink_explored(
    state: ShadowcheckState, scenario: Scenario, verdict: Verdict, replay: Callable[[str], str]
) -> None:
    """Shrink a FAILed explored scenario to the fewest operations that still fail; the
    shrunk scenario is written as YAML and named, with its replay command, in the
    verdict (``Verdict.explored``, shown by plugin/shrinking.explored_text); ``replay``
    makes the command line that runs a scenario file."""
    config = state.config
    exploration = get_exploration(config)
    found = explored_index(scenario.name)
    if exploration is None or found is None or found[0] != exploration.seed:
        return
    explored = exploration.plan(found[1])
    progress = Progress(scenario.name, note_writer(config))
    budget = Budget(
        int(config.getoption("shadowcheck_shrink_attempts", 40)),
        float(config.getoption("shadowcheck_shrink_time", 1200.0)),
    )
    scratch = Path(tempfile.mkdtemp(prefix=f"{scenario.name}-shrinking-"))
    shrunk_name = f"{scenario.name}_shrunk"

    def attempt(keep: list[int]) -> Verdict:
        candidate = explored.scenario(keep, directory=scratch, name=shrunk_name)
        return attempt_run(state, candidate)

    found_at = time.time()  # the failing verdict is in: the find's moment
    count = len(explored.operations)
    progress.note(f"shrinking {scenario.name}: {count} operations")
    result = shrink_operations(verdict, count, attempt, budget, progress.note)
    shutil.rmtree(scratch, ignore_errors=True)
    out = _output_directory(state)
    out.mkdir(parents=True, exist_ok=True)
    shrunk = explored.scenario(result.kept, directory=out, name=shrunk_name)
    labels = [explored.operations[i].label for i in result.kept]
    comment = (
        f"{scenario.name} (exploration seed {exploration.seed}) shrunk from {count} to "
        f"{len(result.kept)} operations: {', '.join(labels)}\n"
        f"It failed against target {state.target_spec}: "
        + "; ".join(c.name for c in verdict.failures)
    )
    path = out / f"{shrunk_name}.yaml"
    path.write_text(scenario_yaml(shrunk, comment=comment), encoding="utf-8")
    verdict.explored = {
        "seed": exploration.seed,
        "index": found[1],
        "operations_before": count,
        "operations_after": len(result.kept),
        "operations": labels,
        "file": str(path),
        "attempts": result.attempts,
        "seconds": round(result.seconds, 1),
        "stopped": result.stopped,
        "command": replay(str(path)),
        "found_at": round(found_at, 3),
        "found_after": round(found_at - exploration.started, 1),
    }
    progress.note(
        f"shrunk {scenario.name} to {len(result.kept)} of {count} operations in "
        f"{result.attempts} attempts ({result.seconds:.0f}s): {path}"
    )


def _output_directory(state: ShadowcheckState) -> Path:
    if state.report_dir is not None:
        return state.report_dir / "explored"
    base = run_basetemp(state.config)
    return (base or Path(tempfile.gettempdir())) / "shadowcheck-explored"


class XdistExploration:
    """Every xdist worker explores the controller's seed, to its deadline."""

    def __init__(self, exploration: Exploration) -> None:
        self.exploration = exploration

    def pytest_configure_node(self, node: Any) -> None:
        e = self.exploration
        shared = {"seed": e.seed, "deadline": e.deadline, "count": e.count, "started": e.started}
        node.workerinput["shadowcheck_explore"] = json.dumps(shared)


class ExplorationHooks:
    """The hooks of an exploration: the deadline, the figures, the terminal summary."""

    def __init__(
        self, exploration: Exploration, controller: bool, report_dir: Path | None = None
    ) -> None:
        self.exploration = exploration
        self.report_dir = report_dir
        self.controller = controller
        self.ran = 0
        #: operations drawn in the scenarios run, and their steps with the endings
        self.drawn = 0
        self.operations = 0
        self.failed: list[str] = []
        self.exercised: Counter[str] = Counter()
        self.skipped_for_time = 0

    def pytest_report_header(self, config: pytest.Config) -> list[str]:
        e = self.exploration
        kind = (
            "deep, until " + time.strftime("%H:%M:%S", time.localtime(e.deadline))
            if e.deadline
            else "bounded slice"
        )
        return [
            f"shadowcheck exploration: seed {e.seed} ({kind}), {e.count} scenario(s) "
            f"{e.lengths()}; replay with --shadowcheck-explore-seed={e.seed}"
            + (" --shadowcheck-explore-only" if e.only else "")
        ]

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_protocol(self, item: pytest.Item, nextitem: Any) -> bool | None:
        """Past a deep exploration's deadline, explored items do not start (silently:
        they were collected only to fill the time). In lanes, the lane that would start
        one decides (plugin/lanes.py): one begun before the deadline is reported."""
        scenario = getattr(item, "scenario", None)
        if scenario is None or item.config.stash.get(LANES_KEY, 0) > 1:
            return None
        return True if self.exploration.expired(scenario.name) else None

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: Any) -> Any:
        report = yield
        scenario = getattr(item, "scenario", None)
        verdict = getattr(item, "verdict", None)
        if call.when != "setup" or scenario is None or verdict is None:
            return report
        found = explored_index(scenario.name)
        if found is None:
            return report
        operations = sum(1 for s in scenario.steps if s.kind != "snapshot")
        exercised: Counter[str] = Counter()
        for c in verdict.checks:
            if c.name == MODEL_CHECK and c.status == Status.PASS:
                exercised.update(c.counts)
        facts = {
            "operations": operations,
            # the operations drawn (a deep exploration's first scenarios draw fewer)
            "length": self.exploration.length_of(found[1]),
            "status": str(verdict.status),
            "exercised": dict(exercised),
        }
        report.user_properties.append((PROPERTY, json.dumps(facts)))
        return report

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "setup":
            return
        for name, value in report.user_properties:
            if name != PROPERTY:
                continue
            facts = json.loads(str(value))
            self.ran += 1
            self.drawn += int(facts["length"])
            self.operations += int(facts["operations"])
            self.exercised.update(facts["exercised"])
            if facts["status"] == str(Status.FAIL):
                self.failed.append(report.nodeid)

    def summary(self) -> list[str]:
        e = self.exploration
        lines = [
            f"exploration: seed {e.seed}, {self.ran} explored scenario(s) run, "
            f"{self.drawn} operations ({self.operations} steps with the endings), "
            f"{len(self.failed)} failed"
        ]
        if self.exercised:
            shown = ", ".join(f"{b} x{n}" for b, n in sorted(self.exercised.items()))
            lines.append(f"rules of the catalogue model that decided, by behaviour: {shown}")
        else:
            lines.append("no rule of the catalogue model decided anything (no model check passed)")
        untestable = untestable_by_exploration(e.capabilities)
        if untestable:
            lines.append("UNTESTABLE by exploration on this target:")
            lines += [f"  {bid}: {why}" for bid, why in untestable.items()]
        if e.deadline:
            lines.append(f"replay this exploration: --shadowcheck-explore-seed={e.seed}")
        if self.report_dir is not None:
            lines.append(f"figures: {self.report_dir / 'exploration.json'}")
        return lines

    def figures(self) -> dict[str, Any]:
        """What a regression dashboard tracks across runs: ``exploration.json`` beside
        the certification, and the JUnit property ``shadowcheck.exploration``."""
        e = self.exploration
        return {
            "seed": e.seed,
            "deep": e.deadline is not None,
            "scenarios_run": self.ran,
            "operations_run": self.drawn,
            "steps_run": self.operations,
            "failed": self.failed,
            "exercised": dict(sorted(self.exercised.items())),
            "untestable": untestable_by_exploration(e.capabilities),
        }

    @pytest.hookimpl(tryfirst=True)  # before junitxml writes its file
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if not self.controller:
            return
        figures = self.figures()
        xml = junit_xml(session.config)
        if xml is not None:
            xml.add_global_property("shadowcheck.exploration", json.dumps(figures))
        if self.report_dir is not None:
            self.report_dir.mkdir(parents=True, exist_ok=True)
            text = json.dumps(figures, indent=1) + "\n"
            (self.report_dir / "exploration.json").write_text(text, encoding="utf-8")

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not self.controller:
            return
        terminalreporter.write_sep("-", "shadowcheck exploration")
        for line in self.summary():
            terminalreporter.write_line(line)
