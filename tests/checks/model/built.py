"""Runs built by hand for the model's unit tests: a real scenario (loaded from YAML by the
real loader) and a real History filled with the events a run of it would record, each at
a chosen moment."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pytest_shadowcheck.checks.model import ModelOutcome, explain
from pytest_shadowcheck.history import History
from pytest_shadowcheck.scenario.loader import load_behaviours, load_scenario_file

TOKEN = "c0ffee01"


def sentence(behaviour: str) -> str:
    """The catalogue's sentence of ``behaviour``, as the model quotes it."""
    return str(load_behaviours()[behaviour]["text"]).replace("*", "")


class Built:
    """One scenario and the history of a run of it, event by event."""

    def __init__(self, tmp_path: Path, body: str, topology: str = "two-node-dag") -> None:
        path = tmp_path / "built.yaml"
        path.write_text(
            f"defaults:\n  topology: {topology}\n"
            "  settings: {ShadowHeartbeatFrequency: 0.5s, ShadowResubmitTimeSpan: 3s,"
            " TransientFailureRetryInterval: 0.5s}\n"
            "scenarios:\n  - name: built\n    title: built by hand\n    behaviours: [CR-1]\n"
            + "\n".join("    " + line for line in body.strip("\n").splitlines())
            + "\n    expect:\n      - model: {}\n",
            encoding="utf-8",
        )
        (self.scenario,) = load_scenario_file(path)
        self.history = History()
        self._base = time.monotonic() - self.history.now()
        self._next_step = 0
        self._conns: dict[str, int] = {}
        #: the latest send's message
        self._sent = ""

    def at(self, t: float, kind: str, link: str | None = None, **data: Any) -> None:
        conn = data.pop("conn", None)
        direction = data.pop("direction", None)
        self.history.record_at(self._base + t, kind, link, conn, direction, **data)

    def step(self, t: float, back: float | None = None) -> None:
        """The scenario's next step ran at ``t`` (a restart or wipe was back at ``back``)."""
        step = self.scenario.steps[self._next_step]
        self._next_step += 1
        if step.kind == "send":
            self._sent = step.arg.id
        self.at(t, "step", text=f"{step.kind} {step.arg.describe()}", line=step.where.line)
        if back is not None:
            self.at(back, "step", text=f"{step.arg.node} back after {step.kind}, queue database x")

    def steps(self, *times: float) -> None:
        for t in times:
            self.step(t)

    def reply(self, t: float, via: str, code: int, text: str = "", copied: bool = True) -> None:
        """The sender of the latest send got ``code`` for its content; a 250 comes, as on
        a correct MTA, after ``via`` copied it to the other node of its DAG (``copied``
        False: no copy on the wire)."""
        if code == 250 and copied:
            self.copy(t - 0.05, via, self._sent)
        link = f"client->{via}"
        self._conns[link] = conn = self._conns.get(link, 0) + 1
        self.at(t - 0.01, "reply", link, conn=conn, direction="s2c", command="CONNECT", code=220)
        enhanced = {250: "2.6.0", 451: "4.4.0"}.get(code)
        said = text or {250: "2.6.0 queued", 451: "4.4.0 Message failed to be made redundant"}[code]
        self.at(
            t, "reply", link, conn=conn, direction="s2c", command="EOD", code=code,
            enhanced=enhanced, text=said,
        )  # fmt: skip

    def copy(self, t: float, via: str, ref: str) -> None:
        """``via`` copies ``ref`` to the other node of its DAG, acknowledged at ``t``: a
        session opened just before."""
        nodes = self.scenario.topology.nodes
        shadow = next(n for n in nodes if n != via and nodes[n].dag == nodes[via].dag)
        link = f"{via}->{shadow}"
        self._conns[link] = conn = self._conns.get(link, 0) + 1
        self.line(t - 0.03, link, "s2c", f"220 {shadow} ready", conn=conn)
        self.content(t - 0.01, link, ref, conn=conn)
        self.line(t, link, "s2c", "250 2.6.0 queued as shadow", conn=conn)

    def copy_session(self, t: float, link: str, ref: str, conn: int = 1) -> None:
        """A whole ``XSHADOWCOPY`` session on ``link`` opened at ``t``: the copy of
        ``ref`` stored 0.11 s later, the session closed by its client."""
        self.at(t, "connect", link, conn=conn)
        self.line(t + 0.01, link, "c2s", "XSHADOWCOPY P1 DB1 corp.test", conn=conn)
        self.line(t + 0.02, link, "s2c", "250 2.0.0 Ready for shadow copy", conn=conn)
        self.content(t + 0.1, link, ref, conn=conn)
        self.line(t + 0.11, link, "s2c", "250 2.0.0 Shadow copy stored", conn=conn)
        self.at(t + 0.12, "close", link, conn=conn, reason="client closed")

    def delivered(
        self, t: float, ref: str, by: str, *rcpts: str, sink: str = "mailbox", sender: str = "s"
    ) -> None:
        self.at(
            t, "delivery", sink=sink, trace=f"{ref}.{TOKEN}", mail_from=sender,
            message_id=f"<{ref}.{TOKEN}@shadowcheck.test>", rcpt_tos=list(rcpts), helo=by,
        )  # fmt: skip

    def looked(self, t: float, node: str, queue: str, *refs: str) -> None:
        answer = [{"message_id": f"<{r}.{TOKEN}@shadowcheck.test>"} for r in refs]
        self.at(t, "snapshot", node=node, queue=queue, answer=answer)

    def line(self, t: float, link: str, direction: str, text: str, conn: int = 1) -> None:
        self.at(t, "line", link, conn=conn, direction=direction, text=text)

    def content(self, t: float, link: str, ref: str, conn: int = 1) -> None:
        """The final dot of ``ref``'s content on ``link`` (a copy, a relay)."""
        self.at(
            t, "data", link, conn=conn, direction="c2s", size=100, trace=f"{ref}.{TOKEN}",
            message_id=f"<{ref}.{TOKEN}@shadowcheck.test>",
        )  # fmt: skip

    def heartbeats(self, shadow: str, primary: str, since: float, until: float) -> None:
        """``shadow`` asks ``primary`` for discard status every ShadowHeartbeatFrequency
        (0.5 s) from ``since`` to ``until``, each time in a session of its own, as a
        correct shadow holding copies does (DI-2); nothing to discard."""
        link = f"{shadow}->{primary}"
        t = since
        while t < until:
            self._conns[link] = conn = self._conns.get(link, 0) + 1
            self.at(t, "connect", link, conn=conn)
            self.line(t + 0.01, link, "c2s", "XQDISCARD", conn=conn)
            self.line(t + 0.02, link, "s2c", "250 0 discard notifications", conn=conn)
            self.at(t + 0.03, "close", link, conn=conn, reason="client closed")
            t += 0.5

    def explain(self, slack: float = 2.0) -> ModelOutcome:
        return explain(self.scenario, self.history, slack=slack)


class BuiltRun:
    """A built run as the model check reads a run: its scenario, its history and the
    history's excerpt (check_model reads nothing else of the engine's run)."""

    def __init__(self, built: Built) -> None:
        self.scenario = built.scenario
        self.history = built.history

    def excerpt(
        self, around: float, links: list[str], before: float = 3.0, after: float = 2.0
    ) -> str:
        return self.history.excerpt(around, links, before=before, after=after)
