"""The ``docker`` target: each node of a scenario is a container of an MTA image.

``--shadowcheck-target docker:targets/postfix.yaml`` names a target
description (:mod:`.description`): the image, the files rendered per
node from the scenario's topology and settings, the command, readiness, the
version and the capabilities the MTA claims. Docker itself gives:

* kill = SIGKILL to the container; restart = start the same container again
  (same files, same queue volume); pause / resume = the cgroup freezer;
* wipe_queue_db = remove the container and its queue volume (``queue_dir``),
  then create both afresh from the image;
* power_cut and disk_faults (a description with a ``queue_dir``, where FUSE works):
  for a scenario that needs them (``ClusterPlan.lazy_storage``) each node's
  ``queue_dir`` is a bind mount of a lazy filesystem on the host instead of the
  volume (:mod:`.queue_disk`); power_cut = SIGKILL to the container, then what the
  filesystem held that was not fsynced is dropped; restart binds the same mount
  into a new container, wipe empties it and copies the image's directory in again.

Containers use host networking and the templates bind them to loopback ports
the target allocates, so every link goes through the harness proxies and no
traffic leaves the machine. Every container and volume carries labels naming
the run and the owning process (a lazy filesystem: a file beside its mount point);
they are removed on stop, at interpreter exit, and - after a crash or SIGKILL - by
the reaper that runs before the first start of any later run. Each container's log
(its output, then the description's ``logs:`` files) is written to the scenario's
workdir (``NODE.log``) before the container is removed.

Without a control API, a description's admin adapters (:mod:`.admin`)
run commands in the container: ``set_settings`` and route changes render the
files again and reload the MTA (or restart it on its queue, ``reload: restart``);
a queue listing answers GET /queues/active.

With ``routing: mx`` each node gets a DNS server of the harness (:mod:`..network.dns`,
on port 53 of a loopback address of its own) as the only ``nameserver`` of its
``/etc/resolv.conf`` (a bind mount): it answers MX and A for the node's next-hop
domains with the loopback addresses where their proxies also listen on port 25. A
route change renders the files and changes the answers. What each node asked is
kept in :attr:`DockerTarget.dns_queries` and written to ``NODE.dns.log``.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from pytest_shadowcheck.network.dns import DnsQuery, DnsServer
from pytest_shadowcheck.scenario.capabilities import STORAGE_CAPABILITIES
from pytest_shadowcheck.scenario.loader import Scenario
from pytest_shadowcheck.storage.mount import fuse_unavailable, is_lazy, mounted_at
from pytest_shadowcheck.targets.base import ClusterPlan, NodeHandle, Target, TargetError
from pytest_shadowcheck.targets.docker.admin import (
    ACTIVE_QUEUE,
    EXEC_TIMEOUT,
    ROUTES,
    list_queue,
    read_file,
    run_in,
)
from pytest_shadowcheck.targets.docker.description import (
    LISTEN_HOST,
    Description,
    NodePorts,
    RenderedNode,
    load_description,
    node_next_hops,
    render_node,
    version_from_output,
)
from pytest_shadowcheck.targets.docker.housekeeping import (
    LABEL_NODE,
    LABEL_OWNER,
    LABEL_RUN,
    LABEL_TARGET,
    LIVE_CONTAINERS,
    LIVE_STORAGE,
    LIVE_VOLUMES,
    owner_label,
    reap_leftovers,
)
from pytest_shadowcheck.targets.docker.images import RECIPE_HASH_LABEL
from pytest_shadowcheck.targets.docker.queue_disk import (
    image_directory,
    owner_file,
    queue_mount_problem,
    unpack,
)
from pytest_shadowcheck.targets.docker.support import (
    docker_client,
    free_ports,
    http_ok,
    smtp_banner,
    tar_files,
)
from pytest_shadowcheck.targets.hookspecs import hookimpl
from pytest_shadowcheck.targets.lazy_storage import LazyStorage

__all__ = ["DockerTarget", "docker_client", "owner_label", "reap_leftovers"]

KILL_TIMEOUT = 10.0
POLL = 0.1
LOG_TAIL = 15
PAUSE_ATTEMPTS = 5
#: reload by restart: how long the MTA may take to stop on SIGTERM before SIGKILL
STOP_GRACE = 10
#: whether this process has removed the leftovers of dead runs yet (once is enough)
_REAPED = False

# --------------------------------------------------------------------------- the target


class DockerTarget(Target):
    name = "docker"

    def __init__(self, path: str, run_id: str | None = None) -> None:
        self.description: Description = load_description(path)
        # "docker:postfix" in reasons: "target docker:postfix lacks capability control_api"
        self.name = f"docker:{self.description.name}"
        self.capabilities = self.description.capabilities
        self.added_headers = self.description.added_headers
        self.timers = self.description.timers
        self.glue = self.description.glue
        self.control_calls = self.description.admin.calls
        # every node's files are rendered from its own settings
        self.per_node_settings = True
        self.run_id = run_id or secrets.token_hex(8)
        self.client = docker_client()
        self.image = self._find_image()
        #: why no node's queue can be on a lazy filesystem here (None: it can)
        self.no_lazy_queue = self._why_no_lazy_queue()
        if self.no_lazy_queue is None:
            self.capabilities = self.capabilities | set(STORAGE_CAPABILITIES)
        #: the nodes' queue directories on lazy filesystems (plan.lazy_storage)
        self.storage: LazyStorage | None = None
        self._image_queue: bytes | None = None
        self._version: str | None = None
        self.plan: ClusterPlan | None = None
        self.token = ""
        self.ports: dict[str, NodePorts] = {}
        self.rendered: dict[str, RenderedNode] = {}
        self.containers: dict[str, Any] = {}
        self.volumes: dict[str, str] = {}
        self.handles: dict[str, NodeHandle] = {}
        self.paused: set[str] = set()
        # settings and routes changed during the scenario (admin adapters), per node:
        # the files are rendered with them from then on, also after a restart
        self.changed: dict[str, dict[str, Any]] = {}
        self.routes: dict[str, dict[str, Any]] = {}
        # the cluster's virtual time as the last clock move reported it: a node
        # started again starts there (its templates see it as virtual_now)
        self.virtual_now: float | None = None
        # routing: mx - each node's DNS server, and what it was asked (kept after stop)
        self.mx_routing = self.description.routing == "mx"
        self.dns: dict[str, DnsServer] = {}
        self.dns_queries: dict[str, list[DnsQuery]] = {}

    # -- description -------------------------------------------------------------

    def _find_image(self) -> Any:
        from docker.errors import ImageNotFound

        from pytest_shadowcheck.targets.docker.images import (
            RECIPES,
            Recipe,
            RecipeError,
            recipe_hash,
            user_recipe,
        )

        desc = self.description
        where = desc.where("image")
        recipe: str | Recipe | None = desc.recipe
        build = f"python -m pytest_shadowcheck images build {desc.recipe}"
        if desc.recipe and desc.recipe not in RECIPES:
            # a user's recipe: a directory, relative to the description
            path = desc.path.parent / desc.recipe
            try:
                recipe = user_recipe(path, desc.image)
            except RecipeError as exc:
                raise TargetError(f"{desc.where('recipe')}: {exc}") from None
            build = f"python -m pytest_shadowcheck images build --recipe {path} --tag {desc.image}"
        try:
            image = self.client.images.get(desc.image)
        except ImageNotFound:
            how = (
                f"build it: {build}"
                if desc.recipe
                else "build or load it (docker build -t / docker load / docker tag) "
                "and name it in 'image'"
            )
            raise TargetError(
                f"{where}: image {desc.image!r} is not in the local Docker engine "
                f"(no registry is used); {how}"
            ) from None
        if recipe is not None:
            try:
                wanted = recipe_hash(recipe)
            except RecipeError:
                wanted = None  # no source tree to compare with: trust the image
            built = (image.labels or {}).get(RECIPE_HASH_LABEL)
            if wanted and built != wanted:
                raise TargetError(
                    f"{where}: image {desc.image!r} was not built from the current "
                    f"{desc.recipe!r} recipe (label {built}, recipe {wanted}); rebuild it: "
                    f"{build}"
                )
        return image

    def _why_no_lazy_queue(self) -> str | None:
        if not self.description.queue_dir:
            return (
                f"the description {self.description.path.name} names no queue_dir "
                "(the directory whose disk would lose power)"
            )
        if (why := fuse_unavailable()) is not None:
            return f"no lazy filesystem on this machine: {why}"
        url = str(getattr(self.client.api, "base_url", ""))
        if url != "http+docker://localhost":  # what docker-py calls a unix socket
            return (
                f"the Docker engine is reached at {url}: a filesystem mounted here cannot "
                "be bind-mounted into its containers"
            )
        return None

    def capability_unavailable(self, capability: str) -> str | None:
        if capability in STORAGE_CAPABILITIES:
            return self.no_lazy_queue
        return None

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
        return version_from_output(desc, output.decode(errors="replace")) + suffix

    def describe(self) -> str:
        return f"{self.description.name} in docker ({self.description.image})"

    def cannot_run(self, scenario: Scenario) -> str | None:
        return self.description.cannot_run(scenario)

    # -- lifecycle -----------------------------------------------------------------

    async def start(self, plan: ClusterPlan) -> dict[str, NodeHandle]:
        global _REAPED
        if not _REAPED:
            await asyncio.to_thread(reap_leftovers, self.client)
            _REAPED = True
        self.plan = plan
        self.virtual_now = None
        self.ports, self.rendered = {}, {}  # one target runs many scenarios
        self.changed, self.routes = {}, {}
        plan.workdir.mkdir(parents=True, exist_ok=True)
        self.token = secrets.token_hex(4)
        nodes = list(plan.topology.nodes)
        with_control = "control_api" in self.capabilities
        ports = free_ports(len(nodes) * (2 if with_control else 1))
        for index, node in enumerate(nodes):
            step = 2 if with_control else 1
            self.ports[node] = NodePorts(
                smtp=ports[index * step], control=ports[index * step + 1] if with_control else None
            )
        try:
            if self.mx_routing:
                await self._start_dns(nodes)
            for node in nodes:
                self._render(node)
            if plan.lazy_storage:
                await self._mount_queues(plan, nodes)
        except BaseException:
            await self.stop()
            raise
        results = await asyncio.gather(
            *(self._launch(node) for node in nodes), return_exceptions=True
        )
        failure = next((r for r in results if isinstance(r, BaseException)), None)
        if failure is not None:
            await self.stop()  # nothing of a failed start survives it
            raise failure
        return dict(self.handles)

    async def _start_dns(self, nodes: list[str]) -> None:
        self.dns_queries = {}
        for node in nodes:
            server = DnsServer(node)
            self.dns[node] = server  # before start: stop() closes what a failure left
            await server.start()
            self.dns_queries[node] = server.queries

    def _resolv_conf(self, node: str) -> Path:
        assert self.plan is not None
        return (self.plan.workdir / node / "resolv.conf").resolve()

    async def _mount_queues(self, plan: ClusterPlan, nodes: list[str]) -> None:
        """Each node's queue directory: a lazy filesystem over a disk that starts with
        what the image has at ``queue_dir`` (fresh, as a new named volume would be)."""
        if self.no_lazy_queue is not None:
            raise TargetError(f"{self.name} cannot cut power or fill disks: {self.no_lazy_queue}")
        storage = LazyStorage(plan.workdir, suffix="-queue")
        self.storage = storage
        LIVE_STORAGE.add(storage)
        archive = await asyncio.to_thread(self._image_queue_archive)
        for node in nodes:
            backing = storage.backing(node)
            # the owner first: a crash from here on leaves a mount the reaper can judge
            owner_file(storage.directory(node)).write_text(owner_label() + "\n")
            await asyncio.to_thread(shutil.rmtree, backing, True)
            await asyncio.to_thread(unpack, archive, backing)
            await storage.mount(node)

    def _image_queue_archive(self) -> bytes:
        """What the image has at ``queue_dir`` (a tar archive; read once per target)."""
        if self._image_queue is None:
            assert self.description.queue_dir is not None
            labels = {LABEL_OWNER: owner_label(), LABEL_RUN: self.run_id}
            self._image_queue = image_directory(
                self.client, self.description.image, self.description.queue_dir, labels
            )
        return self._image_queue

    def _render(self, node: str) -> None:
        """Fill the node's templates; keep the result in the workdir as evidence."""
        assert self.plan is not None
        plan = self.plan
        if self.changed.get(node) or self.routes.get(node):
            own = {**plan.node_settings.get(node, {}), **self.changed.get(node, {})}
            hops = {**plan.next_hops.get(node, {}), **self.routes.get(node, {})}
            plan = replace(
                plan,
                node_settings={**plan.node_settings, node: own},
                next_hops={**plan.next_hops, node: {d: h for d, h in hops.items() if h}},
            )
        server = self.dns.get(node)
        dns_server = server.address[0] if server is not None else None
        rendered = render_node(
            self.description, plan, node, self.ports, self.run_id, self.virtual_now, dns_server
        )
        if server is not None:
            # the answers follow the routes as the files do (a route step re-renders)
            hops = node_next_hops(plan, node)
            server.set_zone({d: h["mx_address"] for d, h in hops.items() if "mx_address" in h})
            resolv = self._resolv_conf(node)
            resolv.parent.mkdir(parents=True, exist_ok=True)
            # no search list: a name is asked as written; two tries of 2 s each
            resolv.write_text(f"nameserver {dns_server}\noptions timeout:2 attempts:2\n")
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
        """Create (not start) the node's container and, with a queue_dir, its volume (or
        the bind mount of its lazy filesystem)."""
        desc = self.description
        rendered = self.rendered[node]
        mounts = {}
        if desc.queue_dir and self.storage is not None:
            mounts[str(self.storage.directory(node))] = {"bind": desc.queue_dir, "mode": "rw"}
        elif desc.queue_dir:
            name = self.volumes.get(node) or f"shadowcheck-{self.token}-{node}-queue"
            self.client.volumes.create(name=name, labels=self._labels(node))
            LIVE_VOLUMES.add(name)
            self.volumes[node] = name
            mounts[name] = {"bind": desc.queue_dir, "mode": "rw"}
        if node in self.dns:
            # Docker writes no resolv.conf of its own over a file mounted there
            mounts[str(self._resolv_conf(node))] = {"bind": "/etc/resolv.conf", "mode": "ro"}
        container = self.client.containers.create(
            desc.image,
            command=rendered.command or None,
            name=f"shadowcheck-{self.token}-{node}",
            network_mode="host",
            labels=self._labels(node),
            environment=rendered.environment,
            volumes=mounts,
        )
        LIVE_CONTAINERS.add(container.id)
        self.containers[node] = container
        if rendered.files:
            container.put_archive("/", tar_files(rendered.files))
        return container

    async def _launch(self, node: str) -> NodeHandle:
        container: Any = self.containers.get(node)
        if container is None:
            container = await asyncio.to_thread(self._create, node)
        await asyncio.to_thread(container.start)
        await self._wait_ready(node)
        if self.storage is not None and self.description.queue_dir:
            problem = await asyncio.to_thread(
                queue_mount_problem, container, self.description.queue_dir
            )
            if problem is not None:
                raise TargetError(f"node {node}: {problem}; {self._host_queue(node)}")
        ports = self.ports[node]
        handle = NodeHandle(
            name=node,
            smtp=(LISTEN_HOST, ports.smtp),
            control=(LISTEN_HOST, ports.control) if ports.control is not None else None,
        )
        self.handles[node] = handle
        return handle

    def _host_queue(self, node: str) -> str:
        """What the host has at ``node``'s queue mount now: tells a mount the host lost
        from one the engine did not bind into the container."""
        assert self.storage is not None
        source = self.storage.directory(node)
        found = mounted_at(source)
        if found is not None and is_lazy(*found):
            return f"the host still has the lazy filesystem at {source}"
        what = f"{found[0]} {found[1]}" if found is not None else "no mount"
        return f"the host has {what} at {source}, no longer the lazy filesystem"

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
            problem = await smtp_banner(ports.smtp) if ready.smtp_banner else None
            if problem is None and ready.control_path and ports.control is not None:
                problem = await http_ok(ports.control, ready.control_path)
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
        files: dict[str, str] = {}
        if container is not None:
            with contextlib.suppress(Exception):
                text = container.logs(tail=lines).decode(errors="replace")
            files = self._log_files(container)
        if not (text or files) and self.plan is not None:
            with contextlib.suppress(OSError):
                saved = (self.plan.workdir / f"{node}.log").read_text(errors="replace")
                text = "\n".join(saved.splitlines()[-lines:])
        parts = [f"--- last lines of the {node} container log ---\n{text.rstrip()}"] * bool(
            text.strip()
        )
        for path, content in files.items():
            tail = "\n".join(content.splitlines()[-lines:])
            parts.append(f"--- last lines of {path} in {node} ---\n{tail}")
        asked = self.dns_queries.get(node)
        if asked:
            # routing: mx - where the MTA was told its next hops are
            tail = "\n".join(str(q) for q in asked[-lines:])
            parts.append(f"--- last questions {node} asked the harness DNS ---\n{tail}")
        return "\n".join(parts)

    def _log_files(self, container: Any) -> dict[str, str]:
        """The description's ``logs:`` files that exist in the container, by path."""
        found = {}
        for path in self.description.logs:
            content = read_file(container, path)
            if content:
                found[path] = content
        return found

    def node_log(self, node: str) -> str | None:
        """Everything the node logged in this scenario: the containers it had before
        (saved in the workdir), then the live one's output and ``logs:`` files."""
        if self.plan is None:
            return None
        parts = []
        with contextlib.suppress(OSError):
            parts.append((self.plan.workdir / f"{node}.log").read_text(errors="replace"))
        container = self.containers.get(node)
        if container is not None:
            with contextlib.suppress(Exception):
                parts.append(container.logs().decode(errors="replace"))
            parts.extend(self._log_files(container).values())
        return "\n".join(parts)

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
                for path, content in self._log_files(container).items():
                    out.write(f"--- {path} in container {container.name} ---\n".encode())
                    out.write(content.encode())

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
            LIVE_CONTAINERS.discard(container.id)
        self.paused.discard(node)
        name = self.volumes.get(node)
        if volume and name:
            with contextlib.suppress(NotFound):
                self.client.volumes.get(name).remove(force=True)
            LIVE_VOLUMES.discard(name)
            self.volumes.pop(node, None)

    async def stop(self) -> None:
        nodes = sorted(set(self.containers) | set(self.volumes))
        try:
            await asyncio.gather(
                *(asyncio.to_thread(self._remove, node, "stopped", True) for node in nodes),
                return_exceptions=True,
            )
            self.handles.clear()
        finally:
            await self._stop_dns()
            # unmounted whatever happened to the containers (the mounts would outlive us)
            storage, self.storage = self.storage, None
            if storage is not None:
                try:
                    await storage.stop()
                finally:
                    LIVE_STORAGE.discard(storage)

    async def _stop_dns(self) -> None:
        servers, self.dns = self.dns, {}
        for node, server in servers.items():
            with contextlib.suppress(Exception):
                await server.stop()
            if self.plan is not None and server.queries:
                with contextlib.suppress(OSError):
                    lines = [
                        f"{time.strftime('%H:%M:%S', time.localtime(q.t))} {q}"
                        for q in server.queries
                    ]
                    (self.plan.workdir / f"{node}.dns.log").write_text("\n".join(lines) + "\n")

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
        from docker.errors import APIError

        container = self._container(node)
        for attempt in range(PAUSE_ATTEMPTS):
            try:
                await asyncio.to_thread(container.pause)
                break
            except APIError as exc:
                # the cgroup freezer gives up on a container that forks as it freezes
                # (Exim forks per delivery); runc thaws it again, so try once more
                if "unable to freeze" not in str(exc) or attempt == PAUSE_ATTEMPTS - 1:
                    raise TargetError(f"pause {node}: {exc}") from None
                await asyncio.sleep(0.05)
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

    # -- admin adapters (docker_admin.py): what the control API would answer -----------

    async def _admin(self, node: str, command: tuple[str, ...], what: str) -> str:
        container = self._container(node)
        try:
            code, output = await asyncio.wait_for(
                asyncio.to_thread(run_in, container, command), EXEC_TIMEOUT
            )
        except TimeoutError:
            raise TargetError(f"{what} on {node}: {' '.join(command)} did not finish") from None
        if code != 0:
            raise TargetError(
                f"{what} on {node}: {' '.join(command)} exited {code}: {output.strip()[-500:]}"
            )
        return output

    async def control(self, node: str, method: str, path: str, body: Any = None) -> Any:
        if "control_api" in self.capabilities:
            return await super().control(node, method, path, body)
        admin = self.description.admin
        if (method, path) == ACTIVE_QUEUE and admin.queue is not None:
            try:
                return await asyncio.wait_for(
                    asyncio.to_thread(list_queue, self._container(node), admin.queue),
                    EXEC_TIMEOUT,
                )
            except (RuntimeError, TimeoutError) as exc:
                raise TargetError(f"queue of {node}: {exc or 'no answer'}") from None
        if (method, path) == ROUTES and admin.reconfigures and isinstance(body, dict):
            for domain, hop in body.items():
                await self.set_next_hop(node, domain, hop)
            return None
        raise TargetError(
            f"{self.description.name} has no control API and no admin adapter for {method} {path}"
        )

    async def set_settings(self, node: str, values: dict[str, Any]) -> Any:
        if not self.description.admin.reconfigures:
            return await super().set_settings(node, values)
        before = dict(self.changed.get(node, {}))
        self.changed[node] = {**before, **values}
        try:
            restarted = await self._reconfigure(node, "settings")
        except TargetError:
            self.changed[node] = before
            # a restarting MTA that refused the files in admin.check never ran them:
            # putting them back is enough; one that did not start again is restarted
            up = await asyncio.to_thread(self._up, node)
            await self._reconfigure(node, "previous settings", apply=not self._restarts or not up)
            raise
        rendered = sorted(v for v in values if self.description.renders(v))
        return {"rendered": rendered, **({"restarted": restarted} if restarted else {})}

    async def set_next_hop(self, node: str, domain: str, hop: dict[str, Any]) -> Any:
        admin = self.description.admin
        if not admin.reconfigures:
            return await super().set_next_hop(node, domain, hop)
        self.routes.setdefault(node, {})[domain] = hop
        restarted = await self._reconfigure(node, f"route {domain}")
        if admin.flush:
            # what waited for a route goes now, as the control API's route change does
            await self._admin(node, admin.flush, "flush")
        return {"restarted": restarted} if restarted else None

    @property
    def _restarts(self) -> bool:
        return self.description.admin.restarts

    def _up(self, node: str) -> bool:
        container = self.containers.get(node)
        if container is None:
            return False
        container.reload()
        return bool(container.status == "running")

    async def _reconfigure(self, node: str, what: str, apply: bool = True) -> str:
        """Render the node's files again, vet them (admin.check), then admin.reload - or,
        for an MTA without one (``reload: restart``), restart the node on its queue. A
        restart is returned as a sentence for the history ("" when none was needed)."""
        admin = self.description.admin
        running = self.rendered[node].files
        self._render(node)
        files = self.rendered[node].files
        container = self._container(node)
        await asyncio.to_thread(container.put_archive, "/", tar_files(files))
        if admin.check:
            await self._admin(node, admin.check, f"check of {what}")
        if not apply:
            return ""
        if not admin.restarts:
            await self._admin(node, admin.reload, f"reload for {what}")
            # an MTA that re-executes itself on reload (Exim) listens again only later
            await self._wait_ready(node)
            return ""
        if files == running:
            return ""  # already running with these files (a change replayed after a restart)
        # stopped as an admin stops the daemon (SIGTERM, SIGKILL after a grace period),
        # then a new container on the same queue volume reads the new files
        await asyncio.to_thread(self._container(node).stop, timeout=STOP_GRACE)
        await asyncio.to_thread(self._remove, node, f"restarted for {what}", False)
        await self._launch(node)
        return (
            f"{node} restarted on its queue to apply the {what} "
            f"({self.description.name} has no reload: admin.reload is restart)"
        )

    async def wipe(self, node: str) -> NodeHandle:
        await asyncio.to_thread(self._kill, node)
        await asyncio.to_thread(self._remove, node, "queue wiped", True)
        if self.storage is not None:
            # the same disk emptied (through the filesystem: what it held goes too), then
            # the image's directory, made durable as an installed one is
            await self.storage.wipe(node)
            archive = await asyncio.to_thread(self._image_queue_archive)
            await asyncio.to_thread(unpack, archive, self.storage.directory(node), sync=True)
        self._render(node)
        return await self._launch(node)

    # -- storage faults (power_cut, disk_faults) ---------------------------------------

    def _storage(self) -> LazyStorage:
        if self.storage is None:
            raise TargetError("the nodes' queues are not on a lazy filesystem (lazy_storage)")
        return self.storage

    def _cut(self, node: str) -> None:
        """SIGKILL, at once: the container's other processes die with its init, and
        docker reports it exited only when they are all gone. A paused container is
        killed frozen (``kill`` thaws it first: its processes would run a moment)."""
        from docker.errors import APIError

        container = self._container(node)
        container.reload()
        if container.status in ("running", "paused"):
            try:
                container.kill()
            except APIError as exc:
                if container.status != "paused":
                    raise TargetError(f"power cut of {node}: {exc}") from None
                container.unpause()  # an engine that does not kill a frozen container
                container.kill()
        container.wait(timeout=KILL_TIMEOUT)
        self.paused.discard(node)

    async def power_cut(self, node: str) -> dict[str, Any]:
        storage = self._storage()
        if node in self.containers:
            await asyncio.to_thread(self._cut, node)
        # the container is dead: nothing writes to its disk any more
        return await storage.power_cut(node)

    async def disk(self, node: str, mode: str | None, budget: int = 0) -> None:
        await self._storage().disk(node, mode, budget)

    def storage_events(self, node: str) -> list[dict[str, Any]]:
        return self.storage.events(node) if self.storage is not None else []


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
