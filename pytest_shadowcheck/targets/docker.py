"""The ``docker`` target: each node of a scenario is a container of an MTA image.

``--shadowcheck-target docker:targets/postfix.yaml`` names a target
description (:mod:`.docker_description`): the image, the files rendered per
node from the scenario's topology and settings, the command, readiness, the
version and the capabilities the MTA claims. Docker itself gives:

* kill = SIGKILL to the container; restart = start the same container again
  (same files, same queue volume); pause / resume = the cgroup freezer;
* wipe_queue_db = remove the container and its queue volume (``queue_dir``),
  then create both afresh from the image.

Containers use host networking and the templates bind them to loopback ports
the target allocates, so every link goes through the harness proxies and no
traffic leaves the machine. Every container and volume carries labels naming
the run and the owning process; they are removed on stop, at interpreter exit,
and - after a crash or SIGKILL - by the reaper that runs before the first start
of any later run. Each container's log is written to the scenario's workdir
(``NODE.log``) before the container is removed.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import io
import os
import random
import re
import secrets
import socket
import tarfile
from pathlib import Path
from typing import Any

from ..hookspecs import hookimpl
from ..images import RECIPE_HASH_LABEL
from ..scenario import Scenario
from .base import ClusterPlan, NodeHandle, Target, TargetError
from .docker_description import (
    LISTEN_HOST,
    Description,
    NodePorts,
    RenderedNode,
    load_description,
    render_node,
)

__all__ = ["DockerTarget", "docker_client", "owner_label", "reap_leftovers"]

LABEL_OWNER = "org.shadowcheck.owner"
LABEL_RUN = "org.shadowcheck.run"
LABEL_NODE = "org.shadowcheck.node"
LABEL_TARGET = "org.shadowcheck.target"
KILL_TIMEOUT = 10.0
POLL = 0.1
LOG_TAIL = 15
#: node ports are chosen from here up to the ephemeral range
PORT_POOL_START = 20000

#: (container ids, volume names) this process created and has not removed yet
_LIVE_CONTAINERS: set[str] = set()
_LIVE_VOLUMES: set[str] = set()
_REAPED = False


# --------------------------------------------------------------------------- ownership


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def owner_label(pid: int | None = None) -> str:
    """``host:pid:start`` of the process that owns a container."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}"


def _owner_alive(label: str) -> bool:
    host, _, rest = label.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's engine user: not ours to judge
    if start == "?":  # no /proc when it was labelled: the pid alone must do
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _start_time(int(pid)) == start


def docker_client() -> Any:
    """A client of the local Docker engine, or a TargetError saying how to get one."""
    try:
        import docker
    except ImportError:
        raise TargetError(
            "the docker target needs the Docker SDK: pip install 'pytest-shadowcheck[docker]'"
        ) from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:
        raise TargetError(
            f"no Docker engine answers at {where} ({exc.__class__.__name__}: {exc}); "
            "start one (e.g. `dockerd &`, see docs/targets.md)"
        ) from None
    return client


def reap_leftovers(client: Any) -> list[str]:
    """Remove containers and volumes labelled by a process of this host that is gone
    (a crashed or SIGKILLed run); return their names. Live owners are left alone."""
    from docker.errors import APIError, NotFound

    removed = []
    for container in client.containers.list(all=True, filters={"label": LABEL_OWNER}):
        if _owner_alive(container.labels.get(LABEL_OWNER, "")):
            continue
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
            removed.append(container.name)
    for volume in client.volumes.list(filters={"label": LABEL_OWNER}):
        labels = volume.attrs.get("Labels") or {}
        if _owner_alive(labels.get(LABEL_OWNER, "")):
            continue
        with contextlib.suppress(NotFound, APIError):
            volume.remove(force=True)
            removed.append(volume.name)
    return removed


def _remove_live() -> None:
    """atexit: remove whatever this process still owns (a run that did not stop)."""
    if not (_LIVE_CONTAINERS or _LIVE_VOLUMES):
        return
    with contextlib.suppress(Exception):
        client = docker_client()
        for cid in list(_LIVE_CONTAINERS):
            with contextlib.suppress(Exception):
                client.containers.get(cid).remove(force=True)
        for name in list(_LIVE_VOLUMES):
            with contextlib.suppress(Exception):
                client.volumes.get(name).remove(force=True)
    _LIVE_CONTAINERS.clear()
    _LIVE_VOLUMES.clear()


atexit.register(_remove_live)


def _ephemeral_floor() -> int:
    """Lowest port the kernel hands out for bind(port 0)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, all held until every one is chosen.

    They come from below the kernel's ephemeral range: between choosing a port
    and the container binding it, a bind(0) anywhere on the machine (the
    harness's own proxies, other test processes) can never take it."""
    floor = _ephemeral_floor()
    pool = list(range(PORT_POOL_START, floor)) if floor - PORT_POOL_START >= 1000 else []
    random.shuffle(pool)
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = pool.pop() if pool else 0
            try:
                sock.bind((LISTEN_HOST, port))
            except OSError as exc:
                sock.close()
                if port == 0:
                    raise TargetError(f"no free port on {LISTEN_HOST}: {exc}") from None
                continue
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _tar(files: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, (content, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            info.mode = mode
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


async def _smtp_banner(port: int) -> str | None:
    """None when an SMTP server greets with 220 on the port, else what was wrong."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(LISTEN_HOST, port), timeout=2.0
        )
    except (OSError, TimeoutError) as exc:
        return f"no SMTP service on {LISTEN_HOST}:{port} ({exc.__class__.__name__})"
    try:
        line = await asyncio.wait_for(reader.readline(), timeout=2.0)
    except (OSError, TimeoutError):
        line = b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    text = line.decode(errors="replace").strip()
    return None if text.startswith("220") else f"no 220 banner on port {port} (got {text!r})"


async def _http_ok(port: int, path: str) -> str | None:
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
            session.get(f"http://{LISTEN_HOST}:{port}{path}") as response,
        ):
            return None if response.status < 300 else f"GET {path}: HTTP {response.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"GET {path} on port {port}: {exc.__class__.__name__}"


# --------------------------------------------------------------------------- the target


class DockerTarget(Target):
    name = "docker"

    def __init__(self, path: str, run_id: str | None = None) -> None:
        self.description: Description = load_description(path)
        # "docker:postfix" in reasons: "target docker:postfix lacks capability control_api"
        self.name = f"docker:{self.description.name}"
        self.capabilities = self.description.capabilities
        self.added_headers = self.description.added_headers
        self.run_id = run_id or secrets.token_hex(8)
        self.client = docker_client()
        self.image = self._find_image()
        self._version: str | None = None
        self.plan: ClusterPlan | None = None
        self.token = ""
        self.ports: dict[str, NodePorts] = {}
        self.rendered: dict[str, RenderedNode] = {}
        self.containers: dict[str, Any] = {}
        self.volumes: dict[str, str] = {}
        self.handles: dict[str, NodeHandle] = {}
        self.paused: set[str] = set()
        # the cluster's virtual time as the last clock move reported it: a node
        # started again starts there (its templates see it as virtual_now)
        self.virtual_now: float | None = None

    # -- description -------------------------------------------------------------

    def _find_image(self) -> Any:
        from docker.errors import ImageNotFound

        desc = self.description
        where = desc.where("image")
        try:
            image = self.client.images.get(desc.image)
        except ImageNotFound:
            how = (
                f"build it: python -m pytest_shadowcheck.images build {desc.recipe}"
                if desc.recipe
                else "build or load it (docker build -t / docker load / docker tag) "
                "and name it in 'image'"
            )
            raise TargetError(
                f"{where}: image {desc.image!r} is not in the local Docker engine "
                f"(no registry is used); {how}"
            ) from None
        if desc.recipe:
            from ..images import RecipeError, recipe_hash

            try:
                wanted = recipe_hash(desc.recipe)
            except RecipeError:
                wanted = None  # no source tree to compare with: trust the image
            built = (image.labels or {}).get(RECIPE_HASH_LABEL)
            if wanted and built != wanted:
                raise TargetError(
                    f"{where}: image {desc.image!r} was not built from the current "
                    f"{desc.recipe!r} recipe (label {built}, recipe {wanted}); rebuild it: "
                    f"python -m pytest_shadowcheck.images build {desc.recipe}"
                )
        return image

    def version(self) -> str:
        if self._version is None:
            self._version = self._read_version()
        return self._version

    def _read_version(self) -> str:
        desc = self.description
        image_id = str(self.image.id).removeprefix("sha256:")[:12]
        suffix = f" (image {desc.image} {image_id})"
        if desc.version_text is not None:
            return desc.version_text + suffix
        if not desc.version_command:
            return "unknown" + suffix
        try:
            output = self.client.containers.run(
                desc.image,
                desc.version_command,
                remove=True,
                network_mode="none",
                labels={LABEL_OWNER: owner_label(), LABEL_RUN: self.run_id},
            )
        except Exception as exc:
            return f"unknown (version command failed: {exc})" + suffix
        text = output.decode(errors="replace").strip()
        return desc.version_format.format(output=text) + suffix

    def describe(self) -> str:
        return f"{self.description.name} in docker ({self.description.image})"

    def cannot_run(self, scenario: Scenario) -> str | None:
        desc = self.description
        nodes = len(scenario.topology.nodes)
        if nodes > desc.max_nodes:
            return f"{desc.name} runs at most {desc.max_nodes} nodes, the scenario has {nodes}"
        unsupported = sorted(set(scenario.settings) & desc.unsupported_settings)
        if unsupported:
            return (
                f"{desc.name} cannot apply setting {', '.join(unsupported)} "
                f"(settings.unsupported in {desc.path})"
            )
        if scenario.start_refused is not None:
            # the MTA must refuse a configuration: it must be given all of it first
            named = [s for s in scenario.settings if re.search(scenario.start_refused, s)]
            unrendered = sorted(s for s in named if not desc.renders(s))
            if unrendered:
                return (
                    f"the configuration it must refuse cannot be given to {desc.name}: no "
                    f"template of {desc.path.name} renders {', '.join(unrendered)}"
                )
        return None

    # -- lifecycle -----------------------------------------------------------------

    async def start(self, plan: ClusterPlan) -> dict[str, NodeHandle]:
        global _REAPED
        if not _REAPED:
            await asyncio.to_thread(reap_leftovers, self.client)
            _REAPED = True
        self.plan = plan
        self.virtual_now = None
        self.ports, self.rendered = {}, {}  # one target runs many scenarios
        plan.workdir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(4)
        nodes = list(plan.topology.nodes)
        with_control = "control_api" in self.capabilities
        ports = _free_ports(len(nodes) * (2 if with_control else 1))
        for index, node in enumerate(nodes):
            step = 2 if with_control else 1
            self.ports[node] = NodePorts(
                smtp=ports[index * step], control=ports[index * step + 1] if with_control else None
            )
        for node in nodes:
            self._render(node)
        results = await asyncio.gather(
            *(self._launch(node) for node in nodes), return_exceptions=True
        )
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await self.stop()  # nothing of a failed start survives it
            raise failure
        return dict(self.handles)

    def _render(self, node: str) -> None:
        """Fill the node's templates; keep the result in the workdir as evidence."""
        assert self.plan is not None
        rendered = render_node(
            self.description, self.plan, node, self.ports, self.run_id, self.virtual_now
        )
        self.rendered[node] = rendered
        base = self.plan.workdir / node / "files"
        for path, (content, _) in rendered.files.items():
            out = base / path.lstrip("/")
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_bytes(content)
        base.mkdir(parents=True, exist_ok=True)
        (base.parent / "command").write_text(" ".join(rendered.command) + "\n")

    def _labels(self, node: str) -> dict[str, str]:
        return {
            LABEL_OWNER: owner_label(),
            LABEL_RUN: self.run_id,
            LABEL_NODE: node,
            LABEL_TARGET: self.description.name,
        }

    def _create(self, node: str) -> Any:
        """Create (not start) the node's container and, with a queue_dir, its volume."""
        desc = self.description
        rendered = self.rendered[node]
        mounts = {}
        if desc.queue_dir:
            name = self.volumes.get(node) or f"shadowcheck-{self.token}-{node}-queue"
            self.client.volumes.create(name=name, labels=self._labels(node))
            _LIVE_VOLUMES.add(name)
            self.volumes[node] = name
            mounts[name] = {"bind": desc.queue_dir, "mode": "rw"}
        container = self.client.containers.create(
            desc.image,
            command=rendered.command or None,
            name=f"shadowcheck-{self.token}-{node}",
            network_mode="host",
            labels=self._labels(node),
            environment=rendered.environment,
            volumes=mounts,
        )
        _LIVE_CONTAINERS.add(container.id)
        self.containers[node] = container
        if rendered.files:
            container.put_archive("/", _tar(rendered.files))
        return container

    async def _launch(self, node: str) -> NodeHandle:
        container: Any = self.containers.get(node)
        if container is None:
            container = await asyncio.to_thread(self._create, node)
        await asyncio.to_thread(container.start)
        await self._wait_ready(node)
        ports = self.ports[node]
        handle = NodeHandle(
            name=node,
            smtp=(LISTEN_HOST, ports.smtp),
            control=(LISTEN_HOST, ports.control) if ports.control is not None else None,
        )
        self.handles[node] = handle
        return handle

    async def _wait_ready(self, node: str) -> None:
        ready = self.description.ready
        container = self.containers[node]
        ports = self.ports[node]
        loop = asyncio.get_running_loop()
        deadline = loop.time() + ready.timeout
        while True:
            await asyncio.to_thread(container.reload)
            if container.status in ("exited", "dead"):
                code = container.attrs.get("State", {}).get("ExitCode")
                raise TargetError(
                    f"node {node} ({self.description.image}) exited with code {code} "
                    f"before it was ready\n{self._tail(node)}"
                )
            problem = await _smtp_banner(ports.smtp) if ready.smtp_banner else None
            if problem is None and ready.control_path and ports.control is not None:
                problem = await _http_ok(ports.control, ready.control_path)
            if problem is None and ready.command:
                result = await asyncio.to_thread(container.exec_run, list(ready.command))
                if result.exit_code != 0:
                    output = result.output.decode(errors="replace").strip()[-200:]
                    problem = f"readiness command exited {result.exit_code}: {output}"
            if problem is None:
                return
            if loop.time() >= deadline:
                raise TargetError(
                    f"node {node} ({self.description.image}) was not ready within "
                    f"{ready.timeout:g}s: {problem}\n{self._tail(node)}"
                )
            await asyncio.sleep(POLL)

    def _tail(self, node: str, lines: int = LOG_TAIL) -> str:
        container = self.containers.get(node)
        text = ""
        if container is not None:
            with contextlib.suppress(Exception):
                text = container.logs(tail=lines).decode(errors="replace")
        if not text and self.plan is not None:
            with contextlib.suppress(OSError):
                saved = (self.plan.workdir / f"{node}.log").read_text(errors="replace")
                text = "\n".join(saved.splitlines()[-lines:])
        text = text.rstrip()
        return f"--- last lines of the {node} container log ---\n{text}" if text else ""

    def diagnostics(self) -> str:
        if self.plan is None:
            return ""
        return "\n".join(t for t in (self._tail(n) for n in self.plan.topology.nodes) if t)

    def _save_log(self, node: str, container: Any, why: str) -> None:
        """Append this container's whole log to WORKDIR/NODE.log (before it is removed)."""
        if self.plan is None:
            return
        with contextlib.suppress(Exception):
            log = container.logs(timestamps=True)
            with (self.plan.workdir / f"{node}.log").open("ab") as out:
                out.write(f"--- container {container.name} ({why}) ---\n".encode())
                out.write(log)

    def _remove(self, node: str, why: str, volume: bool) -> None:
        from docker.errors import APIError, NotFound

        container = self.containers.pop(node, None)
        if container is not None:
            self._save_log(node, container, why)
            with contextlib.suppress(NotFound, APIError):
                if node in self.paused:
                    container.unpause()
            with contextlib.suppress(NotFound):
                container.remove(force=True)
            _LIVE_CONTAINERS.discard(container.id)
        self.paused.discard(node)
        name = self.volumes.get(node)
        if volume and name:
            with contextlib.suppress(NotFound):
                self.client.volumes.get(name).remove(force=True)
            _LIVE_VOLUMES.discard(name)
            self.volumes.pop(node, None)

    async def stop(self) -> None:
        nodes = sorted(set(self.containers) | set(self.volumes))
        await asyncio.gather(
            *(asyncio.to_thread(self._remove, node, "stopped", True) for node in nodes),
            return_exceptions=True,
        )
        self.handles.clear()

    # -- node actions ------------------------------------------------------------------

    def handle(self, node: str) -> NodeHandle:
        try:
            return self.handles[node]
        except KeyError:
            raise TargetError(f"no node {node!r}") from None

    def _container(self, node: str) -> Any:
        container = self.containers.get(node)
        if container is None:
            raise TargetError(f"node {node} has no container")
        return container

    def _kill(self, node: str) -> None:
        from docker.errors import APIError

        container = self._container(node)
        if node in self.paused:
            container.unpause()
            self.paused.discard(node)
        container.reload()
        if container.status == "running":
            try:
                container.kill()  # SIGKILL
            except APIError as exc:
                raise TargetError(f"kill {node}: {exc}") from None
        container.wait(timeout=KILL_TIMEOUT)

    async def kill(self, node: str) -> None:
        await asyncio.to_thread(self._kill, node)

    async def pause(self, node: str) -> None:
        await asyncio.to_thread(self._container(node).pause)
        self.paused.add(node)

    async def resume(self, node: str) -> None:
        await asyncio.to_thread(self._container(node).unpause)
        self.paused.discard(node)

    async def restart(self, node: str) -> NodeHandle:
        # a new container on the same queue volume: the files are rendered again
        # (virtual_now may have moved), the queue is the one the killed node left
        await asyncio.to_thread(self._kill, node)
        await asyncio.to_thread(self._remove, node, "restarted", False)
        self._render(node)
        return await self._launch(node)

    async def wipe(self, node: str) -> NodeHandle:
        await asyncio.to_thread(self._kill, node)
        await asyncio.to_thread(self._remove, node, "queue wiped", True)
        self._render(node)
        return await self._launch(node)


@hookimpl
def shadowcheck_describe_targets() -> list[tuple[str, str]]:
    return [("docker", "an MTA image, one container per node: docker:DESCRIPTION.yaml")]


@hookimpl
def shadowcheck_make_target(
    name: str, argument: str | None, options: dict[str, Any]
) -> Target | None:
    if name != "docker":
        return None
    if not argument:
        raise TargetError("the docker target needs a description: docker:PATH.yaml")
    return DockerTarget(argument, run_id=options.get("run_id"))
