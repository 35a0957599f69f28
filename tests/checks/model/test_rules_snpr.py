"""SN-6 in the catalogue model: a configuration with ReplayLagTime beyond
SafetyNetHoldTime is flagged in the node's configuration warnings, judged at each look
(``snapshot`` of ``config_warnings``) on a history built by hand."""

from __future__ import annotations

from pathlib import Path

from pytest_shadowcheck.checks.model import MODEL_BEHAVIOURS, unmodelled

from .built import Built, sentence

SN6 = {"code": "SN-6", "message": "ReplayLagTime (259200s) exceeds SafetyNetHoldTime (172800s)"}


def lag_raised(tmp_path: Path, start: str = "settings: {ReplayLagTime: 1d}\n") -> Built:
    """ReplayLagTime 1 day (within the default 2-day hold), then 3 days (beyond it),
    mbx1's warnings read before, right after and well after the change."""
    b = Built(
        tmp_path,
        start + "steps:\n"
        "  - snapshot: {node: mbx1, queue: config_warnings}\n"
        "  - set_settings: {values: {ReplayLagTime: 3d}}\n"
        "  - snapshot: {node: mbx1, queue: config_warnings}\n"
        "  - wait: 5s\n"
        "  - snapshot: {node: mbx1, queue: config_warnings}\n",
    )
    b.steps(1.0, 2.0, 2.1, 2.2, 7.2)
    return b


def look(b: Built, t: float, *warnings: dict[str, str]) -> None:
    b.at(t, "snapshot", node="mbx1", queue="config_warnings", answer=list(warnings))


def test_sn6_is_modelled() -> None:
    assert "SN-6" in MODEL_BEHAVIOURS
    assert "flagged" in sentence("SN-6")


def test_sn6_a_lag_beyond_the_hold_time_unflagged_diverges(tmp_path: Path) -> None:
    # "Resubmission needs SafetyNetHoldTime >= ReplayLagTime for a lagged copy; a
    # configuration breaking this must be flagged."
    b = lag_raised(tmp_path)
    look(b, 1.05)
    look(b, 2.15)  # inside the change's slack: either answer
    look(b, 7.25)
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "SN-6"
    assert outcome.divergence.rule == sentence("SN-6")
    assert "ReplayLagTime (3d) exceeds SafetyNetHoldTime (2d)" in outcome.divergence.expected
    assert outcome.divergence.observed == "at +7.2s mbx1 listed no configuration warning"
    assert "set_settings" in " ".join(outcome.divergence.operations)


def test_sn6_the_warning_flagged_is_what_the_catalogue_asks(tmp_path: Path) -> None:
    b = lag_raised(tmp_path)
    look(b, 1.05)
    look(b, 2.15, SN6)
    look(b, 7.25, SN6)
    outcome = b.explain()
    assert outcome.divergence is None
    # the look inside the change's slack decides nothing
    assert outcome.exercised["SN-6"] == 2
    assert "ReplayLagTime" not in unmodelled(b.scenario)


def test_sn6_a_warning_about_a_lag_within_the_hold_time_diverges(tmp_path: Path) -> None:
    b = lag_raised(tmp_path)
    look(b, 1.05, SN6)
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "SN-6"
    assert "flags nothing about ReplayLagTime: it (1d) is within" in outcome.divergence.expected
    assert "listed the configuration warnings SN-6: ReplayLagTime" in outcome.divergence.observed


def test_sn6_the_lag_equal_to_the_hold_time_is_not_flagged(tmp_path: Path) -> None:
    # "SafetyNetHoldTime >= ReplayLagTime": equal is enough
    b = Built(
        tmp_path,
        "settings: {ReplayLagTime: 2d, SafetyNetHoldTime: 2d}\nsteps:\n"
        "  - snapshot: {node: mbx1, queue: config_warnings}\n",
    )
    b.steps(1.0)
    look(b, 1.05, SN6)
    outcome = b.explain()
    assert outcome.divergence is not None and outcome.divergence.behaviour == "SN-6"


def test_sn6_no_lag_given_owes_no_warning(tmp_path: Path) -> None:
    # a node told nothing of lagged copies is not judged, whatever it lists
    b = Built(tmp_path, "steps:\n  - snapshot: {node: mbx1, queue: config_warnings}\n")
    b.steps(1.0)
    look(b, 1.05, SN6)
    outcome = b.explain()
    assert outcome.divergence is None
    assert outcome.exercised["SN-6"] == 0


# -- SN-10: a group expanded afresh on resubmission --------------------------------------


def regrouped(tmp_path: Path, *redelivered_to: str, dave_in: str = "DB1") -> Built:
    """team@corp.test is alice and carol when m1 is sent and delivered; then alice and
    dave (whose mailbox is in ``dave_in``); mbx1 killed, a resubmission for DB1 (alice's
    database) asked of mbx2, which delivers m1 again."""
    b = Built(
        tmp_path,
        "steps:\n"
        "  - directory: {group: team@corp.test, members: [alice@corp.test, carol@corp.test]}\n"
        "  - send: {id: m1, via: mbx1, to: [team@corp.test]}\n"
        "  - directory: {group: team@corp.test, members: [alice@corp.test, dave@corp.test]}\n"
        f"  - directory: {{recipient: dave@corp.test, database: {dave_in}}}\n"
        "  - kill: mbx1\n"
        "  - resubmit: {node: mbx2, database: DB1, start: '2026-01-01T00:00:00Z',"
        " end: '2026-01-01T02:00:00Z'}\n"
        "  - wait: 10s\n",
    )
    b.steps(1.0, 2.0)
    b.reply(2.3, "mbx1", 250)
    b.delivered(2.5, "m1", "mbx1", "alice@corp.test", "carol@corp.test")
    b.steps(3.0, 3.5, 4.0, 5.0, 6.0)
    if redelivered_to:
        b.delivered(8.0, "m1", "mbx2", *redelivered_to)
    b.at(16.0, "note", text="the end")
    return b


def test_sn10_a_removed_member_gets_the_resubmitted_message_diverges(tmp_path: Path) -> None:
    # "A Shadow Safety Net copy holds only the original envelope recipients: on
    # resubmission a distribution group is expanded afresh (removed members get nothing,
    # added members get the old message)."
    b = regrouped(tmp_path, "alice@corp.test", "carol@corp.test")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "SN-10"
    assert outcome.divergence.rule == sentence("SN-10")
    assert "carol@corp.test, no longer a member, gets nothing" in outcome.divergence.expected
    assert outcome.divergence.observed == (
        "mbx2 delivered m1 again at +8.0s to alice@corp.test, carol@corp.test"
    )


def test_sn10_an_added_member_missing_diverges(tmp_path: Path) -> None:
    b = regrouped(tmp_path, "alice@corp.test")
    outcome = b.explain()
    assert outcome.divergence is not None
    assert outcome.divergence.behaviour == "SN-10"
    assert "dave@corp.test, added since, gets the old message" in outcome.divergence.expected


def test_sn10_an_added_member_of_another_database_is_not_owed(tmp_path: Path) -> None:
    # a resubmission request names one mailbox database (SN-5): the group's members of
    # then in that database get the message, the others are another request's
    outcome = regrouped(tmp_path, "alice@corp.test", dave_in="DB2").explain()
    assert outcome.divergence is None
    assert outcome.exercised["SN-10"] == 1


def test_sn10_the_members_of_then_is_what_the_catalogue_asks(tmp_path: Path) -> None:
    b = regrouped(tmp_path, "alice@corp.test", "dave@corp.test")
    outcome = b.explain()
    assert outcome.divergence is None
    assert outcome.exercised["SN-10"] == 1
    # the directory step leaves the model's other rules out, SN-10's only
    assert "directory" in outcome.unmodelled


def test_sn10_no_redelivery_decides_nothing(tmp_path: Path) -> None:
    outcome = regrouped(tmp_path).explain()
    assert outcome.divergence is None
    assert outcome.exercised["SN-10"] == 0


def test_sn10_the_primary_resubmitting_its_own_expansion_is_not_judged(tmp_path: Path) -> None:
    # the sentence is about the Shadow Safety Net's copy: the primary's own Safety Net
    # holds the message as it categorised it
    b = regrouped(tmp_path)
    b.delivered(9.0, "m1", "mbx1", "alice@corp.test", "carol@corp.test")
    outcome = b.explain()
    assert outcome.divergence is None
    assert outcome.exercised["SN-10"] == 0
