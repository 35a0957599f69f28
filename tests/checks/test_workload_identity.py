"""A workload's accounting identifies messages by the harness's trace, per message and
recipient: never by the Message-ID, which the sender chooses (resends and some mailers
reuse one, some send none). The checker is a function of the history, so these build one.
"""

from __future__ import annotations

from typing import Any

from pytest_shadowcheck.checks.workload import check_workload, results
from pytest_shadowcheck.history import History
from pytest_shadowcheck.statuses import Status

SHARED = "<resent@example.test>"


def _attempt(h: History, ref: str, message_id: str, rcpts: list[str], via: str = "mbx1") -> None:
    h.record(
        "attempt", f"client->{via}", 1, workload="w", ref=ref, message_id=message_id,
        trace=f"{ref}.tok", via=via, mail_from="a@ext.test", rcpt_tos=rcpts, size=500,
        sent=h.now(), command="EOD", code=250, text="2.0.0 queued", error=None,
    )  # fmt: skip


def _delivery(h: History, rcpts: list[str], trace: str | None, message_id: str) -> None:
    h.record(
        "delivery", None, sink="corp.test", message_id=message_id, trace=trace,
        mail_from="a@ext.test", rcpt_tos=rcpts, helo="mbx1", peer=None, size=500,
    )  # fmt: skip


def _snapshot(h: History, node: str, queue: str, entries: list[dict[str, Any]]) -> None:
    h.record("snapshot", node=node, queue=queue, answer=entries, workload="w")


def test_two_messages_sharing_a_message_id_one_lost_is_a_loss_naming_it() -> None:
    h = History()
    _attempt(h, "w-00000", SHARED, ["bob@corp.test"])
    _attempt(h, "w-00001", SHARED, ["bob@corp.test"])
    _delivery(h, ["bob@corp.test"], "w-00000.tok", SHARED)
    report = check_workload(h, "w", 1, nodes=frozenset({"mbx1", "mbx2"}))
    assert report.fates["w-00000"].fate == "delivered"
    assert report.fates["w-00001"].fate == "lost"
    loss = results(report, ["PR-3"], "here", settle=5)[0]
    assert loss.status == Status.FAIL
    assert "1 of 2 acknowledged messages lost" in loss.observed
    assert "w-00001 <resent@example.test>" in loss.observed
    assert "w-00000" not in loss.observed.split("Figures")[0]


def test_accounting_is_per_recipient() -> None:
    h = History()
    _attempt(h, "w-00000", "<a@x>", ["bob@corp.test", "carol@corp.test", "dave@corp.test"])
    _delivery(h, ["bob@corp.test", "dave@corp.test"], "w-00000.tok", "<a@x>")
    report = check_workload(h, "w", 1)
    fate = report.fates["w-00000"]
    assert fate.fate == "lost" and fate.missing == ["carol@corp.test"]
    loss = results(report, ["PR-3"], "here", settle=5)[0]
    assert "w-00000 <a@x> (not delivered to carol@corp.test, 1 of its 3 recipients)" in (
        loss.observed
    )


def test_a_copy_that_lost_the_trace_is_matched_by_a_message_id_no_other_message_shares() -> None:
    h = History()
    _attempt(h, "w-00000", "<only@x>", ["bob@corp.test"])
    _attempt(h, "w-00001", SHARED, ["bob@corp.test"])
    _attempt(h, "w-00002", SHARED, ["bob@corp.test"])
    _delivery(h, ["bob@corp.test"], None, "<only@x>")
    _delivery(h, ["bob@corp.test"], None, SHARED)  # whose? it cannot say
    report = check_workload(h, "w", 1)
    assert report.fates["w-00000"].fate == "delivered"
    assert {report.fates[r].fate for r in ("w-00001", "w-00002")} == {"lost"}


def test_a_shared_message_id_in_a_queue_holds_one_message_not_all_of_them() -> None:
    h = History()
    for ref in ("w-00000", "w-00001"):
        _attempt(h, ref, SHARED, ["bob@corp.test"])
    _snapshot(h, "mbx1", "active", [{"id": "q1", "message_id": SHARED}])
    report = check_workload(h, "w", 1)
    assert sorted(f.fate for f in report.fates.values()) == ["lost", "lost"]
    _snapshot(h, "mbx2", "active", [{"id": "q7", "message_id": SHARED}])
    report = check_workload(h, "w", 1)
    assert sorted(f.fate for f in report.fates.values()) == ["queued", "queued"]


def test_two_queued_messages_sharing_a_message_id_in_one_queue_are_two_entries() -> None:
    h = History()
    for ref in ("w-00000", "w-00001", "w-00002"):
        _attempt(h, ref, SHARED if ref != "w-00002" else "", ["bob@corp.test"])
    _snapshot(h, "mbx1", "active", [
        {"id": "q1", "message_id": SHARED}, {"id": "q2", "message_id": SHARED},
        {"id": "q3", "message_id": "<made-by-the-mta@mbx1>"},
    ])  # fmt: skip
    report = check_workload(h, "w", 1)
    assert [f.fate for f in report.fates.values()] == ["queued"] * 3
    # a message never acknowledged claims none of the entries
    h.record(
        "attempt", "client->mbx1", 2, workload="w", ref="w-00003", message_id=None,
        trace="w-00003.tok", via="mbx1", mail_from="a@ext.test", rcpt_tos=["bob@corp.test"],
        size=500, sent=h.now(), command="EOD", code=None, text="", error="connection lost",
    )  # fmt: skip
    report = check_workload(h, "w", 1)
    assert report.fates["w-00002"].fate == "queued"


def test_a_shadow_copy_whose_primary_is_up_holds_nothing() -> None:
    h = History()
    _attempt(h, "w-00000", "<a@x>", ["bob@corp.test"])
    _snapshot(h, "mbx2", "shadow", [{"message_id": "<a@x>", "primary_node": "mbx1"}])
    report = check_workload(h, "w", 1)
    assert report.fates["w-00000"].fate == "lost"
    # while its primary is down, it is the copy a promotion will deliver
    h.record("note", nemesis="start", index=0, fault="kill", nodes=["mbx1"], links=[])
    report = check_workload(h, "w", 1)
    assert report.fates["w-00000"].fate == "queued"


def test_a_recipient_refused_at_rcpt_is_owed_nothing() -> None:
    # the MTA took bob and refused carol with a 550 (no route yet): the 250 at the end
    # acknowledges the message for bob alone
    h = History()
    _attempt(h, "w-00000", "<a@x>", ["bob@corp.test", "carol@partner.test"])
    h.record(
        "attempt", "client->mbx1", 3, workload="w", ref="w-00001", message_id="<b@x>",
        trace="w-00001.tok", via="mbx1", mail_from="a@ext.test",
        rcpt_tos=["bob@corp.test", "carol@partner.test"],
        refused_rcpts=["carol@partner.test"], size=500, sent=h.now(), command="EOD",
        code=250, text="2.0.0 queued", error=None,
    )  # fmt: skip
    for trace in ("w-00000.tok", "w-00001.tok"):
        _delivery(h, ["bob@corp.test"], trace, "<a@x>" if trace.startswith("w-00000") else "<b@x>")
    report = check_workload(h, "w", 1)
    assert report.fates["w-00000"].missing == ["carol@partner.test"]
    assert report.fates["w-00000"].fate == "lost"
    assert report.fates["w-00001"].fate == "delivered"


def _unlisted(h: History, node: str, why: str) -> None:
    h.record("snapshot", node=node, queue="active", workload="w", unlisted=why)


def test_an_undelivered_message_on_a_node_that_could_not_list_its_queues_is_not_a_loss() -> None:
    # mbx1 acknowledged it, and its queue listing failed at the end: whether it still
    # holds the message is not known, so the loss is not claimed (INCONCLUSIVE)
    h = History()
    _attempt(h, "w-00000", "<a@x>", ["bob@corp.test"])
    _attempt(h, "w-00001", "<b@x>", ["bob@corp.test"], via="mbx2")
    _delivery(h, ["bob@corp.test"], "w-00001.tok", "<b@x>")
    why = "mbx1 did not list its active queue: GET /queues/active on mbx1: HTTP 401"
    _unlisted(h, "mbx1", why)
    _unlisted(h, "mbx3", "mbx3 was paused when the harness listed the queues")
    _snapshot(h, "mbx2", "active", [])
    report = check_workload(h, "w", 1)
    assert report.fates["w-00000"].fate == "unlisted"
    loss, _dup, liveness = results(report, ["PR-3"], "here", settle=5)
    assert loss.status == Status.INCONCLUSIVE
    assert "1 of 2 acknowledged messages were not delivered" in loss.observed
    assert "whether they are lost is not known" in loss.observed
    assert why in loss.observed and "w-00000 <a@x>" in loss.observed
    assert "mbx3" not in loss.observed  # it never held the message
    # undelivered either way: a liveness question the MTA's compiled-in retry may excuse
    assert liveness.status == Status.FAIL and "w-00000" in liveness.observed
    _d, _u, excused = results(report, ["PR-3"], "here", settle=5, retry=(60.0, 60.0))
    assert excused.status == Status.UNTESTABLE


def test_a_node_that_could_not_list_its_queues_excuses_only_what_it_may_hold() -> None:
    # the message went through mbx1, which listed an empty queue: mbx2's failed listing
    # cannot hold it (it never had a copy), so the loss stands
    h = History()
    _attempt(h, "w-00000", "<a@x>", ["bob@corp.test"])
    _snapshot(h, "mbx1", "active", [])
    _unlisted(h, "mbx2", "mbx2 was down when the harness listed the queues")
    report = check_workload(h, "w", 1)
    assert report.fates["w-00000"].fate == "lost"
    loss = results(report, ["PR-3"], "here", settle=5)[0]
    assert loss.status == Status.FAIL and "never delivered, in no queue" in loss.observed
    # had mbx2 received a shadow copy, it might hold it
    h.record(
        "data", "mbx1->mbx2", 4, trace="w-00000.tok", message_id="<a@x>",
        mail_from="a@ext.test", rcpt_tos=["bob@corp.test"],
    )  # fmt: skip
    assert check_workload(h, "w", 1, nodes=frozenset({"mbx1", "mbx2"})).fates[
        "w-00000"
    ].fate == "unlisted"
