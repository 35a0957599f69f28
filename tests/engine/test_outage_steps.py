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


@pytest.mark.slow
def test_a_dead_nodes_links_refuse_instead_of_reaching_whatever_took_its_port(
    tmp_path: Path,
) -> None:
    # kill -9 frees the node's port; a bind anywhere on the machine (another scenario's
    # sink, in a lane beside) may take it. A client of the dead node must be refused,
    # not served by that listener: in CI a power-cut node's messages got a sink's 250
    import asyncio

    from pytest_shadowcheck.engine.run import Run
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.progress import Progress
    from pytest_shadowcheck.targets.reference import ReferenceTarget

    path = tmp_path / "kill.yaml"
    path.write_text(
        "scenarios:\n  - name: s1\n    behaviours: [PR-3]\n    topology: single-node\n"
        "    steps:\n      - kill: mbx1\n"
    )
    (scenario,) = load_scenario_file(path)
    reached: list[str] = []

    async def main() -> str:
        run = Run(scenario, ReferenceTarget(), History(), Progress("s1"), tmp_path / "run")
        await run.setup()
        try:
            old = run.handles["mbx1"].smtp
            await run.kill("mbx1")

            async def squatter(reader: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
                reached.append("connected")
                w.write(b"220 not mbx1\r\n")
                await w.drain()
                w.close()

            server = await asyncio.start_server(squatter, *old)
            try:
                reader, writer = await asyncio.open_connection(
                    *run.proxies["client->mbx1"].address
                )
                try:
                    greeting = await asyncio.wait_for(reader.read(100), 5)
                except ConnectionError:
                    greeting = b""
                writer.close()
            finally:
                server.close()
                await server.wait_closed()
            return greeting.decode()
        finally:
            await run.teardown()

    greeting = asyncio.run(main())
    assert reached == [] and greeting == "", (reached, greeting)
