"""The catalogue model grants the harness its own lateness: a prediction missed by no
more than the harness itself ran late is no verdict on the MTA (INCONCLUSIVE, and run
again); a miss beyond it is still a FAIL.

Real reference nodes (two, one DAG); the harness's event loop is really blocked (as an
overloaded machine blocks it) once m1 has been delivered, through the scenario hook every
run calls: the shadow's next discard query waits in the harness's proxy for as long, and
the look at the shadow queue due when the stall ends still sees the copy - past the
window DI-2 gives (a heartbeat and the model's 2 s slack).

A window widened by the lateness may close after the run ended; the rule cannot decide
then, which is no excuse for an event still missing at the end by more than the
lateness (built histories: tests/checks/model/built.py)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harnesskit import LoopStall, reference_or_variant

from pytest_shadowcheck.checks.model.check import MODEL_CHECK, check_model
from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.history import History
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.verdict import Status

from .built import Built, BuiltRun

SCENARIO = """\
scenarios:
  - name: discarded_within_a_heartbeat
    behaviours: [DI-2]
    topology: two-node-dag
    settings: {ShadowHeartbeatFrequency: 0.5s, ShadowResubmitTimeSpan: 3s}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: 10s}
      - wait: LOOK
      - snapshot: {node: mbx2, queue: shadow}
    expect:
      - model: {}
"""


def _looking(history: History) -> bool:
    """m1 is delivered and the wait before the look at the shadow queue has begun."""
    return any(
        str(e.data.get("text", "")).startswith("wait ")
        and "delivered" not in str(e.data.get("text", ""))
        for e in history.events(kind="step")
    )


def _model(
    tmp_path: Path, stall: float, variant: str = "", look: float = 3.0
) -> tuple[Status, str]:
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO.replace("LOOK", f"{look:g}s"))
    (scenario,) = load_scenario_file(source)
    target = reference_or_variant(variant)
    verdict = run_scenario(
        scenario, target, workdir=tmp_path / "run", hooks=LoopStall(stall, _looking)
    )
    (model,) = [c for c in verdict.checks if c.name == MODEL_CHECK]
    return model.status, model.observed


@pytest.mark.parametrize(
    ("stall", "variant", "look", "status", "said"),
    [
        (0.0, "", 3.0, Status.PASS, "rules decided"),
        (5.0, "", 3.0, Status.INCONCLUSIVE, "but the harness itself ran"),
        # the copy still held at the look, or no discard query while it was held: DI-2.
        # The look comes late (6 s against a window of 2.5 s): the miss then stays beyond
        # what a loaded machine's lateness over the model's 10 s horizon can explain
        # (0.6-0.8 s at -n 4 beside the project's other tests; a 3 s look left 0.5 s)
        (0.3, "never-queries-discards", 6.0, Status.FAIL, ("still held m1", "did not ask again")),
    ],
    ids=["quiet", "harness-stalled", "shadow-never-asks-beyond-the-stall"],
)
def test_a_prediction_the_harness_missed_is_no_verdict(
    tmp_path: Path, stall: float, variant: str, look: float, status: Status,
    said: str | tuple[str, ...],
) -> None:  # fmt: skip
    got, observed = _model(tmp_path, stall, variant, look)
    assert got == status, observed
    assert any(w in observed for w in ((said,) if isinstance(said, str) else said)), observed
    if status == Status.INCONCLUSIVE:
        assert "no verdict on the MTA" in observed


@pytest.mark.parametrize(
    ("lag", "delivered", "status", "said"),
    [
        # PR-3's deadline is +7.2s and the run ends at +7.7s. Granted 0.3 s of lateness,
        # the widened window would close at +7.8s, past the end, so the widened model
        # cannot decide; m1 still missing at the end, 0.5 s past the deadline, is more
        # than the lateness accounts for
        (0.3, None, Status.FAIL, "ran 0.300s late, and that does not account for it"),
        # 0.6 s of lateness would account for anything the run could still have seen
        (0.6, None, Status.INCONCLUSIVE, "would close after the run ended"),
        # m1 came 0.2 s late, within the 0.3 s the harness ran late
        (0.3, 7.4, Status.INCONCLUSIVE, "would close after the run ended"),
    ],
    ids=["missing-beyond-the-lateness", "missing-within-it", "late-within-it"],
)
def test_a_window_widened_past_the_run_is_no_excuse_for_what_the_run_saw(
    tmp_path: Path, lag: float, delivered: float | None, status: Status, said: str
) -> None:
    # the primary restarts on its queue while m1 waits for its next hop (test_rules.py's
    # PR-3 history); the harness's event loop ran ``lag`` seconds late just before
    b = Built(
        tmp_path,
        "steps:\n  - fault: {link: mbx1->mailbox, kind: cut}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n"
        "  - restart: mbx1\n  - heal: mbx1->mailbox\n  - wait: 6s\n",
    )
    b.steps(0.5, 1.0)
    b.reply(1.1, "mbx1", 250)
    b.step(1.2, back=1.5)
    b.steps(1.6, 1.7)
    if delivered is not None:
        b.delivered(delivered, "m1", "mbx1", "alice@corp.test")
    b.at(7.0, "lag", late=lag)
    b.at(7.7, "note", text="end")
    result = asyncio.run(check_model(BuiltRun(b), b.scenario.expect[0]))
    assert result.status == status, result.observed
    assert said in result.observed, result.observed
    assert result.behaviours == ["PR-3"]
