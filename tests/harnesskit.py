"""Helpers the harness's tests share: a plain SMTP server on a thread of its own (an
already-running node of the ``external`` target), and the JUnit schema to validate
against. Importable as ``harnesskit`` (tests/conftest.py puts tests/ on the path)."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network import MailSink
from pytest_shadowcheck.targets.reference import ReferenceTarget
from pytest_shadowcheck.verdict import Verdict

__all__ = [
    "LoopStall",
    "ThreadedSink",
    "junit_schema",
    "reference_or_variant",
    "run_on_reference",
]

XSD = Path("/work/shared/data/junit-10.xsd")
#: the broken variants' launcher (tests/conformance): every node runs the variant
VARIANT_LAUNCHER = Path(__file__).parent / "conformance" / "broken_mta.py"
BUNDLED_XSD = Path(__file__).parent / "junit-10.xsd"


#: one node, two checks of one reply: a plain SMTP server that accepts is wrong for the
#: CR-4 check (451 wanted) and right for the CR-5 one (250 wanted)
CR4_FAILS_CR5_PASSES = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: rejects_but_logs_fine
    behaviours: [CR-4, CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m1, code: 451, behaviours: [CR-4]}
      - reply: {message: m1, code: 250, behaviours: [CR-5]}
"""


def reference_or_variant(variant: str = "") -> ReferenceTarget:
    """The reference target, or (``variant``) its broken variant of that name, for a
    test that runs a scenario in-process (``run_scenario``)."""
    return (
        ReferenceTarget(launcher=[str(VARIANT_LAUNCHER), variant]) if variant else ReferenceTarget()
    )


def run_on_reference(
    tmp_path: Path, text: str, variant: str = ""
) -> tuple[list[dict[str, Any]], Verdict]:
    """Run the one scenario of the YAML ``text`` in-process on real reference nodes (or
    those of its broken ``variant``): the events of its history (as written to its file)
    and its verdict."""
    # here, not at the top: most tests that use this kit run no scenario
    from pytest_shadowcheck.engine.run import run_scenario
    from pytest_shadowcheck.scenario.loader import load_scenario_file

    source = tmp_path / "scenario.yaml"
    source.write_text(text)
    (scenario,) = load_scenario_file(source)
    history = tmp_path / "history.json"
    verdict = run_scenario(
        scenario, reference_or_variant(variant), workdir=tmp_path / "run", history_file=history
    )
    events: list[dict[str, Any]] = json.loads(history.read_text())["events"]
    return events, verdict


class LoopStall:
    """Scenario hooks that block the run's event loop for ``seconds`` (as an overloaded
    machine blocks it: proxies, sinks, steps and time stamps all wait) once ``when`` holds
    for the run's history."""

    def __init__(self, seconds: float, when: Callable[[History], bool]) -> None:
        self.seconds = seconds
        self.when = when
        self.tasks: list[asyncio.Task[None]] = []

    def shadowcheck_scenario_started(self, scenario: Any, target: Any, history: History) -> None:
        async def stall() -> None:
            while not self.when(history):
                await asyncio.sleep(0.001)
            time.sleep(self.seconds)

        if self.seconds:
            self.tasks.append(asyncio.get_running_loop().create_task(stall()))

    def shadowcheck_scenario_finished(self, **_: Any) -> None:
        pass


class ThreadedSink:
    """A MailSink on its own event loop thread: a plain SMTP server standing in for
    an already-running node of the ``external`` target."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sink = MailSink("plain", History())
        future = asyncio.run_coroutine_threadsafe(self.sink.start(), self.loop)
        self.host, self.port = future.result(10)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    def close(self) -> None:
        asyncio.run_coroutine_threadsafe(self.sink.stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


def junit_schema() -> Path:
    return XSD if XSD.exists() else BUNDLED_XSD
