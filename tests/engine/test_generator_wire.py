"""Exploration's wire operations (engine/generator_wire.py): the sessions a sender keeps
silent or busy outlast the limit the node must end them at, and the model's slack, by
more than the harness's own lateness the model grants: a session the harness ends just
at that deadline would leave a node that never ends it unjudged."""

from __future__ import annotations

from pytest_shadowcheck.engine.generator import plan
from pytest_shadowcheck.engine.generator_wire import WIRE_SETTINGS
from pytest_shadowcheck.plugin.exploration import deep_length
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES
from pytest_shadowcheck.scenario.durations import parse_duration

ALL = frozenset(CAPABILITIES)
#: the catalogue model's slack (checks/model/check.py DEFAULT_SLACK)
SLACK = 2.0


def test_silent_and_busy_senders_stay_well_past_the_limit_and_the_slack() -> None:
    sessions = [
        (op.label, op.steps[0]["session"])
        for index in range(80)
        for op in plan(11, index, capabilities=ALL, length=deep_length(index)).operations
        if op.label.startswith(("wire busy", "wire silent"))
    ]
    assert {label.split()[1] for label, _ in sessions} == {"busy", "silent"}
    for label, session in sessions:
        idle = parse_duration(session["idle"], None)
        if "busy" in label:
            assert session["keepalive"]
            limit = WIRE_SETTINGS["ReceiveConnectionTimeout"]
        else:
            limit = WIRE_SETTINGS["ReceiveConnectionInactivityTimeout"]
        assert idle >= limit + SLACK + 2.0, (label, session)
