"""The target interface: turn a topology into running nodes and act on them.

The engine builds a :class:`ClusterPlan` (topology, settings, and for every
node the proxy addresses it must use to reach its peers and next hops), calls
:meth:`Target.start`, then points each proxy at the real node addresses it gets
back. Node actions (kill, pause, ...) exist only when the target declares the
matching capability; the engine never calls an action whose capability is
missing (the scenario is UNTESTABLE instead).
"""

from __future__ import annotations

import abc
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import aiohttp

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES, QUEUE_PATHS, control_call
from pytest_shadowcheck.scenario.model import Scenario, Topology

__all__ = [
    "CAPABILITIES",
    "QUEUE_PATHS",
    "ClusterPlan",
    "Glue",
    "NodeHandle",
    "Target",
    "TargetError",
    "control_call",
]

#: seconds the harness waits for a node's control API to answer
CONTROL_TIMEOUT = 15.0


@dataclass(frozen=True)
class Glue:
    """What a target's set-up adds around the MTA that provides behaviours the MTA does
    not (a delivery program that forwards, a relay shim): a PASS of one of ``provides``
    is the glue's, and the certification never credits it to the MTA."""

    provides: tuple[str, ...]
    #: what the glue is, in the description's words
    what: str


@dataclass
class NodeHandle:
    """A running node: where its SMTP service and (optional) control API listen."""

    name: str
    smtp: tuple[str, int]
    control: tuple[str, int] | None = None
    pid: int | None = None
    queue_db_id: str | None = None


@dataclass
class ClusterPlan:
    """Everything a target needs to start the nodes of one scenario run.

    ``peers[node][other]`` is the ``host:port`` (a harness proxy) that ``node``
    must use to reach ``other``. ``next_hops[node][domain]`` is either
    ``{"address": "host:port", "kind": "mailbox"|"boundary"}`` (a proxy in
    front of a harness sink) or ``{"node": other}``. For a target that routes by MX
    (:attr:`Target.mx_routing`), ``mx_addresses`` maps each such proxy ``host:port``
    (a next hop's or a peer's) to the loopback address where the same proxy also
    listens on port 25. ``settings`` are
    Exchange names with timers in seconds. ``workdir`` is a fresh directory the
    target may use (data directories, logs).
    """

    topology: Topology
    settings: dict[str, Any]
    peers: dict[str, dict[str, str]]
    next_hops: dict[str, dict[str, Any]]
    workdir: Path
    secret: str = "shadowcheck"
    clock_start: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    #: settings of single nodes, over ``settings`` (only for a target that says
    #: ``per_node_settings``)
    node_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the scenario cuts power or fills a disk: every node's queue directory must be on
    #: a lazy filesystem (capabilities power_cut, disk_faults)
    lazy_storage: bool = False
    #: proxy "host:port" -> loopback address where it also listens on port 25 (MX routing)
    mx_addresses: dict[str, str] = field(default_factory=dict)


class Target(abc.ABC):
    """Base class of every target. Subclasses set ``name`` and ``capabilities``."""

    #: the name used with --shadowcheck-target
    name: str = "?"
    #: subset of CAPABILITIES this target supports
    capabilities: frozenset[str] = frozenset()
    #: header fields the MTA adds to every message beyond the trace fields (the
    #: integrity invariant permits them on top of the sender's header section)
    added_headers: frozenset[str] = frozenset()
    #: glue around the MTA that provides behaviours in its stead (not credited to it)
    glue: tuple[Glue, ...] = ()
    #: whether ClusterPlan.node_settings reach the nodes (scenarios giving one node
    #: settings of its own are UNTESTABLE on a target without it)
    per_node_settings: bool = False
    #: control API calls (method, path) this target answers without the capability
    #: control_api (a docker description's admin adapters); see :meth:`can`
    control_calls: frozenset[tuple[str, str]] = frozenset()
    #: the latest virtual time a node reported after advance_clock (None: real
    #: clock or never advanced); a node started again should start there
    virtual_now: float | None = None
    #: timers compiled into the MTA, whatever the setting says: setting name ->
    #: (shortest, longest) seconds (a retry schedule of 60-119 s is (60.0, 119.0)); a
    #: scenario counting a window from such a setting at another value is UNTESTABLE
    timers: Mapping[str, tuple[float, float]] = MappingProxyType({})
    #: the nodes find their next hops by MX and connect to port 25: every proxy a node
    #: sends through also listens on port 25 of a loopback address of its own
    #: (ClusterPlan.mx_addresses), which the target's DNS answers with
    mx_routing: bool = False
    #: several instances of this target may run clusters at once in one process, each
    #: in a thread of its own (the harness's lanes): no state shared between instances,
    #: nothing that needs the main thread
    lanes: bool = False

    def can(self, capability: str, call: tuple[str, str] | None = None) -> bool:
        """Whether the target has ``capability``, or - for control_api - answers the one
        ``call`` (method, path) a step or check needs (:func:`control_call`)."""
        if capability in self.capabilities:
            return True
        return capability == "control_api" and call is not None and call in self.control_calls

    # -- description ---------------------------------------------------------

    def version(self) -> str:
        """Version of the system under test (shown in JUnit and the certification report)."""
        return "unknown"

    def describe(self) -> str:
        return self.name

    @property
    def label(self) -> str:
        """How reports name the system under test: the description's name (``docker:postfix``
        gives ``postfix``), the same whatever path or working directory was used."""
        return self.name.partition(":")[2] or self.name

    def cannot_run(self, scenario: Scenario) -> str | None:
        """Return why this target cannot run ``scenario`` (it is then UNTESTABLE), or None.

        Capabilities are checked before; this is for anything else (a node the
        target does not have, settings it cannot apply, ...)."""
        return None

    # -- lifecycle -------------------------------------------------------------

    @abc.abstractmethod
    async def start(self, plan: ClusterPlan) -> dict[str, NodeHandle]:
        """Start (or reach) every node of ``plan.topology``; return a handle per node."""

    @abc.abstractmethod
    async def stop(self) -> None:
        """Stop everything :meth:`start` started. Must be safe to call twice, and after
        a failed start."""

    def diagnostics(self) -> str:
        """Text worth showing when a scenario fails (e.g. the tail of node logs)."""
        return ""

    def node_log(self, node: str) -> str | None:
        """What ``node`` has logged so far, or None when the target cannot read its log
        (a ``log`` check is then UNTESTABLE)."""
        return None

    def link_address(self, link: str, topology: Topology) -> tuple[str, int] | None:
        """Where the harness must listen for ``link`` ("mbx1->mailbox", "mbx1->mbx2"):
        the fixed address a node relays to or reaches its peer at, for an MTA whose
        routes the harness cannot set. None (the default): any free port, given to the
        nodes in the ClusterPlan."""
        return None

    # -- node actions (only called with the matching capability) -------------

    async def kill(self, node: str) -> None:
        """Capability ``kill``: stop the node abruptly (SIGKILL; no clean shutdown)."""
        raise TargetError(f"target {self.name} cannot kill nodes")

    async def pause(self, node: str) -> None:
        """Capability ``pause``: freeze the node (SIGSTOP): sockets open, nothing answers."""
        raise TargetError(f"target {self.name} cannot pause nodes")

    async def resume(self, node: str) -> None:
        """Capability ``pause``: undo :meth:`pause`."""
        raise TargetError(f"target {self.name} cannot resume nodes")

    async def restart(self, node: str) -> NodeHandle:
        """Capability ``restart``: start the node again with the same queue database
        (killing it first if it still runs); return its new handle."""
        raise TargetError(f"target {self.name} cannot restart nodes")

    async def wipe(self, node: str) -> NodeHandle:
        """Capability ``wipe_queue_db``: stop the node, delete its queue database, start
        it again (a new queue database ID); return its new handle."""
        raise TargetError(f"target {self.name} cannot wipe queue databases")

    # -- control API (capability control_api) -----------------------------------

    def handle(self, node: str) -> NodeHandle:
        raise TargetError(f"target {self.name} has no node {node!r}")

    def control_headers(self, node: str) -> dict[str, str]:
        """HTTP headers for ``node``'s control API (e.g. its bearer token)."""
        return {}

    # -- storage faults (capabilities power_cut and disk_faults) ------------------------

    def capability_unavailable(self, capability: str) -> str | None:
        """Why this target lacks ``capability`` on this machine although it could offer
        it (no /dev/fuse for power_cut), quoted in the UNTESTABLE reason; None otherwise."""
        return None

    async def power_cut(self, node: str) -> dict[str, Any]:
        """Cut ``node``'s power: its processes die at once (SIGKILL; a container's whole
        cgroup) and whatever its queue directory held that was not fsynced is gone. The
        node stays down until :meth:`restart`. Returns what was lost:
        ``{"lost": [{"file": ..., "bytes": ...}], "undone": ["names undone", ...]}``."""
        raise TargetError(f"target {self.name} cannot cut a node's power")

    async def disk(self, node: str, mode: str | None, budget: int = 0) -> None:
        """Make ``node``'s queue disk ``full`` (writes fail with ENOSPC once ``budget``
        more bytes are written) or ``error`` (writes and fsyncs fail with EIO); None: it
        works again."""
        raise TargetError(f"target {self.name} cannot make a node's disk full or failing")

    def storage_events(self, node: str) -> list[dict[str, Any]]:
        """What ``node``'s queue filesystem saw since the last call: each ``sync`` (file,
        bytes made durable, ``t`` from ``time.monotonic()``), ``power_cut`` (files and
        bytes lost) and ``disk`` change; [] for a target without one."""
        return []

    async def control(self, node: str, method: str, path: str, body: Any = None) -> Any:
        """Call the node's control API (docs/contracts.md section 2); return the JSON answer.

        Raises TargetError with the status and the answer for a non-2xx reply.
        """
        handle = self.handle(node)
        if handle.control is None:
            raise TargetError(f"node {node} has no control API")
        url = f"http://{handle.control[0]}:{handle.control[1]}{path}"
        timeout = aiohttp.ClientTimeout(total=CONTROL_TIMEOUT)
        try:
            async with (
                aiohttp.ClientSession(timeout=timeout) as session,
                session.request(
                    method, url, json=body, headers=self.control_headers(node)
                ) as response,
            ):
                text = await response.text()
                if response.status >= 400:
                    raise TargetError(f"{method} {path} on {node}: HTTP {response.status} {text}")
                return await response.json(content_type=None) if text else None
        except TimeoutError:
            raise TargetError(
                f"{method} {path} on {node}: no answer within {CONTROL_TIMEOUT:g}s"
            ) from None
        except aiohttp.ClientError as exc:
            # in words, not a repr: "Cannot connect to host 127.0.0.1:4021 ..."
            said = str(exc) or type(exc).__name__
            raise TargetError(f"{method} {path} on {node}: {said}") from None

    async def set_settings(self, node: str, values: dict[str, Any]) -> Any:
        """Capability ``set_settings``: change settings (Exchange names) on a running node.
        The default uses PUT /settings of the control API. A target that can apply a
        change only by restarting the node answers ``{"restarted": "why, in a
        sentence"}`` (also from set_next_hop): the engine records the restart and
        claims no PASS across it (``Verdict.caveats``)."""
        return await self.control(node, "PUT", "/settings", values)

    async def set_next_hop(self, node: str, domain: str, hop: dict[str, Any]) -> Any:
        """Capability ``control_api``: route ``domain`` to ``hop`` from now on (``{"address":
        "host:port", "kind": ...}`` or ``{"node": other}``, as in ClusterPlan.next_hops).
        The default uses PUT /topology/next_hops of the control API."""
        return await self.control(node, "PUT", "/topology/next_hops", {domain: hop})

    async def advance_clock(self, node: str, seconds: float) -> Any:
        """Capability ``virtual_clock``: move the node's clock forward by ``seconds``.
        The default uses POST /clock of the control API and records the node's
        answer in ``virtual_now``."""
        answer = await self.control(node, "POST", "/clock", {"advance": seconds})
        if isinstance(answer, dict) and isinstance(answer.get("now"), (int, float)):
            self.virtual_now = max(self.virtual_now or 0.0, float(answer["now"]))
        return answer
