"""``--shadowcheck-shrink``: a failing workload scenario re-run on parts of its plan until
the fewest messages and faults that still fail the same way are found
(:mod:`pytest_shadowcheck.engine.shrink` searches; this module runs each attempt and
puts the answer beside the full replay in the verdict, the failure text and JUnit)."""

from __future__ import annotations

import shlex
import shutil
import time
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.engine.shrink import Budget, shrink_workload
from pytest_shadowcheck.engine.workload import replay_args
from pytest_shadowcheck.plugin.terminal import note_writer
from pytest_shadowcheck.progress import Progress
from pytest_shadowcheck.scenario.replay import Selection, parse_indices
from pytest_shadowcheck.verdict import Verdict

if TYPE_CHECKING:
    from pytest_shadowcheck.plugin.state import ShadowcheckState
    from pytest_shadowcheck.scenario.model import Scenario

__all__ = ["attempt_run", "explored_text", "shrink_failure", "shrink_text"]


def shrink_failure(
    state: ShadowcheckState, scenario: Scenario, verdict: Verdict, replay: str
) -> None:
    """Shrink every workload of ``verdict`` that failed a check; each workload's summary
    gains ``shrunk`` (see :meth:`~pytest_shadowcheck.engine.shrink.ShrinkResult.to_dict`)."""
    config = state.config
    progress = Progress(scenario.name, note_writer(config))
    scale = float(config.getoption("shadowcheck_workload_scale", 1.0))
    seed = config.getoption("shadowcheck_workload_seed", None)
    budget = Budget(
        int(config.getoption("shadowcheck_shrink_attempts", 40)),
        float(config.getoption("shadowcheck_shrink_time", 1200.0)),
    )
    for summary in verdict.workloads:
        facts = summary.get("replay")
        name = str(summary.get("workload"))
        failed = [c for c in verdict.failures if c.name.startswith(f"workload {name}:")]
        if not isinstance(facts, dict) or not failed:
            continue
        full = Selection(name, parse_indices(facts["messages"]), parse_indices(facts["faults"]))
        guess = full
        if facts["failing_messages"] != "none":
            guess = Selection(
                name,
                parse_indices(facts["failing_messages"]),
                parse_indices(facts["failing_faults"]),
            )

        def attempt(selection: Selection) -> Verdict:
            chosen = {**state.selections, selection.workload: selection}
            return attempt_run(state, scenario, chosen, replay)

        progress.note(
            f"shrinking workload {name}: {_count(full)} failed; first guess {guess.describe()}"
        )
        result = shrink_workload(verdict, full, guess, attempt, budget, progress.note)
        args = replay_args(int(summary.get("seed", seed or 1)), scale, result.after)
        command = f"{replay} {_join(args)}" if replay else _join(args)
        summary["shrunk"] = result.to_dict(command)
        early = f"; stopped early: {result.stopped}" if result.stopped else ""
        progress.note(
            f"shrunk workload {name} to {_count(result.after)} in {result.attempts} attempts "
            f"({result.seconds:.0f}s){early}"
        )


def attempt_run(
    state: ShadowcheckState,
    scenario: Scenario,
    selections: dict[str, Selection] | None = None,
    replay: str = "",
) -> Verdict:
    """One fresh run of a shrinking attempt: ``scenario`` (with only ``selections`` of
    its workloads played); its workdir goes."""
    config = state.config
    verdict = Verdict(
        scenario.name,
        scenario.behaviours,
        source=str(scenario.where),
        named_evidence=scenario.named_evidence,
    )
    workdir = state.workdir(scenario.name)
    try:
        run_scenario(
            scenario,
            state.target,
            workdir=workdir,
            progress=Progress(f"{scenario.name} (shrinking)"),
            verdict=verdict,
            workload_scale=config.getoption("shadowcheck_workload_scale", 1.0),
            workload_seed=config.getoption("shadowcheck_workload_seed", None),
            workload_selection=selections,
            replay_command=replay,
            # a shrink still going in another lane when the session stops is no use
            stop=state.stopping,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return verdict


def _join(args: list[str]) -> str:
    return shlex.join(args)


def _count(selection: Selection) -> str:
    return _counted(len(selection.messages or ()), len(selection.faults or ()))


def _counted(m: int, f: int) -> str:
    return f"{m} message{'s' if m != 1 else ''} and {f} fault{'s' if f != 1 else ''}"


def shrink_text(workloads: list[dict[str, Any]]) -> list[str]:
    """The failure text's lines for the shrunk reproductions, beside the full replay."""
    lines = []
    for w in workloads:
        shrunk, facts = w.get("shrunk"), w.get("replay") or {}
        if not isinstance(shrunk, dict):
            continue
        before = _counted(shrunk["messages_before"], shrunk["faults_before"])
        after = _counted(shrunk["messages_after"], shrunk["faults_after"])
        early = f"; stopped early: {shrunk['stopped']}" if shrunk.get("stopped") else ""
        lines += [
            f"shrunk reproduction of workload {w.get('workload')}: {before} -> {after} "
            f"(messages {shrunk['messages']}, faults {shrunk['faults']}; "
            f"{shrunk['attempts']} attempts, {shrunk['seconds']:g}s{early})",
            f"    replay shrunk: {shrunk['command']}",
            f"    replay full:   {facts.get('command', '')}",
        ]
    return lines


def explored_text(shrunk: dict[str, Any] | None) -> list[str]:
    """The failure text's lines for a shrunk explored scenario (Verdict.explored)."""
    lines: list[str] = []
    if shrunk:
        early = f"; stopped early: {shrunk['stopped']}" if shrunk["stopped"] else ""
        lines += [
            f"shrunk explored scenario: {shrunk['operations_before']} -> "
            f"{shrunk['operations_after']} operations ({', '.join(shrunk['operations'])}; "
            f"{shrunk['attempts']} attempts, {shrunk['seconds']:g}s{early})",
            f"    written as a scenario file: {shrunk['file']}",
            f"    replay shrunk: {shrunk['command']}",
        ]
        if "found_at" in shrunk:  # (a verdict read back from an older report has none)
            at = time.strftime("%H:%M:%S", time.localtime(shrunk["found_at"]))
            lines.append(
                f"    found at {at} local time, {shrunk['found_after']:.0f}s into the exploration"
            )
    return lines
