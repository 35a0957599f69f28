"""Every topology gets the senders' domains routed to a recording sink, so a bounce the
MTA sends lands where the harness sees it; a topology that routes them keeps its own."""

from __future__ import annotations

from pathlib import Path

from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.model import NextHop, Scenario


def load(tmp_path: Path, text: str) -> list[Scenario]:
    path = tmp_path / "s.yaml"
    path.write_text(text, encoding="utf-8")
    return load_scenario_file(path)


def test_a_topology_without_the_senders_domains_gets_the_senders_sink(tmp_path: Path) -> None:
    (scenario,) = load(
        tmp_path,
        """\
scenarios:
  - name: s1
    behaviours: [CR-1]
    topology: {nodes: {mbx1: {}, mbx2: {}}, next_hops: {corp.test: {sink: mailbox}}}
    steps:
      - send: {id: m1, via: mbx1, to: [a@corp.test]}
      - send: {id: m2, via: mbx1, from: boss@HQ.example, to: [a@corp.test]}
      - session: {via: mbx1, say: [EHLO x, "MAIL FROM:<x@third.example>", QUIT]}
""",
    )
    topology = scenario.topology
    assert topology.next_hops["ext.test"] == NextHop("ext.test", "senders", "boundary")
    assert topology.senders == {
        "ext.test": "senders",
        "hq.example": "senders",
        "third.example": "senders",
    }
    assert topology.added_hops == ("ext.test", "hq.example", "third.example")
    assert topology.sinks() == ["mailbox", "senders"]
    assert "mbx2->senders" in topology.links()


def test_a_topology_that_routes_the_senders_domain_keeps_its_route(tmp_path: Path) -> None:
    (scenario,) = load(
        tmp_path,
        """\
scenarios:
  - name: s1
    behaviours: [CR-10]
    topology: creation-forks
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
""",
    )
    assert scenario.topology.senders == {"ext.test": "outside"}
    assert scenario.topology.added_hops == ()
    assert "senders" not in scenario.topology.sinks()


def test_every_bundled_topology_has_a_sink_for_the_senders(tmp_path: Path) -> None:
    bundled = Path(__file__).parents[2] / "scenarios" / "topologies"
    for topology_file in sorted(bundled.glob("*.yaml")):
        (scenario,) = load(
            tmp_path,
            f"""\
scenarios:
  - name: s1
    behaviours: [CR-1]
    topology: {topology_file.stem}
    steps: [note: x]
""",
        )
        assert "ext.test" in scenario.topology.senders, topology_file.stem


def test_a_topology_without_next_hops_stays_without_sinks(tmp_path: Path) -> None:
    (scenario,) = load(
        tmp_path,
        """\
scenarios:
  - name: s1
    behaviours: [TO-1]
    topology: {nodes: {mbx1: {}}}
    steps: [note: x]
""",
    )
    assert scenario.topology.sinks() == [] and scenario.topology.senders == {}
