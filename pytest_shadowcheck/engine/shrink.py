"""Shrinking a failing workload: the fewest messages and faults that still fail the same
way (``--shadowcheck-shrink``).

A workload's messages and faults are numbered in its plan (drawn from the seed), so a
reproduction is a selection of numbers (:mod:`pytest_shadowcheck.scenario.replay`). The
shrinker starts from a first guess - the messages that failed alone, with the faults that
met them - and then runs delta debugging (Zeller's ddmin, as Hypothesis shrinks) over the
messages by number, then over the faults by number. Every attempt is a fresh run of the
scenario with only the selection played, supplied by the caller (``attempt``); it counts
as failing only when the same checks fail for the same behaviour IDs, and only when a
second run fails so too: a smaller selection that failed once may have won a race the
fault it dropped used to decide (a send racing its own delivery once a link cut is
gone), and a reproduction that passes on replay is none. The number of attempts and the
time are bounded: when either runs out, the smallest reproduction found so far is the
answer, marked incomplete.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from pytest_shadowcheck.scenario.replay import Selection, format_indices
from pytest_shadowcheck.verdict import Status, Verdict

__all__ = [
    "Budget",
    "ShrinkResult",
    "StepShrinkResult",
    "ddmin",
    "failure_signature",
    "shrink_operations",
    "shrink_workload",
]

#: one attempt: the selection to play -> the verdict of that run
Attempt = Callable[[Selection], Verdict]


def failure_signature(verdict: Verdict) -> frozenset[tuple[str, tuple[str, ...]]]:
    """What "failing the same way" compares: each failing check and its behaviour IDs."""
    return frozenset((c.name, tuple(sorted(c.behaviours))) for c in verdict.failures)


class _OutOfBudget(Exception):
    pass


def _fails_twice(
    run: Callable[[], tuple[bool, Status]], budget: Budget, say: Callable[[str], None], what: str
) -> bool:
    """Whether a candidate fails the same way in two runs, the second only after the
    first failed; each run spends one attempt of the budget."""
    for confirming in (False, True):
        budget.spend()
        began = time.monotonic()
        same, status = run()
        if same:
            outcome = "fails the same way" + (" again" if confirming else "")
        elif confirming:
            outcome = f"does not this time ({status}): a race, not kept"
        else:
            outcome = f"does not ({status})"
        say(
            f"shrink attempt {budget.used}/{budget.attempts}: {what}: {outcome} "
            f"({time.monotonic() - began:.0f}s)"
        )
        if not same:
            return False
    return True


@dataclass
class Budget:
    attempts: int
    seconds: float
    started: float = field(default_factory=time.monotonic)
    used: int = 0

    def spend(self) -> None:
        if self.used >= self.attempts:
            raise _OutOfBudget(f"the {self.attempts} attempts allowed were used")
        if time.monotonic() - self.started >= self.seconds:
            raise _OutOfBudget(f"the {self.seconds:g}s allowed were used")
        self.used += 1


@dataclass
class ShrinkResult:
    """A shrunk reproduction of one workload, as reports show it."""

    workload: str
    before: Selection
    after: Selection
    attempts: int
    seconds: float
    #: why the search stopped early ("" when ddmin ran to its end)
    stopped: str = ""

    def to_dict(self, command: str) -> dict[str, Any]:
        before_m, before_f = self.before.messages or frozenset(), self.before.faults or frozenset()
        after_m, after_f = self.after.messages or frozenset(), self.after.faults or frozenset()
        return {
            "messages_before": len(before_m),
            "faults_before": len(before_f),
            "messages_after": len(after_m),
            "faults_after": len(after_f),
            "messages": format_indices(after_m),
            "faults": format_indices(after_f),
            "selection": self.after.text(),
            "attempts": self.attempts,
            "seconds": round(self.seconds, 1),
            "stopped": self.stopped,
            "command": command,
        }


def ddmin(
    items: list[int], fails: Callable[[list[int]], bool], try_empty: bool = False
) -> list[int]:
    """The smallest subset of ``items`` (known to fail) that ``fails``, 1-minimal: no
    single number can be left out (Zeller and Hildebrandt's ddmin). ``fails`` may raise
    to stop the search; the caller keeps what it saw last."""
    if try_empty and items and fails([]):
        return []
    n = 2
    while len(items) >= 2:
        chunks = [c for c in _split(items, n) if c]
        for chunk in chunks:
            if fails(chunk):
                items, n = chunk, 2
                break
        else:
            for i in range(len(chunks) if n > 2 else 0):
                rest = [x for j, c in enumerate(chunks) if j != i for x in c]
                if fails(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


def _split(items: list[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(items), n)
    out, at = [], 0
    for i in range(n):
        step = size + (1 if i < extra else 0)
        out.append(items[at : at + step])
        at += step
    return out


def shrink_workload(
    original: Verdict,
    full: Selection,
    guess: Selection,
    attempt: Attempt,
    budget: Budget,
    say: Callable[[str], None] = lambda _: None,
) -> ShrinkResult:
    """Shrink one workload's failing run (``original``, which played ``full``): first
    ``guess``, then ddmin over the messages, then over the faults. ``attempt`` runs the
    scenario with a selection; ``say`` reports progress."""
    wanted = failure_signature(original)
    best = full
    seen: dict[tuple[frozenset[int], frozenset[int]], bool] = {}

    def run(selection: Selection) -> tuple[bool, Status]:
        verdict = attempt(selection)
        same = verdict.status == Status.FAIL and failure_signature(verdict) == wanted
        return same, verdict.status

    def fails(selection: Selection) -> bool:
        key = (selection.messages or frozenset(), selection.faults or frozenset())
        if key not in seen:
            seen[key] = _fails_twice(lambda: run(selection), budget, say, selection.describe())
        return seen[key]

    def with_messages(kept: list[int]) -> bool:
        nonlocal best
        chosen = Selection(full.workload, frozenset(kept), best.faults)
        if fails(chosen):
            best = chosen
            return True
        return False

    def with_faults(kept: list[int]) -> bool:
        nonlocal best
        chosen = Selection(full.workload, best.messages, frozenset(kept))
        if fails(chosen):
            best = chosen
            return True
        return False

    stopped = ""
    try:
        if guess != full and fails(guess):
            best = guess
        ddmin(sorted(best.messages or ()), with_messages)
        ddmin(sorted(best.faults or ()), with_faults, try_empty=True)
    except _OutOfBudget as exc:
        stopped = str(exc)
    return ShrinkResult(
        full.workload, full, best, budget.used, time.monotonic() - budget.started, stopped
    )


@dataclass
class StepShrinkResult:
    """A failing explored scenario shrunk to the fewest of its operations."""

    before: int
    kept: list[int]
    attempts: int
    seconds: float
    stopped: str = ""


def shrink_operations(
    original: Verdict,
    count: int,
    attempt: Callable[[list[int]], Verdict],
    budget: Budget,
    say: Callable[[str], None] = lambda _: None,
) -> StepShrinkResult:
    """The fewest of ``count`` numbered operations (an explored scenario's) that still
    fail: ddmin over their numbers, each attempt a fresh run of the scenario rebuilt
    from the kept ones. It fails "the same way" when a check that failed originally
    (same name, e.g. ``no loss of m3``) fails again: a subset may lose fewer messages."""
    wanted = {c.name for c in original.failures}
    seen: dict[tuple[int, ...], bool] = {}
    kept = list(range(count))

    def run(key: tuple[int, ...]) -> tuple[bool, Status]:
        verdict = attempt(list(key))
        same = verdict.status == Status.FAIL and bool(wanted & {c.name for c in verdict.failures})
        return same, verdict.status

    def fails(subset: list[int]) -> bool:
        nonlocal kept
        key = tuple(sorted(subset))
        if key not in seen:
            what = f"{len(key)} of {count} operations"
            seen[key] = _fails_twice(lambda: run(key), budget, say, what)
        if seen[key] and len(key) < len(kept):
            kept = list(key)
        return seen[key]

    stopped = ""
    try:
        ddmin(kept, fails)
    except _OutOfBudget as exc:
        stopped = str(exc)
    return StepShrinkResult(count, kept, budget.used, time.monotonic() - budget.started, stopped)
