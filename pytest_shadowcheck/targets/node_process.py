"""How the reference target runs one node: a child process it can SIGKILL, SIGSTOP and
SIGCONT, whose first stdout line says where the node listens and whose stderr goes to
the node's log.

Two ways to start one, same behaviour:

* :class:`ExecNode` - ``python ARGV...`` in a fresh interpreter (``subprocess``). Works
  for any interpreter and any launcher.
* :class:`ForkedNode` - forked from a server process (``multiprocessing``'s
  forkserver) that imported the MTA once. A fresh interpreter spends ~0.4 s importing
  the MTA (aiohttp, aiosmtpd, uvloop) before a node can listen; scenarios start and
  restart nodes dozens of times, so that import cost dominated the suite's set-up.
  The fork gets its own pid, sockets and database handles - nothing is shared with
  its siblings but the already imported, not yet used modules - so a SIGKILL is
  still a real crash of that node alone.

Either way the node is the leader of a process group of its own, and
:meth:`NodeProcess.send_signal` signals that group: a node may run more than one
process (the reference MTA's SMTP-in workers, ``SmtpInProcesses``), and a kill, a
SIGSTOP or a SIGCONT of the node must reach all of them at once.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import subprocess
import sys
from multiprocessing.connection import Connection
from pathlib import Path
from typing import IO, Protocol

from pytest_shadowcheck.targets import node_guard
from pytest_shadowcheck.targets.node_guard import die_with_owner, run_as_main

__all__ = ["ExecNode", "ForkedNode", "NodeProcess", "signal_group", "start_node_process"]

#: run by path by ExecNode: a node that dies with the harness, under any interpreter
_GUARD = Path(node_guard.__file__)
#: what the fork server imports once: the MTA's modules every node loads anyway
PRELOAD = ["__main__", "reference_impl.cli", "reference_impl.control_api"]


class NodeProcess(Protocol):
    """The part of ``subprocess.Popen`` the reference target uses."""

    pid: int

    def readline(self) -> bytes:
        """The next line the node printed on its stdout (b"" once it closed it)."""
        ...

    def poll(self) -> int | None:
        """Exit code (negative: killed by that signal), or None while it runs."""
        ...

    def wait(self, timeout: float) -> int | None:
        """Wait up to ``timeout`` seconds for it to exit; its exit code, or None."""
        ...

    def send_signal(self, sig: int) -> None:
        """Signal the node: every process of its group."""
        ...

    def close(self) -> None:
        """Release the pipe to its stdout (after it exited)."""
        ...


def signal_group(pid: int, sig: int) -> None:
    """Signal the process group led by ``pid``; just ``pid`` if it has none (yet)."""
    try:
        os.killpg(pid, sig)
    except ProcessLookupError:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)


class ExecNode:
    """``python ARGV...`` as a ``subprocess.Popen``. A Python interpreter's script or
    ``-m MODULE`` runs through node_guard.py, so that it dies with the harness; other
    forms (interpreter options, another program) run as given."""

    def __init__(self, python: str, argv: list[str], log: Path) -> None:
        name = Path(python).name
        guarded = _emulable(argv) and name.startswith(("python", "pypy"))
        # only the node gets the read end; the write end stays here for the node's life
        alive, self._alive = os.pipe() if guarded else (-1, -1)
        command = [python, str(_GUARD), str(alive), *argv] if guarded else [python, *argv]
        try:
            with log.open("ab") as stderr:
                self._proc = subprocess.Popen(
                    command,
                    stdout=subprocess.PIPE,
                    stderr=stderr,
                    stdin=subprocess.DEVNULL,
                    process_group=0,
                    pass_fds=(alive,) if guarded else (),
                )
        finally:
            if guarded:
                os.close(alive)
        self.pid = self._proc.pid

    def readline(self) -> bytes:
        assert self._proc.stdout is not None
        return self._proc.stdout.readline()

    def poll(self) -> int | None:
        return self._proc.poll()

    def wait(self, timeout: float) -> int | None:
        try:
            return self._proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def send_signal(self, sig: int) -> None:
        if self._proc.poll() is None:
            signal_group(self.pid, sig)

    def close(self) -> None:
        if self._proc.stdout is not None:
            self._proc.stdout.close()
        if self._alive >= 0:
            os.close(self._alive)
            self._alive = -1


def _become(argv: list[str], log: str, stdout: Connection, alive: Connection) -> None:
    """In the forked child: turn into ``python ARGV...`` with stdout on the pipe."""
    os.setpgid(0, 0)  # a group of its own, as ExecNode's (see the module doc)
    # the fork server, not the harness, is the node's parent: only the harness holds the
    # other end of ``alive`` (node_guard.py says why a node must die with it)
    die_with_owner(alive.recv_bytes)
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    os.dup2(stdout.fileno(), 1)
    stdout.close()
    run_as_main(argv)


_CONTEXT: multiprocessing.context.ForkServerContext | None = None


def _fork_server() -> multiprocessing.context.ForkServerContext:
    global _CONTEXT
    if _CONTEXT is None:
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(PRELOAD)
        _CONTEXT = context
    return _CONTEXT


class ForkedNode:
    """``python ARGV...`` forked from the fork server (the same interpreter as ours)."""

    def __init__(self, argv: list[str], log: Path) -> None:
        context = _fork_server()
        reader, writer = context.Pipe(duplex=False)
        # the harness keeps the write end for the node's life and never writes to it
        alive, self._alive = context.Pipe(duplex=False)
        self._proc = context.Process(
            target=_become, args=(argv, str(log), writer, alive), name=f"node {argv}"
        )
        self._proc.start()
        # only the child may hold the write end: its exit must read as EOF here
        writer.close()
        alive.close()
        self._stdout: IO[bytes] = os.fdopen(os.dup(reader.fileno()), "rb")
        reader.close()
        assert self._proc.pid is not None
        self.pid = self._proc.pid
        self._closed_with: int | None = None

    def readline(self) -> bytes:
        return self._stdout.readline()

    def poll(self) -> int | None:
        if self._closed_with is not None:
            return self._closed_with
        return self._proc.exitcode

    def wait(self, timeout: float) -> int | None:
        if self._closed_with is None:
            self._proc.join(timeout)
        return self.poll()

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            signal_group(self.pid, sig)

    def close(self) -> None:
        self._stdout.close()
        exitcode = self.poll()
        if exitcode is not None:
            self._alive.close()  # (while it runs, closing it would kill it)
        if exitcode is not None and self._closed_with is None:
            # a closed Process object raises on every question: keep its answer
            self._closed_with = exitcode
            self._proc.close()


def _emulable(argv: list[str]) -> bool:
    """``SCRIPT ...`` or ``-m MODULE ...``: what a fork or node_guard.py can run as
    ``python ARGV`` would."""
    return len(argv) >= (2 if argv[:1] == ["-m"] else 1) and (
        argv[0] == "-m" or not argv[0].startswith("-")
    )


def start_node_process(python: str, argv: list[str], log: Path) -> NodeProcess:
    """Start ``python ARGV...``: forked when ``python`` is this interpreter and ARGV is
    ``-m MODULE ...`` or ``SCRIPT ...`` (what a fork can emulate), else executed."""
    forkable = (
        python == sys.executable
        and _emulable(argv)
        and os.environ.get("SHADOWCHECK_NODE_START", "fork") != "exec"
    )
    if forkable:
        return ForkedNode(argv, log)
    return ExecNode(python, argv, log)
