"""The model's rules of placement and forks on histories built by hand: where a shadow
copy may be (CR-7), what a next hop's answers to each recipient oblige (CR-10), a bounce
taken like any message (CR-1). Each quotes the catalogue's sentence it reads."""

from __future__ import annotations

from pathlib import Path

from .built import Built, sentence

SINK = "mbx1->mailbox"


def transaction(
    b: Built, t: float, ref: str, answers: dict[str, str], eod: str = "250 2.6.0 queued",
    conn: int = 1,
) -> None:  # fmt: skip
    """mbx1 offers ``ref`` to the mailbox sink: each recipient answered as given, then
    the content (when one was taken) and the reply to its final dot; the delivery
    recorded for the recipients taken."""
    b.line(t, SINK, "c2s", "MAIL FROM:<sender@ext.test>", conn)
    b.line(t, SINK, "s2c", "250 2.1.0 Sender OK", conn)
    for rcpt, answer in answers.items():
        b.line(t, SINK, "c2s", f"RCPT TO:<{rcpt}>", conn)
        b.line(t, SINK, "s2c", answer, conn)
    taken = [r for r, a in answers.items() if a.startswith("250")]
    if not taken:
        return
    b.line(t, SINK, "c2s", "DATA", conn)
    b.line(t, SINK, "s2c", "354 go ahead", conn)
    b.content(t + 0.01, SINK, ref, conn)
    if eod.startswith("250"):
        b.delivered(t + 0.01, ref, "mbx1", *taken)
    b.line(t + 0.02, SINK, "s2c", eod, conn)


def refusing(tmp_path: Path, rule: str) -> Built:
    b = Built(
        tmp_path,
        "steps:\n"
        f"  - sink: {{name: mailbox, rcpt: {{bob@corp.test: '{rule}'}}}}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test, bob@corp.test]}\n"
        "  - sink: {name: mailbox, reply: accept}\n"
        "  - wait: 5s\n",
    )
    b.steps(1.0, 1.2, 3.0, 3.1)
    b.reply(1.5, "mbx1", 250)
    b.at(12.0, "note", text="end")
    return b


def test_cr10_quotes_the_catalogue() -> None:
    assert "the shadow copy is not released until every fork" in sentence("CR-10")
    assert "PreferRemote tries a remote-site node" in sentence("CR-7")


def test_cr10_a_recipient_the_next_hop_took_is_not_sent_again(tmp_path: Path) -> None:
    # CR-10: "the shadow copy is not released until every fork (...) is fully
    # processed": the taken recipient's fork is done; only the deferred one is retried
    b = refusing(tmp_path, "450 4.2.1 busy")
    transaction(b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "450 4.2.1 busy"})
    transaction(b, 3.5, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "250 ok"}, conn=2)
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-10"
    assert "delivered m1 to alice@corp.test again" in outcome.divergence.observed


def test_cr10_the_deferred_recipient_alone_is_retried(tmp_path: Path) -> None:
    b = refusing(tmp_path, "450 4.2.1 busy")
    transaction(b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "450 4.2.1 busy"})
    transaction(b, 3.5, "m1", {"bob@corp.test": "250 ok"}, conn=2)
    outcome = b.explain()
    assert outcome.divergence is None
    assert outcome.exercised["CR-10"] >= 1


def test_cr10_a_recipient_refused_for_now_is_retried_not_bounced(tmp_path: Path) -> None:
    # a 4xx is no failure of the fork: it is not fully processed until bob is delivered
    b = refusing(tmp_path, "450 4.2.1 busy")
    transaction(b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "450 4.2.1 busy"})
    b.at(1.7, "delivery", sink="senders", mail_from="<>", rcpt_tos=["sender@ext.test"], helo="mbx1")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-10"
    assert "never reached bob@corp.test" in outcome.divergence.observed


def test_cr10_a_refusal_for_good_is_not_retried(tmp_path: Path) -> None:
    # a 500 is a 5xx like 550: the fork has failed (a DSN), it is not tried again
    b = refusing(tmp_path, "500 5.0.0 refused")
    transaction(b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "500 5.0.0 refused"})
    transaction(b, 3.5, "m1", {"bob@corp.test": "250 ok"}, conn=2)
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-10"
    assert "tried again and delivered m1 to bob@corp.test" in outcome.divergence.observed


def test_cr10_a_refusal_for_good_bounced_is_what_the_catalogue_allows(tmp_path: Path) -> None:
    b = refusing(tmp_path, "550 5.1.1 no such user")
    transaction(
        b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "550 5.1.1 no such user"}
    )
    b.at(1.7, "delivery", sink="senders", mail_from="<>", rcpt_tos=["sender@ext.test"], helo="mbx1")
    outcome = b.explain()
    assert outcome.divergence is None
    assert outcome.exercised["CR-10"] >= 1


def test_cr10_a_fork_refused_for_good_makes_a_dsn(tmp_path: Path) -> None:
    # the fork is fully processed when its DSN is out: a refusal for good owes one
    b = refusing(tmp_path, "500 5.0.0 refused")
    transaction(b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "500 5.0.0 refused"})
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-10"
    assert "no report from mbx1 reached senders" in outcome.divergence.observed


def test_cr10_a_second_try_after_an_outage_is_not_judged(tmp_path: Path) -> None:
    b = Built(
        tmp_path,
        "steps:\n"
        "  - sink: {name: mailbox, rcpt: {bob@corp.test: '450 4.2.1 busy'}}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test, bob@corp.test]}\n"
        "  - kill: mbx1\n"
        "  - restart: mbx1\n",
    )
    b.steps(1.0, 1.2, 2.0)
    b.step(3.0, back=3.2)
    b.reply(1.5, "mbx1", 250)
    transaction(b, 1.6, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "450 4.2.1 busy"})
    transaction(b, 3.5, "m1", {"alice@corp.test": "250 ok", "bob@corp.test": "250 ok"}, conn=2)
    assert b.explain().divergence is None


# -- CR-7: placement ---------------------------------------------------------------------


def placed(tmp_path: Path, topology: str, preference: str, holder: str) -> Built:
    b = Built(
        tmp_path,
        f"settings: {{ShadowMessagePreferenceSetting: {preference}}}\n"
        "steps:\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n"
        "  - snapshot: {node: " + holder + ", queue: shadow}\n",
        topology=topology,
    )
    b.steps(1.0, 1.6)
    b.reply(1.3, "mbx1", 250)
    b.looked(1.7, holder, "shadow", "m1")
    return b


def test_cr7_local_only_keeps_the_copy_in_the_site(tmp_path: Path) -> None:
    # CR-7: "RemoteOnly and LocalOnly try only their side"
    outcome = placed(tmp_path, "creation-two-site-dag", "LocalOnly", "mbx3").explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-7"
    assert "ShadowMessagePreferenceSetting is LocalOnly" in outcome.divergence.expected
    good = placed(tmp_path, "creation-two-site-dag", "LocalOnly", "mbx2").explain()
    assert good.divergence is None


def test_cr7_prefer_remote_tries_the_remote_site_first(tmp_path: Path) -> None:
    # CR-7: "PreferRemote tries a remote-site node up to MaxRetriesForRemoteSiteShadow
    # times, then a local-site node"
    outcome = placed(tmp_path, "creation-two-site-dag", "PreferRemote", "mbx2").explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-7"
    assert "tries it first, and mbx3 was up and reachable" in outcome.divergence.expected
    good = placed(tmp_path, "creation-two-site-dag", "PreferRemote", "mbx3").explain()
    assert good.divergence is None
    assert good.exercised["CR-7"] == 1


def test_cr7_prefer_remote_falls_back_to_the_local_site(tmp_path: Path) -> None:
    b = Built(
        tmp_path,
        "steps:\n  - kill: mbx3\n  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n"
        "  - snapshot: {node: mbx2, queue: shadow}\n",
        topology="creation-two-site-dag",
    )
    b.steps(0.5, 1.0, 1.6)
    b.reply(1.3, "mbx1", 250)
    b.looked(1.7, "mbx2", "shadow", "m1")
    assert b.explain().divergence is None


def test_cr7_outside_a_dag_the_local_site_only(tmp_path: Path) -> None:
    # CR-7: "Outside a DAG, or in a single-site DAG: local site only, whatever the
    # preference"
    outcome = placed(tmp_path, "creation-ad-site", "PreferRemote", "mbx3").explain()
    assert outcome.divergence is not None
    assert "only a node of its own site (site-a)" in outcome.divergence.expected
    assert placed(tmp_path, "creation-ad-site", "RemoteOnly", "mbx2").explain().divergence is None


# -- CR-1: a bounce sent in ---------------------------------------------------------------


def test_cr1_a_bounce_is_taken_like_any_message(tmp_path: Path) -> None:
    # CR-1: "A message received from outside the boundary is copied to a shadow node
    # inside the boundary before the primary acknowledges DATA to the sender"
    b = Built(tmp_path, "steps:\n  - send: {id: b1, via: mbx1, from: '', to: [alice@corp.test]}\n")
    b.steps(1.0)
    b.reply(1.3, "mbx1", 550, "5.1.7 the null reverse-path is not accepted here")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-1"
    assert "(MAIL FROM:<>)" in outcome.divergence.expected


def test_cr1_a_bounce_for_a_domain_the_node_does_not_route_may_be_refused(
    tmp_path: Path,
) -> None:
    # only mbx1 routes only1.test: mbx2 refuses to relay there, for any sender
    b = Built(
        tmp_path,
        "steps:\n  - send: {id: b1, via: mbx2, from: '', to: [erin@only1.test]}\n",
        topology="outages-one-route",
    )
    b.steps(1.0)
    b.reply(1.3, "mbx2", 550, "5.7.54 Unable to relay recipient in non-accepted domain")
    outcome = b.explain()
    assert outcome.divergence is None and "CR-1" not in outcome.exercised


def forked(tmp_path: Path, other: str) -> Built:
    b = Built(
        tmp_path,
        "steps:\n"
        f"  - sink: {{name: other, reply: '{other}'}}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test, dan@other.test]}\n"
        "  - snapshot: {node: mbx2, queue: shadow}\n"
        "  - snapshot: {node: mbx2, queue: shadow}\n",
        topology="creation-forks",
    )
    b.steps(1.0, 1.2, 1.6, 4.0)
    b.reply(1.5, "mbx1", 250)
    b.looked(1.61, "mbx2", "shadow", "m1")
    b.delivered(1.7, "m1", "mbx1", "alice@corp.test")
    return b


def test_cr10_the_copy_is_kept_until_every_next_hop_has_it(tmp_path: Path) -> None:
    # CR-10: "the shadow copy is not released until every fork (...) is fully processed"
    b = forked(tmp_path, "451 4.3.0 busy")
    b.looked(4.01, "mbx2", "shadow")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-10"
    assert "dan@other.test had not been delivered by then" in outcome.divergence.expected
    kept = forked(tmp_path, "451 4.3.0 busy")
    kept.looked(4.01, "mbx2", "shadow", "m1")
    assert kept.explain().divergence is None


def test_cr10_the_copy_is_kept_until_the_dsn_is_out(tmp_path: Path) -> None:
    # "... every fork (including DSNs and journal reports) is fully processed"
    b = forked(tmp_path, "550 5.1.1 no such user")
    b.line(1.65, "mbx1->other", "c2s", "MAIL FROM:<sender@ext.test>")
    b.line(1.65, "mbx1->other", "s2c", "250 ok")
    b.line(1.65, "mbx1->other", "c2s", "RCPT TO:<dan@other.test>")
    b.line(1.65, "mbx1->other", "s2c", "250 ok")
    b.line(1.65, "mbx1->other", "c2s", "DATA")
    b.line(1.65, "mbx1->other", "s2c", "354 go ahead")
    b.content(1.66, "mbx1->other", "m1")
    b.line(1.67, "mbx1->other", "s2c", "550 5.1.1 no such user")
    b.looked(4.01, "mbx2", "shadow")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert "no DSN had been delivered since" in outcome.divergence.expected
    b.at(2.0, "delivery", sink="outside", mail_from="<>", rcpt_tos=["sender@ext.test"], helo="mbx1")
    assert b.explain().divergence is None


# -- PR-5: a copy without a route --------------------------------------------------------


def routeless_copy(tmp_path: Path, queue: str) -> Built:
    b = Built(
        tmp_path,
        "steps:\n"
        "  - sink: {name: mailbox, rcpt: {erin@only1.test: '451 4.3.0 busy'}}\n"
        "  - send: {id: m1, via: mbx1, to: [erin@only1.test]}\n"
        "  - kill: mbx1\n"
        "  - wait: 7s\n"
        "  - snapshot: {node: mbx2, queue: " + queue + "}\n",
        topology="outages-one-route",
    )
    b.steps(0.5, 1.0, 2.0, 2.1, 9.0)
    b.reply(1.3, "mbx1", 250)
    b.looked(1.5, "mbx2", "shadow", "m1")
    return b


def test_pr5_a_copy_without_a_route_is_not_promoted(tmp_path: Path) -> None:
    # PR-5: "A shadow message with no alternative route stays in the shadow queue and is
    # not resubmitted until a route exists"
    assert "stays in the shadow queue" in sentence("PR-5")
    b = routeless_copy(tmp_path, "active")
    b.looked(9.1, "mbx2", "active", "m1")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "PR-5"
    assert "mbx2 has no route for erin@only1.test" in outcome.divergence.expected


def test_pr5_the_copy_waiting_in_the_shadow_queue_is_what_the_catalogue_allows(
    tmp_path: Path,
) -> None:
    b = routeless_copy(tmp_path, "shadow")
    b.looked(9.1, "mbx2", "shadow", "m1")
    outcome = b.explain()
    assert outcome.divergence is None
    assert outcome.exercised["PR-5"] == 1


def remote_cut(tmp_path: Path, sessions: int, live_tries: int | None = None) -> Built:
    """mbx1's link to mbx3, alone in the remote site, cut; m1 sent at 3.0 and answered at
    3.4, after ``sessions`` sessions to mbx3. With ``live_tries`` an admin sets
    MaxRetriesForRemoteSiteShadow to it at 3.1, while the primary is making its copy."""
    change = (
        f"  - set_settings: {{values: {{MaxRetriesForRemoteSiteShadow: {live_tries}}}}}\n"
        if live_tries is not None
        else ""
    )
    # sent in the background, so that the change can come before the reply
    background = ", background: true" if live_tries is not None else ""
    b = Built(
        tmp_path,
        "steps:\n  - fault: {link: mbx1->mbx3, kind: cut}\n"
        f"  - send: {{id: m1, via: mbx1, to: [alice@corp.test]{background}}}\n" + change,
        topology="creation-two-site-dag",
    )
    b.steps(0.5, 3.0)
    for i in range(sessions):
        b.at(3.01 + i / 100, "connect", "mbx1->mbx3", conn=i + 1)
    if live_tries is not None:
        b.step(3.1)
    b.at(3.2, "connect", "mbx1->mbx2", conn=1)
    b.reply(3.4, "mbx1", 250)
    return b


def test_cr7_every_remote_attempt_is_made_before_the_local_site(tmp_path: Path) -> None:
    # CR-7: "PreferRemote tries a remote-site node up to MaxRetriesForRemoteSiteShadow
    # times, then a local-site node up to MaxRetriesForLocalSiteShadow times"
    outcome = remote_cut(tmp_path, 1).explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-7"
    assert "MaxRetriesForRemoteSiteShadow (4) times" in outcome.divergence.expected
    assert "opened 1 session(s) to mbx3" in outcome.divergence.observed
    good = remote_cut(tmp_path, 4).explain()
    assert good.divergence is None
    assert good.exercised["CR-7"] >= 1


def test_cr7_a_lone_remote_node_is_tried_no_more_than_the_setting_says(
    tmp_path: Path,
) -> None:
    # "... tries a remote-site node up to MaxRetriesForRemoteSiteShadow times"
    # (one-extra-shadow-attempt-per-site): mbx3, alone in its site, tried five times
    outcome = remote_cut(tmp_path, 5).explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-7"
    assert "(4) times at most" in outcome.divergence.expected
    assert "opened 5 sessions to mbx3" in outcome.divergence.observed
    # mbx1 holding a copy of mbx3's (which mbx3 sent it just before): heartbeats to mbx3
    # may go on, so the sessions say nothing of the attempts
    b = Built(
        tmp_path,
        "steps:\n  - send: {id: m0, via: mbx3, to: [alice@corp.test]}\n"
        "  - fault: {link: mbx1->mbx3, kind: cut}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n",
        topology="creation-two-site-dag",
    )
    b.step(0.2)
    b.reply(0.3, "mbx3", 250, copied=False)
    b.steps(0.5, 3.0)
    for i in range(5):
        b.at(3.01 + i / 100, "connect", "mbx1->mbx3", conn=i + 1)
    b.at(3.2, "connect", "mbx1->mbx2", conn=1)
    b.reply(3.4, "mbx1", 250)
    assert b.explain().divergence is None or b.explain().divergence.behaviour != "CR-7"


def test_cr7_tries_changed_live_during_the_copy_bound_it_from_both_values(
    tmp_path: Path,
) -> None:
    # MaxRetriesForRemoteSiteShadow lowered from 4 to 2 while m1's copy was being made:
    # the catalogue does not say which value the attempts under way follow, so 3 sessions
    # are within both (the rule once took the default of 4 for a value changed live, and
    # FAILed this), 1 is fewer than either, 5 more than either
    good = remote_cut(tmp_path, 3, live_tries=2).explain()
    assert good.divergence is None, good.divergence
    assert good.exercised["CR-7"] >= 1
    few = remote_cut(tmp_path, 1, live_tries=2).explain().divergence
    assert few is not None and few.behaviour == "CR-7"
    assert "MaxRetriesForRemoteSiteShadow (2) times" in few.expected, few.expected
    many = remote_cut(tmp_path, 5, live_tries=2).explain().divergence
    assert many is not None and many.behaviour == "CR-7"
    assert "(4) times at most" in many.expected, many.expected


def test_cr10_a_copy_released_at_the_first_fork_before_any_look(tmp_path: Path) -> None:
    # the only shadow the placement allows holds the copy; alice's fork done, dan's not
    b = Built(
        tmp_path,
        "steps:\n"
        "  - sink: {name: other, reply: '451 4.3.0 busy'}\n"
        "  - send: {id: m1, via: mbx1, to: [alice@corp.test, dan@other.test]}\n"
        "  - snapshot: {node: mbx2, queue: shadow}\n",
        topology="creation-forks",
    )
    b.steps(1.0, 1.2, 4.0)
    b.reply(1.5, "mbx1", 250)
    b.delivered(1.7, "m1", "mbx1", "alice@corp.test")
    b.looked(4.01, "mbx2", "shadow")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "CR-10"


def test_cr10_a_dsn_for_an_address_refused_without_content(tmp_path: Path) -> None:
    # "... every fork (including DSNs ...)": nobody@corp.test refused at RCPT, the DSN held
    b = Built(
        tmp_path,
        "steps:\n"
        "  - sink: {name: mailbox, rcpt: {nobody@corp.test: '550 5.1.1 no such user'}}\n"
        "  - send: {id: m1, via: mbx1, to: [dan@other.test, nobody@corp.test]}\n"
        "  - snapshot: {node: mbx2, queue: shadow}\n",
        topology="creation-forks",
    )
    b.steps(1.0, 1.2, 4.0)
    b.reply(1.5, "mbx1", 250)
    b.delivered(1.7, "m1", "mbx1", "dan@other.test")
    b.looked(4.01, "mbx2", "shadow")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert "may have been refused for good" in outcome.divergence.expected


def test_cr7_a_copy_whose_discard_was_missed_may_still_be_asked_about(
    tmp_path: Path,
) -> None:
    # mbx3's m0 was delivered long before m1: a shadow up all along was told to discard
    # its copy, so five sessions to mbx3 for m1 are one too many
    def history(down: bool) -> Built:
        kill = "  - kill: mbx1\n  - restart: mbx1\n" if down else ""
        b = Built(
            tmp_path,
            "steps:\n  - send: {id: m0, via: mbx3, to: [alice@corp.test]}\n"
            + kill
            + "  - fault: {link: mbx1->mbx3, kind: cut}\n"
            "  - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n",
            topology="creation-two-site-dag",
        )
        b.step(0.2)
        b.line(0.22, "mbx3->mbx1", "s2c", "220 mbx1 ready")
        b.content(0.24, "mbx3->mbx1", "m0")
        b.line(0.25, "mbx3->mbx1", "s2c", "250 2.6.0 queued as shadow")
        b.reply(0.3, "mbx3", 250, copied=False)
        b.delivered(0.5, "m0", "mbx3", "alice@corp.test")
        if down:
            b.step(0.35)
            b.step(20.0, back=20.5)
        b.steps(40.0, 40.5)
        for i in range(5):
            b.at(40.51 + i / 100, "connect", "mbx1->mbx3", conn=i + 1)
        b.at(40.7, "connect", "mbx1->mbx2", conn=1)
        b.reply(40.9, "mbx1", 250)
        return b

    outcome = history(down=False).explain()
    assert outcome.divergence is not None, outcome
    assert outcome.divergence.behaviour == "CR-7", outcome.divergence
    assert "opened 5 sessions to mbx3" in outcome.divergence.observed
    # mbx1 down while m0 was delivered, back 20 s later: mbx3 may have dropped the
    # discard notification (ShadowMessageAutoDiscardInterval), so mbx1 may still hold its
    # copy and ask mbx3 about it; the sessions no longer count attempts
    outcome = history(down=True).explain()
    assert outcome.divergence is None or outcome.divergence.behaviour != "CR-7"
