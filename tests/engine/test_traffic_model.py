"""Realistic workload traffic (issue 26): the plan from the seed, its shape, the content
for what a server offers, and a realistic workload into a real sink, every copy compared
with the digest of what was sent."""

from __future__ import annotations

import asyncio
import email
import email.policy
import statistics
from collections import Counter
from dataclasses import replace
from pathlib import Path

import pytest

from pytest_shadowcheck.checks.integrity_workload import compare_digest, digest
from pytest_shadowcheck.engine.traffic import (
    Planned,
    drive,
    plan_messages,
    render_for,
    traffic_note,
)
from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.history import History
from pytest_shadowcheck.network import MailSink
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.workload_spec import TrafficSpec, WorkloadSpec

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

POOL = ("u1@corp.test", "u1@other.test", "u1@third.test")
EVERYTHING = frozenset({"8BITMIME", "SMTPUTF8", "SIZE", "PIPELINING", "CHUNKING"})


def realistic(
    seed: int = 1, messages: int = 300, sessions: int = 4, **knobs: object
) -> WorkloadSpec:
    return WorkloadSpec(
        name="r", messages=messages, via=("mbx1", "mbx2"), to=POOL, seed=seed, rate=50,
        sessions=sessions, traffic=TrafficSpec(profile="realistic", **knobs),  # type: ignore[arg-type]
    )  # fmt: skip


def _drawn(plan: list[Planned]) -> list[tuple[object, ...]]:
    return [(p.via, p.mail_from, p.rcpt_tos, p.size, p.shape) for p in plan]


def _body(raw: bytes) -> bytes:
    return raw.split(b"\r\n\r\n", 1)[1]


def test_the_seed_names_the_realistic_plan_and_its_content() -> None:
    first, again = realistic(7), realistic(7)
    plan = plan_messages(first, "t1")
    assert _drawn(plan) == _drawn(plan_messages(again, "t2"))
    assert _drawn(plan) != _drawn(plan_messages(realistic(8), "t1"))
    # the content follows from the seed too (the Date field aside)
    one = render_for(plan[5], "s", 7, EVERYTHING).raw
    assert _body(one) == _body(render_for(plan[5], "s", 7, EVERYTHING).raw)
    assert _body(one) != _body(render_for(plan[5], "s", 8, EVERYTHING).raw)
    # and the tidy traffic stays what it was: the old scenarios' plans do not move
    tidy = replace(first, traffic=TrafficSpec())
    assert all(p.shape is None for p in plan_messages(tidy, "t1"))


def test_sizes_are_heavy_tailed_within_the_cap() -> None:
    plan = plan_messages(realistic(3, messages=400), "t")
    sizes = [p.size for p in plan]
    assert 1500 <= statistics.median(sizes) <= 8000  # most messages a few KB
    assert sum(s <= 64 * 1024 for s in sizes) >= 0.9 * len(sizes)
    assert max(sizes) >= 256 * 1024  # and a tail towards the cap
    assert max(sizes) <= 2 * 1024 * 1024
    capped = plan_messages(realistic(3, messages=400, max_size=100_000), "t")
    assert max(p.size for p in capped) <= 100_000
    # what is sent is about what was drawn
    for p in plan[:40]:
        assert abs(len(render_for(p, "s", 3, EVERYTHING).raw) - p.size) <= max(600, p.size // 5)


def test_every_feature_is_in_a_plan_of_a_few_hundred() -> None:
    plan = plan_messages(realistic(1), "t")
    shapes = [p.shape for p in plan if p.shape is not None]
    assert len(shapes) == len(plan)
    rcpts = Counter(len(p.rcpt_tos) for p in plan)
    assert rcpts[1] > len(plan) / 2 and max(rcpts) > 20 and max(rcpts) <= 50
    assert {r.rpartition("@")[2] for p in plan for r in p.rcpt_tos} == {
        "corp.test", "other.test", "third.test"
    }  # fmt: skip
    assert all(len(set(p.rcpt_tos)) == len(p.rcpt_tos) for p in plan)
    assert any(p.mail_from == "" for p in plan)
    for feature in ("eight_bit", "utf8_subject", "mime", "new_session", "rset_before", "bdat"):
        assert any(getattr(s, feature) for s in shapes), feature
    assert any(s.dot_lines for s in shapes) and any(s.long_lines for s in shapes)
    assert {s.id_kind for s in shapes} == {"unique", "shared", "none"}
    # bursts: many messages due in the same second, and the workload no longer
    dues = Counter(int(s.due) for s in shapes)
    assert max(dues.values()) >= 20 + 50 // 2
    assert max(s.due for s in shapes) <= len(plan) / 50
    texts = [render_for(p, "s", 1, EVERYTHING).raw for p in plan]
    lines = [line for raw in texts for line in _body(raw).split(b"\r\n")]
    assert b"." in lines and any(line.startswith(b". ") for line in lines)
    assert max(len(line) for line in lines) == 998
    mime = [raw for raw, p in zip(texts, plan, strict=True) if p.shape and p.shape.mime]
    parsed = email.message_from_bytes(mime[0], policy=email.policy.default)
    attachments = [part for part in parsed.iter_attachments()]
    assert attachments and len(attachments[0].get_content()) > 0


def test_the_content_fits_what_the_server_offers() -> None:
    plan = plan_messages(realistic(2, messages=200), "t")
    for p in plan:
        assert p.shape is not None
        bare = render_for(p, "s", 2, frozenset())
        assert bare.params == () and bare.body == "7bit"
        assert max(bare.raw) < 128, f"{p.ref}: 8-bit octets to a server without 8BITMIME"
        eight = render_for(p, "s", 2, frozenset({"8BITMIME"}))
        assert ("BODY=8BITMIME" in eight.params) == p.shape.eight_bit
        assert "SMTPUTF8" not in eight.params
        full = render_for(p, "s", 2, EVERYTHING)
        assert ("SMTPUTF8" in full.params) == p.shape.utf8_subject
        assert f"SIZE={len(full.raw)}" in full.params
        for raw in (bare.raw, full.raw):
            assert raw.endswith(b"\r\n") and b"\n" not in raw.replace(b"\r\n", b"")
            assert b"\r" not in raw.replace(b"\r\n", b"")
            assert max(len(line) for line in raw.split(b"\r\n")) <= 998
    subjects = [render_for(p, "s", 2, frozenset()).raw for p in plan if p.shape.utf8_subject]
    assert subjects and all(b"Subject: =?utf-8?" in raw for raw in subjects)


def test_a_realistic_workload_into_a_sink_arrives_as_sent() -> None:
    history = History()
    spec = realistic(4, messages=80, sessions=3)

    async def main() -> MailSink:
        sink = MailSink("mailbox", history)
        address = await sink.start()
        try:
            accepted = await drive(
                spec, plan_messages(spec, "tok"), history, {"mbx1": address, "mbx2": address}
            )
            assert len(accepted) == 80
            return sink
        finally:
            await sink.stop()

    sink = asyncio.run(main())
    # by the harness's trace: some Message-IDs are shared, some missing
    attempts = {e.data["trace"]: e.data for e in history.events(kind="attempt")}
    assert len(attempts) == 80 and len(sink.deliveries) == 80
    ids = [a["message_id"] for a in attempts.values()]
    assert None in ids and len(set(ids)) < 80
    for delivery in sink.deliveries:
        assert delivery.trace is not None
        assert compare_digest(attempts[delivery.trace], delivery, frozenset()) == []
    hist = traffic_note(history, "r")
    assert hist is not None and hist["messages"] == 80
    # the sink offers 8BITMIME and SMTPUTF8 (not PIPELINING, CHUNKING): so they are used
    assert hist["eight_bit"] > 0 and hist["smtputf8"] > 0
    assert hist["pipelined"] == 0 and hist["bdat"] == 0
    assert hist["rset"] > 0 and set(hist["transactions_per_session"]) - {"1"}
    assert sum(hist["sizes"].values()) == 80 and hist["most_recipients"] > 10
    assert hist["burst_peak_per_second"] >= 20


def test_a_damaged_copy_is_told_in_words() -> None:
    history = History()
    spec = realistic(1, messages=60, sessions=1)
    plan = [p for p in plan_messages(spec, "tok") if p.shape and p.shape.long_lines][:1]

    async def main() -> MailSink:
        sink = MailSink("mailbox", history)
        address = await sink.start()
        try:
            await drive(spec, plan, history, {"mbx1": address, "mbx2": address})
            return sink
        finally:
            await sink.stop()

    (delivery,) = asyncio.run(main()).deliveries
    (attempt,) = [e.data for e in history.events(kind="attempt")]
    cut = b"\r\n".join(line[:512] for line in delivery.raw.split(b"\r\n"))
    (problem,) = compare_digest(attempt, replace(delivery, raw=cut), frozenset())
    assert problem.startswith("the body differs: sent ")
    assert "longest 998 octets" in problem and "delivered" in problem
    assert "longest 512 octets" in problem
    added = b"X-Scanned: yes\r\n" + delivery.raw
    (problem,) = compare_digest(attempt, replace(delivery, raw=added), frozenset({"received"}))
    assert problem.startswith("a X-Scanned header field was added")
    assert digest(delivery.raw)["body_sha256"] == attempt["body_sha256"]


def test_a_message_id_given_to_a_message_sent_without_one_is_no_change() -> None:
    history = History()
    spec = realistic(1, messages=60, sessions=1)
    plan = [p for p in plan_messages(spec, "tok") if p.sent_id is None][:1]
    assert plan, "the seed draws a message without a Message-ID"

    async def main() -> MailSink:
        sink = MailSink("mailbox", history)
        address = await sink.start()
        try:
            await drive(spec, plan, history, {"mbx1": address, "mbx2": address})
            return sink
        finally:
            await sink.stop()

    (delivery,) = asyncio.run(main()).deliveries
    (attempt,) = [e.data for e in history.events(kind="attempt")]
    head, body = delivery.raw.split(b"\r\n\r\n", 1)
    assert b"\r\nmessage-id:" not in b"\r\n" + head.lower()
    # Postfix's cleanup appends the Message-ID it makes below the sender's fields
    given = b"Message-ID: <20261126152314.A543D168781@mbx1.shadowcheck.test>"
    postfix = head + b"\r\n" + given + b"\r\n\r\n" + body
    assert compare_digest(attempt, replace(delivery, raw=postfix), frozenset()) == []
    # two added, or one added to a message that had its own, is still a change
    twice = head + b"\r\n" + given + b"\r\n" + given + b"\r\n\r\n" + body
    (problem,) = compare_digest(attempt, replace(delivery, raw=twice), frozenset())
    assert problem == "the sender's header fields are no longer in their order"


def test_a_field_re_folded_on_its_way_is_no_change() -> None:
    history = History()
    spec = realistic(1, messages=60, sessions=1)
    plan = [p for p in plan_messages(spec, "tok") if len(p.rcpt_tos) >= 4][:1]

    async def main() -> MailSink:
        sink = MailSink("mailbox", history)
        address = await sink.start()
        try:
            await drive(spec, plan, history, {"mbx1": address, "mbx2": address})
            return sink
        finally:
            await sink.stop()

    (delivery,) = asyncio.run(main()).deliveries
    (attempt,) = [e.data for e in history.events(kind="attempt")]
    (to,) = [line for line in delivery.raw.split(b"\r\n") if line.startswith(b"To: ")]
    # sendmail folds an address list at its own column, with a tab
    first, rest = to.split(b", ", 1)
    refolded = delivery.raw.replace(to, first + b",\r\n\t" + rest)
    assert refolded != delivery.raw
    assert compare_digest(attempt, replace(delivery, raw=refolded), frozenset()) == []
    # another address is a change, however it is folded
    other = refolded.replace(first[4:], b"someone@else.test", 1)
    (problem,) = compare_digest(attempt, replace(delivery, raw=other), frozenset())
    assert problem == "the sender's To header field is missing or changed"


BAD_TRAFFIC = {
    "traffic: wild": ("'wild' is not allowed", "one of tidy, realistic"),
    "traffic: {profile: wild}": ("unknown traffic profile 'wild'", "tidy or realistic"),
    "traffic: {eight_bits: 0.5}": ("unknown traffic knob 'eight_bits'", "one of profile"),
    "traffic: {mime: 2}": ("traffic mime is a share of the messages", "from 0 to 1"),
    "traffic: {max_size: 2GBs}": ("traffic max_size is a size in bytes", "64KB or 2MB"),
    "traffic: {max_recipients: 0}": ("traffic max_recipients is a count", "1 or more"),
}


@pytest.mark.parametrize("line", sorted(BAD_TRAFFIC))
def test_traffic_errors_name_file_and_line(tmp_path: Path, line: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "scenarios:\n  - name: s1\n    behaviours: [PR-1]\n    topology: two-node-dag\n"
        "    steps:\n      - workload:\n          messages: 10\n"
        f"          {line}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario_file(path)
    message, expected = BAD_TRAFFIC[line]
    assert f"{path}:8" in str(caught.value), str(caught.value)
    assert message in str(caught.value) and expected in str(caught.value)


def test_traffic_knobs_load() -> None:
    path = Path(__file__).resolve().parents[2] / "scenarios" / "durability.yaml"
    specs = {
        s.name: step.arg
        for s in load_scenario_file(path)
        for step in s.steps
        if step.kind == "workload"
    }
    # durability_pause keeps tidy traffic on purpose (see its comment in the file)
    tidy = {name for name, spec in specs.items() if not spec.traffic.realistic}
    assert tidy == {"durability_pause"}, tidy
    backlog = specs["durability_backlog_promotion"].traffic
    assert backlog.large == 0.05 and backlog.max_size == 2 * 1024 * 1024
    assert specs["durability_single_node_kill_restart"].traffic.max_size == 128 * 1024


THROUGH_THE_REFERENCE = """\
scenarios:
  - name: realistic_through_reference
    behaviours: [PR-1]
    topology: two-node-dag
    settings: {TransientFailureRetryInterval: 0.5s, RejectMessageOnShadowFailure: true}
    settle: 1s
    steps:
      - route: {domain: other.test, sink: mailbox}
      - workload:
          messages: 80
          sessions: 4
          rate: 40
          to: [u1@corp.test, u1@other.test]
          settle: 15s
          traffic: {profile: realistic, large: 0.05, max_size: 1MB}
"""


@pytest.mark.slow
def test_a_realistic_workload_through_the_reference_arrives_as_sent(
    pytester: pytest.Pytester,
) -> None:
    import json

    pytester.makefile(".yaml", wl=THROUGH_THE_REFERENCE)
    report = pytester.path / "cert"
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "--shadowcheck-scenarios", "wl.yaml", f"--shadowcheck-report={report}",
        "-p", "no:cacheprovider", "-p", "no:randomly", timeout=150,
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    (scenario,) = json.loads((report / "certification.json").read_text())["scenarios"]
    named = "integrity of the copies of workload w"
    (check,) = [c for c in scenario["checks"] if c["name"] == named]
    assert check["status"] == "PASS"
    (workload,) = scenario["workloads"]
    copies = int(check["observed"].split(" copies of ")[0])
    # every acknowledged message delivered, each recipient domain its own copy
    assert copies >= workload["acknowledged"] == workload["attempted"] == 80
    traffic = workload["traffic"]
    assert traffic["messages"] == 80 and traffic["largest"] > 64 * 1024
    assert traffic["eight_bit"] > 0 and traffic["mime"] > 0 and traffic["long_lines"] > 0
    page = (report / "certification.html").read_text()
    assert "sent: recipients" in page and "lines starting with a dot" in page
