"""The model's rules on the copy's session (CR-2, checks/model/sessions.py) and on the
expiry of discard events no shadow asked for (DI-6, checks/model/discard_expiry.py), on
histories built by hand. Each forbidden observation is a divergence quoting the
catalogue's sentence; the allowed ones are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.checks.model import MODEL_BEHAVIOURS

from .built import Built, sentence
from .test_model_runs import run


def test_the_boundary_behaviours_are_modelled() -> None:
    for bid in ("CR-2", "DI-6"):
        assert bid in MODEL_BEHAVIOURS and sentence(bid)


# -- CR-2: one shadow session per sender session ----------------------------------------

SESSION = """settings: {SendConnectionInactivityTimeout: 1s}
steps:
  - session:
      via: mbx1
      say: [EHLO s.example, "MAIL FROM:<s@ext.test>", "RCPT TO:<alice@corp.test>", DATA,
            {message: s1}, "MAIL FROM:<s@ext.test>", "RCPT TO:<alice@corp.test>", DATA,
            {message: s2}, QUIT]
  - wait: 5s
"""


def sender_session(b: Built, *, copies: list[tuple[int, float]], opened: float = 1.0) -> None:
    """Two messages in one sender session through mbx1, each copied to mbx2 over the
    shadow session numbered as in ``copies`` (conn, when it opened). The rule reads the
    wire alone: no step events needed."""
    client = "client->mbx1"
    b.at(opened, "connect", client, conn=1)
    b.line(opened + 0.01, client, "s2c", "220 mbx1 ready")
    shadow = "mbx1->mbx2"
    seen: set[int] = set()
    for i, (ref, (conn, at)) in enumerate(zip(("s1", "s2"), copies, strict=True)):
        t = opened + 0.2 + i * 0.3
        b.content(t, client, ref)
        if conn not in seen:
            seen.add(conn)
            b.at(at, "connect", shadow, conn=conn)
            b.line(at + 0.01, shadow, "s2c", "220 mbx2 ready", conn=conn)
        b.line(t + 0.02, shadow, "c2s", f"XSHADOWCOPY id{i} 1", conn=conn)
        b.content(t + 0.05, shadow, ref, conn=conn)
        b.line(t + 0.07, shadow, "s2c", "250 2.6.0 queued as shadow", conn=conn)
        b.line(t + 0.1, client, "s2c", "250 2.6.0 queued")
    b.at(opened + 1.0, "close", client, conn=1, reason="client closed")
    # the last shadow session closed once idle (TO-2)
    b.at(opened + 1.5, "close", shadow, conn=max(seen), reason="client closed")
    # the messages are never delivered: mbx2 keeps asking mbx1 for discards (DI-2)
    b.heartbeats("mbx2", "mbx1", opened + 0.5, 9.0)


def test_cr2_messages_of_one_sender_session_share_its_shadow_session(tmp_path: Path) -> None:
    # "The copy travels over a new SMTP session from primary to shadow, opened while the
    # sender's session is still open."
    ok = Built(tmp_path, SESSION)
    sender_session(ok, copies=[(1, 1.15), (1, 1.15)])
    ok.at(9.0, "note", text="end")
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["CR-2"] >= 2
    # a second session for the second message, the first closed by the primary meanwhile
    split = Built(tmp_path, SESSION)
    # the primary says QUIT; the shadow, answering 221, is the one the proxy sees closing
    split.line(1.44, "mbx1->mbx2", "c2s", "QUIT")
    split.line(1.445, "mbx1->mbx2", "s2c", "221 Bye")
    split.at(1.45, "close", "mbx1->mbx2", conn=1, reason="server closed")
    sender_session(split, copies=[(1, 1.15), (2, 1.48)])
    split.at(9.0, "note", text="end")
    found = split.explain().divergence
    assert found is not None and found.behaviour == "CR-2"
    assert found.rule == sentence("CR-2")
    assert "over the one shadow session that belongs to it" in found.expected
    assert "copied s2, of the same sender session, over another session" in found.observed
    assert "after mbx1 closed it at +1.4s" in found.observed


def test_cr2_a_shadow_session_that_may_have_ended_is_not_judged(tmp_path: Path) -> None:
    # ended by the shadow (its side closed it): a new session is the only way on
    ended = Built(tmp_path, SESSION)
    ended.at(1.45, "close", "mbx1->mbx2", conn=1, reason="server closed")
    sender_session(ended, copies=[(1, 1.15), (2, 1.48)])
    ended.at(9.0, "note", text="end")
    assert ended.explain().divergence is None
    # idle past SendConnectionInactivityTimeout between the two messages
    slow = Built(tmp_path, SESSION.replace("1s}", "0.1s}"))
    slow.at(1.45, "close", "mbx1->mbx2", conn=1, reason="client closed")
    sender_session(slow, copies=[(1, 1.15), (2, 1.48)])
    slow.at(9.0, "note", text="end")
    assert slow.explain().divergence is None


def test_cr2_a_copy_over_a_session_older_than_the_senders(tmp_path: Path) -> None:
    reused = Built(tmp_path, SESSION)
    sender_session(reused, copies=[(1, 0.5), (1, 0.5)])
    reused.at(9.0, "note", text="end")
    found = reused.explain().divergence
    assert found is not None and found.behaviour == "CR-2"
    assert "opened at +0.5s, before the sender's session" in found.observed


# -- DI-6: discard events no shadow asked for expire ------------------------------------

EXPIRY = """settings: {ShadowMessageAutoDiscardInterval: 5m}
steps:
  - send: {id: m1, via: mbx1, to: [alice@corp.test]}
  - kill: mbx2
  - wait: 1s
  - snapshot: {node: mbx1, queue: discard_events}
  - advance: 4m + 58s
  - wait: 3s
  - snapshot: {node: mbx1, queue: discard_events}
  - advance: 2m
  - wait: 3s
  - snapshot: {node: mbx1, queue: discard_events}
"""


def expiry_run(b: Built, *, kept: tuple[bool, bool, bool], delivered: float = 2.0) -> None:
    b.step(0.5)
    b.reply(0.8, "mbx1", 250)
    b.steps(0.9, 1.0)
    b.delivered(delivered, "m1", "mbx1", "alice@corp.test")
    for i, (t, held) in enumerate(zip((4.5, 8.5, 12.5), kept, strict=True)):
        if i:
            b.steps(t - 3.1, t - 3.0)  # the advance, then the wait
        b.step(t)
        b.looked(t + 0.1, "mbx1", "discard_events", *(("m1",) if held else ()))
    b.at(14.5, "note", text="end")


def test_di6_an_unasked_discard_event_is_deleted_after_the_interval(tmp_path: Path) -> None:
    # "Discard events no shadow asked for within ShadowMessageAutoDiscardInterval are
    # deleted by the primary."
    ok = Built(tmp_path, EXPIRY, topology="two-node-dag-virtual")
    expiry_run(ok, kept=(True, True, False))
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["DI-6"] == 3
    never = Built(tmp_path, EXPIRY, topology="two-node-dag-virtual")
    expiry_run(never, kept=(True, True, True))
    found = never.explain().divergence
    assert found is not None and found.behaviour == "DI-6"
    assert found.rule == sentence("DI-6")
    assert "deletes the discard event of m1 that mbx2 (out of service) never" in found.expected
    assert "(5 minutes)" in found.expected or "(5m)" in found.expected
    assert "still listed m1 at +12.6s" in found.observed


def test_di6_an_unasked_discard_event_is_kept_until_the_interval(tmp_path: Path) -> None:
    early = Built(tmp_path, EXPIRY, topology="two-node-dag-virtual")
    expiry_run(early, kept=(True, False, False))
    found = early.explain().divergence
    assert found is not None and found.behaviour == "DI-6"
    assert "keeps the discard event of m1" in found.expected
    assert "did not list m1 at +8.6s" in found.observed


def test_di6_a_shadow_that_may_have_asked_is_not_judged(tmp_path: Path) -> None:
    # delivered before the shadow went down: it may have asked, and what the primary keeps
    # of a notification it handed out is not the catalogue's concern
    asked = Built(tmp_path, EXPIRY, topology="two-node-dag-virtual")
    expiry_run(asked, kept=(False, False, True), delivered=0.85)
    outcome = asked.explain()
    assert outcome.divergence is None and "DI-6" not in outcome.exercised


# -- on a real cluster ----------------------------------------------------------------

REAL = """defaults:
  topology: two-node-dag
  settings:
    ShadowHeartbeatFrequency: 0.5s
    ShadowResubmitTimeSpan: 3s
    TransientFailureRetryInterval: 0.5s
    SendConnectionInactivityTimeout: 1s
  timeout: 60s
  settle: 3s
scenarios:
  - name: model_one_shadow_session_per_sender_session
    title: three messages back to back in one sender session, as exploration sends them
    behaviours: [CR-2]
    steps:
      - session:
          via: mbx1
          say: [EHLO s.example, "MAIL FROM:<s@ext.test>", "RCPT TO:<alice@corp.test>", DATA,
                {message: s1}, "MAIL FROM:<s@ext.test>", "RCPT TO:<bob@corp.test>", DATA,
                {message: s2}, "MAIL FROM:<s@ext.test>", "RCPT TO:<alice@corp.test>", DATA,
                {message: s3}, QUIT]
      - wait: 2s
    expect:
      - model: {}

  - name: model_unasked_discard_event_expires
    title: the discard expiry drill of exploration, on a real clock
    behaviours: [DI-6]
    settings: {ShadowMessageAutoDiscardInterval: 6s}
    steps:
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: e1, via: mbx1, to: [alice@corp.test]}
      - kill: mbx2
      - sink: {name: mailbox, reply: accept}
      - wait: 3.5s
      - snapshot: {node: mbx1, queue: discard_events}
      - wait: 14s
      - snapshot: {node: mbx1, queue: discard_events}
      - restart: mbx2
    expect:
      - model: {}
"""


@pytest.mark.slow
def test_cr2_and_di6_on_the_reference_and_on_their_variants(
    tmp_path: Path,
) -> None:
    scenarios = tmp_path / "boundary.yaml"
    scenarios.write_text(REAL, encoding="utf-8")
    name = "model_one_shadow_session_per_sender_session"
    for where in ("reference", "broken", "expiry"):
        (tmp_path / where).mkdir()
    reference = run(tmp_path / "reference", "reference", scenarios=scenarios)
    expiry = "model_unasked_discard_event_expires"
    assert reference == {name: ("passed", ""), expiry: ("passed", "")}, reference
    # the drill's two looks were judged (kept, then gone), not merely left alone
    rules = (tmp_path / "reference" / "report" / "certification.json").read_text("utf-8")
    assert "DI-6 x2" in rules
    never = run(
        tmp_path / "expiry", "broken:discard-events-never-expire", expiry, scenarios=scenarios
    )
    outcome, text = never[expiry]
    assert outcome == "failed" and "DI-6: FAIL" in text, text
    assert "the discard events of mbx1 still listed e1" in text
    broken = run(
        tmp_path / "broken", "broken:shadow-session-per-message", name, scenarios=scenarios
    )
    outcome, text = broken[name]
    assert outcome == "failed" and "CR-2: FAIL" in text, text
    assert "copied s2, of the same sender session, over another session to mbx2" in text
