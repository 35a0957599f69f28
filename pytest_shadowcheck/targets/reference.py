"""The ``reference`` target: the bundled MTA (``reference_impl``) as local processes.

Each node runs as ``python -m reference_impl node --config CLUSTER.yaml --name N
--data WORKDIR/N`` (one process per node, so one can be SIGKILLed, SIGSTOPped
and SIGCONTed). The generated cluster file gives every node its peers' and
next hops' addresses: harness proxies, so every link is observed and faultable.

kill = SIGKILL; restart = the same command with the same ``--data`` (same
queue database ID); wipe = delete the data directory, then start; pause /
resume = SIGSTOP / SIGCONT. Every signal goes to the node's process group (a
node with SMTP-in workers is several processes, ``node_process``). For a scenario
that cuts power or fills a disk, each ``--data`` directory is a lazy filesystem
(:mod:`.lazy_storage`): power_cut = SIGKILL, then what was not fsynced is dropped.
"""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import shutil
import signal
import sys
from pathlib import Path
from typing import Any

import yaml

from pytest_shadowcheck.scenario.capabilities import CAPABILITIES, STORAGE_CAPABILITIES
from pytest_shadowcheck.storage.mount import fuse_unavailable
from pytest_shadowcheck.targets.base import ClusterPlan, NodeHandle, Target, TargetError
from pytest_shadowcheck.targets.hookspecs import hookimpl
from pytest_shadowcheck.targets.lazy_storage import LazyStorage
from pytest_shadowcheck.targets.node_process import NodeProcess, start_node_process

__all__ = ["ReferenceTarget", "cluster_document"]

START_TIMEOUT = 30.0
STOP_TIMEOUT = 5.0

#: every process any ReferenceTarget started, so nothing outlives the test run
_LIVE: set[NodeProcess] = set()


def _kill_leftovers() -> None:
    for proc in list(_LIVE):
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGKILL)
        _LIVE.discard(proc)


# Registered after node_process imported multiprocessing, so it runs before
# multiprocessing's own exit hook, which joins forked nodes: they are dead by then.
atexit.register(_kill_leftovers)


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host or "127.0.0.1", int(port)


def cluster_document(plan: ClusterPlan) -> dict[str, Any]:
    """The cluster file (docs/contracts.md section 1) for ``plan``: peers and next hops
    are the harness proxies. Also used by the docker target's templates."""
    topo = plan.topology
    nodes: dict[str, Any] = {}
    for name, spec in topo.nodes.items():
        entry: dict[str, Any] = {"site": spec.site, "dag": spec.dag}
        if spec.profile:
            entry["profile"] = spec.profile
        entry["peers"] = dict(plan.peers.get(name, {}))
        entry["next_hops"] = dict(plan.next_hops.get(name, {}))
        if plan.node_settings.get(name):
            entry["settings"] = dict(plan.node_settings[name])
        nodes[name] = entry
    cluster: dict[str, Any] = {
        "boundary": topo.boundary,
        "secret": plan.secret,
        "profile": topo.profile,
        "nodes": nodes,
        "directory": topo.directory or {},
        "settings": dict(plan.settings),
    }
    if topo.clock == "virtual":
        cluster["clock"] = {
            "mode": "virtual",
            "start": plan.clock_start or "2026-01-01T00:00:00Z",
        }
    return cluster


class ReferenceTarget(Target):
    name = "reference"
    capabilities = frozenset(CAPABILITIES)
    per_node_settings = True
    # each categorisation stamps the message (docs/protocol.md; SN-11 reads it)
    added_headers = frozenset({"X-Categorized-By"})
    # an instance holds one cluster's processes and files; nodes are processes
    lanes = True

    def __init__(self, python: str | None = None, launcher: list[str] | None = None) -> None:
        self.python = python or sys.executable
        # what runs a node, before ``node --config ...``: a subclass or plugin may
        # put a wrapper here (the project's own tests run deliberately broken
        # variants of the reference MTA this way)
        self.launcher = launcher or ["-m", "reference_impl"]
        self.plan: ClusterPlan | None = None
        self.config_path: Path | None = None
        self.procs: dict[str, NodeProcess] = {}
        self.handles: dict[str, NodeHandle] = {}
        self.tokens: dict[str, str | None] = {}
        self.paused: set[str] = set()
        # the cluster's virtual time, as the last clock move reported it: a node
        # (re)started later starts there, so a new queue database is dated right (SN-8)
        self.virtual_now: float | None = None
        self.storage: LazyStorage | None = None
        #: without FUSE here, no power cut or disk fault (UNTESTABLE, with the reason)
        self.no_fuse = fuse_unavailable()
        if self.no_fuse:
            self.capabilities = self.capabilities - set(STORAGE_CAPABILITIES)

    def capability_unavailable(self, capability: str) -> str | None:
        if capability in STORAGE_CAPABILITIES and self.no_fuse:
            return f"no lazy filesystem on this machine: {self.no_fuse}"
        return None

    def version(self) -> str:
        try:
            import reference_impl

            return str(getattr(reference_impl, "__version__", "unknown"))
        except ImportError:
            return "not installed"

    def describe(self) -> str:
        return f"reference MTA {self.version()} ({self.python} {' '.join(self.launcher)})"

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, plan: ClusterPlan) -> dict[str, NodeHandle]:
        self.plan = plan
        self.virtual_now = None
        plan.workdir.mkdir(parents=True, exist_ok=True)
        self.config_path = plan.workdir / "cluster.yaml"
        self.config_path.write_text(
            yaml.safe_dump(cluster_document(plan), sort_keys=False), encoding="utf-8"
        )
        if plan.lazy_storage:
            self.storage = LazyStorage(plan.workdir)
            for name in plan.topology.nodes:
                await self.storage.mount(name)
        started = await asyncio.gather(
            *(self._start_node(name) for name in plan.topology.nodes), return_exceptions=True
        )
        for result in started:
            if isinstance(result, BaseException):
                raise result
        return dict(self.handles)

    def _data_dir(self, node: str) -> Path:
        assert self.plan is not None
        return self.plan.workdir / node

    def _log_path(self, node: str) -> Path:
        assert self.plan is not None
        return self.plan.workdir / f"{node}.log"

    async def _start_node(self, node: str) -> NodeHandle:
        assert self.config_path is not None
        argv = [
            *self.launcher, "node",
            "--config", str(self.config_path),
            "--name", node,
            "--data", str(self._data_dir(node)),
        ]  # fmt: skip
        if self.virtual_now is not None:
            argv += ["--clock-start", repr(self.virtual_now)]
        proc = start_node_process(self.python, argv, self._log_path(node))
        _LIVE.add(proc)
        self.procs[node] = proc
        try:
            line = await asyncio.wait_for(asyncio.to_thread(proc.readline), START_TIMEOUT)
        except TimeoutError:
            self._reap(node)
            raise TargetError(
                f"node {node} did not report it listens within {START_TIMEOUT:g}s\n"
                + self._tail(node)
            ) from None
        try:
            info = json.loads(line)
        except ValueError:
            self._reap(node)
            raise TargetError(
                f"node {node} did not start (exit code {proc.poll()}): {line!r}\n"
                + self._tail(node)
            ) from None
        # the node's control API wants this token (reference_impl/credentials.py)
        self.tokens[node] = info.get("token")
        handle = NodeHandle(
            name=node,
            smtp=_addr(info["smtp"]),
            control=_addr(info["control"]) if info.get("control") else None,
            pid=int(info.get("pid") or proc.pid),
            queue_db_id=info.get("queue_db_id"),
        )
        self.handles[node] = handle
        return handle

    def _reap(self, node: str) -> None:
        proc = self.procs.pop(node, None)
        if proc is None:
            return
        proc.send_signal(signal.SIGCONT)
        proc.send_signal(signal.SIGKILL)
        proc.wait(STOP_TIMEOUT)
        proc.close()
        _LIVE.discard(proc)
        self.paused.discard(node)

    def _tail(self, node: str, lines: int = 20) -> str:
        try:
            text = self._log_path(node).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        tail = text.splitlines()[-lines:]
        return f"--- last lines of {node}.log ---\n" + "\n".join(tail) if tail else ""

    def node_log(self, node: str) -> str | None:
        try:
            return self._log_path(node).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""

    def diagnostics(self) -> str:
        if self.plan is None:
            return ""
        return "\n".join(t for t in (self._tail(n, 15) for n in self.plan.topology.nodes) if t)

    async def stop(self) -> None:
        procs = list(self.procs.items())
        for node, proc in procs:
            if node in self.paused:
                proc.send_signal(signal.SIGCONT)
            proc.send_signal(signal.SIGTERM)
        for node, proc in procs:
            await asyncio.to_thread(proc.wait, STOP_TIMEOUT)
            self._reap(node)
        self.procs.clear()
        self.paused.clear()
        if self.storage is not None:
            await self.storage.stop()
            self.storage = None
        # one target runs many scenarios: the next start must not hand back these nodes
        self.handles.clear()

    def control_headers(self, node: str) -> dict[str, str]:
        """The bearer token the node printed when it started."""
        token = self.tokens.get(node)
        return {"Authorization": f"Bearer {token}"} if token else {}

    # -- node actions --------------------------------------------------------------

    def handle(self, node: str) -> NodeHandle:
        try:
            return self.handles[node]
        except KeyError:
            raise TargetError(f"no node {node!r}") from None

    def _proc(self, node: str) -> NodeProcess:
        proc = self.procs.get(node)
        if proc is None:
            raise TargetError(f"node {node} is not running")
        return proc

    async def kill(self, node: str) -> None:
        proc = self._proc(node)
        proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(proc.wait, STOP_TIMEOUT)
        self._reap(node)

    async def pause(self, node: str) -> None:
        self._proc(node).send_signal(signal.SIGSTOP)
        self.paused.add(node)

    async def resume(self, node: str) -> None:
        self._proc(node).send_signal(signal.SIGCONT)
        self.paused.discard(node)

    async def restart(self, node: str) -> NodeHandle:
        if node in self.procs:
            await self.kill(node)
        return await self._start_node(node)

    async def wipe(self, node: str) -> NodeHandle:
        if node in self.procs:
            await self.kill(node)
        if self.storage is not None:
            await self.storage.wipe(node)
        else:
            shutil.rmtree(self._data_dir(node), ignore_errors=True)
        return await self._start_node(node)

    # -- storage faults --------------------------------------------------------------

    def _storage(self) -> LazyStorage:
        if self.storage is None:
            raise TargetError("the nodes' queues are not on a lazy filesystem")
        return self.storage

    async def power_cut(self, node: str) -> dict[str, Any]:
        storage = self._storage()
        if node in self.procs:
            await self.kill(node)
        return await storage.power_cut(node)

    async def disk(self, node: str, mode: str | None, budget: int = 0) -> None:
        await self._storage().disk(node, mode, budget)

    def storage_events(self, node: str) -> list[dict[str, Any]]:
        return self.storage.events(node) if self.storage is not None else []


@hookimpl
def shadowcheck_describe_targets() -> list[tuple[str, str]]:
    return [
        (
            "reference",
            "the bundled reference MTA, one local process per node (default); "
            "reference:capabilities=kill,restart,... claims only those, to see what a "
            "black-box MTA with them could certify",
        )
    ]


@hookimpl
def shadowcheck_make_target(
    name: str, argument: str | None, options: dict[str, Any]
) -> Target | None:
    if name != "reference":
        return None
    if argument and argument.startswith("capabilities="):
        claimed = frozenset(c for c in argument.partition("=")[2].split(",") if c)
        unknown = sorted(claimed - set(CAPABILITIES))
        if unknown:
            raise TargetError(
                f"unknown capabilities {', '.join(unknown)}; known: {', '.join(CAPABILITIES)}"
            )
        target = ReferenceTarget(python=os.environ.get("SHADOWCHECK_PYTHON") or None)
        target.capabilities = claimed
        return target
    return ReferenceTarget(python=argument or os.environ.get("SHADOWCHECK_PYTHON") or None)
