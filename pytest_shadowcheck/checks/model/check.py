"""The ``model`` expectation: the whole run judged by the catalogue model. A FAIL names
the behaviour whose prediction failed, with the operations that led there; a PASS the
behaviours whose rules decided something; NOT-APPLICABLE when none did."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.lateness import said
from pytest_shadowcheck.checks.model import explain
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.scenario.model import Step

__all__ = ["DEFAULT_SLACK", "MODEL_CHECK", "check_model"]

#: the name of the model check's result
MODEL_CHECK = "the catalogue model"

#: how late past its window an event may come on a loaded machine and still count
DEFAULT_SLACK = 2.0
#: how far before a divergence the harness's own lateness is counted (s): the longest
#: window the model judges in an explored scenario (a heartbeat, ShadowResubmitTimeSpan
#: of up to 6 s, the slack)
LAG_HORIZON = 10.0


async def check_model(run: Run, step: Step) -> CheckResult:
    slack = float(step.arg.get("slack", DEFAULT_SLACK))
    outcome = explain(run.scenario, run.history, slack=slack)
    name = MODEL_CHECK
    aside = (
        f" (not covered by the model, so not judged where they matter: "
        f"{', '.join(outcome.unmodelled)})"
        if outcome.unmodelled
        else ""
    )
    found = outcome.divergence
    if found is not None:
        # The model's windows are met by the events the harness stamps: a harness that
        # itself ran late stamps them late. Granted that lateness as more slack, does
        # the run still diverge? (A divergence that remains is judged with it.)
        # over a horizon this long a node mostly waited for its own background work,
        # not on the path to the divergence: the longest waiter is granted, not the sum
        # a timing window of one exchange grants (checks/wire.py)
        machine = run.history.lateness(max(0.0, found.t - LAG_HORIZON), found.t, waiters=1)
        late = machine.total
        if late > 0:
            widened = explain(run.scenario, run.history, slack=slack + late)
            if widened.divergence is None:
                b = found.behaviour
                # a window widened past the run's end leaves its rule undecided, which
                # is not an observation among the allowed outcomes: a deadline missed
                # by more than the lateness still stands
                undecided = widened.exercised[b] < outcome.exercised[b]
                if undecided and found.late_beyond(late):
                    found.observed += (
                        f"; the harness itself ran {late:.3f}s late, and that does not "
                        "account for it"
                    )
                else:
                    more = (
                        "the rule's window would close after the run ended"
                        if undecided
                        else "every observation is among the outcomes the catalogue allows"
                    )
                    return CheckResult(
                        name,
                        Status.INCONCLUSIVE,
                        found.expected,
                        f"{found.observed}; but {said(machine)} in the "
                        f"{LAG_HORIZON:g}s before (an overloaded machine), and with that "
                        f"much more time {more}: no verdict on the MTA",
                        where=str(step.where),
                        excerpt=run.excerpt(found.t, run.scenario.topology.links()),
                        behaviours=[b],
                        harness_late=True,
                    )
            else:
                found = widened.divergence
    if found is not None:
        operations = "\n".join(f"  {i}. {op}" for i, op in enumerate(found.operations, 1))
        links = run.scenario.topology.links()
        return CheckResult(
            name,
            Status.FAIL,
            found.expected,
            found.observed + aside,
            where=str(step.where),
            excerpt=(
                f"operations up to it ({len(found.operations)}):\n{operations}\n"
                f"history around it:\n{run.excerpt(found.t, links, before=3.0, after=1.0)}"
            ),
            behaviours=[found.behaviour],
        )
    exercised = ", ".join(f"{b} x{n}" for b, n in sorted(outcome.exercised.items()))
    if not exercised:
        return CheckResult(
            name,
            Status.NOT_APPLICABLE,
            "every observation among the outcomes the catalogue allows",
            f"none of the model's rules could decide anything in {outcome.operations} "
            f"operations{aside}",
            where=str(step.where),
        )
    return CheckResult(
        name,
        Status.PASS,
        "every observation among the outcomes the catalogue allows",
        f"{outcome.operations} operations followed; rules decided: {exercised}{aside}",
        where=str(step.where),
        behaviours=sorted(outcome.exercised),
        counts=dict(sorted(outcome.exercised.items())),
    )
