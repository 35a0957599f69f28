"""Each action step comes out of the loader as a typed spec with its defaults applied, and
says how the history shows it; a bad value is still one error at its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.scenario.durations import Moment
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.model import Step
from pytest_shadowcheck.scenario.schema import scenario_schema
from pytest_shadowcheck.scenario.steps import (
    ACTION_SPECS,
    DEFAULT_SENDER,
    REPLY_TIMEOUT,
    SEND_TIMEOUT,
    AdvanceSpec,
    CheckSpec,
    DirectorySpec,
    FaultSpec,
    HealSpec,
    NodeActionSpec,
    NoteSpec,
    ResubmitSpec,
    RouteSpec,
    SayItem,
    SendSpec,
    SessionSpec,
    SettingsSpec,
    SinkSpec,
    SnapshotSpec,
    WaitSpec,
    default_body,
    settings_text,
)
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec

HEAD = """\
scenarios:
  - name: s1
    behaviours: [CR-4, XS-3]
    topology:
      nodes: {mbx1: {}, mbx2: {}}
      next_hops: {corp.test: {sink: mailbox}}
    settings: {ShadowHeartbeatFrequency: 5s}
    steps:
"""
#: the line of the first step
FIRST = 9

EVERY_STEP = """\
      - send: {id: m1, via: mbx1, to: [a@corp.test]}
      - send: {id: m2, via: mbx2, from: b@ext.test, to: [a@corp.test, c@corp.test],
               message_id: "<fixed@x.test>", subject: hi, body: "text", size: 2000,
               timeout: 2s, background: true}
      - fault: {link: mbx1->mbx2, kind: delay, seconds: 20ms}
      - fault: {link: client->mbx1, kind: drop_after, bytes: 100}
      - fault: {link: mbx1->mailbox, kind: cut}
      - heal: all
      - heal: mbx1->mbx2
      - kill: mbx1
      - pause: mbx2
      - resume: mbx2
      - restart: mbx1
      - wipe: mbx2
      - wait: ShadowHeartbeatFrequency + 500ms
      - wait: {delivered: m1, to: mailbox, timeout: 10s}
      - wait: {reply: m2, timeout: 1m}
      - advance: 2h
      - set_settings: {nodes: [mbx1], values: {SafetyNetHoldTime: 3d,
                       ShadowRedundancyEnabled: false, MaxRetriesForLocalSiteShadow: 2},
                       result: accepted}
      - set_settings: {values: {ReplayLagTime: 1s}}
      - resubmit: {node: mbx2, database: DB1, start: "2026-01-01T00:00:00Z", end: -2h}
      - directory: {group: team@corp.test, members: [a@corp.test]}
      - directory: {recipient: a@corp.test}
      - route: {domain: corp.test, sink: mailbox, nodes: [mbx2]}
      - route: {domain: other.test, node: mbx1}
      - snapshot: {node: mbx1, queue: shadow}
      - sink: {name: mailbox, reply: "451 4.3.0 busy"}
      - check: {queue: {node: mbx2, queue: shadow, contains: [m1], within: 5s,
                        behaviours: [CR-4]}}
      - note: look here
      - session:
          via: mbx1
          say: [EHLO x.test, {send: XQDISCARD m1, reply: "^5"}, {auth_as: mbx2}]
          control: {XQDISCARD: XQNOSUCH}
          idle: ShadowHeartbeatFrequency
          behaviours: [XS-3]
      - session: {via: mbx2, say: [EHLO x.test, MAIL FROM:<a@x.test>, {message: m3}]}
      - workload: {messages: 10}
      - power_cut: mbx1
      - disk_full: mbx2
      - disk_full: {node: mbx1, after: 4096}
      - disk_error: mbx1
      - disk_ok: mbx1
"""


def load(tmp_path: Path, steps: str) -> list[Step]:
    path = tmp_path / "steps.yaml"
    path.write_text(HEAD + steps, encoding="utf-8")
    (scenario,) = load_scenario_file(path)
    return scenario.steps


def load_error(tmp_path: Path, steps: str) -> ScenarioError:
    with pytest.raises(ScenarioError) as caught:
        load(tmp_path, steps)
    return caught.value


@pytest.fixture(scope="module")
def steps(tmp_path_factory: pytest.TempPathFactory) -> list[Step]:
    return load(tmp_path_factory.mktemp("steps"), EVERY_STEP)


def test_every_action_kind_of_the_schema_has_a_spec() -> None:
    kinds = set(scenario_schema()["$defs"]["step"]["properties"])
    assert kinds == set(ACTION_SPECS)


def test_every_step_comes_out_as_its_kinds_spec(steps: list[Step]) -> None:
    assert [type(s.arg) for s in steps] == [ACTION_SPECS[s.kind] for s in steps]
    assert {s.kind for s in steps} == set(ACTION_SPECS)


def test_send_defaults_are_applied_when_the_scenario_loads(steps: list[Step]) -> None:
    assert steps[0].arg == SendSpec(
        id="m1",
        via="mbx1",
        sender=DEFAULT_SENDER,
        to=("a@corp.test",),
        message_id=None,
        subject="shadowcheck s1 m1",
        body=default_body("s1", "m1"),
        size=None,
        timeout=SEND_TIMEOUT,
        background=False,
    )
    assert steps[1].arg == SendSpec(
        id="m2",
        via="mbx2",
        sender="b@ext.test",
        to=("a@corp.test", "c@corp.test"),
        message_id="<fixed@x.test>",
        subject="hi",
        body="text",
        size=2000,
        timeout=2.0,
        background=True,
    )


def test_faults_get_their_kinds_direction(steps: list[Step]) -> None:
    assert steps[2].arg == FaultSpec(
        link="mbx1->mbx2", kind="delay", seconds=0.02, direction="both"
    )
    assert steps[3].arg == FaultSpec(
        link="client->mbx1", kind="drop_after", direction="c2s", bytes=100
    )
    assert steps[4].arg == FaultSpec.of("mbx1->mailbox", "cut")


def test_heal_node_actions_waits_and_advance(steps: list[Step]) -> None:
    assert [s.arg for s in steps[5:7]] == [HealSpec(None), HealSpec("mbx1->mbx2")]
    assert [(s.kind, s.arg) for s in steps[7:12]] == [
        ("kill", NodeActionSpec("mbx1")),
        ("pause", NodeActionSpec("mbx2")),
        ("resume", NodeActionSpec("mbx2")),
        ("restart", NodeActionSpec("mbx1")),
        ("wipe", NodeActionSpec("mbx2")),
    ]
    assert steps[12].arg == WaitSpec(timeout=5.5)
    assert steps[13].arg == WaitSpec(delivered="m1", to="mailbox", timeout=10.0)
    assert steps[14].arg == WaitSpec(reply="m2", timeout=60.0)
    assert steps[15].arg == AdvanceSpec(7200.0)


def test_settings_durations_are_seconds_and_nodes_a_tuple(steps: list[Step]) -> None:
    assert steps[16].arg == SettingsSpec(
        values={
            "SafetyNetHoldTime": 259200.0,
            "ShadowRedundancyEnabled": False,
            "MaxRetriesForLocalSiteShadow": 2,
        },
        nodes=("mbx1",),
        result="accepted",
    )
    assert steps[17].arg == SettingsSpec(values={"ReplayLagTime": 1.0})


def test_resubmit_window_is_moments_on_the_nodes_clock(steps: list[Step]) -> None:
    spec = steps[18].arg
    assert isinstance(spec, ResubmitSpec)
    assert (spec.node, spec.database) == ("mbx2", "DB1")
    assert spec.start == Moment("2026-01-01T00:00:00Z", at=1767225600.0)
    assert spec.end == Moment("-2h", offset=-7200.0)
    assert (spec.start.on(5.0), spec.end.on(10000.0)) == (1767225600.0, 2800.0)


def test_directory_route_snapshot_sink_note(steps: list[Step]) -> None:
    assert steps[19].arg == DirectorySpec(group="team@corp.test", members=("a@corp.test",))
    assert steps[20].arg == DirectorySpec(recipient="a@corp.test")
    assert steps[21].arg == RouteSpec(domain="corp.test", sink="mailbox", nodes=("mbx2",))
    assert steps[22].arg == RouteSpec(domain="other.test", node="mbx1")
    assert steps[23].arg == SnapshotSpec(node="mbx1", queue="shadow")
    assert steps[24].arg == SinkSpec(name="mailbox", reply="451 4.3.0 busy")
    assert steps[26].arg == NoteSpec("look here")


def test_check_wraps_the_expectation_as_expect_would_give_it(steps: list[Step]) -> None:
    step = steps[25]
    assert isinstance(step.arg, CheckSpec)
    inner = step.arg.expectation
    assert (inner.kind, inner.arg) == (
        "queue",
        {"node": "mbx2", "queue": "shadow", "contains": ["m1"], "within": 5.0},
    )
    assert inner.where == step.where
    assert inner.behaviours == step.behaviours == ["CR-4"]


def test_session_items_and_defaults(steps: list[Step]) -> None:
    spec, plain = steps[27].arg, steps[28].arg
    assert isinstance(spec, SessionSpec) and isinstance(plain, SessionSpec)
    where = steps[27].where
    assert [(i.send, i.auth_as, i.message, i.reply) for i in spec.say] == [
        ("EHLO x.test", None, None, None),
        ("XQDISCARD m1", None, None, "^5"),
        (None, "mbx2", None, None),
    ]
    assert all(isinstance(i, SayItem) and i.where.path == where.path for i in spec.say)
    assert spec.say[1].where.line == where.line + 2
    assert (spec.via, spec.idle, spec.control, spec.behaviours) == (
        "mbx1",
        5.0,
        {"XQDISCARD": "XQNOSUCH"},
        ("XS-3",),
    )
    assert (spec.timeout, spec.keepalive) == (REPLY_TIMEOUT, None)
    assert (plain.timeout, plain.idle, plain.keepalive, plain.control) == (
        REPLY_TIMEOUT,
        0.0,
        None,
        {},
    )
    assert plain.say[2].message == "m3"


def test_workload_keeps_its_spec(steps: list[Step]) -> None:
    spec = steps[29].arg
    assert isinstance(spec, WorkloadSpec)
    assert (spec.messages, spec.via, spec.behaviours) == (10, ("mbx1", "mbx2"), ("CR-4", "XS-3"))


def test_the_history_shows_a_step_as_scenarios_match_it(steps: list[Step]) -> None:
    shown = [f"{s.kind} {s.arg.describe()}" for s in steps[:27]]
    assert shown == [
        "send id=m1 via=mbx1 to=['a@corp.test']",
        "send id=m2 via=mbx2 from=b@ext.test to=['a@corp.test', 'c@corp.test'] "
        "message_id=<fixed@x.test> size=2000 timeout=2.0 background=True",
        "fault link=mbx1->mbx2 kind=delay seconds=0.02",
        "fault link=client->mbx1 kind=drop_after bytes=100",
        "fault link=mbx1->mailbox kind=cut",
        "heal all",
        "heal mbx1->mbx2",
        "kill mbx1",
        "pause mbx2",
        "resume mbx2",
        "restart mbx1",
        "wipe mbx2",
        "wait 5.5",
        "wait delivered=m1 to=mailbox timeout=10.0",
        "wait reply=m2 timeout=60.0",
        "advance 7200.0",
        "set_settings SafetyNetHoldTime=3d, ShadowRedundancyEnabled=false, "
        "MaxRetriesForLocalSiteShadow=2 nodes=['mbx1'] result=accepted",
        "set_settings ReplayLagTime=1s",
        "resubmit node=mbx2 database=DB1 start=2026-01-01T00:00:00Z end=-2h",
        "directory group=team@corp.test members=['a@corp.test']",
        "directory recipient=a@corp.test",
        "route domain=corp.test sink=mailbox nodes=['mbx2']",
        "route domain=other.test node=mbx1",
        "snapshot node=mbx1 queue=shadow",
        "sink name=mailbox reply=451 4.3.0 busy",
        "check kind=queue node=mbx2 queue=shadow contains=['m1'] within=5.0",
        "note look here",
    ]


def test_a_fault_shows_its_direction_only_when_not_its_kinds_own() -> None:
    assert FaultSpec.of("a->b", "delay", 1.0, "s2c").describe() == (
        "link=a->b kind=delay seconds=1.0 direction=s2c"
    )
    assert FaultSpec.of("a->b", "drop_after", bytes=5).describe() == (
        "link=a->b kind=drop_after bytes=5"
    )


@pytest.mark.parametrize(
    ("values", "shown"),
    [
        ({"ShadowHeartbeatFrequency": 5.0}, "ShadowHeartbeatFrequency=5s"),
        (
            {"ReceiveConnectionTimeout": 0.2, "RejectMessageOnShadowFailure": True},
            "ReceiveConnectionTimeout=200ms, RejectMessageOnShadowFailure=true",
        ),
        (
            {"ShadowMessagePreferenceSetting": "LocalOnly", "MaxMessageSize": 1000},
            "ShadowMessagePreferenceSetting=LocalOnly, MaxMessageSize=1000",
        ),
    ],
)
def test_settings_are_shown_by_name_never_as_a_python_dict(
    values: dict[str, object], shown: str
) -> None:
    assert settings_text(values) == shown


@pytest.mark.parametrize(
    ("step", "line", "message"),
    [
        ("fault: {link: mbx1->mbx2, kind: delay, seconds: soon}", 0, "bad duration 'soon'"),
        ("fault: {link: mbx1->mbx2, kind: delay}", 0, "fault 'delay' needs 'seconds'"),
        ("heal: mbx1->nowhere", 0, "unknown link 'mbx1->nowhere'"),
        ("send: {id: m1, via: mbx9, to: [a@corp.test]}", 0, "unknown node 'mbx9'"),
        (
            "set_settings:\n          values: {SafetyNetHoldTime: forever}",
            1,
            "bad duration 'forever'",
        ),
        ("set_settings: {values: {}, nodes: [mbx1, mbx7]}", 0, "unknown node 'mbx7'"),
        (
            "resubmit:\n          node: mbx1\n          database: DB1\n"
            "          start: now\n          end: later",
            4,
            "bad time 'later'",
        ),
        ("wait: {delivered: m9, timeout: 1s}", 0, "unknown message 'm9'"),
        ("wait: {timeout: 1s}", 0, "a wait with a timeout waits for one thing"),
        ("advance: NoSuchTimer", 0, "bad duration 'NoSuchTimer'"),
        ("sink: {name: nosink, reply: accept}", 0, "unknown sink 'nosink'"),
        ("route: {domain: d.test, sink: mailbox, kind: boundary, nodes: [mbx3]}", 0,
         "unknown node 'mbx3'"),
        ("session: {via: mbx1, say: [EHLO], keepalive: 1s}", 0, "keepalive needs idle"),
    ],
)  # fmt: skip
def test_a_bad_value_is_one_error_at_its_file_and_line(
    tmp_path: Path, step: str, line: int, message: str
) -> None:
    error = load_error(tmp_path, f"      - {step}\n")
    assert error.where.path == tmp_path / "steps.yaml"
    assert error.where.line == FIRST + line
    assert message in error.message
    assert f"steps.yaml:{FIRST + line}" in str(error)
