"""DI-2 read from the wire (checks/model/heartbeats.py), on histories built by hand: a
shadow holding a copy asks its primary for discard status in every session it opens to
it, and at least once every ShadowHeartbeatFrequency. What is owed only while a copy is
held, with both nodes up and linked, is not owed otherwise."""

from __future__ import annotations

from pathlib import Path

import pytest

from .built import Built, sentence

HELD = (
    "steps:\n  - fault: {link: mbx1->mailbox, kind: cut}\n"
    "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n"
    "  - send: {id: m2, via: mbx2, to: [alice@corp.test]}\n"
    "  - wait: 10s\n"
)


def copied(b: Built) -> None:
    """m1 through mbx1, copied to mbx2 (acknowledged at 0.71): mbx2 holds it from then on,
    its next hop cut."""
    b.steps(0.4, 0.5)
    b.copy_session(0.6, "mbx1->mbx2", "m1")
    b.reply(0.8, "mbx1", 250, copied=False)


def own_copy_session(b: Built, t: float, *, query: bool) -> None:
    """mbx2 copies its own message m2 to mbx1, in a session it opens at ``t``; mbx1 then
    asks mbx2 for discard status every heartbeat."""
    b.step(t - 0.1)
    link = "mbx2->mbx1"
    conn = 100
    b.at(t, "connect", link, conn=conn)
    said = [
        ("c2s", "EHLO mbx2"), ("s2c", "250-mbx1"), ("s2c", "250-XSHADOW mbx1 DB1"),
        ("s2c", "250 HELP"),
    ]  # fmt: skip
    if query:
        said += [("c2s", "XQDISCARD"), ("s2c", "250 0 discard notifications for mbx2")]
    said += [("c2s", "XSHADOWCOPY Q1 DB2 corp.test"), ("s2c", "250 2.0.0 Ready for shadow copy")]
    for i, (direction, text) in enumerate(said):
        b.line(t + 0.01 * (i + 1), link, direction, text, conn=conn)
    b.content(t + 0.2, link, "m2", conn=conn)
    b.line(t + 0.21, link, "s2c", "250 2.0.0 Shadow copy stored", conn=conn)
    b.line(t + 0.22, link, "c2s", "QUIT", conn=conn)
    b.line(t + 0.23, link, "s2c", "221 Bye", conn=conn)
    b.at(t + 0.24, "close", link, conn=conn, reason="client closed")
    # mbx1 now holds m2's copy: it asks mbx2 in turn
    b.heartbeats("mbx1", "mbx2", t + 0.5, 10.9)


def test_di2_a_query_in_the_session_carrying_the_shadows_own_copy(tmp_path: Path) -> None:
    # "The shadow asks the primary for discard status with XQDISCARD in every session it
    # opens to the primary, for any reason"
    b = Built(tmp_path, HELD)
    copied(b)
    b.heartbeats("mbx2", "mbx1", 1.0, 10.9)
    own_copy_session(b, 3.0, query=False)
    b.at(10.9, "note", text="end")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "DI-2"
    assert found.rule == sentence("DI-2")
    assert "in every session it opens to it" in found.expected
    assert "`XSHADOWCOPY Q1 DB2 corp.test`" in found.observed
    assert "never XQDISCARD" in found.observed
    ok = Built(tmp_path, HELD)
    copied(ok)
    ok.heartbeats("mbx2", "mbx1", 1.0, 10.9)
    own_copy_session(ok, 3.0, query=True)
    ok.at(10.9, "note", text="end")
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["DI-2"] >= 2


def test_di2_no_query_owed_by_a_node_holding_no_copy(tmp_path: Path) -> None:
    """mbx2 opens its session before it holds m1's copy: it is nobody's shadow yet."""
    b = Built(tmp_path, HELD.replace("m1, via: mbx1", "m0, via: mbx1"))
    b.steps(0.4, 0.5)
    own_copy_session(b, 0.6, query=False)
    b.at(10.9, "note", text="end")
    outcome = b.explain()
    # judged once: mbx1's heartbeats for m2's copy, not mbx2's session
    assert outcome.divergence is None and outcome.exercised["DI-2"] == 1


def test_di2_a_shadow_holding_a_copy_asks_every_heartbeat(tmp_path: Path) -> None:
    # "... and at least once every ShadowHeartbeatFrequency" (0.5 s here, slack 2 s)
    b = Built(tmp_path, HELD)
    copied(b)
    b.heartbeats("mbx2", "mbx1", 1.0, 3.0)
    b.heartbeats("mbx2", "mbx1", 6.0, 10.9)  # silent from 2.5 to 6.0
    b.at(10.9, "note", text="end")
    found = b.explain().divergence
    assert found is not None and found.behaviour == "DI-2"
    assert "at least once every ShadowHeartbeatFrequency (0.5 s)" in found.expected
    assert "it last asked at +2.5s" in found.observed and "until +6.0s" in found.observed
    # never asked at all while it held the copy
    never = Built(tmp_path, HELD)
    copied(never)
    never.at(10.9, "note", text="end")
    found = never.explain().divergence
    assert found is not None and found.behaviour == "DI-2"
    assert "after the copy was acknowledged at +0.7s" in found.observed
    ok = Built(tmp_path, HELD)
    copied(ok)
    ok.heartbeats("mbx2", "mbx1", 1.0, 10.9)
    ok.at(10.9, "note", text="end")
    outcome = ok.explain()
    assert outcome.divergence is None and outcome.exercised["DI-2"] >= 1


@pytest.mark.parametrize(
    "fault", ["fault: {link: mbx2->mbx1, kind: cut}", "pause: mbx2"], ids=["cut", "frozen"]
)
def test_di2_no_heartbeat_owed_across_a_cut_or_a_frozen_node(tmp_path: Path, fault: str) -> None:
    """The link between them cut, or the shadow frozen: it may have promoted the copy (or
    cannot ask), and owes no more queries - the rule judges only what came before."""
    wait = "  - wait: 10s\n"
    b = Built(tmp_path, HELD.replace(wait, f"  - {fault}\n" + wait))
    copied(b)
    b.heartbeats("mbx2", "mbx1", 1.0, 2.0)
    b.steps(2.0, 2.1, 2.2)
    b.at(10.9, "note", text="end")
    assert b.explain().divergence is None
    # the same silence with nothing in the way is a divergence
    silent = Built(tmp_path, HELD.replace(wait, "  - wait: 0.1s\n" + wait))
    copied(silent)
    silent.heartbeats("mbx2", "mbx1", 1.0, 2.0)
    silent.steps(2.0, 2.1, 2.2)
    silent.at(10.9, "note", text="end")
    found = silent.explain().divergence
    assert found is not None and found.behaviour == "DI-2"


def test_di2_no_query_owed_to_a_primary_that_stopped_offering_xshadow(tmp_path: Path) -> None:
    """ShadowRedundancyEnabled set false while mbx2 holds mbx1's copy: mbx1 then
    advertises no XSHADOW (CR-6), and a client uses no extension a server does not
    advertise, so mbx2's silence from then on owes nothing (the reference's own
    behaviour, which exploration seed 11's scenarios 220 and 307 FAILed before)."""
    wait = "  - wait: 10s\n"
    off = "  - set_settings: {values: {ShadowRedundancyEnabled: false}}\n"
    b = Built(tmp_path, HELD.replace(wait, off + wait))
    copied(b)
    b.heartbeats("mbx2", "mbx1", 1.0, 2.0)
    b.steps(2.0, 2.1)
    b.at(10.9, "note", text="end")
    assert b.explain().divergence is None
    # the same silence with redundancy on stays a divergence
    on = Built(tmp_path, HELD.replace(wait, off.replace("false", "true") + wait))
    copied(on)
    on.heartbeats("mbx2", "mbx1", 1.0, 2.0)
    on.steps(2.0, 2.1)
    on.at(10.9, "note", text="end")
    found = on.explain().divergence
    assert found is not None and found.behaviour == "DI-2"


def test_di2_a_heartbeat_made_shorter_while_the_cluster_runs_is_due_at_once(
    tmp_path: Path,
) -> None:
    """ShadowHeartbeatFrequency 4 s set to 0.5 s at +1.1s while mbx2 holds m1's copy: the
    next query is due 0.5 s (and the slack) after the change, not at the end of the 4 s
    beat under way (heartbeat-frequency-read-once's defect; before session 35 a copy held
    across a change was not judged at all). Made longer (0.5 s to 4 s), the later due
    stands: a shadow that takes the new frequency at once is no divergence."""
    wait = "  - wait: 10s\n"
    change = "  - set_settings: {values: {ShadowHeartbeatFrequency: 0.5s}}\n"
    slow = "settings: {ShadowHeartbeatFrequency: 4s}\n" + HELD.replace(wait, change + wait)

    def asks(b: Built, *times: float) -> None:
        for t in times:
            b.heartbeats("mbx2", "mbx1", t, t + 0.1)  # one query at t

    late = Built(tmp_path, slow)
    copied(late)
    late.steps(1.0, 1.1, 1.2)  # send m2, the change, the wait
    asks(late, 4.6, 8.6)  # the beat begun at +0.6s ran out first
    late.at(10.9, "note", text="end")
    found = late.explain().divergence
    assert found is not None and found.behaviour == "DI-2", found
    assert "ShadowHeartbeatFrequency (4 s, 0.5 s from +1.2s)" in found.expected
    assert "after the copy was acknowledged at +0.7s" in found.observed
    assert "until +4.6s" in found.observed
    at_once = Built(tmp_path, slow)
    copied(at_once)
    at_once.steps(1.0, 1.1, 1.2)
    at_once.heartbeats("mbx2", "mbx1", 1.3, 10.9)
    at_once.at(10.9, "note", text="end")
    outcome = at_once.explain()
    assert outcome.divergence is None and outcome.exercised["DI-2"] >= 1
    longer = Built(tmp_path, HELD.replace(wait, change.replace("0.5s", "4s") + wait))
    copied(longer)
    longer.steps(1.0, 1.1, 1.2)
    asks(longer, 1.0, 5.0, 9.0)
    longer.at(10.9, "note", text="end")
    outcome = longer.explain()
    assert outcome.divergence is None and outcome.exercised["DI-2"] >= 1, outcome.divergence
