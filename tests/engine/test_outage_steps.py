"""The route step and node-restart events, against the reference target (real nodes)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.scenario.loader import load_scenario_file

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

TOPOLOGY = """\
    topology:
      nodes: {mbx1: {}}
      next_hops:
        corp.test: {sink: first}
        other.test: {sink: second}
"""


def test_route_step_needs_one_of_sink_and_node(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(
        "scenarios:\n  - name: s1\n    behaviours: [PR-5]\n"
        + TOPOLOGY
        + "    steps:\n      - route: {domain: corp.test, sink: second, node: mbx1}\n"
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario_file(path)
    text = str(caught.value)
    assert f"{path}:10" in text
    assert "needs exactly one of sink and node" in text


def test_every_node_has_a_link_to_every_sink(tmp_path: Path) -> None:
    path = tmp_path / "links.yaml"
    path.write_text(
        "scenarios:\n  - name: s1\n    behaviours: [PR-5]\n"
        "    topology:\n"
        "      nodes: {mbx1: {next_hops: {only1.test: {sink: first}}}, mbx2: {}}\n"
        "      next_hops: {corp.test: {sink: second}}\n"
        "    steps:\n"
        "      - route: {domain: only1.test, sink: first, nodes: [mbx2]}\n"
        "      - fault: {link: mbx2->first, kind: cut}\n"
    )
    (scenario,) = load_scenario_file(path)
    assert {"mbx1->first", "mbx1->second", "mbx2->first", "mbx2->second"} <= set(
        scenario.topology.links()
    )
    assert "control_api" in scenario.required_capabilities()


@pytest.mark.slow
def test_route_set_after_a_restart_redirects_mail(pytester: pytest.Pytester) -> None:
    # The restart gives the node new ports: the route step must reach its new control API,
    # and the "back" event marks when the node listens again.
    pytester.makefile(
        ".yaml",
        outage_steps="scenarios:\n  - name: pr5_route_after_restart\n"
        "    behaviours: [PR-5]\n" + TOPOLOGY + "    steps:\n"
        "      - restart: mbx1\n"
        "      - route: {domain: corp.test, sink: second}\n"
        "      - send: {id: m1, via: mbx1, to: [alice@corp.test]}\n"
        "    expect:\n"
        "      - delivered: {message: m1, to: second, by: mbx1, within: 10s}\n"
        "      - not_delivered: {message: m1, to: first}\n"
        "      - order: {first: {step: '^mbx1 back after restart, queue database'},"
        " then: {reply: m1}}\n",
    )
    result = pytester.runpytest_subprocess(
        "--shadowcheck",
        "--shadowcheck-scenarios",
        "outage_steps.yaml",
        "-p",
        "no:cacheprovider",
        "-p",
        "no:randomly",
        timeout=120,
    )
    result.assert_outcomes(passed=1)
