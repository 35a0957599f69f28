"""MX routing on a real Postfix: the same image routing by the harness's DNS
(``targets/postfix-mx.yaml``: no relayhost, no transport_maps) gives the same verdicts
as routing to ``host:port`` (``targets/postfix.yaml``), and asks DNS to get there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from dockerkit import (
    REROUTABLE_DEFAULTS,
    ROOT,
    TARGETS,
    leftovers,
    load_scenarios,
    new_target,
    write_description,
)

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.base import ClusterPlan
from pytest_shadowcheck.targets.docker.description import (
    DescriptionError,
    NodePorts,
    load_description,
    render_node,
)
from pytest_shadowcheck.verdict import Status


def test_routing_mx_gives_templates_the_dns_server_and_each_hops_mx(tmp_path: Path) -> None:
    description = load_description(TARGETS / "postfix-mx.yaml")
    assert description.routing == "mx"
    assert load_description(TARGETS / "postfix.yaml").routing == "relay"
    one = "scenarios: [{name: x, title: x, behaviours: [CR-5], steps: [{wait: 1s}]}]\n"
    (scenario,) = load_scenarios(tmp_path, REROUTABLE_DEFAULTS + one)
    plan = ClusterPlan(
        topology=scenario.topology,
        settings={},
        peers={"mbx1": {}},
        next_hops={"mbx1": {
            "corp.test": {"address": "127.0.0.1:41100", "kind": "mailbox"},
            "other.test": {"address": "127.0.0.1:41101", "kind": "mailbox"},
        }},
        workdir=tmp_path / "work",
        mx_addresses={"127.0.0.1:41100": "127.31.0.1", "127.0.0.1:41101": "127.31.0.2"},
    )  # fmt: skip
    probe = write_description(
        tmp_path,
        """
        image: x
        routing: mx
        files:
          /probe: |
            {{ routing }} {{ dns_server }}
            {% for d, hop in next_hops.items() %}{{ d }} {{ hop.mx_host }} {{ hop.mx_address }}
            {% endfor %}
        """,
        "probe.yaml",
    )
    node = render_node(
        load_description(probe), plan, "mbx1", {"mbx1": NodePorts(42001)}, "r", None, "127.9.9.9"
    )
    assert node.files["/probe"][0].decode().split("\n")[:3] == [
        "mx 127.9.9.9",
        "corp.test mx.corp.test 127.31.0.1",
        "other.test mx.other.test 127.31.0.2",
    ]
    main_cf = (
        render_node(description, plan, "mbx1", {"mbx1": NodePorts(42001)}, "r")
        .files["/etc/postfix/main.cf"][0]
        .decode()
    )
    # routes by DNS: the domains it relays for, and nothing saying where they go
    assert "relay_domains = corp.test, other.test" in main_cf
    assert "transport_maps" not in main_cf and "relayhost" not in main_cf
    assert "smtp_dns_support_level = enabled" in main_cf


def test_postfix_mx_is_postfix_but_for_the_route(tmp_path: Path) -> None:
    """The two Postfix descriptions compared are the same MTA: image, command, queue,
    admin, timers; only how a next hop is found differs."""
    relay = load_description(TARGETS / "postfix.yaml")
    mx = load_description(TARGETS / "postfix-mx.yaml")
    same = ("image", "command", "environment", "admin", "ready", "queue_dir", "claimed")
    assert [getattr(mx, key) for key in same] == [getattr(relay, key) for key in same]
    ours = {f.path: f.source.splitlines() for f in relay.files}
    theirs = {f.path: f.source.splitlines() for f in mx.files}
    assert ours["/etc/postfix/master.cf"] == theirs["/etc/postfix/master.cf"]
    removed = sorted(set(ours["/etc/postfix/main.cf"]) - set(theirs["/etc/postfix/main.cf"]))
    added = sorted(set(theirs["/etc/postfix/main.cf"]) - set(ours["/etc/postfix/main.cf"]))
    assert [line.split(" =")[0].strip() for line in removed if "=" in line] == [
        "smtp_dns_support_level", "smtp_host_lookup", "transport_maps"
    ]  # fmt: skip
    assert [line.strip() for line in added if "=" in line] == [
        "smtp_dns_support_level = enabled", "smtp_host_lookup = dns"
    ]  # fmt: skip


def test_routing_is_relay_or_mx(tmp_path: Path) -> None:
    path = write_description(tmp_path, "image: x\nrouting: dns\n")
    with pytest.raises(DescriptionError) as caught:
        load_description(path)
    assert str(caught.value).startswith(f"{path}:2: routing is relay")


#: a creation scenario (a cut shadow link, delivered anyway) and an outage one (the
#: primary's link to the next hop cut, the primary killed, healed, restarted): the
#: cut applies to the proxy's port-25 listener as to its own port
LIBRARY = [
    ("creation.yaml", "cr5_cut_link_accepts"),
    ("outages.yaml", "pr3_acknowledged_message_survives_kill_and_restart_on_same_queue"),
]


def library_scenario(file: str, name: str) -> Any:
    return next(s for s in load_scenario_file(ROOT / "scenarios" / file) if s.name == name)


@pytest.mark.docker
@pytest.mark.usefixtures("images")
def test_postfix_via_mx_gives_the_verdicts_of_postfix_via_relay(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    relay = new_target("postfix.yaml", tidy)
    mx = new_target("postfix-mx.yaml", tidy)
    assert (relay.mx_routing, mx.mx_routing) == (False, True)
    for file, name in LIBRARY:
        scenario = library_scenario(file, name)
        by_relay = run_scenario(scenario, relay, workdir=tmp_path / "relay" / name)
        by_mx = run_scenario(scenario, mx, workdir=tmp_path / "mx" / name)
        # not a vacuous equality: both ran and both delivered (the checks passed)
        assert by_relay.status == Status.PASS, (name, by_relay.reason, by_relay.failures)
        assert by_mx.status == by_relay.status, (name, by_mx.reason, by_mx.failures)
        checks = [(c.name, c.status) for c in by_mx.checks]
        assert checks == [(c.name, c.status) for c in by_relay.checks], name
        # Postfix found the next hop by asking: MX of the domain, then A of its host
        asked = [(q.type, q.name.lower(), q.answer) for q in mx.dns_queries["mbx1"]]
        assert ("MX", "corp.test", "MX 10 mx.corp.test") in asked, asked
        assert not relay.dns_queries
    # the relay description's main.cf routes by host:port, the MX one names no route
    relay_cf = (tmp_path / "relay" / name / "mbx1" / "files" / "etc/postfix/main.cf").read_text()
    mx_cf = (tmp_path / "mx" / name / "mbx1" / "files" / "etc/postfix/main.cf").read_text()
    assert "transport_maps" in relay_cf and "transport_maps" not in mx_cf
    assert "smtp_host_lookup = dns" in mx_cf
    resolv = (tmp_path / "mx" / name / "mbx1" / "resolv.conf").read_text()
    assert resolv.startswith("nameserver 127.")
    assert (
        "MX corp.test? MX 10 mx.corp.test" in (tmp_path / "mx" / name / "mbx1.dns.log").read_text()
    )
    assert leftovers(engine, tidy[0]) == [] and leftovers(engine, tidy[1]) == []


REROUTE_SCENARIO = (
    REROUTABLE_DEFAULTS
    + """  settings: {TransientFailureRetryInterval: 1h}
  timeout: 60s
scenarios:
  - name: rerouted_by_dns
    title: a deferred message goes where DNS says after a route change
    behaviours: [CR-5]
    steps:
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - check: {queue: {node: mbx1, queue: active, contains: [m1], within: 5s}}
      - route: {domain: corp.test, sink: backup}
    expect:
      - delivered: {message: m1, to: backup, within: 10s}
"""
)


@pytest.mark.docker
@pytest.mark.usefixtures("images")
def test_a_route_change_changes_what_dns_answers(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    (scenario,) = load_scenarios(tmp_path, REROUTE_SCENARIO)
    target = new_target("postfix-mx.yaml", tidy)
    verdict = run_scenario(scenario, target, workdir=tmp_path / "work")
    assert verdict.status == Status.PASS, (verdict.reason, verdict.failures, verdict.diagnostics)
    answers = [q.answer for q in target.dns_queries["mbx1"] if q.name.lower() == "mx.corp.test"]
    # asked before the route step (mailbox) and after it (backup): two addresses
    addresses = [a for a in dict.fromkeys(answers) if a.startswith("A ")]
    assert len(addresses) == 2, answers
    assert leftovers(engine, tidy[-1]) == []
