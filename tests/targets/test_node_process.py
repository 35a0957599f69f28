"""Both ways the reference target starts a node behave alike: real child processes
that print their ready line, log to stderr, stop, continue and die like ``python ARGV``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from pytest_shadowcheck.targets.node_process import (
    ExecNode,
    ForkedNode,
    NodeProcess,
    start_node_process,
)

SCRIPT = """
import os, sys, time
print("to the log", file=sys.stderr, flush=True)
if sys.argv[1:] == ["fork"]:
    # a node of more than one process (as the reference MTA with SMTP-in workers)
    child = os.fork()
    if child == 0:
        while True:
            time.sleep(0.05)
    sys.argv.append(str(child))
print("ready", os.getpid(), " ".join(sys.argv[1:]), flush=True)
if sys.argv[1:] == ["exit"]:
    sys.exit(3)
while True:
    # a heartbeat on stdout: output resumes once a stopped process continues
    time.sleep(0.05)
    print("tick", flush=True)
"""

Starter = Callable[[list[str], Path], NodeProcess]
STARTERS: dict[str, Starter] = {
    "exec": lambda argv, log: ExecNode(sys.executable, argv, log),
    "fork": ForkedNode,
}


@pytest.fixture(params=sorted(STARTERS))
def start(request: pytest.FixtureRequest) -> Starter:
    return STARTERS[request.param]


def _script(tmp_path: Path) -> str:
    path = tmp_path / "node.py"
    path.write_text(SCRIPT, encoding="utf-8")
    return str(path)


def test_ready_line_log_and_sigkill(start: Starter, tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    proc = start([_script(tmp_path), "--name", "mbx1"], log)
    try:
        words = proc.readline().split()
        assert words[0] == b"ready"
        assert int(words[1]) == proc.pid != os.getpid()
        assert words[2:] == [b"--name", b"mbx1"]
        assert proc.poll() is None
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc.close()
    assert "to the log" in log.read_text(encoding="utf-8")


def test_stop_and_continue(start: Starter, tmp_path: Path) -> None:
    proc = start([_script(tmp_path)], tmp_path / "node.log")
    try:
        assert proc.readline().startswith(b"ready")
        proc.send_signal(signal.SIGSTOP)
        assert proc.wait(0.3) is None, "a stopped node has not exited"
        proc.send_signal(signal.SIGCONT)
        assert proc.readline() == b"tick\n"
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == -signal.SIGTERM
        proc.close()


def test_exit_code_and_end_of_output(start: Starter, tmp_path: Path) -> None:
    proc = start([_script(tmp_path), "exit"], tmp_path / "node.log")
    assert proc.readline().startswith(b"ready")
    assert proc.readline() == b"", "the pipe closes when the node exits"
    assert proc.wait(10) == 3
    assert proc.poll() == 3
    proc.send_signal(signal.SIGKILL)  # harmless once it exited
    proc.close()


def test_module_form_runs_like_python_dash_m(start: Starter, tmp_path: Path) -> None:
    log = tmp_path / "node.log"
    proc = start(
        [
            "-m",
            "reference_impl",
            "node",
            "--config",
            str(tmp_path / "none.yaml"),
            "--name",
            "mbx1",
            "--data",
            str(tmp_path / "mbx1"),
        ],
        log,
    )
    assert proc.readline() == b""
    assert proc.wait(30) == 2, "the MTA's own exit code for a configuration error"
    proc.close()
    assert "none.yaml" in log.read_text(encoding="utf-8")


def test_this_interpreter_forks_unless_told_to_exec(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script = _script(tmp_path)
    chosen = []
    for env in ("fork", "exec"):
        monkeypatch.setenv("SHADOWCHECK_NODE_START", env)
        proc = start_node_process(sys.executable, [script], tmp_path / "node.log")
        chosen.append(type(proc).__name__)
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc.close()
    assert chosen == ["ForkedNode", "ExecNode"]
    other = start_node_process("/usr/bin/env", ["true"], tmp_path / "other.log")
    assert isinstance(other, ExecNode), "another interpreter cannot be forked from this one"
    assert other.wait(10) == 0
    other.close()


def _state(pid: int) -> str:
    """The process's state letter (R, S, T stopped, Z zombie), or "gone"."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return "gone"


def _until(predicate: Callable[[], bool], timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_signals_reach_every_process_of_the_node(start: Starter, tmp_path: Path) -> None:
    """A node's own children (SMTP-in workers) are stopped, continued and killed with it."""
    proc = start([_script(tmp_path), "fork"], tmp_path / "node.log")
    child = 0
    try:
        words = proc.readline().split()
        assert words[:3] == [b"ready", str(proc.pid).encode(), b"fork"]
        child = int(words[3])
        assert os.getpgid(child) == os.getpgid(proc.pid) == proc.pid, "the node leads its group"
        proc.send_signal(signal.SIGSTOP)
        assert _until(lambda: _state(child) == "T" and _state(proc.pid) == "T")
        proc.send_signal(signal.SIGCONT)
        assert _until(lambda: _state(child) != "T" and _state(proc.pid) != "T")
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(10) == -signal.SIGKILL
        assert _until(lambda: _state(child) in ("Z", "gone")), "the child outlived the kill"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        proc.close()
        if child and _state(child) not in ("Z", "gone"):
            os.kill(child, signal.SIGKILL)


_HARNESS = """
import sys
from pathlib import Path
from pytest_shadowcheck.targets.node_process import ExecNode, ForkedNode
if sys.argv[3] == "fork":
    proc = ForkedNode([sys.argv[1], "fork"], Path(sys.argv[2]))
else:
    proc = ExecNode(sys.executable, [sys.argv[1], "fork"], Path(sys.argv[2]))
print(proc.readline().decode().strip(), flush=True)
sys.stdin.read()  # until killed
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", sorted(STARTERS))
def test_a_node_dies_with_the_harness_that_started_it(tmp_path: Path, how: str) -> None:
    # a harness killed mid-run must not leave its nodes delivering into ports a later
    # run listens on (a forked node's parent is the fork server, not the harness; an
    # executed one's parent is gone and it would be adopted by init)
    harness = subprocess.Popen(
        [sys.executable, "-c", _HARNESS, _script(tmp_path), str(tmp_path / "node.log"), how],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE,
    )  # fmt: skip
    assert harness.stdout is not None
    words = harness.stdout.readline().split()
    assert words[0] == b"ready", words
    node, worker = int(words[1]), int(words[3])  # the node and the process it forked
    assert _alive(node) and _alive(worker)
    harness.kill()
    harness.wait(10)
    deadline = time.monotonic() + 10
    while (_alive(node) or _alive(worker)) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(node) and not _alive(worker)
