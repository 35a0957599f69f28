"""The nemesis's ``protocol`` fault: a point drawn from the seed (link, place, command,
cut or hold, occurrence), a self-contained value that replays as a fault step."""

from __future__ import annotations

import asyncio

from pytest_shadowcheck.engine.nemesis import NEMESIS_POINTS, Fault, plan_faults, run_nemesis
from pytest_shadowcheck.engine.steps import FAULTS
from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.proxy import FaultProxy
from pytest_shadowcheck.network.sink import MailSink
from pytest_shadowcheck.scenario.capabilities import DEFAULT_FAULTS, POINT_FAULTS
from pytest_shadowcheck.scenario.loader import NextHop, NodeSpec, Topology
from pytest_shadowcheck.scenario.steps import FaultSpec, HealSpec
from pytest_shadowcheck.scenario.workload_spec import NemesisSpec
from pytest_shadowcheck.verdict import Verdict

from .test_steps_table import Recorder

TOPOLOGY = Topology(
    "t",
    {"mbx1": NodeSpec("mbx1"), "mbx2": NodeSpec("mbx2"), "mbx3": NodeSpec("mbx3")},
    {"corp.test": NextHop("corp.test", sink="mailbox")},
)


def test_protocol_faults_are_drawn_from_the_seed_only() -> None:
    kinds = ("protocol", "cut")
    nemesis = NemesisSpec(faults=kinds, nodes=("mbx1", "mbx2", "mbx3"), seed=5)
    first = plan_faults(nemesis, kinds, TOPOLOGY, 60)
    assert first == plan_faults(nemesis, kinds, TOPOLOGY, 60)
    other = NemesisSpec(faults=kinds, nodes=("mbx1", "mbx2", "mbx3"), seed=6)
    assert first != plan_faults(other, kinds, TOPOLOGY, 60)
    points = [f for f in first if f.kind == "protocol"]
    assert points and all(f.action == "" for f in first if f.kind != "protocol")
    peer_points = set(NEMESIS_POINTS["peer"])
    for fault in points:
        assert fault.action in POINT_FAULTS and 1 <= fault.occurrence <= 3
        (link,) = fault.links
        assert fault.nodes[0] == link.split("->")[0] or fault.nodes[0] == link.split("->")[1]
        if link.endswith("->mailbox"):
            assert fault.point in NEMESIS_POINTS["smtp"]  # no shadow verbs to a sink
        # every fault is a value of its own: it replays as a fault step
        assert FaultSpec.of(link, fault.action, point=fault.point).verb == fault.point[1]
    # the seed reaches every kind of point: shadow verbs on the links between nodes too
    assert {f.point for f in points} & peer_points
    assert len({(f.action, f.point) for f in points}) > 5


def test_a_nemesis_without_protocol_faults_draws_none() -> None:
    assert "protocol" not in DEFAULT_FAULTS
    nemesis = NemesisSpec(faults=DEFAULT_FAULTS, nodes=("mbx1", "mbx2"), seed=5)
    assert all(f.kind != "protocol" for f in plan_faults(nemesis, DEFAULT_FAULTS, TOPOLOGY, 80))


def test_the_nemesis_plays_a_protocol_fault_as_a_point_fault_then_heals() -> None:
    fault = Fault(
        0, "protocol", ("mbx1",), ("mbx1->mbx2",), 0.0, 0.0,
        action="stall_at", point=("inside_reply", "EOD"), occurrence=2,
    )  # fmt: skip
    run = Recorder()
    asyncio.run(run_nemesis(run, [fault], asyncio.Event(), Verdict("s", [])))  # type: ignore[arg-type]
    assert [(s.kind, s.arg) for s in run.steps] == [
        (
            "fault",
            FaultSpec.of("mbx1->mbx2", "stall_at", point=("inside_reply", "EOD"), occurrence=2),
        ),
        ("heal", HealSpec("mbx1->mbx2")),
    ]
    (start, _end) = run.history.events(kind="note")
    assert start.data["text"] == (
        "nemesis #0 protocol stall_at inside_reply EOD, 2nd time, mbx1->mbx2 for 0.00s"
    )


def test_a_drawn_point_strikes_a_real_session() -> None:
    """The fault step the nemesis plays arms a real proxy, which cuts the session where
    the point says (here: before the reply to the final dot)."""
    history = History()
    spec = FaultSpec.of("mbx1->mailbox", "cut_at", point=("before_reply", "EOD"))

    async def main() -> tuple[int, bytes]:
        sink = MailSink("mailbox", history)
        proxy = FaultProxy("mbx1->mailbox", history)
        await proxy.start()
        proxy.set_upstream(*await sink.start())
        FAULTS[spec.kind](proxy, spec)
        reader, writer = await asyncio.open_connection(*proxy.address)

        async def reply() -> bytes:
            line = await reader.readuntil(b"\r\n")
            while line[3:4] == b"-":
                line = await reader.readuntil(b"\r\n")
            return line

        await reply()  # the greeting
        for command in (b"EHLO mbx1", b"MAIL FROM:<a@ext.test>", b"RCPT TO:<u@corp.test>"):
            writer.write(command + b"\r\n")
            assert (await reply()).startswith(b"250")
        writer.write(b"DATA\r\n")
        assert (await reply()).startswith(b"354")
        writer.write(b"Message-ID: <n1@x.test>\r\n\r\nhi\r\n.\r\n")
        rest = await asyncio.wait_for(reader.read(), 5.0)
        writer.close()
        count = sink.count("<n1@x.test>")
        await proxy.stop()
        await sink.stop()
        return count, rest

    count, rest = asyncio.run(asyncio.wait_for(main(), 20.0))
    assert (count, rest) == (1, b"")  # taken by the server, its 250 lost on the way
    struck = [e.data["struck"] for e in history.events(kind="fault") if "struck" in e.data]
    assert struck == ["before the server's reply to the final dot, 1st time"]
