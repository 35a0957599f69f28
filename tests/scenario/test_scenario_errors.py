"""A broken scenario file gives one clean error: file:line, a snippet, what was expected."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

GOOD_HEAD = """\
scenarios:
  - name: s1
    behaviours: [CR-4]
    topology:
      nodes: {mbx1: {}}
    steps:
"""

CASES = {
    "unknown_step_key": (
        GOOD_HEAD + "      - send: {id: m1, via: mbx1, to: [a@corp.test]}\n"
        "      - wait: {delivered: m1, timout: 2s}\n",
        8,
        "unknown key 'timout'",
        "one of delivered, reply, timeout, to",
    ),
    "yaml_syntax": (
        GOOD_HEAD + "      - send: {id: m1, via: mbx1, to: [a@corp.test]\n",
        7,
        "YAML syntax error",
        "valid YAML",
    ),
    "unknown_node": (
        GOOD_HEAD + "      - kill: mbx9\n",
        7,
        "unknown node 'mbx9'",
        "a node of topology 'inline': mbx1",
    ),
    "unknown_fault": (
        GOOD_HEAD + "      - fault: {link: client->mbx1, kind: explode}\n",
        7,
        "'explode' is not allowed",
        "one of cut, blackhole, delay",
    ),
    "bad_duration": (
        GOOD_HEAD + "      - wait: 3 fortnights\n",
        7,
        "bad duration '3 fortnights'",
        "a duration: seconds or a number with ms, s, m, h or d",
    ),
    "unknown_step": (
        GOOD_HEAD + "      - explode: mbx1\n",
        7,
        "unknown step 'explode'",
        "one of advance, check, directory",
    ),
    "unknown_behaviour": (
        GOOD_HEAD.replace("CR-4", "CR-99") + "      - kill: mbx1\n",
        3,
        "unknown behaviour ID 'CR-99'",
        "an ID of the catalogue",
    ),
    "unknown_topology": (
        GOOD_HEAD.replace("    topology:\n      nodes: {mbx1: {}}\n", "    topology: nowhere\n")
        + "      - kill: mbx1\n",
        4,
        "unknown topology 'nowhere'",
        "two-node-dag",
    ),
    "directory_without_target": (
        GOOD_HEAD + "      - directory: {members: [a@corp.test]}\n",
        7,
        "a directory step changes one group or one recipient",
        "{group, members} or {recipient, database}",
    ),
    "bad_resubmit_time": (
        GOOD_HEAD + "      - resubmit: {node: mbx1, database: DB1, start: yesterday, end: now}\n",
        7,
        "bad time 'yesterday'",
        "now, -2h, +5m, epoch seconds or ISO 8601",
    ),
    "message_not_sent": (
        GOOD_HEAD + "      - send: {id: m1, via: mbx1, to: [a@corp.test]}\n"
        "    expect:\n      - reply: {message: m2, code: 250}\n",
        9,
        "unknown message 'm2'",
        "the id of a send step: m1",
    ),
    "auth_as_unknown_node": (
        GOOD_HEAD + "      - session:\n          via: mbx1\n"
        "          say: [EHLO x.test, {auth_as: mbx9}]\n",
        9,
        "unknown node 'mbx9'",
        "a node of topology 'inline': mbx1",
    ),
    "unique_without_contains": (
        GOOD_HEAD + "      - send: {id: m1, via: mbx1, to: [a@corp.test]}\n"
        "    expect:\n"
        "      - lines: {link: client->mbx1, absent: '^XSHADOW',\n"
        "                unique: true}\n",
        10,
        "'unique' says which lines must not repeat: it needs 'contains'",
        "lines: {link, contains: REGEX, unique: true}",
    ),
    "count_with_duplicates": (
        GOOD_HEAD + "      - send: {id: m1, via: mbx1, to: [a@corp.test]}\n"
        "    expect:\n"
        "      - delivered: {message: m1, count: 2,\n"
        "                    duplicates: expected}\n",
        10,
        "'count' says exactly how many copies arrive: it takes no 'duplicates'",
        "delivered: {message: m1, count: 2}",
    ),
    "control_with_a_message": (
        GOOD_HEAD + "      - session:\n"
        "          via: mbx1\n"
        "          control: {XQDISCARD: XQNOSUCH}\n"
        "          say: [EHLO x, XQDISCARD, {message: m1}]\n",
        9,
        "a session with control cannot send a message",
        "put the message in a session of its own",
    ),
    "control_of_a_verb_not_said": (
        GOOD_HEAD + "      - session:\n"
        "          via: mbx1\n"
        "          control: {XSHADOW: XSNOSUCH}\n"
        "          say: [EHLO x, XQDISCARD]\n",
        9,
        "control XSHADOW: XSNOSUCH must replace a verb the session says with one it does not say",
        "control: {XQDISCARD: XQNOSUCH}",
    ),
    "control_stand_in_said_in_the_session": (
        GOOD_HEAD + "      - session:\n"
        "          via: mbx1\n"
        "          control: {XQDISCARD: noop}\n"
        "          say: [EHLO x, XQDISCARD, NOOP]\n",
        9,
        "control XQDISCARD: noop must replace a verb",
        "control: {XQDISCARD: XQNOSUCH}",
    ),
    "reply_and_refused": (
        GOOD_HEAD + "      - session:\n"
        "          via: mbx1\n"
        "          say:\n"
        "            - {send: XSHADOW mbx2, reply: '^5', refused: true}\n",
        10,
        "a line has either reply (what the reply must match) or refused: true",
        "refused: true accepts any 4xx or 5xx reply or the end of the session",
    ),
    "needs_an_unset_setting": (
        GOOD_HEAD.replace("    steps:\n", "    needs_settings: [ReplayLagTime]\n    steps:\n")
        + "      - kill: mbx1\n",
        6,
        "needs_settings names 'ReplayLagTime', which the scenario does not set",
        "a setting of the scenario's settings or node_settings",
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_broken_scenario_is_one_clean_error(pytester: pytest.Pytester, case: str) -> None:
    text, line, message, expected = CASES[case]
    path = pytester.path / "broken.yaml"
    path.write_text(text, encoding="utf-8")
    result = pytester.runpytest("--shadowcheck", str(path))
    assert result.ret == pytest.ExitCode.INTERRUPTED
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [f"*broken.yaml:{line}: *{message}*", f"> *{line} |*", f"expected: *{expected}*"]
    )
    assert "Traceback" not in out
    assert out.count("ERROR collecting") == 1


def test_duplicate_key_names_its_line(pytester: pytest.Pytester) -> None:
    path = pytester.path / "dup.yaml"
    path.write_text(
        GOOD_HEAD.replace("    behaviours: [CR-4]\n", "    behaviours: [CR-4]\n    name: s2\n")
        + "      - kill: mbx1\n"
    )
    result = pytester.runpytest("--shadowcheck", str(path))
    result.stdout.fnmatch_lines(["*dup.yaml:4: duplicate key 'name'*"])
    assert result.ret == pytest.ExitCode.INTERRUPTED


def test_shared_topology_file_error_points_into_that_file(pytester: pytest.Pytester) -> None:
    (pytester.path / "topologies").mkdir()
    (pytester.path / "topologies" / "mine.yaml").write_text("nodes:\n  mbx1: {sight: a}\n")
    path = pytester.path / "uses.yaml"
    path.write_text(
        GOOD_HEAD.replace("    topology:\n      nodes: {mbx1: {}}\n", "    topology: mine\n")
        + "      - kill: mbx1\n"
    )
    result = pytester.runpytest("--shadowcheck", str(path))
    result.stdout.fnmatch_lines(["*topologies/mine.yaml:2: unknown key 'sight'*"])
    assert "Traceback" not in result.stdout.str()


def test_the_schema_names_exactly_the_capabilities_the_harness_knows() -> None:
    # the schema's enum and CAPABILITIES are kept by hand: a capability added to one
    # only would be refused in scenarios or unknown to targets
    from pytest_shadowcheck.scenario.loader import CAPABILITIES
    from pytest_shadowcheck.scenario.schema import scenario_schema

    assert scenario_schema()["$defs"]["capability"]["enum"] == list(CAPABILITIES)
