"""Target descriptions: checked at load time with file:line errors, rendered per node.

No Docker engine needed: these read the YAML and fill the Jinja2 templates.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from dockerkit import TARGETS, write_description

from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.base import ClusterPlan
from pytest_shadowcheck.targets.docker.admin import (
    NEUTRAL_FORMAT,
    QUEUE_FORMATS,
    QueueFormatError,
    message_id_of,
)
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
    # timers in whole seconds: 0.5s cannot be expressed, it becomes 1s; the backoff is
    # a second more, since qmgr takes a deferred file a second before its time stamp
    assert "queue_run_delay = 1s" in main_cf
    assert "minimal_backoff_time = 2s" in main_cf
    assert "maximal_backoff_time = 2s" in main_cf
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
            "admin.queue.format 'mailq' is not one of json-lines, postqueue-json, exim-bp,"
            " sendmail-mailq",
        ),
        (
            "image: x\nadmin:\n  queue: {list: [q], format: exim-bp, headers: [exim, -Mvh]}\n",
            3,
            "put {id} in it",
        ),
        (
            "image: x\nadmin:\n  queue: {list: [exim, -bp], format: exim-bp}\n",
            3,
            "admin.queue.headers is needed with format exim-bp: its listing has no Message-ID",
        ),
        ("image: x\nlogs: [var/log/exim4/mainlog]\n", 2, "must be an absolute path"),
    ],
    ids=[
        "unknown-key", "no-image", "capability", "template-syntax", "relative", "ready", "queue",
        "admin-key", "check-alone", "empty-command", "queue-format", "headers-id",
        "headers-needed", "logs",
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


def test_the_neutral_listing_carries_message_ids_and_names_a_bad_line() -> None:
    # targets/haraka/haraka-queue-json on Haraka 3.1.1's queue (captured from the
    # image): one message split per domain (two files, one Message-ID), a null
    # sender, a folded Message-Id header; "file" is a field the harness ignores
    listing = (
        '{"id":"hKCtqa_3","recipients":["alice@corp.test","bob@corp.test"],'
        '"sender":"sender@ext.test","state":"deferred","received_at":1795693014,'
        '"file":"1795693014374_1795693074455_1_17_hKCtqa_3_vm",'
        '"message_id":"<m1.abc@shadowcheck.test>"}\n'
        '{"id":"MGc1Qa_5","recipients":["carol@remote.test"],"sender":"sender@ext.test",'
        '"state":"deferred","received_at":1795693014,'
        '"file":"1795693014402_1795693074473_1_17_MGc1Qa_5_vm",'
        '"message_id":"<m1.abc@shadowcheck.test>"}\n'
        '{"id":"jK2VNF_6","recipients":["dave@corp.test"],"sender":"","state":"deferred",'
        '"received_at":1795693014,"file":"1795693014457_1795693074510_1_17_jK2VNF_6_vm",'
        '"message_id":"<m2.abc@shadowcheck.test>"}\n'
    )
    assert QUEUE_FORMATS["json-lines"](listing) == [
        {"id": "hKCtqa_3", "recipients": ["alice@corp.test", "bob@corp.test"],
         "sender": "sender@ext.test", "state": "deferred", "received_at": 1795693014,
         "message_id": "<m1.abc@shadowcheck.test>"},
        {"id": "MGc1Qa_5", "recipients": ["carol@remote.test"], "sender": "sender@ext.test",
         "state": "deferred", "received_at": 1795693014,
         "message_id": "<m1.abc@shadowcheck.test>"},
        {"id": "jK2VNF_6", "recipients": ["dave@corp.test"], "sender": "", "state": "deferred",
         "received_at": 1795693014, "message_id": "<m2.abc@shadowcheck.test>"},
    ]  # fmt: skip
    # only id and recipients are required; a bare Message-ID gets its angle brackets
    # (the harness compares "<...>"); blank lines are skipped
    assert QUEUE_FORMATS["json-lines"](
        '\n{"id": "Q1", "recipients": [], "message_id": " m3@x.test "}\n\n'
    ) == [{"id": "Q1", "recipients": [], "message_id": "<m3@x.test>"}]
    assert QUEUE_FORMATS["json-lines"]("") == []
    bad = {
        '{"id": "Q1", "recipients": []}\n{"id": "Q2", "recipients": [}\n': "line 2 is not JSON",
        '["Q1", ["a@corp.test"]]\n': "line 1 is not a JSON object",
        '{"recipients": ["a@corp.test"]}\n': "line 1 has no id",
        '{"id": 7, "recipients": ["a@corp.test"]}\n': "line 1 has no id",
        '{"id": "Q1", "recipients": "a@corp.test"}\n': "line 1 (id Q1) has no recipients",
        '{"id": "Q1", "recipients": [], "message_id": ["<m@x>"]}\n':
            "line 1 (id Q1): message_id is not a string",
        '{"id": "Q1", "recipients": [], "received_at": "yesterday"}\n':
            "line 1 (id Q1): received_at is not a number",
    }  # fmt: skip
    for text, message in bad.items():
        with pytest.raises(QueueFormatError) as caught:
            QUEUE_FORMATS["json-lines"](text)
        assert str(caught.value).startswith(message), caught.value


def test_headers_are_optional_only_for_the_neutral_listing(tmp_path: Path) -> None:
    path = write_description(
        tmp_path, "image: x\nadmin:\n  queue: {list: [q], format: json-lines}\n"
    )
    queue = load_description(path).admin.queue
    assert queue is not None and queue.headers == () and queue.format == NEUTRAL_FORMAT
    # Haraka's description: a script of its recipe prints the neutral listing
    haraka = load_description(TARGETS / "haraka.yaml").admin
    assert haraka.queue is not None and haraka.queue.format == "json-lines"
    assert haraka.restarts and haraka.calls == {
        ("GET", "/queues/active"), ("PUT", "/topology/next_hops")
    }  # fmt: skip
    # its outbound queue relays each next hop to the harness; Haraka refuses a retry
    # interval under 5 s, so 0.5 s becomes 5 s, repeated for the message's 2 days
    files = render_node(
        load_description(TARGETS / "haraka.yaml"), plan_for(tmp_path), "mbx1", PORTS, "r"
    ).files
    forward = files["/haraka/config/smtp_forward.ini"][0].decode()
    assert "enable_outbound=false" in forward
    assert "[corp.test]\nhost=127.0.0.1\nport=41100" in forward
    assert "temp_fail_intervals=5s*34560" in files["/haraka/config/outbound.ini"][0].decode()
    assert files["/haraka/config/smtp.ini"][0].decode().startswith("[main]\nlisten=")


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


def test_a_file_path_is_a_template_rendered_per_node(tmp_path: Path) -> None:
    path = write_description(
        tmp_path,
        """
        image: x
        files:
          /etc/mta/{{ node }}.conf: "name = {{ node }}"
          "{{ '/etc/mta/retry' if settings.TransientFailureRetryInterval else '/tmp/none' }}":
            {template: "{{ settings.TransientFailureRetryInterval | seconds }}", mode: "600"}
        """,
    )
    description = load_description(path)
    # a setting named only in a path still reaches the MTA
    assert description.renders("TransientFailureRetryInterval")
    plan = plan_for(tmp_path)
    files = {n: render_node(description, plan, n, PORTS, "run-1").files for n in ("mbx1", "mbx2")}
    assert files["mbx1"] == {
        "/etc/mta/mbx1.conf": (b"name = mbx1", 0o644),
        "/etc/mta/retry": (b"1", 0o600),
    }
    assert set(files["mbx2"]) == {"/etc/mta/mbx2.conf", "/etc/mta/retry"}


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (
            "\"{{ '' if node == 'mbx1' else '/etc/a' }}\"",
            "the path renders to nothing for node mbx1",
        ),
        ("'{{ node }}/a.conf'", "file '{{ node }}/a.conf' (for node mbx1: 'mbx1/a.conf'): the "
         "path must be absolute"),
        ("/etc/{{ node }}/", "the path names a directory, not a file"),
    ],
    ids=["empty", "relative", "directory"],
)
def test_a_rendered_path_that_is_no_file_names_its_line(
    tmp_path: Path, key: str, message: str
) -> None:
    path = write_description(tmp_path, f"image: x\nfiles:\n  /etc/b.conf: b\n  {key}: a\n")
    description = load_description(path)
    with pytest.raises(DescriptionError) as caught:
        render_node(description, plan_for(tmp_path), "mbx1", PORTS, "run-1")
    text = str(caught.value)
    assert text.startswith(f"{path}:4: "), text
    assert message in text


def test_two_paths_rendering_to_one_file_is_an_error(tmp_path: Path) -> None:
    path = write_description(
        tmp_path,
        """
        image: x
        files:
          /etc/mta/{{ node }}.conf: a
          /etc/mta/{{ 'mbx1' }}.conf: |
            b
        """,
    )
    description = load_description(path)
    # mbx2 gets two files; for mbx1 both keys name the same file
    assert len(render_node(description, plan_for(tmp_path), "mbx2", PORTS, "run-1").files) == 2
    with pytest.raises(DescriptionError) as caught:
        render_node(description, plan_for(tmp_path), "mbx1", PORTS, "run-1")
    text = str(caught.value)
    assert text.startswith(f"{path}:4: files '/etc/mta/{{{{ node }}}}.conf' (line 3) and "), text
    assert "both render to /etc/mta/mbx1.conf for node mbx1" in text


def test_a_path_template_with_a_syntax_error_names_its_line(tmp_path: Path) -> None:
    path = write_description(tmp_path, "image: x\nfiles:\n  /etc/{{ node: |\n    text\n")
    with pytest.raises(DescriptionError) as caught:
        load_description(path)
    assert str(caught.value).startswith(f"{path}:3: path /etc/{{{{ node: "), str(caught.value)


@pytest.mark.parametrize(
    ("version", "message"),
    [
        ('""', "'version' is empty"),
        ("{text: '  '}", "'version' is empty"),
        ("{command: [v], format: ''}", "version.format '' renders to nothing"),
        ("{command: [v], format: 'MTA {version}'}", "{output} is the only placeholder"),
    ],
    ids=["empty", "blank-text", "blank-format", "placeholder"],
)
def test_a_version_that_says_nothing_is_an_error(
    tmp_path: Path, version: str, message: str
) -> None:
    path = write_description(tmp_path, f"image: x\nversion: {version}\n")
    with pytest.raises(DescriptionError) as caught:
        load_description(path)
    assert str(caught.value).startswith(f"{path}:2: "), str(caught.value)
    assert message in str(caught.value)


def test_every_description_key_is_documented_with_an_example(tmp_path: Path) -> None:
    """docs/targets.md shows each key of a description in a YAML example, and its
    example of templated file paths renders as it says."""
    from pytest_shadowcheck.targets.docker.description import _KEYS

    docs = (TARGETS.parent / "docs" / "targets.md").read_text(encoding="utf-8")
    shown: set[str] = set()
    blocks = re.findall(r"```yaml\n(.*?)```", docs, re.S)
    for block in blocks:
        data = yaml.safe_load(block)
        if isinstance(data, dict):
            shown |= set(data)
    assert sorted(set(_KEYS) - shown) == []
    (paths,) = [b for b in blocks if b.startswith("files:\n  /etc/mta/{{ node }}.conf")]
    (glue,) = [b for b in blocks if b.startswith("glue:")]
    description = load_description(write_description(tmp_path, "image: x\n" + paths + glue))
    assert description.glue[0].provides == ("TO-2", "CR-5")
    node = render_node(description, plan_for(tmp_path), "mbx2", PORTS, "run-1")
    assert set(node.files) == {"/etc/mta/mbx2.conf", "/etc/mta/shadow.conf"}
    peers = b'peers = {"mbx1": {"host": "127.0.0.1", "port": 41001, "address": "127.0.0.1:41001"}}'
    assert node.files["/etc/mta/shadow.conf"] == (peers, 0o600)
