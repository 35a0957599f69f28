"""Target descriptions: checked at load time with file:line errors, rendered per node.

No Docker engine needed: these read the YAML and fill the Jinja2 templates.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from dockerkit import TARGETS, write_description

from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.base import ClusterPlan
from pytest_shadowcheck.targets.docker.admin import QUEUE_FORMATS, message_id_of
from pytest_shadowcheck.targets.docker.description import (
    DescriptionError,
    NodePorts,
    load_description,
    render_node,
)

SCENARIO = """
defaults:
  topology: two-node-dag
  settings: {TransientFailureRetryInterval: 0.5s, MessageExpirationTimeout: 2d}
scenarios:
  - name: two_nodes
    title: two nodes
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
"""


def plan_for(tmp_path: Path) -> ClusterPlan:
    path = tmp_path / "two.yaml"
    path.write_text(SCENARIO.lstrip())
    (scenario,) = load_scenario_file(path)
    return ClusterPlan(
        topology=scenario.topology,
        settings=dict(scenario.settings),
        peers={"mbx1": {"mbx2": "127.0.0.1:41002"}, "mbx2": {"mbx1": "127.0.0.1:41001"}},
        next_hops={
            "mbx1": {"corp.test": {"address": "127.0.0.1:41100", "kind": "mailbox"}},
            "mbx2": {"corp.test": {"address": "127.0.0.1:41200", "kind": "mailbox"}},
        },
        workdir=tmp_path / "work",
    )


PORTS = {"mbx1": NodePorts(smtp=42001, control=42011), "mbx2": NodePorts(smtp=42002)}


def test_postfix_description_renders_relay_to_the_harness_proxies(tmp_path: Path) -> None:
    description = load_description(TARGETS / "postfix.yaml")
    # set_settings through the reload adapter; the queue listing answers for the
    # active queue and the reload for routes, never the whole control API
    assert description.capabilities == {
        "kill", "pause", "restart", "wipe_queue_db", "set_settings"
    }  # fmt: skip
    assert description.admin.calls == {("GET", "/queues/active"), ("PUT", "/topology/next_hops")}
    node = render_node(description, plan_for(tmp_path), "mbx1", PORTS, "run-1")
    main_cf = node.files["/etc/postfix/main.cf"][0].decode()
    master_cf = node.files["/etc/postfix/master.cf"][0].decode()
    assert "myhostname = mbx1.shadowcheck.test" in main_cf
    assert "relay_domains = corp.test" in main_cf
    assert "transport_maps = inline:{ corp.test=smtp:[127.0.0.1]:41100 }" in main_cf
    # timers in whole seconds: 0.5s cannot be expressed, it becomes 1s
    assert "minimal_backoff_time = 1s" in main_cf
    assert "maximal_queue_lifetime = 172800s" in main_cf
    assert master_cf.splitlines()[2] == "127.0.0.1:42001 inet n - n - - smtpd"
    assert node.command[-1] == "chmod a+w /dev/stdout && exec postfix start-fg"


def test_an_mta_without_reload_is_restarted_for_a_change(tmp_path: Path) -> None:
    description = load_description(TARGETS / "opensmtpd.yaml")
    # reload: restart - no reload command, yet settings and routes can change
    assert description.admin.restarts and description.admin.reload == ()
    assert "set_settings" in description.capabilities
    assert description.admin.calls == {("PUT", "/topology/next_hops")}
    assert description.admin.check == ("smtpd", "-n", "-f", "/etc/smtpd.conf")
    # without restart or a reload command, check has nothing to vet
    path = tmp_path / "t.yaml"
    path.write_text("image: x\nadmin:\n  check: [smtpd, -n]\n  flush: [smtpctl]\n")
    with pytest.raises(DescriptionError, match=r"admin\.check needs admin\.reload"):
        load_description(path)


def test_reference_description_writes_the_cluster_file(tmp_path: Path) -> None:
    description = load_description(TARGETS / "reference.yaml")
    assert {"control_api", "virtual_clock", "set_settings", "wipe_queue_db"} <= (
        description.capabilities
    )
    plan = plan_for(tmp_path)
    node = render_node(description, plan, "mbx2", PORTS, "run-1")
    cluster = yaml.safe_load(node.files["/etc/shadowcheck/cluster.yaml"][0])
    assert cluster["nodes"]["mbx1"]["smtp"] == "127.0.0.1:42001"
    assert cluster["nodes"]["mbx1"]["control"] == "127.0.0.1:42011"
    assert cluster["nodes"]["mbx2"]["peers"] == {"mbx1": "127.0.0.1:41001"}
    assert "--name=mbx2" in node.command
    assert not any(arg.startswith("--clock-start") for arg in node.command)
    again = render_node(description, plan, "mbx2", PORTS, "run-1", virtual_now=1767225600.5)
    assert "--clock-start=1767225600.5" in again.command


@pytest.mark.parametrize(
    ("body", "line", "message"),
    [
        ("image: x\nvolumes: [a]\n", 2, "unknown key 'volumes'"),
        ("name: x\ncommand: [run]\n", 1, "'image' is required"),
        ("image: x\ncapabilities: [kill, teleport]\n", 2, "unknown capability 'teleport'"),
        (
            "image: x\nfiles:\n  /etc/a.conf: |\n    one\n    {% if node %}\n    two\n",
            5,
            "template /etc/a.conf: Unexpected end of template",
        ),
        ("image: x\nfiles:\n  etc/a.conf: text\n", 3, "the path must be absolute"),
        ("image: x\nready: {smtp_banner: false}\n", 2, "'ready' needs at least one check"),
        ("image: x\nqueue_dir: spool\n", 2, "'queue_dir' must be an absolute path"),
        ("image: x\nadmin:\n  reload: [r]\n  restart: [r]\n", 4, "unknown admin adapter 'restart'"),
        ("image: x\nadmin:\n  check: [postfix, check]\n", 3, "admin.check needs admin.reload"),
        (
            "image: x\nadmin:\n  flush: []\n  queue:\n"
            "    {list: [q], format: mailq, headers: [h, '{id}']}\n",
            3,
            "admin.flush is a command",
        ),
        (
            "image: x\nadmin:\n  queue:\n    {list: [q], format: mailq, headers: [h, '{id}']}\n",
            3,
            "admin.queue.format 'mailq' is not one of postqueue-json, exim-bp, sendmail-mailq",
        ),
        (
            "image: x\nadmin:\n  queue: {list: [q], format: exim-bp, headers: [exim, -Mvh]}\n",
            3,
            "put {id} in it",
        ),
        ("image: x\nlogs: [var/log/exim4/mainlog]\n", 2, "must be an absolute path"),
    ],
    ids=[
        "unknown-key", "no-image", "capability", "template-syntax", "relative", "ready", "queue",
        "admin-key", "check-alone", "empty-command", "queue-format", "headers-id", "logs",
    ],
)
def test_a_bad_description_names_file_and_line(
    tmp_path: Path, body: str, line: int, message: str
) -> None:
    path = write_description(tmp_path, body)
    with pytest.raises(DescriptionError) as caught:
        load_description(path)
    text = str(caught.value)
    assert text.startswith(f"{path}:{line}: "), text
    assert message in text
    assert f"> {line} |" in text  # the offending line is shown


def test_node_settings_reach_only_their_node(tmp_path: Path) -> None:
    path = write_description(
        tmp_path,
        """
        image: x
        files:
          /etc/a.conf: "lag = {{ settings.ReplayLagTime | default('none') }}"
        """,
    )
    description = load_description(path)
    plan = plan_for(tmp_path)
    plan.node_settings = {"mbx1": {"ReplayLagTime": 259200.0}}
    files = {
        node: render_node(description, plan, node, PORTS, "run-1").files["/etc/a.conf"][0]
        for node in ("mbx1", "mbx2")
    }
    assert files == {"mbx1": b"lag = 259200.0", "mbx2": b"lag = none"}


def test_queue_listings_are_read_as_the_active_queue() -> None:
    postqueue = (
        '{"queue_name": "deferred", "queue_id": "4D40A160D73", "arrival_time": 1763900000, '
        '"sender": "sender@ext.test", "recipients": [{"address": "alice@corp.test", '
        '"delay_reason": "connection refused"}]}\n'
    )
    exim = (
        " 0m   1.2K 1qYx8A-000123-AB <sender@ext.test>\n"
        "        D bob@corp.test\n"
        "          alice@corp.test\n"
        "\n"
        "25m   2.0K 1qYx9B-000456-CD <> *** frozen ***\n"
        "          postmaster@corp.test\n"
    )
    assert QUEUE_FORMATS["postqueue-json"](postqueue) == [
        {"id": "4D40A160D73", "sender": "sender@ext.test", "recipients": ["alice@corp.test"],
         "state": "deferred", "received_at": 1763900000},
    ]  # fmt: skip
    assert QUEUE_FORMATS["exim-bp"](exim) == [
        {"id": "1qYx8A-000123-AB", "sender": "sender@ext.test", "recipients": ["alice@corp.test"],
         "state": "queued"},
        {"id": "1qYx9B-000456-CD", "sender": "", "recipients": ["postmaster@corp.test"],
         "state": "frozen"},
    ]  # fmt: skip
    # sendmail 8.17's mailq (captured from the image): an MSP and an MTA section, the
    # same message in both, a null sender, a status line, two recipients
    mailq = (
        "MSP Queue status...\n"
        "\t\t/var/spool/mqueue-client (2 requests)\n"
        "-----Q-ID----- --Size-- -----Q-Time----- ------------Sender/Recipient-----------\n"
        "6ANNgSYN000013        5 Mon Nov 23 23:42 <>\n"
        "                 (host map: lookup (corp.test): deferred)\n"
        "\t\t\t\t\t carol@corp.test\n"
        "6ANNgS7s000011*       5 Mon Nov 23 23:42 <sender@ext.test>\n"
        "                 (Deferred: Connection refused by [127.0.0.1])\n"
        "\t\t\t\t\t alice@corp.test\n"
        "\t\t\t\t\t <bob@corp.test>\n"
        "\t\tTotal requests: 2\n"
        "MTA Queue status...\n"
        "\t\t/var/spool/mqueue (1 request)\n"
        "-----Q-ID----- --Size-- -----Q-Time----- ------------Sender/Recipient-----------\n"
        "6ANNgSYN000013        5 Mon Nov 23 23:42 <>\n"
        "                 (host map: lookup (corp.test): deferred)\n"
        "\t\t\t\t\t carol@corp.test\n"
        "\t\tTotal requests: 1\n"
    )
    assert QUEUE_FORMATS["sendmail-mailq"](mailq) == [
        {"id": "6ANNgSYN000013", "sender": "", "recipients": ["carol@corp.test"],
         "state": "queued"},
        {"id": "6ANNgS7s000011", "sender": "sender@ext.test",
         "recipients": ["alice@corp.test", "bob@corp.test"], "state": "running"},
    ]  # fmt: skip
    assert QUEUE_FORMATS["sendmail-mailq"]("/var/spool/mqueue is empty\n") == []
    # postcat -hq and exim -Mvh print a header section each in its own way
    assert message_id_of("Received: x\nMessage-Id: <m1.a@shadowcheck.test>\n") == (
        "<m1.a@shadowcheck.test>"
    )
    assert message_id_of("1qYx8A-000123-AB-H\n049I Message-ID: <m2@x.test>\n") == "<m2@x.test>"
    assert message_id_of("H??Subject: t\nH??Message-ID: <m3@x.test>\n.\n") == "<m3@x.test>"
    assert message_id_of("Subject: no id\n") is None


def test_a_template_error_while_rendering_names_the_template_line(tmp_path: Path) -> None:
    path = write_description(
        tmp_path,
        """
        image: x
        files:
          /etc/a.conf: |
            first = {{ node }}
            second = {{ settings.NoSuchSetting }}
        """,
    )
    description = load_description(path)
    with pytest.raises(DescriptionError) as caught:
        render_node(description, plan_for(tmp_path), "mbx1", PORTS, "run-1")
    text = str(caught.value)
    assert text.startswith(f"{path}:5: cannot render for node mbx1:"), text
    assert "NoSuchSetting" in text
