"""The model's wire rules (checks/model/wire.py) on histories built by hand: session
limits (TO-1, TO-2, TO-4), a stranger's shadow verbs (XS-3) and the discard
notifications a primary hands out (DI-1, DI-3). Each forbidden observation is a
divergence quoting the catalogue's sentence; the allowed ones are not."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.checks.model import MODEL_BEHAVIOURS, unmodelled

from .built import Built, sentence

FAST = "settings: {SendConnectionInactivityTimeout: 1s}\n"


def test_the_wire_behaviours_are_modelled() -> None:
    for bid in ("DI-1", "DI-3", "TO-1", "TO-2", "TO-4", "XS-3"):
        assert bid in MODEL_BEHAVIOURS and sentence(bid)


# -- TO-2 / TO-4: a node's own sessions ------------------------------------------------


def delivery_session(b: Built, t: float, closed: float | None) -> None:
    link = "mbx1->mailbox"
    b.at(t, "connect", link, conn=1)
    b.line(t + 0.01, link, "s2c", "220 mailbox ready")
    b.line(t + 0.02, link, "c2s", "EHLO mbx1")
    b.line(t + 0.03, link, "s2c", "250 mailbox")
    if closed is not None:
        b.at(closed, "close", link, conn=1, reason="client closed")


def test_to2_an_idle_outbound_session_is_closed(tmp_path: Path) -> None:
    # "An outbound session idle longer than the Send connector's ConnectionInactivityTimeout
    # is closed."
    b = Built(tmp_path, FAST + "steps:\n  - wait: 10s\n")
    b.step(0.5)
    delivery_session(b, 1.0, closed=None)
    b.at(10.5, "note", text="end")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "TO-2"
    assert found.rule == sentence("TO-2")
    assert "idle SendConnectionInactivityTimeout (1 s)" in found.expected
    assert "`250 mailbox`" in found.observed and "until the run ended" in found.observed
    ok = Built(tmp_path, FAST + "steps:\n  - wait: 10s\n")
    ok.step(0.5)
    delivery_session(ok, 1.0, closed=2.2)
    ok.at(10.5, "note", text="end")
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["TO-2"] == 1


def test_to2_a_frozen_node_or_an_unset_timeout_is_not_judged(tmp_path: Path) -> None:
    paused = Built(tmp_path, FAST + "steps:\n  - pause: mbx1\n  - wait: 10s\n")
    paused.steps(0.5, 0.6)
    delivery_session(paused, 1.0, closed=9.0)
    assert paused.explain().divergence is None
    unset = Built(tmp_path, "steps:\n  - wait: 10s\n")
    unset.step(0.5)
    delivery_session(unset, 1.0, closed=9.0)
    assert unset.explain().divergence is None and "TO-2" not in unset.explain().exercised


def copy_to_silent_shadow(b: Built, *, retried: bool) -> None:
    b.steps(0.5, 1.0)
    b.at(1.01, "connect", "mbx1->mbx2", conn=1)
    if retried:  # given up after the timeout (its end, as the proxy records it): again
        b.at(2.01, "shutdown", "mbx1->mbx2", conn=1, direction="c2s")
        b.at(2.02, "connect", "mbx1->mbx2", conn=2)
        b.reply(3.1, "mbx1", 250, copied=False)  # the shadow is frozen: no copy
    b.at(20.0, "close", "mbx1->mbx2", conn=1, reason="client closed")
    b.at(21.0, "note", text="end")


def test_to4_a_copy_session_to_a_silent_shadow_is_given_up(tmp_path: Path) -> None:
    # "A primary→shadow session that times out before the copy is acknowledged counts as
    # a failed shadow attempt (then CR-4 / CR-5)."
    body = FAST + (
        "steps:\n  - pause: mbx2\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test], timeout: 20s}\n"
    )
    b = Built(tmp_path, body)
    copy_to_silent_shadow(b, retried=False)
    found = b.explain().divergence
    assert found is not None and found.behaviour == "TO-4"
    assert found.rule == sentence("TO-4")
    assert "failed shadow attempt" in found.expected
    assert "neither closed the session, nor tried again" in found.observed
    ok = Built(tmp_path, body)
    copy_to_silent_shadow(ok, retried=True)
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["TO-4"] >= 1


def test_to4_sessions_to_the_silent_shadow_are_no_sign_of_giving_up(tmp_path: Path) -> None:
    # heartbeats to the frozen shadow go on (mbx1 holds its copies too): each is a new
    # session to it, none ends the one the sender waits on (waits-for-the-shadow-for-ever)
    body = FAST + (
        "steps:\n  - pause: mbx2\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test], timeout: 20s}\n"
    )
    b = Built(tmp_path, body)
    for n in range(2, 40):  # every half second to the end
        b.at(0.5 * n, "connect", "mbx1->mbx2", conn=n)
    copy_to_silent_shadow(b, retried=False)
    found = b.explain().divergence
    assert found is not None and found.behaviour == "TO-4"
    # a session to another node is: a copy tried elsewhere
    other = Built(tmp_path, body, topology="outages-three-node")
    other.at(2.5, "connect", "mbx1->mbx3", conn=1)
    other.line(2.51, "mbx1->mbx3", "s2c", "220 mbx3 ready")
    other.line(2.52, "mbx1->mbx3", "c2s", "QUIT")
    other.at(2.53, "close", "mbx1->mbx3", conn=1, reason="client closed")
    copy_to_silent_shadow(other, retried=False)
    assert other.explain().divergence is None


# -- TO-1: the harness's inbound sessions ---------------------------------------------

LIMITS = "settings: {ReceiveConnectionInactivityTimeout: 2s, ReceiveConnectionTimeout: 6s}\n"


def silent_sender(b: Built, closed: float, keepalive: bool = False) -> None:
    link = "client->mbx1"
    b.step(0.5)
    b.at(1.0, "connect", link, conn=1)
    b.line(1.01, link, "s2c", "220 mbx1 ready")
    b.line(1.02, link, "c2s", "EHLO client.test")
    b.line(1.03, link, "s2c", "250 mbx1")
    t = 1.5
    while keepalive and t < closed:
        b.line(t, link, "c2s", "NOOP")
        b.line(t + 0.01, link, "s2c", "250 OK")
        t += 0.5
    b.at(closed, "close", link, conn=1, reason="server closed")
    b.at(closed + 1, "note", text="end")


def test_to1_an_idle_inbound_session_is_closed(tmp_path: Path) -> None:
    # "An inbound session idle longer than ConnectionInactivityTimeout is closed; no session
    # lasts longer than ConnectionTimeout."
    b = Built(tmp_path, LIMITS + "steps:\n  - wait: 9s\n")
    silent_sender(b, closed=8.0)
    found = b.explain().divergence
    assert found is not None and found.behaviour == "TO-1"
    assert found.rule == sentence("TO-1")
    assert "ReceiveConnectionInactivityTimeout (2 s)" in found.expected
    ok = Built(tmp_path, LIMITS + "steps:\n  - wait: 9s\n")
    silent_sender(ok, closed=3.1)
    assert ok.explain().divergence is None and ok.explain().exercised["TO-1"] >= 1


def test_to1_a_busy_session_ends_at_the_connection_timeout(tmp_path: Path) -> None:
    b = Built(tmp_path, LIMITS + "steps:\n  - wait: 12s\n")
    silent_sender(b, closed=11.0, keepalive=True)
    found = b.explain().divergence
    assert found is not None and found.behaviour == "TO-1"
    assert "within ReceiveConnectionTimeout (6 s), busy or not" in found.expected
    ok = Built(tmp_path, LIMITS + "steps:\n  - wait: 12s\n")
    silent_sender(ok, closed=7.05, keepalive=True)
    assert ok.explain().divergence is None


def test_the_session_limits_are_settings_the_model_knows(tmp_path: Path) -> None:
    b = Built(tmp_path, LIMITS + "steps:\n  - session: {via: mbx1, say: [EHLO x]}\n")
    assert unmodelled(b.scenario) == []


# -- XS-3: a stranger's shadow verbs ---------------------------------------------------


def stranger(b: Built, answer: str, *, auth: bool = False) -> None:
    link = "client->mbx1"
    b.step(0.5)
    b.at(1.0, "connect", link, conn=1)
    b.line(1.01, link, "s2c", "220 mbx1 ready")
    b.line(1.02, link, "c2s", "EHLO stranger.example")
    b.line(1.03, link, "s2c", "250 mbx1")
    if auth:
        b.line(1.04, link, "c2s", "AUTH PLAIN ****")
        b.line(1.05, link, "s2c", "235 2.7.0 Authentication successful")
    b.line(1.1, link, "c2s", "XQDISCARD")
    b.line(1.11, link, "s2c", answer)
    b.at(1.2, "close", link, conn=1, reason="client closed")


def test_xs3_a_stranger_is_refused_the_shadow_verbs(tmp_path: Path) -> None:
    # "An unauthorised peer can neither shadow nor query discard status: XSHADOW and
    # XQDISCARD from it are refused, and nothing leaks or is discarded."
    b = Built(tmp_path, "steps:\n  - wait: 2s\n")
    stranger(b, "250 0 discard notifications for stranger")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "XS-3"
    assert found.rule == sentence("XS-3")
    assert "refuses `XQDISCARD`" in found.expected
    ok = Built(tmp_path, "steps:\n  - wait: 2s\n")
    stranger(ok, "500 5.5.2 Error: command 'XQDISCARD' not recognized")
    assert ok.explain().divergence is None and ok.explain().exercised["XS-3"] == 1
    peer = Built(tmp_path, "steps:\n  - wait: 2s\n")
    stranger(peer, "250 0 discard notifications for mbx2", auth=True)
    assert peer.explain().divergence is None  # authenticated: not XS-3's stranger


# -- DI-1 / DI-3: discard notifications -------------------------------------------------

DISCARDS = (
    "steps:\n  - fault: {link: mbx1->mailbox, kind: cut}\n"
    "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n"
    "  - wait: 10s\n"
)


def copied(b: Built, shadow: str = "mbx2", mid: str = "P1") -> None:
    """m1 sent through mbx1 and copied to ``shadow`` as mbx1's message ``mid``."""
    b.steps(0.4, 0.5, 0.9)
    link = f"mbx1->{shadow}"
    b.at(0.6, "connect", link, conn=1)
    b.line(0.61, link, "c2s", f"XSHADOWCOPY {mid} DB1 corp.test")
    b.line(0.62, link, "s2c", "250 2.0.0 Ready for shadow copy")
    b.content(0.7, link, "m1")
    b.line(0.71, link, "s2c", "250 2.0.0 Shadow copy stored")
    b.at(0.72, "close", link, conn=1, reason="server closed")
    b.reply(0.8, "mbx1", 250)


def query(
    b: Built, t: float, conn: int, *mids: str, shadow: str = "mbx2", ack: bool = True
) -> None:
    link = f"{shadow}->mbx1"
    b.at(t, "connect", link, conn=conn)
    b.line(t + 0.01, link, "c2s", "XQDISCARD", conn=conn)
    for i, mid in enumerate(mids):
        b.line(t + 0.02 + i * 0.001, link, "s2c", f"250-DISCARD {mid}", conn=conn)
    b.line(t + 0.03, link, "s2c", f"250 {len(mids)} discard notifications", conn=conn)
    if ack:
        b.line(t + 0.04, link, "c2s", "XQDISCARD 300 ACK", conn=conn)
        b.line(t + 0.05, link, "s2c", "250 0 discard notifications", conn=conn)
    b.at(t + 0.06, "close", link, conn=conn, reason="server closed")


def test_di1_no_notification_before_the_next_hop_acknowledged(tmp_path: Path) -> None:
    # "When the next hop acknowledges the message, the primary records the discard status
    # 'delivery complete' for the shadow node."
    b = Built(tmp_path, DISCARDS)
    copied(b)
    query(b, 1.5, 1, "P1")
    b.delivered(3.0, "m1", "mbx1", "alice@corp.test")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "DI-1"
    assert found.rule == sentence("DI-1")
    assert "before any next hop had it" in found.observed
    ok = Built(tmp_path, DISCARDS)
    copied(ok)
    ok.delivered(1.2, "m1", "mbx1", "alice@corp.test")
    query(ok, 1.5, 1, "P1")
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["DI-1"] == 1


def test_di3_a_confirmed_notification_is_not_handed_out_again(tmp_path: Path) -> None:
    # "The primary answers only with the discard notifications meant for the querying
    # shadow node; a notification is handed over once."
    b = Built(tmp_path, DISCARDS)
    copied(b)
    b.delivered(1.2, "m1", "mbx1", "alice@corp.test")
    query(b, 1.5, 1, "P1")
    query(b, 2.5, 2, "P1")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "DI-3"
    assert found.rule == sentence("DI-3")
    assert "again" in found.observed
    # not confirmed (the querier never said ACK): handing it out again is allowed
    ok = Built(tmp_path, DISCARDS)
    copied(ok)
    ok.delivered(1.2, "m1", "mbx1", "alice@corp.test")
    query(ok, 1.5, 1, "P1", ack=False)
    query(ok, 2.5, 2, "P1")
    assert ok.explain().divergence is None
    # offered to two sessions asking at once, before either confirmed: allowed
    both = Built(tmp_path, DISCARDS)
    copied(both)
    both.delivered(1.2, "m1", "mbx1", "alice@corp.test")
    query(both, 1.5, 1, "P1")
    query(both, 1.51, 2, "P1")  # its page ends at 1.54, before the first ACK is answered
    assert both.explain().divergence is None


def test_di3_only_the_querying_shadows_notifications(tmp_path: Path) -> None:
    b = Built(tmp_path, DISCARDS, topology="outages-three-node")
    copied(b, shadow="mbx2")
    b.delivered(1.2, "m1", "mbx1", "alice@corp.test")
    query(b, 1.5, 1, "P1", shadow="mbx3")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "DI-3"
    assert "copied to mbx2" in found.expected


# -- CR-8: a message acknowledged in a session the node then ends ----------------------

KEPT_OPEN = (
    "settings: {ReceiveConnectionInactivityTimeout: 2s, ReceiveConnectionTimeout: 6s}\n"
    "steps:\n"
    "  - session: {via: mbx1, say: [EHLO client.test, 'MAIL FROM:<s@ext.test>',"
    " 'RCPT TO:<alice@corp.test>', DATA, {message: w1}], idle: 8s, keepalive: 500ms}\n"
    "  - wait: 5s\n"
)


def kept_open(
    b: Built, delivered: float | None, copied: bool = True, quit_at: float | None = None
) -> None:
    """The sender stays connected after its 250 (NOOPs) until mbx1 ends the session;
    mbx1 copied w1 to mbx2 first (``copied``), or the sender said QUIT (``quit_at``)."""
    link = "client->mbx1"
    # the session step (built.Built.step reads a describe() sessions do not have)
    b.at(0.5, "step", text="session via=mbx1", line=b.scenario.steps[0].where.line)
    b._next_step += 1
    b.step(9.0)
    b.at(0.6, "connect", link, conn=1)
    b.line(0.61, link, "s2c", "220 mbx1 ready")
    b.line(0.62, link, "c2s", "MAIL FROM:<s@ext.test>")
    b.line(0.63, link, "s2c", "250 OK")
    b.line(0.64, link, "c2s", "RCPT TO:<alice@corp.test>")
    b.line(0.65, link, "s2c", "250 OK")
    b.content(0.7, link, "w1")
    if copied:
        b.copy(0.75, "mbx1", "w1")
        b.heartbeats("mbx2", "mbx1", 1.0, 13.9)
    b.line(0.8, link, "s2c", "250 2.6.0 queued")
    t = 1.3
    while t < (quit_at or 6.5):  # the sender's NOOPs until the node ends the session
        b.line(t, link, "c2s", "NOOP")
        b.line(t + 0.01, link, "s2c", "250 OK")
        t += 0.5
    if quit_at is not None:
        b.line(quit_at, link, "c2s", "QUIT")
        b.line(quit_at + 0.01, link, "s2c", "221 Bye")
    b.at(6.6 if quit_at is None else quit_at + 0.02, "close", link, conn=1, reason="closed")
    if delivered is not None:
        b.delivered(delivered, "w1", "mbx1", "alice@corp.test")
    b.at(14.0, "note", text="end")


def test_cr8_a_message_acknowledged_in_a_kept_session_is_delivered_at_once(
    tmp_path: Path,
) -> None:
    # "Sender session times out after the copy was made: the primary still processes and
    # delivers the message"
    b = Built(tmp_path, KEPT_OPEN)
    kept_open(b, delivered=6.7)  # only once the session ended
    found = b.explain().divergence
    assert found is not None and found.behaviour == "CR-8"
    assert found.rule == sentence("CR-8")
    assert "delivered it only at +6.7s" in found.observed
    ok = Built(tmp_path, KEPT_OPEN)
    kept_open(ok, delivered=0.9)
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["CR-8"] == 1


@pytest.mark.parametrize(
    ("copied", "quit_at"), [(False, None), (True, 1.0)], ids=["no-copy", "sender-quit"]
)
def test_cr8_is_not_judged_without_its_premise(
    tmp_path: Path, copied: bool, quit_at: float | None
) -> None:
    # "Sender session times out *after* the copy was made": an MTA that makes no copy,
    # or a sender that ends its session itself, is no case of it (a late delivery there
    # is for other rules to judge)
    b = Built(tmp_path, KEPT_OPEN)
    kept_open(b, delivered=6.7, copied=copied, quit_at=quit_at)
    outcome = b.explain()
    assert outcome.exercised["CR-8"] == 0
    assert outcome.divergence is None or outcome.divergence.behaviour != "CR-8"
