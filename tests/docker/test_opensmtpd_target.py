"""Debian's OpenSMTPD through the docker target (targets/opensmtpd.yaml), on a real engine.

The image is built from its recipe unless one with the current recipe hash is
already there; every scenario starts real containers (host networking,
loopback ports) and nothing is mocked.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from dockerkit import (
    REROUTABLE_DEFAULTS,
    TARGETS,
    check_kept_and_wiped,
    leftovers,
    load_scenarios,
    new_target,
)

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.base import ClusterPlan
from pytest_shadowcheck.targets.docker.description import (
    NodePorts,
    load_description,
    render_node,
)
from pytest_shadowcheck.verdict import Status

pytestmark = pytest.mark.docker

# OpenSMTPD's own retry schedule is 400 s; the description renders
# TransientFailureRetryInterval as `smtpctl schedule all` every interval, so a
# deferred message is tried again within seconds here.
ROUTED = """
defaults:
  settings: {TransientFailureRetryInterval: 1s}
  timeout: 90s
scenarios:
  - name: each_domain_to_its_own_next_hop
    title: one message for two domains reaches each domain's next hop, relayed by the node
    topology: security-two-next-hops
    behaviours: [XS-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test, dan@other.test]}
    expect:
      - reply: {message: m1, code: 250}
      - delivered: {message: m1, to: mailbox, by: mbx1, within: 10s}
      - delivered: {message: m1, to: other, by: mbx1, within: 10s}
"""


TWO_HOPS = """
defaults:
  topology: security-two-next-hops
  settings:
    {TransientFailureRetryInterval: 0.5s, MessageExpirationTimeout: 2d, MaxMessageSize: 1000}
scenarios:
  - name: two_hops
    behaviours: [XS-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
"""


def _rendered(tmp_path: Path) -> tuple[str, list[str]]:
    path = tmp_path / "two.yaml"
    path.write_text(TWO_HOPS.lstrip())
    (scenario,) = load_scenario_file(path)
    hops = {"corp.test": "127.0.0.1:41100", "other.test": "127.0.0.1:41101"}
    plan = ClusterPlan(
        topology=scenario.topology,
        settings=dict(scenario.settings),
        peers={"mbx1": {"mbx2": "127.0.0.1:41002"}, "mbx2": {"mbx1": "127.0.0.1:41001"}},
        next_hops={
            node: {d: {"address": a, "kind": "mailbox"} for d, a in hops.items()}
            for node in ("mbx1", "mbx2")
        },
        workdir=tmp_path / "work",
    )
    ports = {"mbx1": NodePorts(smtp=42001), "mbx2": NodePorts(smtp=42002)}
    node = render_node(load_description(TARGETS / "opensmtpd.yaml"), plan, "mbx1", ports, "r")
    return node.files["/etc/smtpd.conf"][0].decode(), node.command


@pytest.mark.usefixtures("opensmtpd_image")
def test_the_rendered_configuration_is_one_smtpd_accepts(engine: Any, tmp_path: Path) -> None:
    conf, command = _rendered(tmp_path)
    assert "listen on 127.0.0.1 port 42001 hostname mbx1.shadowcheck.test" in conf
    assert "relay host smtp+notls://127.0.0.1:41101 helo mbx1.shadowcheck.test" in conf
    assert 'match from any for domain "other.test" action "hop2"' in conf
    assert "queue ttl 172800s" in conf and "smtp max-message-size 1000" in conf
    # the retry interval, in whole seconds, drives smtpctl schedule all beside smtpd
    assert "while sleep 1 " in command[-1] and "smtpctl schedule all" in command[-1]

    def check(text: str) -> tuple[int, str]:
        # smtpd -n: parse the configuration and exit, as an admin checks an edit
        script = 'printf %s "$CONF" > /tmp/smtpd.conf && smtpd -n -f /tmp/smtpd.conf'
        container = engine.containers.run(
            "shadowcheck/opensmtpd:6.8", ["sh", "-c", script], environment={"CONF": text},
            network_mode="none", detach=True,
        )  # fmt: skip
        try:
            code = int(container.wait(timeout=30)["StatusCode"])
            return code, container.logs().decode()
        finally:
            container.remove(force=True)

    assert check(conf) == (0, "configuration OK\n")
    code, said = check(conf.replace("relay host", "relay hots"))
    assert code != 0 and "syntax error" in said, said


@pytest.fixture(scope="module")
def opensmtpd_image(engine: Any) -> str:
    """Built unless the image with the current recipe hash exists (CI caches it)."""
    from pytest_shadowcheck.targets.docker.images import RECIPES, build

    build(["opensmtpd"], client=engine, log=lambda _: None)
    return RECIPES["opensmtpd"].image


@pytest.mark.usefixtures("opensmtpd_image")
def test_opensmtpd_relays_and_keeps_an_acknowledged_message_across_kill_and_restart(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    target = new_target("opensmtpd.yaml", tidy)
    assert target.version().startswith("OpenSMTPD 6.8.")

    log = check_kept_and_wiped(target, tmp_path)
    # accepted and deferred by one container, delivered by the next from the same queue
    (evpid,) = re.findall(r"smtp envelope evpid=(\w+)", log)
    blocks = log.split("--- container ")[1:]
    accepted = next(b for b in blocks if "smtp envelope" in b)
    (delivered,) = (b for b in blocks if b is not accepted)
    assert re.search(rf'mta delivery evpid={evpid} .* result="TempFail"', accepted), accepted
    # the restarted container opened the session that delivered it (the scenario's PASS
    # says the sink got it); smtpd logs the result once it has read the 250, which a
    # container stopped right after the delivery may not have done (seen at -n 4)
    assert "mta connected" in delivered, delivered
    results = re.findall(rf'mta delivery evpid={evpid} .* result="(\w+)"', delivered)
    assert results in ([], ["Ok"]), delivered

    (routed,) = load_scenarios(tmp_path, ROUTED, "routed.yaml")
    verdict = run_scenario(routed, target, workdir=tmp_path / "routed")
    assert verdict.status == Status.PASS, verdict.failures
    conf = (tmp_path / "routed" / "mbx1" / "files" / "etc" / "smtpd.conf").read_text()
    # the topology's two next hops, and the senders' domain to the harness's senders sink
    assert conf.count("relay host smtp+notls://127.0.0.1:") == 3
    assert 'match from any for domain "ext.test"' in conf
    assert leftovers(engine, tidy[-1]) == []


# no retry within the scenario: only the route change can deliver m1
RESTARTED = (
    REROUTABLE_DEFAULTS
    + """  settings: {TransientFailureRetryInterval: 1h}
  timeout: 90s
scenarios:
  - name: reload_by_restart
    title: a refused change restarts nothing; a route change restarts smtpd on its queue
    behaviours: [PR-5]
    steps:
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - set_settings: {values: {MaxMessageSize: 0}, result: rejected}
      - route: {domain: corp.test, sink: backup}
    expect:
      - delivered: {message: m1, to: backup, by: mbx1, within: 10s}
"""
)


@pytest.mark.usefixtures("opensmtpd_image")
def test_without_a_reload_a_change_restarts_smtpd_on_its_queue_and_claims_no_pass(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    # targets/opensmtpd.yaml, but MaxMessageSize 0 renders a size smtpd -n refuses
    size = "smtp max-message-size {{ settings.MaxMessageSize | default(10485760) }}"
    text = (TARGETS / "opensmtpd.yaml").read_text()
    assert size in text
    description = tmp_path / "opensmtpd.yaml"
    description.write_text(text.replace(size, size.replace(" }}", " - 1 }}")))
    target = new_target(description, tidy)
    assert {"set_settings"} <= target.capabilities
    (scenario,) = load_scenarios(tmp_path, RESTARTED)

    workdir = tmp_path / "work"
    verdict = run_scenario(scenario, target, workdir=workdir)
    # every check passed: the refusal, and m1 delivered by the new route after the restart
    assert [c.status for c in verdict.checks] == [Status.PASS] * len(verdict.checks)
    assert {c.name for c in verdict.checks} >= {"settings on mbx1 rejected"}
    # ... but a restart stood where the scenario reloads: no PASS is claimed
    assert verdict.status == Status.UNTESTABLE
    (caveat,) = verdict.caveats  # the refused change restarted nothing
    assert caveat.startswith("mbx1 restarted on its queue to apply the route corp.test")
    assert "no PASS is claimed" in verdict.behaviour_reason("PR-5")
    log = (workdir / "mbx1.log").read_text()
    first, second = log.split("--- container ")[1:]
    # the first smtpd was stopped as its admin stops it (SIGTERM), not killed
    assert "(restarted for route corp.test)" in first and "Exiting" in first, first
    # the second smtpd delivered m1 (the checks saw it arrive), the first never did; the
    # scenario may end between the sink's 250 and smtpd's line saying so, so the second
    # smtpd's log holds its connection to the next hop at least
    assert 'result="Ok"' not in first, first
    assert 'result="Ok"' in second or "mta connected" in second, second
    conf = (workdir / "mbx1" / "files" / "etc" / "smtpd.conf").read_text()
    assert "max-message-size 10485759" in conf  # the refused file was put back
    assert leftovers(engine, tidy[-1]) == []
