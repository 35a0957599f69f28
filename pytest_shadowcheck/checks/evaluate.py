"""Evaluating one expectation: the checker for its kind, tagged with the behaviours it
evidences, UNTESTABLE when the target cannot look, NOT-APPLICABLE when the event it
presupposes never happened, a premise when marked ``precondition`` (docs/verdicts.md).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.events import find_event, matcher_phrase, why_not
from pytest_shadowcheck.checks.fates import check_fates
from pytest_shadowcheck.checks.inside import (
    check_config_warning,
    check_log,
    check_queue,
    log_expected,
    queue_expected,
    queue_name,
    warning_expected,
)
from pytest_shadowcheck.checks.model.check import check_model
from pytest_shadowcheck.checks.prose import plain
from pytest_shadowcheck.checks.wire import (
    check_connections,
    check_delivered,
    check_lines,
    check_not_delivered,
    check_order,
    check_reply,
    check_timing,
)
from pytest_shadowcheck.scenario.capabilities import CAPABILITY_NEED, control_call
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.scenario.model import Step

__all__ = ["CHECKERS", "PRECONDITION", "run_check"]

#: the pseudo-behaviour a passing precondition evidences
PRECONDITION = "precondition"

CHECKERS: dict[str, Callable[[Run, Step], Awaitable[CheckResult]]] = {
    "log": check_log,
    "reply": check_reply,
    "delivered": check_delivered,
    "not_delivered": check_not_delivered,
    "fates": check_fates,
    "order": check_order,
    "timing": check_timing,
    "lines": check_lines,
    "connections": check_connections,
    "queue": check_queue,
    "config_warning": check_config_warning,
    "model": check_model,
}


async def run_check(run: Run, step: Step) -> CheckResult:
    """Run one check, tagged with the behaviours it evidences. A check the target cannot
    look at is UNTESTABLE (alone: the scenario's other checks still count); a check whose
    ``given`` event never happened is NOT-APPLICABLE."""
    needed = step.capability()
    if needed is not None and not run.target.can(needed, control_call(step.kind, step.arg)):
        name, expected = _untried(step)
        result = CheckResult(
            name,
            Status.UNTESTABLE,
            expected,
            f"target {run.target.name} lacks {needed}: {CAPABILITY_NEED[needed]}",
            where=str(step.where),
        )
    elif unsent := _unsent(run, step.arg):
        ref, why = unsent
        result = CheckResult(
            f"{step.kind} of {ref}",
            Status.NOT_APPLICABLE,
            f"the scenario's {step.kind} check of {ref}",
            f"{ref} was never sent ({why}), so there was nothing to check",
            where=str(step.where),
        )
    elif (given := step.given or run.scenario.given) and find_event(run, given) is None:
        said = matcher_phrase(given, run)
        fact = why_not(run, given)
        result = CheckResult(
            step.kind,
            Status.NOT_APPLICABLE,
            f"only applies if {said.text}",
            said.never + (f": {fact}" if fact else "") + ", so there was nothing to check",
            where=str(step.where),
        )
    else:
        result = await CHECKERS[step.kind](run, step)
    result.behaviours = list(step.behaviours) or result.behaviours
    if step.precondition:
        if result.status == Status.PASS:
            result.behaviours = [PRECONDITION]  # a premise proves no behaviour
        elif result.status == Status.FAIL:
            result.status = Status.NOT_APPLICABLE
            result.observed = f"the scenario's premise did not hold: {result.observed}"
    return result


#: the keys of a check's arguments that name messages of the scenario
_MESSAGE_KEYS = ("message", "reply", "delivered", "contains", "absent")


def _unsent(run: Run, arg: object) -> tuple[str, str] | None:
    """The first message a check names whose content was never sent (its raw session
    ended before it), with why; None when every message it names was sent."""
    if isinstance(arg, dict):
        for key, value in arg.items():
            names = [value] if isinstance(value, str) else value
            if key in _MESSAGE_KEYS and isinstance(names, list):
                for ref in names:
                    message = run.messages.get(ref) if isinstance(ref, str) else None
                    if message is not None and message.unsent:
                        return ref, message.unsent
            if isinstance(value, dict) and (found := _unsent(run, value)):
                return found
    return None


def _untried(step: Step) -> tuple[str, str]:
    """The name and expectation of a check the target cannot look at, as the check
    would have said them."""
    arg = step.arg
    if step.kind == "queue":
        return queue_name(arg), queue_expected(arg)
    if step.kind == "config_warning":
        return f"config warnings of {arg['node']}", warning_expected(arg)
    if step.kind == "log":
        return f"log of {arg['node']}", log_expected(arg)
    what = ", ".join(f"{k}={plain(v)}" for k, v in arg.items() if not isinstance(v, dict))
    return f"{step.kind} ({what})", f"a look at what {step.kind} needs"
