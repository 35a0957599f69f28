"""How close every timing window of the suite came to its bound, over kept histories.

A flake under load (issue 28) is a timing window the machine pushed past its bound.
Before it flakes, such a window shows as a small margin in the histories of runs that
passed: this script reads histories kept by ``--shadowcheck-history`` (or
``benchmarks/bench_suite.py --histories``), measures each ``timing`` expectation of each
scenario as ``check_timing`` does (its events, its tolerance, the machine's lateness it
grants), and lists the windows whose worst run came closest to failing.

    python3 benchmarks/timing_margins.py DIR [DIR ...] [--scenarios PATH] [--top 20]

DIR holds history files at any depth. For each window it prints, over the runs where
both of its ends happened: the smallest **margin** (seconds left before the bound, or
below the lower bound; negative: outside the window), the smallest margin counting the
lateness the check grants (negative there: a FAIL), how many runs fell outside the
window before that grant (those runs were INCONCLUSIVE at best), and the worst run's
file. A window's ends read from the history alone: wire lines, steps, the sender's
replies (the end of each message's DATA on the sender's link) and deliveries; a window
one of whose ends names a message refused before its DATA is not measured. A window's
``given`` and a target's stretched timers are not taken into account: measure the
reference's histories, or read a margin as against the scenario's own figures.
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, cast

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from pytest_shadowcheck.checks.events import find_event  # noqa: E402
from pytest_shadowcheck.checks.wire import BEFORE_START, DEFAULT_TOLERANCE, STALL_ENDED  # noqa: E402
from pytest_shadowcheck.errors import ScenarioError  # noqa: E402
from pytest_shadowcheck.history import History  # noqa: E402
from pytest_shadowcheck.network.sink import Delivery  # noqa: E402
from pytest_shadowcheck.scenario.loader import load_scenario_file  # noqa: E402
from pytest_shadowcheck.scenario.model import Scenario, Step  # noqa: E402

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView

#: a history file's name: the scenario file's path with "_" for "/", then "__", the
#: scenario's name, and its behaviour IDs in brackets
NAME = re.compile(r"__(?P<name>[^\[\]]+?)(?:\[.*\])?\.json$")


@dataclass
class Sent:
    """What a check reads of a message the scenario sent, as its history recorded it."""

    ref: str
    message_id: str
    via: str
    trace: str
    reply_t: float | None = None
    code: int | None = None
    text: str = ""


@dataclass
class Sink:
    deliveries: list[Delivery] = field(default_factory=list)


class RecordedRun:
    """A scenario run as its history shows it afterwards: enough of the engine's run for
    the checks' event matchers (``find_event``)."""

    def __init__(self, scenario: Scenario, history: History) -> None:
        self.scenario = scenario
        self.history = history
        self.messages: dict[str, Sent] = {}
        self.sinks: dict[str, Sink] = defaultdict(Sink)
        for event in history.events(kind="delivery"):
            d = event.data
            self.sinks[d["sink"]].deliveries.append(
                Delivery(
                    t=event.t,
                    message_id=d.get("message_id"),
                    mail_from=d.get("mail_from", ""),
                    rcpt_tos=list(d.get("rcpt_tos", [])),
                    helo=d.get("helo"),
                    peer=d.get("peer"),
                    size=int(d.get("size", 0)),
                    headers={},
                    raw=b"",
                    trace=d.get("trace"),
                )
            )
        replies = history.events(kind="reply")
        for event in history.events(kind="data"):
            link, trace = event.link or "", str(event.data.get("trace") or "")
            if not link.startswith("client->") or not trace:
                continue
            # the harness's trace is the message's id, a dot, and a token of the run
            ref = trace.rpartition(".")[0]
            message_id = str(event.data.get("message_id") or f"<{trace}>")
            sent = self.messages.setdefault(
                ref, Sent(ref, message_id, link[len("client->") :], trace)
            )
            # the reply to the end of its DATA, on the same connection
            answer = next(
                (
                    r
                    for r in replies
                    if r.t >= event.t
                    and r.link == event.link
                    and r.conn == event.conn
                    and r.data.get("command") == "EOD"
                ),
                None,
            )
            if answer is not None and sent.reply_t is None:
                sent.reply_t, sent.code = answer.t, answer.data.get("code")
                sent.text = str(answer.data.get("text", ""))


@dataclass
class Window:
    """One timing expectation of one scenario, measured over several runs."""

    scenario: str
    where: str
    side: str  # "at most" or "at least"
    #: (margin, margin with the granted lateness, history file) per run measured
    runs: list[tuple[float, float, Path]] = field(default_factory=list)
    #: runs where an end of the window never happened
    unmeasured: int = 0


def measure(run: RecordedRun, step: Step) -> list[tuple[str, float, float]]:
    """(side, margin, margin with the lateness granted) of one timing check in one run,
    as ``check_timing`` judges it; nothing when one of its ends never happened."""
    arg = step.arg
    # the event matchers read only a run's history, messages and sinks
    view = cast("RunView", run)
    try:
        a, b = find_event(view, arg["from"]), find_event(view, arg["to"])
    except KeyError:
        return []  # a message the history shows no DATA of (refused before it)
    if a is None or b is None:
        return []
    tolerance = arg.get("tolerance", DEFAULT_TOLERANCE)
    delta = b[0] - a[0]
    out = []
    if "at_most" in arg:
        margin = arg["at_most"] + tolerance - delta
        out.append(("at most", margin, margin + run.history.lateness(a[0], b[0]).total))
    if "at_least" in arg:
        margin = delta - (arg["at_least"] - tolerance)
        late = run.history.lateness(a[0] - BEFORE_START, max(b[0], a[0] + STALL_ENDED)).total
        out.append(("at least", margin, margin + late))
    return out


def library(paths: list[Path]) -> dict[str, Scenario]:
    found: dict[str, Scenario] = {}
    for path in paths:
        for file in sorted(path.glob("*.yaml")) if path.is_dir() else [path]:
            for scenario in load_scenario_file(file):
                found[scenario.name] = scenario
    return found


def collect(
    dirs: list[Path], scenarios: dict[str, Scenario], unreadable: list[Path] | None = None
) -> dict[tuple[str, str, str], Window]:
    """Every timing window of the histories under ``dirs``; a history file that cannot be
    read (cut short by an interrupted run) is added to ``unreadable``."""
    windows: dict[tuple[str, str, str], Window] = {}
    for directory in dirs:
        for file in sorted(directory.rglob("*.json")):
            match = NAME.search(file.name)
            scenario = scenarios.get(match.group("name")) if match else None
            if scenario is None:
                continue
            steps = [s for s in scenario.expect if s.kind == "timing"]
            if not steps:
                continue
            try:
                run = RecordedRun(scenario, History.read_json(file))
            except (OSError, ValueError, KeyError, TypeError):
                if unreadable is not None:
                    unreadable.append(file)
                continue
            for step in steps:
                measured = measure(run, step)
                sides = [s for s in ("at most", "at least") if s.replace(" ", "_") in step.arg]
                for side in sides:
                    key = (run.scenario.name, str(step.where), side)
                    window = windows.setdefault(key, Window(*key))
                    got = [(m, g) for s, m, g in measured if s == side]
                    if got:
                        window.runs.append((*got[0], file))
                    else:
                        window.unmeasured += 1
    return windows


def report(dirs: list[Path], scenarios: list[Path], top: int) -> list[str]:
    """The table's lines: the ``top`` windows that came closest to failing."""
    unreadable: list[Path] = []
    windows = [w for w in collect(dirs, library(scenarios), unreadable).values() if w.runs]
    notes = [
        f"{len(unreadable)} history file(s) could not be read (cut short?), e.g. {unreadable[0]}"
    ] if unreadable else []  # fmt: skip
    if not windows:
        return [*notes, "no history of a scenario with a timing expectation was found"]
    windows.sort(key=lambda w: min(g for _, g, _ in w.runs))
    lines = [f"{'margin':>8} {'granted':>8} {'outside':>9}  window (worst run)"]
    for w in windows[:top]:
        margin, granted = min(m for m, _, _ in w.runs), min(g for _, g, _ in w.runs)
        outside = sum(1 for m, _, _ in w.runs if m < 0)
        worst = min(w.runs, key=lambda r: r[1])[2]
        unmeasured = f", {w.unmeasured} unmeasured" if w.unmeasured else ""
        lines.append(
            f"{margin:8.3f} {granted:8.3f} {outside:4}/{len(w.runs):<4}  {w.scenario} "
            f"({w.side}, {w.where}{unmeasured})\n{'':29}{worst}"
        )
    return [*notes, *lines]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("dirs", nargs="+", type=Path, help="directories of kept histories")
    parser.add_argument(
        "--scenarios", nargs="+", type=Path, default=[ROOT / "scenarios"],
        help="the scenario files or directories the histories ran (default: the library)",
    )  # fmt: skip
    parser.add_argument("--top", type=int, default=20, help="how many windows to list")
    args = parser.parse_args()
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        parser.error(f"not a directory: {', '.join(missing)}")
    try:
        lines = report(args.dirs, args.scenarios, args.top)
    except ScenarioError as exc:
        parser.error(f"the scenarios the histories ran do not load: {exc}")
    print("\n".join(lines))
    return 0 if any(line.startswith(f"{'margin':>8}") for line in lines) else 1


if __name__ == "__main__":
    raise SystemExit(main())
