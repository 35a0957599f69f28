"""How many scenarios run at once, and in which order (plugin/concurrency.py,
plugin/scheduling.py).

The runs use the ``external`` target against a plain SMTP server, so they start xdist
workers for real without starting MTA nodes.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from harnesskit import ThreadedSink

from pytest_shadowcheck.engine.run import STOPPED
from pytest_shadowcheck.plugin.concurrency import (
    _scenario_count,
    default_lanes,
    default_workers,
    estimated_seconds,
)
from pytest_shadowcheck.plugin.scheduling import LongestFirstScheduling
from pytest_shadowcheck.scenario.loader import load_scenario_file

THREE = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: quick_one
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m1, code: 250}
  - name: quick_two
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [bob@corp.test]}
    expect:
      - reply: {message: m1, code: 250}
  - name: waits_a_while
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [carol@corp.test]}
      - wait: 1.5s
    expect:
      - reply: {message: m1, code: 250}
"""


def _library(pytester: pytest.Pytester) -> Path:
    path = pytester.path / "library" / "three.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(THREE, encoding="utf-8")
    return path


def _run(pytester: pytest.Pytester, sink: ThreadedSink, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess(
        "--shadowcheck", f"--shadowcheck-target=external:mbx1={sink.address}", *args, "library"
    )


def test_four_workers_per_core_and_never_more_than_the_scenarios() -> None:
    assert default_workers(cores=2, scenarios=98) == 8
    assert default_workers(cores=2, scenarios=3) == 3
    assert default_workers(cores=1, scenarios=98) == 4
    assert default_workers(cores=16, scenarios=1) == 0  # one scenario: no worker to start


def test_eight_lanes_per_core_on_an_idle_machine_four_on_a_busy_one() -> None:
    assert default_lanes(cores=2, scenarios=98, busy=0.5) == 16
    assert default_lanes(cores=2, scenarios=98, busy=1.8) == 8
    assert default_lanes(cores=2, scenarios=5, busy=0.0) == 5
    assert default_lanes(cores=4, scenarios=1, busy=0.0) == 0


def test_by_default_scenarios_run_in_workers_and_their_durations_are_kept(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _library(pytester)
    result = _run(pytester, plain_smtp, "-v")
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    # xdist names the worker that ran each scenario
    assert "created: 3/3 workers" in out and "[gw" in out
    known = json.loads((pytester.path / ".pytest_cache/v/shadowcheck/durations").read_text())
    names = ("quick_one", "quick_two", "waits_a_while")
    assert set(known) == {f"library/three.yaml::{n}" for n in names}
    assert known["library/three.yaml::waits_a_while"] >= 1.5


@pytest.mark.parametrize("serial", [["--shadowcheck-concurrency", "1"], ["-n", "0"]])
def test_one_at_a_time_when_asked(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink, serial: list[str]
) -> None:
    _library(pytester)
    result = _run(pytester, plain_smtp, "-v", *serial)
    result.assert_outcomes(passed=3)
    assert "[gw" not in result.stdout.str()


def test_concurrency_named_twice_or_without_xdist_is_a_usage_error(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _library(pytester)
    twice = _run(pytester, plain_smtp, "-n", "2", "--shadowcheck-concurrency", "3")
    assert twice.ret == pytest.ExitCode.USAGE_ERROR
    twice.stderr.fnmatch_lines(["*--shadowcheck-concurrency and pytest-xdist's -n*give one*"])
    without = _run(pytester, plain_smtp, "-p", "no:xdist", "--shadowcheck-concurrency", "2")
    assert without.ret == pytest.ExitCode.USAGE_ERROR
    without.stderr.fnmatch_lines(["*pytest-xdist is not installed (or is disabled*"])
    # serial without xdist is fine
    _run(pytester, plain_smtp, "-p", "no:xdist").assert_outcomes(passed=3)
    zero = _run(pytester, plain_smtp, "--shadowcheck-concurrency", "0")
    assert zero.ret == pytest.ExitCode.USAGE_ERROR


def test_workers_are_counted_over_what_k_and_m_select(pytester: pytest.Pytester) -> None:
    library = _library(pytester)
    shared = library.with_name("shared.yaml")
    # behaviour IDs given once for the file, as the loader merges them
    shared.write_text(
        THREE.replace("defaults:\n", "defaults:\n  behaviours: [PR-2]\n").replace(
            "    behaviours: [CR-5]\n", ""
        ),
        encoding="utf-8",
    )
    counted = {
        args: _scenario_count(pytester.parseconfig("--shadowcheck", *args, "library"))
        for args in [
            (),
            ("-m", "PR-2"),
            ("-k", "quick"),
            ("-k", "waits and three"),
            ("-m", "CR-5 and not PR-2"),
        ]
    }
    assert counted == {
        (): 6,
        ("-m", "PR-2"): 3,
        ("-k", "quick"): 4,
        ("-k", "waits and three"): 1,
        ("-m", "CR-5 and not PR-2"): 3,
    }


def test_explored_scenarios_a_k_names_are_counted(pytester: pytest.Pytester) -> None:
    """The bundled library's slice (names known from its seed), or a replay of a deep
    exploration's scenario by its seed: a -k naming explored scenarios runs them at
    once, not one after another for want of a count."""

    def count(*args: str) -> int:
        return _scenario_count(pytester.parseconfig("--shadowcheck", *args))

    assert count("-k", "explore_s2027_001") == 1
    assert count("-k", "explore_s2027_000 or explore_s2027_002") == 2
    assert count("-k", "explore_s") == 3
    seeded = ("--shadowcheck-explore-only", "--shadowcheck-explore-seed=6006")
    assert count(*seeded, "-k", "explore_s6006_001 or explore_s6006_002") == 2
    assert count(*seeded, "-k", "explore_s2027_001") == 0


def test_an_estimate_counts_the_waits_before_a_scenario_ever_ran(tmp_path: Path) -> None:
    path = tmp_path / "three.yaml"
    path.write_text(THREE, encoding="utf-8")
    by_name = {s.name: estimated_seconds(s) for s in load_scenario_file(path)}
    assert by_name["waits_a_while"] > by_name["quick_one"] + 1.4


@dataclass(eq=False)  # hashed by identity, as xdist keys its workers
class _Worker:
    """What the scheduler sees of an xdist worker: its id, and what it was sent."""

    name: str
    sent: list[int] = field(default_factory=list)
    shutting_down: bool = False

    @property
    def gateway(self) -> Any:
        return type("Gateway", (), {"id": self.name})()

    def send_runtest_some(self, indices: list[int]) -> None:
        self.sent.extend(indices)

    def shutdown(self) -> None:
        self.shutting_down = True


def test_each_worker_starts_with_one_of_the_longest_and_takes_the_next_as_it_finishes(
    pytester: pytest.Pytester,
) -> None:
    config = pytester.parseconfig("--tx", "3*popen")
    scheduler = LongestFirstScheduling(config)
    workers = [_Worker("gw0"), _Worker("gw1"), _Worker("gw2")]
    collection = [f"s{i}" for i in range(8)]  # sorted longest first by the workers
    for worker in workers:
        scheduler.add_node(worker)  # type: ignore[arg-type]
        scheduler.add_node_collection(worker, collection)  # type: ignore[arg-type]
    scheduler.schedule()
    # round by round: the three longest start at once, each worker holds its next
    assert [w.sent for w in workers] == [[0, 3], [1, 4], [2, 5]]
    scheduler.mark_test_complete(workers[1], 1)  # type: ignore[arg-type]
    assert workers[1].sent == [1, 4, 6]
    scheduler.mark_test_complete(workers[1], 4)  # type: ignore[arg-type]
    assert workers[1].sent == [1, 4, 6, 7]
    scheduler.mark_test_complete(workers[0], 0)  # type: ignore[arg-type]
    assert workers[0].shutting_down and workers[0].sent == [0, 3]


LANES = THREE.replace(
    "  topology:\n    nodes: {mbx1: {}}\n",
    "  topology: single-node\n  settings: {RejectMessageOnShadowFailure: false}\n",
)


def _spans(history: Path) -> dict[str, tuple[float, float]]:
    """Scenario name -> (first, last) wall-clock moment of its history."""
    spans = {}
    for file in history.glob("*.json"):
        data = json.loads(file.read_text())
        start = float(data["started_at"])
        times = [start + float(e["t"]) for e in data["events"]]
        spans[file.stem.rsplit("__", 1)[-1].split("[")[0]] = (min(times), max(times))
    return spans


@pytest.mark.slow
def test_with_the_reference_scenarios_run_at_once_in_lanes_of_one_process(
    pytester: pytest.Pytester,
) -> None:
    library = _library(pytester)
    library.write_text(LANES, encoding="utf-8")
    history = pytester.path / "history"
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "--shadowcheck-history", str(history), "-v", "library"
    )
    result.assert_outcomes(passed=3)
    out = result.stdout.str()
    assert "up to 3 scenarios at once, in lanes of this process" in out
    assert "[gw" not in out  # no xdist worker
    spans = _spans(history)
    assert set(spans) == {"quick_one", "quick_two", "waits_a_while"}
    # each began before any other ended: they ran side by side
    latest_start = max(first for first, _ in spans.values())
    earliest_end = min(last for _, last in spans.values())
    assert latest_start < earliest_end, spans
    # the cache keeps how long a scenario ran, not how long pytest waited for it
    known = json.loads((pytester.path / ".pytest_cache/v/shadowcheck/durations").read_text())
    assert known["library/three.yaml::waits_a_while"] >= 1.5
    # lanes need no xdist; --shadowcheck-concurrency 1 runs one after another
    pytester.runpytest_subprocess(
        "--shadowcheck", "-p", "no:xdist", "--shadowcheck-concurrency", "2", "library"
    ).assert_outcomes(passed=3)
    serial = pytester.runpytest_subprocess(
        "--shadowcheck", "--shadowcheck-concurrency", "1", "library"
    )
    serial.assert_outcomes(passed=3)
    assert "in lanes" not in serial.stdout.str()


@pytest.mark.slow
def test_a_scenario_keeps_its_own_time_limit_under_pytest_timeout(
    pytester: pytest.Pytester,
) -> None:
    """pytest-timeout's alarm would count what is not the scenario's run (the wait for
    its lane, an explored FAIL's shrinking) and break the whole session (INTERNALERROR):
    scenarios are left to their own ``timeout``. waits_a_while runs 1.5 s, in lanes,
    past the 1 s asked here."""
    library = _library(pytester)
    library.write_text(LANES, encoding="utf-8")
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "-p", "timeout", "--timeout", "1", "--shadowcheck-concurrency", "3",
        "library",
    )  # fmt: skip
    result.assert_outcomes(passed=3)
    assert "INTERNALERROR" not in result.stdout.str() + result.stderr.str()


@pytest.mark.slow
def test_with_x_nothing_after_the_first_failure_is_reported(pytester: pytest.Pytester) -> None:
    library = _library(pytester)
    # the longest runs first, fails, and -x leaves the other two unreported
    library.write_text(
        LANES.replace(
            "      - wait: 1.5s\n    expect:\n      - reply: {message: m1, code: 250}",
            "      - wait: 1.5s\n    expect:\n      - reply: {message: m1, code: 550}",
        ),
        encoding="utf-8",
    )
    result = pytester.runpytest_subprocess("--shadowcheck", "-x", "library")
    result.assert_outcomes(failed=1)


STALLED_ONCE = """\
scenarios:
  - name: timed
    behaviours: [CR-1]
    topology: single-node
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: 10s}
    expect:
      - timing: {from: {reply: m1}, to: {delivered: m1}, at_most: 0s, tolerance: 0.4s}
  - name: beside
    behaviours: [CR-5]
    topology: single-node
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
    expect:
      - reply: {message: m1, code: 250}
"""

#: a target plugin whose scenario hook blocks the harness's event loop for 1.5 s after
#: the sender's 250, in the first run of "timed" only (a file marks that it happened)
STALL_ONCE_PLUGIN = """
import asyncio
import time
from pathlib import Path

from pytest_shadowcheck import hookimpl

MARK = Path(__file__).with_name("stalled-once")


@hookimpl
def shadowcheck_scenario_started(scenario, target, history):
    if scenario.name != "timed" or MARK.exists():
        return
    MARK.write_text("stalled")

    async def stall():
        while not any(e.data.get("command") == "EOD" for e in history.events(kind="reply")):
            await asyncio.sleep(0.001)
        time.sleep(1.5)

    asyncio.get_running_loop().create_task(stall())
"""


@pytest.mark.slow
@pytest.mark.parametrize("at_once", ["2", "1"], ids=["lanes", "serial"])
def test_a_scenario_the_harness_was_too_late_to_judge_runs_again(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, at_once: str
) -> None:
    library = _library(pytester)
    library.write_text(STALLED_ONCE, encoding="utf-8")
    (pytester.path / "stall_once.py").write_text(STALL_ONCE_PLUGIN, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "--shadowcheck-concurrency", at_once,
        "--shadowcheck-target-plugin", "stall_once",
        "--junit-xml=out.xml", "-o", "junit_family=xunit1", "library",
    )  # fmt: skip
    # the first run of "timed" was INCONCLUSIVE (the stall, not the MTA); its second (in
    # lanes: alone) passed: that verdict stands and says it is a second run's
    result.assert_outcomes(passed=2)
    assert (pytester.path / "stalled-once").exists()
    junit = (pytester.path / "out.xml").read_text()
    assert "shadowcheck.retried" in junit
    assert "its first run was INCONCLUSIVE because the harness itself ran late" in junit
    assert junit.count("shadowcheck.retried") == 1


STOPPED_LIBRARY = """\
defaults:
  topology: single-node
  settings: {RejectMessageOnShadowFailure: false}
scenarios:
  - name: fails_first
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      # an estimate of 91 s puts it first; a quiet cluster ends the wait at once
      - wait: {until: quiet, timeout: 90s}
    expect:
      - reply: {message: m1, code: 550}
  - name: runs_long
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [bob@corp.test]}
      - wait: 40s
    expect:
      - reply: {message: m1, code: 250}
"""

#: a target plugin that writes each verdict as its scenario ends
VERDICTS_PLUGIN = """
from pathlib import Path

from pytest_shadowcheck import hookimpl

OUT = Path(__file__).with_name("verdicts.txt")


@hookimpl
def shadowcheck_scenario_finished(scenario, target, history, verdict):
    with OUT.open("a") as out:
        out.write(f"{scenario.name}|{verdict.status}|{verdict.reason}\\n")
"""


@pytest.mark.slow
def test_with_x_the_scenarios_still_running_are_cut_short(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A deep exploration's lanes ran their scenarios for minutes after the find that
    stopped it: once pytest stops, a running scenario ends at once, unjudged."""
    _library(pytester).write_text(STOPPED_LIBRARY, encoding="utf-8")
    (pytester.path / "verdicts_out.py").write_text(VERDICTS_PLUGIN, encoding="utf-8")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "-x", "--shadowcheck-concurrency", "2",
        "--shadowcheck-target-plugin", "verdicts_out", "library",
    )  # fmt: skip
    result.assert_outcomes(failed=1)
    verdicts = dict(
        line.split("|", 1) for line in (pytester.path / "verdicts.txt").read_text().splitlines()
    )
    assert verdicts["fails_first"].startswith("FAIL"), verdicts
    assert verdicts["runs_long"] == f"INCONCLUSIVE|{STOPPED}", verdicts
