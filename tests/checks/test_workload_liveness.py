"""What is still queued when a workload's settle ends is a question of liveness, never a
loss: reported as such, UNTESTABLE when the MTA's retry schedule is compiled in longer than
the settle, and NOT-APPLICABLE when the scenario's given never happened."""

from __future__ import annotations

from collections import Counter

from pytest_shadowcheck.checks.workload import Fate, WorkloadReport, results
from pytest_shadowcheck.statuses import Status


def _report(queued: int, lost: int = 0) -> WorkloadReport:
    fates = {}
    for n in range(10):
        fate = "queued" if n < queued else "lost" if n < queued + lost else "delivered"
        ref = f"links-{n:05}"
        fates[ref] = Fate(ref, f"<{ref}.abc@shadowcheck.test>", "mbx1", fate, 1.0, 2.0)
        fates[ref].copied_to = {"mbx2"}  # the shadow copy PR-1 acts on
    counts = Counter(f.fate for f in fates.values())
    return WorkloadReport("links", 19, fates, counts, Counter(), {}, {}, 1.0, 0, [], 0)


def test_still_queued_after_the_settle_is_a_liveness_failure_not_a_loss() -> None:
    loss, _, liveness = results(_report(queued=2), ["PR-1"], "durability.yaml:101", settle=20)
    assert loss.status == Status.PASS
    assert loss.observed.startswith("0 of 10 acknowledged messages lost.")
    assert liveness.status == Status.FAIL
    assert liveness.behaviours == ["PR-1"]
    assert liveness.observed.startswith(
        "not delivered in time (liveness): 2 of 10 acknowledged messages still queued on a "
        "live node when the settle ended, none of them lost: links-00000, links-00001"
    ), liveness.observed
    assert "settle of 20s" in liveness.expected


def test_a_retry_schedule_compiled_in_longer_than_the_settle_is_untestable() -> None:
    report = _report(queued=2)
    _, _, liveness = results(report, ["PR-1"], "here", settle=20, retry=(60.0, 119.0))
    assert liveness.status == Status.UNTESTABLE
    assert "compiled-in schedule (TransientFailureRetryInterval 60s to 119s" in liveness.observed
    # a schedule shorter than the settle is no excuse
    _, _, liveness = results(report, ["PR-1"], "here", settle=20, retry=(5.0, 5.0))
    assert liveness.status == Status.FAIL


def test_a_loss_stays_a_loss_whatever_the_retry_schedule() -> None:
    loss, _, _ = results(_report(queued=1, lost=1), ["PR-1"], "here", settle=20, retry=(60, 119))
    assert loss.status == Status.FAIL
    assert loss.observed.startswith("1 of 10 acknowledged messages lost (never delivered, in no")


def test_an_unmet_given_makes_every_result_not_applicable_and_keeps_the_figures() -> None:
    out = results(
        _report(queued=0, lost=1), ["PR-1"], "here", settle=20,
        unmet="mbx1 never sent XSHADOW to mbx2",
    )  # fmt: skip
    assert [r.status for r in out] == [Status.NOT_APPLICABLE] * 3
    assert out[0].observed.startswith(
        "mbx1 never sent XSHADOW to mbx2, so this is not judged here: 1 of 10 acknowledged"
    )


def test_with_no_shadow_copy_a_passing_workload_evidences_no_promotion() -> None:
    report = _report(queued=0)
    for fate in report.fates.values():
        fate.copied_to = set()
    loss, _, _, promotion = results(report, ["PR-1", "PR-3"], "here", settle=20)
    # nothing lost through the kills: PR-3's, never PR-1's (nothing was there to promote)
    assert loss.status == Status.PASS and loss.behaviours == ["PR-3"]
    assert promotion.status == Status.NOT_APPLICABLE and promotion.behaviours == ["PR-1"]
    assert promotion.observed == (
        "no message of the workload was copied to another node (no shadow copy was made), "
        "so there was nothing for PR-1 to promote"
    )
    # a workload of PR-1 alone has nothing left to pass
    loss, *_ = results(report, ["PR-1"], "here", settle=20)
    assert loss.status == Status.NOT_APPLICABLE
