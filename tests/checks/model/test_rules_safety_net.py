"""The model's rules for the rest of Safety Net (SN-4, SN-7, SN-8), on histories built by
hand on a virtual clock: the observation the catalogue forbids is a divergence under the
rule's ID quoting its sentence; what it allows is not."""

from __future__ import annotations

from pathlib import Path

from pytest_shadowcheck.checks.model import ModelOutcome

from .built import TOKEN, Built, sentence


def delivered(b: Built, t: float, by: str, stamps: tuple[str, ...] | None) -> None:
    """m1 delivered to alice by ``by``, the sink recording the X-Categorized-By stamps."""
    if stamps is None:
        b.delivered(t, "m1", by, "alice@corp.test")
        return
    b.at(
        t, "delivery", sink="mailbox", trace=f"m1.{TOKEN}", mail_from="s",
        message_id=f"<m1.{TOKEN}@shadowcheck.test>", rcpt_tos=["alice@corp.test"], helo=by,
        categorised=list(stamps),
    )  # fmt: skip


# -- SN-7: the 12-hour broadcast to the Shadow Safety Nets ------------------------------


def unavailable(
    tmp_path: Path, *again: tuple[float, str], stamps: tuple[tuple[str, ...], ...] = ()
) -> Built:
    """m1 delivered by mbx1 and seen in mbx2's Shadow Safety Net; mbx1 killed; a request
    made to mbx2; the clock moved 11h50m, then 20m; ``again``: redeliveries (t, by)."""
    b = Built(
        tmp_path,
        "steps:\n  - set_settings: {values: {SafetyNetHoldTime: 1d}}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n  - wait: 1s\n"
        "  - advance: 2m\n  - snapshot: {node: mbx2, queue: safetynet_shadow}\n"
        "  - kill: mbx1\n  - advance: 1m\n"
        '  - resubmit: {node: mbx2, database: DB1, start: "-1h", end: "now"}\n'
        "  - advance: 11h + 50m\n  - wait: 1s\n  - advance: 20m\n  - wait: 8s\n"
        "  - snapshot: {node: mbx2, queue: active}\n",
        topology="two-node-dag-virtual",
    )
    b.step(0.1)
    b.step(0.2)
    b.reply(0.3, "mbx1", 250)
    delivered(b, 0.4, "mbx1", stamps[0] if stamps else None)
    b.steps(0.5, 1.5, 1.6)
    b.looked(1.7, "mbx2", "safetynet_shadow", "m1")
    b.steps(1.8, 1.9, 2.0, 2.1, 2.2, 3.2, 3.3)
    for i, (t, by) in enumerate(again):
        delivered(b, t, by, stamps[i + 1] if stamps else None)
    b.step(11.3)
    b.looked(11.4, "mbx2", "active")
    return b


def test_sn7_a_shadow_safety_net_answers_after_the_12_hours(tmp_path: Path) -> None:
    # "If the Primary Safety Net does not answer for 12 hours, the request is broadcast to
    # every node in the boundary and a Shadow Safety Net resubmits the messages for that
    # database and window."
    found = unavailable(tmp_path).explain().divergence
    assert found is not None and found.behaviour == "SN-7"
    assert found.rule == sentence("SN-7")
    assert "resubmits it" in found.expected and "no Shadow Safety Net" in found.observed
    ok = unavailable(tmp_path, (3.6, "mbx2")).explain()
    assert ok.divergence is None and ok.exercised["SN-7"] == 1


def test_sn7_a_failed_attempt_is_retried_when_the_nodes_clock_moves(tmp_path: Path) -> None:
    # "... a Shadow Safety Net resubmits the messages": mbx2 resubmits m1 and tries the
    # mailbox, but the session ends before DATA (a reply later than the node's timeout:
    # the harness stalled 1 s, seed 9009 scenario 95); its retry waits
    # TransientFailureRetryInterval on the nodes' clock, which does not move again here
    b = unavailable(tmp_path)
    hop = "mbx2->mailbox"
    b.line(3.4, hop, "s2c", "220 mailbox ready")
    b.line(3.41, hop, "c2s", "EHLO mbx2")
    b.line(4.5, hop, "s2c", "250 mailbox")
    b.at(4.5, "close", hop, conn=1, reason="client closed")
    outcome = b.explain()
    assert outcome.divergence is None, outcome.divergence
    assert outcome.exercised["SN-7"] == 0
    # a session that took the message is no failed attempt: no redelivery is a divergence
    taken = unavailable(tmp_path)
    for t, direction, text in (
        (3.4, "s2c", "220 mailbox ready"), (3.41, "c2s", "DATA"), (3.42, "s2c", "354 go on"),
        (3.45, "s2c", "250 2.6.0 queued"),
    ):  # fmt: skip
        taken.line(t, hop, direction, text)
    found = taken.explain().divergence
    assert found is not None and found.behaviour == "SN-7", found


def test_sn7_nothing_from_a_shadow_before_the_12_hours(tmp_path: Path) -> None:
    # "... does not answer for 12 hours": a broadcast at once is a divergence
    found = unavailable(tmp_path, (2.05, "mbx2"), (3.6, "mbx2")).explain().divergence
    assert found is not None and found.behaviour == "SN-7"
    assert "before PrimarySafetyNetUnavailableTimeout (12h)" in found.expected
    assert "again at" in found.observed


# -- SN-8: a partial window after the queue database was recreated ------------------------


def recreated(tmp_path: Path, *again: tuple[float, str, str], tail: str = "") -> Built:
    """m1 delivered by mbx1 and seen in mbx2's Shadow Safety Net; 5 minutes later mbx1's
    queue database recreated; 5 minutes later m2 likewise; a request to mbx1 for the last
    hour; ``again``: redeliveries (t, ref, by); ``tail``: one step more, at +16s."""
    b = Built(
        tmp_path,
        "steps:\n  - set_settings: {values: {SafetyNetHoldTime: 1d}}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n  - wait: 1s\n"
        "  - advance: 2m\n  - snapshot: {node: mbx2, queue: safetynet_shadow}\n"
        "  - advance: 5m\n  - wipe: mbx1\n  - wait: 4s\n  - advance: 5m\n"
        "  - send: {id: m2, via: mbx1, to: [alice@corp.test]}\n  - wait: 1s\n"
        "  - advance: 2m\n  - snapshot: {node: mbx2, queue: safetynet_shadow}\n"
        "  - advance: 1m\n"
        '  - resubmit: {node: mbx1, database: DB1, start: "-1h", end: "now"}\n'
        "  - wait: 8s\n  - snapshot: {node: mbx1, queue: active}\n" + tail,
        topology="two-node-dag-virtual",
    )
    b.step(0.1)
    b.step(0.2)
    b.reply(0.3, "mbx1", 250)
    b.delivered(0.4, "m1", "mbx1", "alice@corp.test")
    b.steps(0.5, 1.5, 1.6)
    b.looked(1.7, "mbx2", "safetynet_shadow", "m1")
    b.step(1.8)
    b.step(1.9, back=2.5)
    b.steps(2.6, 6.6)
    b.step(6.7)
    b.reply(6.8, "mbx1", 250)
    b.delivered(6.9, "m2", "mbx1", "alice@corp.test")
    b.steps(7.0, 7.0, 7.1)
    b.looked(7.2, "mbx2", "safetynet_shadow", "m1", "m2")
    b.steps(7.3, 7.4, 7.5)
    for t, ref, by in again:
        b.delivered(t, ref, by, "alice@corp.test")
    b.step(15.5)
    b.looked(15.6, "mbx1", "active")
    if tail:
        b.step(16.0)
    return b


def test_sn8_the_part_before_the_creation_comes_from_a_shadow_safety_net(tmp_path: Path) -> None:
    # "Partial window: the primary's queue database was recreated at 07:00; a request for
    # 01:00-09:00 makes the primary resubmit 07:00-09:00 and broadcast a request for
    # 01:00-07:00, which a Shadow Safety Net answers."
    found = recreated(tmp_path, (7.6, "m2", "mbx1")).explain().divergence
    assert found is not None and found.behaviour == "SN-8"
    assert found.rule == sentence("SN-8")
    assert "broadcasts the part" in found.expected and "m1 only from mbx1" in found.observed
    ok = recreated(tmp_path, (7.6, "m2", "mbx1"), (7.7, "m1", "mbx2")).explain()
    assert ok.divergence is None and ok.exercised["SN-8"] == 2


def test_sn8_the_part_after_the_creation_never_comes_from_a_shadow(tmp_path: Path) -> None:
    # "... makes the primary resubmit 07:00-09:00 and broadcast a request for 01:00-07:00"
    b = recreated(tmp_path, (7.6, "m2", "mbx1"), (7.7, "m1", "mbx2"), (7.8, "m2", "mbx2"))
    found = b.explain().divergence
    assert found is not None and found.behaviour == "SN-8"
    assert "broadcasts only the part of the window before that creation" in found.expected
    assert "got m2 again" in found.observed and "from mbx2" in found.observed


def test_sn8_what_happens_after_the_requests_deadline_excuses_nothing(tmp_path: Path) -> None:
    # a node killed once the request's deadline is past cannot have caused mbx2's
    # redelivery of m2 before it (seed 11, scenario 27: the rest of the scenario's faults
    # left SN-8 unjudged)
    b = recreated(
        tmp_path, (7.6, "m2", "mbx1"), (7.7, "m1", "mbx2"), (7.8, "m2", "mbx2"),
        tail="  - kill: mbx2\n",
    )  # fmt: skip
    found = b.explain().divergence
    assert found is not None and found.behaviour == "SN-8", found
    assert "got m2 again" in found.observed


# -- SN-4: an unacknowledged shadow copy expires after hold + expiration -------------------


#: mbx1 (MessageExpirationTimeout 7 days) cut from the next hop, mbx2's expiration 2 days,
#: SafetyNetHoldTime 1 hour; m1 sent through mbx1 (its first five steps)
CUT_FOR_A_WEEK = (
    "settings: {SafetyNetHoldTime: 1h}\n"
    "steps:\n  - set_settings: {nodes: [mbx1], values: {MessageExpirationTimeout: 7d}}\n"
    "  - set_settings: {nodes: [mbx2], values: {MessageExpirationTimeout: 2d}}\n"
    "  - fault: {link: mbx1->mailbox, kind: cut}\n  - wait: 3s\n"
    "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n  - wait: 1s\n"
)


def unacknowledged(tmp_path: Path, advance: str, *held: str) -> Built:
    """mbx1 cannot reach the next hop and keeps m1 (its MessageExpirationTimeout 7 days);
    mbx2's copy looked at after ``advance`` (SafetyNetHoldTime 1h, its expiration 2d)."""
    b = Built(
        tmp_path,
        CUT_FOR_A_WEEK + "  - snapshot: {node: mbx2, queue: shadow}\n"
        f"  - advance: {advance}\n  - wait: 2s\n  - snapshot: {{node: mbx2, queue: shadow}}\n",
        topology="two-node-dag-virtual",
    )
    b.steps(0.1, 0.2, 0.3, 0.4)
    b.step(3.4)
    b.reply(3.5, "mbx1", 250)
    b.steps(3.6, 4.6)
    b.looked(4.7, "mbx2", "shadow", "m1")
    b.steps(4.8, 4.9, 6.9)
    b.looked(7.0, "mbx2", "shadow", *held)
    return b


def test_sn4_an_unacknowledged_copy_outlives_the_hold_time(tmp_path: Path) -> None:
    # "Unacknowledged shadow messages expire from Safety Net after SafetyNetHoldTime +
    # MessageExpirationTimeout."
    found = unacknowledged(tmp_path, "2d + 1h - 3m").explain().divergence
    assert found is not None and found.behaviour == "SN-4"
    assert found.rule == sentence("SN-4")
    assert "1h + 2d" in found.expected and "did not hold m1" in found.observed
    ok = unacknowledged(tmp_path, "2d + 1h - 3m", "m1").explain()
    assert ok.divergence is None and ok.exercised["SN-4"] == 1
    # past the sum it may rightly be gone
    gone = unacknowledged(tmp_path, "2d + 1h").explain()
    assert gone.divergence is None and gone.exercised["SN-4"] == 0


def expired_then_delivered(tmp_path: Path, advance: str, *kept: str, then: str = "1m") -> Built:
    """As ``unacknowledged``, then the link healed after ``advance``: m1 is delivered, the
    clock moved ``then`` (the heartbeat that tells mbx2) and mbx2's Shadow Safety Net
    looked at."""
    b = Built(
        tmp_path,
        CUT_FOR_A_WEEK
        + f"  - advance: {advance}\n  - wait: 2s\n  - heal: mbx1->mailbox\n  - wait: 1s\n"
        f"  - advance: {then}\n  - wait: 4s\n"
        "  - snapshot: {node: mbx2, queue: safetynet_shadow}\n",
        topology="two-node-dag-virtual",
    )
    b.steps(0.1, 0.2, 0.3, 0.4)
    b.step(3.4)
    b.reply(3.5, "mbx1", 250)
    b.steps(3.6, 4.6, 4.7, 6.7, 6.8)
    b.delivered(7.0, "m1", "mbx1", "alice@corp.test")
    b.steps(7.8, 7.9, 11.8)
    b.looked(11.9, "mbx2", "safetynet_shadow", *kept)
    return b


def test_sn2_not_judged_for_a_copy_that_may_have_expired_before_its_delivery(
    tmp_path: Path,
) -> None:
    # "After DI-4 the shadow keeps the message in its Shadow Safety Net" - a copy it
    # still holds: past SafetyNetHoldTime + MessageExpirationTimeout it may have expired
    # (SN-4) before the delivery's discard, and then there is nothing to keep (the
    # reference, seed 2027 of the slice)
    found = expired_then_delivered(tmp_path, "1h - 5m").explain().divergence
    assert found is not None and found.behaviour == "SN-2", found
    assert "Shadow Safety Net of mbx2 did not hold it" in found.observed
    assert expired_then_delivered(tmp_path, "1h - 5m", "m1").explain().divergence is None
    gone = expired_then_delivered(tmp_path, "2d + 1h + 5m").explain()
    assert gone.divergence is None and gone.exercised["SN-2"] == 0


def test_sn2_on_a_virtual_clock_the_shadow_learns_of_a_delivery_at_its_next_heartbeat(
    tmp_path: Path,
) -> None:
    # "After DI-4 the shadow keeps the message in its Shadow Safety Net": DI-4 comes with
    # the shadow's discard query, every ShadowHeartbeatFrequency on the nodes' clock; a
    # virtual clock that has not moved since the delivery has rung no heartbeat (the
    # reference, seed 11, scenario 31)
    still = expired_then_delivered(tmp_path, "1h - 5m", then="0.2s").explain()
    assert still.divergence is None and still.exercised["SN-2"] == 0
    moved = expired_then_delivered(tmp_path, "1h - 5m", then="1s").explain().divergence
    assert moved is not None and moved.behaviour == "SN-2"


# -- SN-11: a Shadow Safety Net copy categorised afresh ----------------------------------


def test_sn11_a_resubmitted_shadow_copy_is_categorised_afresh(tmp_path: Path) -> None:
    # "A Shadow Safety Net copy has none of the primary's later changes (content
    # conversion) and goes through full categorisation on resubmission."
    def run(*again: str) -> Built:
        return unavailable(tmp_path, (3.6, "mbx2"), stamps=(("mbx1",), tuple(again)))

    for wrong in ((), ("mbx1",), ("mbx2", "mbx1")):
        found = run(*wrong).explain().divergence
        assert found is not None and found.behaviour == "SN-11", wrong
        assert found.rule == sentence("SN-11")
        assert "categorised afresh (a stamp of mbx2)" in found.expected
    ok = run("mbx2").explain()
    assert ok.divergence is None and ok.exercised["SN-11"] == 1
    # an MTA whose own delivery shows no stamp is not judged
    unstamped = unavailable(tmp_path, (3.6, "mbx2"), stamps=((), ())).explain()
    assert unstamped.divergence is None and unstamped.exercised["SN-11"] == 0


def test_sn3_a_shadow_safety_net_entry_dates_from_the_heartbeat_that_told_the_shadow(
    tmp_path: Path,
) -> None:
    # "Messages leave the Safety Net after SafetyNetHoldTime": the shadow's entry is made
    # when it learns of the delivery (DI-4), at a heartbeat; on a virtual clock the first
    # comes with the advance after the delivery (9 minutes here), so 14 minutes after the
    # delivery a 10-minute hold may have run only 5 minutes (the reference, seed 11,
    # scenario 31); and it may have been stamped as early as the delivery, so it is owed
    # only up to 10 minutes after that
    def run(later: str, *held: str) -> Built:
        b = Built(
            tmp_path,
            "settings: {SafetyNetHoldTime: 10m}\n"
            "steps:\n  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n  - wait: 1s\n"
            f"  - advance: 9m\n  - wait: 3s\n  - advance: {later}\n  - wait: 3s\n"
            "  - snapshot: {node: mbx2, queue: safetynet_shadow}\n",
            topology="two-node-dag-virtual",
        )
        b.step(0.1)
        b.reply(0.2, "mbx1", 250)
        b.delivered(0.3, "m1", "mbx1", "alice@corp.test")
        b.steps(0.4, 1.4, 1.5, 4.5, 4.6, 7.6)
        b.looked(7.7, "mbx2", "safetynet_shadow", *held)
        return b

    kept = run("5m", "m1").explain()
    assert kept.divergence is None, kept.divergence
    assert run("5m").explain().divergence is None
    found = run("30s").explain().divergence
    assert found is not None and found.behaviour == "SN-2", found


# -- SN-1: how far the nodes' clock may have moved by a look ------------------------------


def test_sn1_a_day_s_advance_just_before_the_look_may_have_emptied_the_safety_net(
    tmp_path: Path,
) -> None:
    # "... the message moves from its active queue to the Primary Safety Net": it stays
    # for SafetyNetHoldTime, and the node may have applied an advance as soon as it was
    # asked; a look 2.7 s after a 2-hour advance may find it gone, however much slack a
    # loaded machine is granted (seed 9009, scenario 95: the slack widened to 3.1 s)
    def run(slack: float, *held: str) -> ModelOutcome:
        b = Built(
            tmp_path,
            "settings: {SafetyNetHoldTime: 1h}\n"
            "steps:\n  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n  - wait: 1s\n"
            "  - advance: 2h\n  - wait: 2.5s\n"
            "  - snapshot: {node: mbx1, queue: safetynet_primary}\n",
            topology="two-node-dag-virtual",
        )
        b.step(0.1)
        b.reply(0.2, "mbx1", 250)
        b.delivered(0.3, "m1", "mbx1", "alice@corp.test")
        b.steps(0.4, 1.4, 1.5)
        b.looked(4.1, "mbx1", "safetynet_primary", *held)
        b.step(4.1)
        return b.explain(slack=slack)

    for slack in (2.0, 3.1):
        assert run(slack).divergence is None, (slack, run(slack).divergence)
    # and a look before the advance still owes the entry
    early = Built(
        tmp_path,
        "settings: {SafetyNetHoldTime: 1h}\n"
        "steps:\n  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n  - wait: 3s\n"
        "  - snapshot: {node: mbx1, queue: safetynet_primary}\n  - advance: 2h\n",
        topology="two-node-dag-virtual",
    )
    early.step(0.1)
    early.reply(0.2, "mbx1", 250)
    early.delivered(0.3, "m1", "mbx1", "alice@corp.test")
    early.step(0.4)
    early.looked(3.5, "mbx1", "safetynet_primary")
    early.steps(3.5, 3.6)
    found = early.explain().divergence
    assert found is not None and found.behaviour == "SN-1", found


# -- SN-2: the Shadow Safety Net of the node that held the copy --------------------------


def test_sn2_is_judged_at_the_shadow_the_wire_shows_the_copy_went_to(tmp_path: Path) -> None:
    # "After DI-4 the shadow keeps the message in its Shadow Safety Net": of mbx2's two
    # possible shadows (PreferRemote in a two-site DAG), the one its XSHADOWCOPY session
    # went to is the shadow; the other's Shadow Safety Net rightly lacks the message
    # (the reference, seed 8008, scenario 69: the copy on mbx3, mbx1 looked at)
    def run(**held: tuple[str, ...]) -> Built:
        b = Built(
            tmp_path,
            "settings: {ShadowMessagePreferenceSetting: PreferRemote}\n"
            "steps:\n  - send: {id: m1, via: mbx2, to: [alice@corp.test]}\n  - wait: 4s\n"
            "  - snapshot: {node: mbx1, queue: safetynet_shadow}\n"
            "  - snapshot: {node: mbx3, queue: safetynet_shadow}\n",
            topology="creation-two-site-dag",
        )
        b.step(0.1)
        b.copy_session(0.12, "mbx2->mbx3", "m1")
        b.reply(0.3, "mbx2", 250, copied=False)
        b.delivered(0.35, "m1", "mbx2", "alice@corp.test")
        b.heartbeats("mbx3", "mbx2", 0.5, 4.0)
        b.steps(0.4)
        b.looked(4.5, "mbx1", "safetynet_shadow", *held.get("mbx1", ()))
        b.step(4.5)
        b.looked(4.6, "mbx3", "safetynet_shadow", *held.get("mbx3", ()))
        b.step(4.6)
        return b

    kept = run(mbx3=("m1",)).explain()
    assert kept.divergence is None, kept.divergence
    assert kept.exercised["SN-2"] == 1
    found = run().explain().divergence
    assert found is not None and found.behaviour == "SN-2", found
    assert "Shadow Safety Net of mbx3 did not hold it" in found.observed
