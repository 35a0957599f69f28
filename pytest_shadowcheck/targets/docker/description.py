"""Docker target descriptions: load and check the YAML, render each node's files.

A description (``--shadowcheck-target docker:PATH``) names the image, how many
nodes the target can run, the files to write into each node's container
(Jinja2 templates filled from the scenario's topology and settings), the
command, a readiness check, how to read the MTA's version and the
capabilities the MTA claims beyond those docker gives (kill, pause, restart
and, with a ``queue_dir``, wipe_queue_db). The format is documented in
``docs/targets.md``; ``targets/postfix.yaml`` is a complete example.

Every problem is one :class:`DescriptionError` naming ``file:line``.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pytest_shadowcheck.errors import ScenarioError, SourceRef, format_snippet
from pytest_shadowcheck.network.dns import mx_host
from pytest_shadowcheck.scenario.durations import parse_duration
from pytest_shadowcheck.scenario.loader import MTA_CAPABILITIES, PROCESS_CAPABILITIES
from pytest_shadowcheck.scenario.steps import SettingsSpec
from pytest_shadowcheck.targets.base import ClusterPlan, Glue, TargetError
from pytest_shadowcheck.targets.docker.admin import AdminAdapters, AdminError, parse_admin

if TYPE_CHECKING:
    from pytest_shadowcheck.scenario.loader import Scenario

__all__ = [
    "CLAIMABLE",
    "DOCKER_CAPABILITIES",
    "Description",
    "DescriptionError",
    "NodePorts",
    "Readiness",
    "RenderedNode",
    "load_description",
    "render_node",
    "version_from_output",
]

#: what docker itself gives: SIGKILL, the freezer, start again, a new queue volume
DOCKER_CAPABILITIES = frozenset(PROCESS_CAPABILITIES)
#: what only the MTA can provide; a description claims them under ``capabilities``
CLAIMABLE = frozenset(MTA_CAPABILITIES)
LISTEN_HOST = "127.0.0.1"

_KEYS = {
    "name": "label shown in reports (default: the file name)",
    "image": "the image to run (required)",
    "recipe": "the recipe that builds the image: a bundled one or your directory (images build)",
    "max_nodes": "how many nodes the target can run at once",
    "queue_dir": "directory of the durable queue: a named volume per node (a lazy filesystem "
    "for power cuts and full disks)",
    "files": "path in the container (a template too) -> template (or {template, mode})",
    "command": "the command, a list of templates",
    "environment": "NAME -> template",
    "ready": "readiness: smtp_banner, command, control_path, timeout",
    "version": "how to read the MTA's version: command + format, or text",
    "capabilities": "capabilities beyond docker's own",
    "settings": "unsupported: settings the MTA cannot apply",
    "added_headers": "header fields the MTA adds to every message beyond Received/Return-Path",
    "admin": "commands run in the container: reload, check, flush, queue (docker_admin.py)",
    "logs": "files in the container the MTA logs to, shown as the node's log",
    "timers": "timers compiled into the MTA: SETTING -> duration or LOW-HIGH (e.g. 60s-119s)",
    "glue": "what the description adds that provides behaviours the MTA does not: "
    "[{provides: [ID, ...], what: text}] (their PASS is not credited to the MTA)",
    "routing": "how nodes find next hops: relay (host:port in the templates, the default) "
    "or mx (the harness serves DNS; docs/targets.md, MX routing)",
}
#: values of ``routing``
ROUTINGS = ("relay", "mx")


class DescriptionError(TargetError):
    """The target description is wrong; ``str()`` names file:line and shows the line."""

    def __init__(self, message: str, where: SourceRef) -> None:
        text = f"{where}: {message}"
        snippet = format_snippet(where.path, where.line, where.column)
        super().__init__(f"{text}\n{snippet}" if snippet else text)


@dataclass(frozen=True)
class Readiness:
    """A node is ready when every given check passes within ``timeout`` seconds."""

    smtp_banner: bool = True
    command: tuple[str, ...] = ()
    control_path: str | None = None
    timeout: float = 30.0


@dataclass(frozen=True)
class FileTemplate:
    #: the path in the container as written: a template rendered like the content
    path: str
    source: str
    mode: int
    where: SourceRef
    #: line of the description where the template's first line is
    first_line: int
    #: line of the description where the path (the key) is
    path_line: int = 0


@dataclass
class Description:
    """A loaded, checked target description."""

    path: Path
    name: str
    image: str
    recipe: str | None
    max_nodes: int
    queue_dir: str | None
    files: list[FileTemplate]
    command: list[str]
    environment: dict[str, str]
    ready: Readiness
    version_command: list[str]
    version_format: str
    version_text: str | None
    claimed: frozenset[str]
    unsupported_settings: frozenset[str]
    added_headers: frozenset[str] = frozenset()
    admin: AdminAdapters = field(default_factory=AdminAdapters)
    #: files in the container the MTA logs to (beside its standard output)
    logs: tuple[str, ...] = ()
    #: timers compiled into the MTA: setting -> (shortest, longest) seconds
    timers: dict[str, tuple[float, float]] = field(default_factory=dict)
    #: glue the description adds that provides behaviours in the MTA's stead
    glue: tuple[Glue, ...] = ()
    lines: dict[str, int] = field(default_factory=dict)
    #: "relay": templates route each domain to its hop's host:port; "mx": by DNS
    routing: str = "relay"

    @property
    def capabilities(self) -> frozenset[str]:
        own = DOCKER_CAPABILITIES if self.queue_dir else DOCKER_CAPABILITIES - {"wipe_queue_db"}
        # a reload (or restart) after the files are rendered again with the new settings
        adapted = {"set_settings"} if self.admin.reconfigures else set()
        return own | self.claimed | adapted

    def where(self, key: str) -> SourceRef:
        return SourceRef(self.path, self.lines.get(key, 0))

    def cannot_run(self, scenario: Scenario) -> str | None:
        """Why a scenario cannot run on this description's MTA, or None."""
        desc = self
        nodes = len(scenario.topology.nodes)
        if nodes > desc.max_nodes:
            return f"{desc.name} runs at most {desc.max_nodes} nodes, the scenario has {nodes}"
        given = set(scenario.settings).union(*scenario.node_settings.values())
        changed = [s.arg.values for s in scenario.steps if isinstance(s.arg, SettingsSpec)]
        unsupported = sorted(given.union(*changed) & desc.unsupported_settings)
        if unsupported:
            return (
                f"{desc.name} cannot apply setting {', '.join(unsupported)} "
                f"(settings.unsupported in {desc.path})"
            )
        unrendered = sorted(
            s for s in scenario.needs_settings if not desc.renders(s) and s not in desc.timers
        )
        if unrendered:
            return (
                f"the scenario's premise is a configuration the MTA was given, and no template "
                f"of {desc.path.name} renders {', '.join(unrendered)}: {desc.name} is never "
                "told it"
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
        for step in scenario.steps:
            if not isinstance(step.arg, SettingsSpec) or step.arg.result != "rejected":
                continue
            # a change the MTA must reject proves nothing unless the MTA is given all of it
            unrendered = sorted(s for s in step.arg.values if not desc.renders(s))
            if unrendered:
                return (
                    f"the change it must reject (line {step.where.line}) cannot be given to "
                    f"{desc.name}: no template of {desc.path.name} renders {', '.join(unrendered)}"
                )
        return None

    def renders(self, setting: str) -> bool:
        """Whether any template (files, command, environment) uses ``setting``: a
        setting no template names never reaches the MTA."""
        sources = [f.source for f in self.files] + [f.path for f in self.files]
        sources += self.command + list(self.environment.values())
        return any(setting in source for source in sources)


@dataclass(frozen=True)
class NodePorts:
    """Loopback ports the target allocated for one node (host networking)."""

    smtp: int
    control: int | None = None


@dataclass
class RenderedNode:
    """What one node's container gets: files (path -> (content, mode)), command, env."""

    files: dict[str, tuple[bytes, int]]
    command: list[str]
    environment: dict[str, str]


# --------------------------------------------------------------------------- loading


def _timers(raw: Any, where: SourceRef) -> dict[str, tuple[float, float]]:
    """``timers: {TransientFailureRetryInterval: 60s-119s, ...}``: (shortest, longest)."""
    if raw is None:
        return {}
    expected = (
        "timers: {SETTING: DURATION or LOW-HIGH}, e.g. {TransientFailureRetryInterval: 60s-119s}"
    )
    if not isinstance(raw, dict):
        raise DescriptionError(expected, where)
    out = {}
    for name, value in raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[A-Z][A-Za-z0-9]+", name):
            raise DescriptionError(f"timers: {name!r} is not a setting name; {expected}", where)
        low_text, _, high_text = str(value).partition("-")
        try:
            low = parse_duration(low_text.strip(), where)
            high = parse_duration(high_text.strip(), where) if high_text else low
        except ScenarioError:
            raise DescriptionError(f"timers.{name}: {value!r} is not {expected}", where) from None
        if high < low:
            raise DescriptionError(f"timers.{name}: {value!r} ends before it starts", where)
        out[name] = (low, high)
    return out



def _marks(node: yaml.Node) -> dict[str, tuple[int, str | None]]:
    """(1-based line of the value, scalar style) for top-level keys and ``files.PATH``."""
    out: dict[str, tuple[int, str | None]] = {}
    if not isinstance(node, yaml.MappingNode):
        return out
    for key, value in node.value:
        name = str(key.value)
        out[name] = (key.start_mark.line + 1, None)
        if name == "glue" and isinstance(value, yaml.SequenceNode):
            for index, item in enumerate(value.value):
                out[f"glue.{index}"] = (item.start_mark.line + 1, None)
        if name == "admin" and isinstance(value, yaml.MappingNode):
            for akey, _ in value.value:
                out[f"admin.{akey.value}"] = (akey.start_mark.line + 1, None)
        if name == "files" and isinstance(value, yaml.MappingNode):
            for fkey, fvalue in value.value:
                template = fvalue
                if isinstance(fvalue, yaml.MappingNode):
                    template = next((v for k, v in fvalue.value if k.value == "template"), fvalue)
                style = template.style if isinstance(template, yaml.ScalarNode) else None
                out[f"files.{fkey.value}"] = (template.start_mark.line + 1, style)
                out[f"files-key.{fkey.value}"] = (fkey.start_mark.line + 1, None)
    return out


def _template_env() -> Any:
    try:
        import jinja2
    except ImportError:
        raise TargetError(
            "the docker target needs Jinja2 and the Docker SDK: "
            "pip install 'pytest-shadowcheck[docker]'"
        ) from None
    env = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    env.filters["to_yaml"] = lambda value: yaml.safe_dump(value, sort_keys=False)
    env.filters["to_json"] = lambda value: json.dumps(value)
    env.filters["seconds"] = _whole_seconds
    return env


def _whole_seconds(value: Any, minimum: int = 1) -> int:
    """Round a timer up to whole seconds (most MTAs have no sub-second timers)."""
    return max(minimum, math.ceil(float(value)))


def _is_template(text: str) -> bool:
    return "{{" in text or "{%" in text


def _check_path(path: str, written: str, where: SourceRef, node: str | None = None) -> str:
    """The container path a ``files:`` key names (rendered for ``node``), normalised:
    absolute, not empty, not a directory."""
    shown = f"{written!r}" + (f" (for node {node}: {path!r})" if path != written else "")
    if not path.strip():
        empty = "is empty" if node is None else f"renders to nothing for node {node}"
        raise DescriptionError(f"file {written!r}: the path {empty}", where)
    if not path.startswith("/"):
        raise DescriptionError(f"file {shown}: the path must be absolute", where)
    if path.endswith("/"):
        raise DescriptionError(f"file {shown}: the path names a directory, not a file", where)
    return posixpath.normpath(path)


def _str_list(value: Any, where: SourceRef, what: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(v, (str, int, float)) for v in value):
        raise DescriptionError(f"{what} must be a list of strings", where)
    return [str(v) for v in value]


def load_description(path: str | Path) -> Description:
    """Read and check a target description; every template is compiled here."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except OSError as exc:
        raise TargetError(f"docker target description {file}: {exc.strerror or exc}") from None
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
        data = yaml.safe_load(text)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark
        line = mark.line + 1 if mark else 0
        raise DescriptionError(f"YAML syntax error: {exc.problem}", SourceRef(file, line)) from None
    marks = _marks(root) if root is not None else {}
    lines = {key: line for key, (line, _) in marks.items()}

    def at(key: str) -> SourceRef:
        return SourceRef(file, lines.get(key, lines.get(key.split(".")[0], 1)))

    if not isinstance(data, dict):
        raise DescriptionError("a target description is a mapping (image, files, ...)", at(""))
    unknown = sorted(set(data) - set(_KEYS))
    if unknown:
        known = ", ".join(_KEYS)
        raise DescriptionError(f"unknown key {unknown[0]!r} (known: {known})", at(unknown[0]))
    if not isinstance(data.get("image"), str) or not data["image"]:
        raise DescriptionError("'image' is required: the image to run", at("image"))
    env = _template_env()
    import jinja2

    files: list[FileTemplate] = []
    raw_files = data.get("files") or {}
    if not isinstance(raw_files, dict):
        raise DescriptionError("'files' maps a container path to a template", at("files"))
    for target_path, spec in raw_files.items():
        key = f"files.{target_path}"
        where = at(key)
        path_where = SourceRef(file, lines.get(f"files-key.{target_path}", where.line))
        try:
            env.from_string(str(target_path))
        except jinja2.TemplateSyntaxError as exc:
            raise DescriptionError(f"path {target_path}: {exc.message}", path_where) from None
        # a templated path is checked once rendered (render_node), a fixed one here
        if not _is_template(str(target_path)):
            _check_path(str(target_path), str(target_path), path_where)
        mode = 0o644
        if isinstance(spec, dict):
            if set(spec) - {"template", "mode"} or "template" not in spec:
                raise DescriptionError(f"file {target_path}: expected {{template, mode}}", where)
            try:
                mode = int(str(spec.get("mode", "644")), 8)
            except ValueError:
                raise DescriptionError(
                    f'file {target_path}: mode is octal text such as "600"', where
                ) from None
            spec = spec["template"]
        if not isinstance(spec, str):
            raise DescriptionError(f"file {target_path}: the template must be text", where)
        line, style = marks.get(key, (0, None))
        # a block scalar (| or >) starts on the line after its indicator
        first = line + 1 if style in ("|", ">") else line
        try:
            env.from_string(spec)
        except jinja2.TemplateSyntaxError as exc:
            at_line = SourceRef(file, first + (exc.lineno or 1) - 1)
            raise DescriptionError(f"template {target_path}: {exc.message}", at_line) from None
        files.append(FileTemplate(str(target_path), spec, mode, where, first, path_where.line))

    command = _str_list(data.get("command") or [], at("command"), "'command'")
    environment = data.get("environment") or {}
    if not isinstance(environment, dict):
        raise DescriptionError("'environment' maps NAME to a template", at("environment"))
    for item in [*command, *(str(v) for v in environment.values())]:
        try:
            env.from_string(item)
        except jinja2.TemplateSyntaxError as exc:
            raise DescriptionError(f"template {item!r}: {exc.message}", at("command")) from None

    ready = _readiness(data.get("ready"), at("ready"))
    version = data.get("version")
    version = {} if version is None else version
    if isinstance(version, str):
        version = {"text": version}
    if not isinstance(version, dict) or set(version) - {"command", "format", "text"}:
        raise DescriptionError("'version' is {command: [...], format: '... {output}'} or text",
                               at("version"))  # fmt: skip
    _check_version(version, at("version"))
    claimed = set(_str_list(data.get("capabilities") or [], at("capabilities"), "'capabilities'"))
    bad = sorted(claimed - CLAIMABLE - DOCKER_CAPABILITIES)
    if bad:
        raise DescriptionError(
            f"unknown capability {bad[0]!r}: an MTA can claim {', '.join(sorted(CLAIMABLE))}",
            at("capabilities"),
        )
    claimed -= DOCKER_CAPABILITIES
    settings = data.get("settings") or {}
    if not isinstance(settings, dict) or set(settings) - {"unsupported"}:
        raise DescriptionError("'settings' has one key: unsupported: [NAME, ...]", at("settings"))
    max_nodes = data.get("max_nodes", 8)
    if not isinstance(max_nodes, int) or max_nodes < 1:
        raise DescriptionError("'max_nodes' must be a positive number", at("max_nodes"))
    queue_dir = data.get("queue_dir")
    if queue_dir is not None and not str(queue_dir).startswith("/"):
        raise DescriptionError("'queue_dir' must be an absolute path", at("queue_dir"))
    admin = AdminAdapters()
    if data.get("admin") is not None:
        try:
            admin = parse_admin(data["admin"], at)
        except AdminError as exc:
            raise DescriptionError(str(exc), exc.where) from None
    logs = _str_list(data.get("logs") or [], at("logs"), "'logs'")
    relative = [p for p in logs if not p.startswith("/")]
    if relative:
        raise DescriptionError(
            f"logs: {relative[0]!r} must be an absolute path in the container", at("logs")
        )
    timers = _timers(data.get("timers"), at("timers"))
    routing = data.get("routing", "relay")
    if routing not in ROUTINGS:
        raise DescriptionError(
            f"routing is relay (next hops as host:port, the default) or mx (the harness "
            f"serves DNS for them), not {routing!r}",
            at("routing"),
        )
    return Description(
        timers=timers,
        path=file,
        name=str(data.get("name") or file.stem),
        image=data["image"],
        recipe=str(data["recipe"]) if data.get("recipe") else None,
        max_nodes=max_nodes,
        queue_dir=str(queue_dir) if queue_dir else None,
        files=files,
        command=command,
        environment={str(k): str(v) for k, v in environment.items()},
        ready=ready,
        version_command=_str_list(version.get("command") or [], at("version"), "version.command"),
        version_format=str(version.get("format", "{output}")),
        version_text=str(version["text"]) if "text" in version else None,
        claimed=frozenset(claimed),
        unsupported_settings=frozenset(
            _str_list(settings.get("unsupported") or [], at("settings"), "settings.unsupported")
        ),
        added_headers=frozenset(
            _str_list(data.get("added_headers") or [], at("added_headers"), "added_headers")
        ),
        admin=admin,
        logs=tuple(logs),
        glue=_glue(data.get("glue"), at),
        lines=lines,
        routing=str(routing),
    )


def _glue(raw: Any, at: Any) -> tuple[Glue, ...]:
    """``glue: [{provides: [ID, ...], what: text}]``, IDs from the behaviour catalogue."""
    from pytest_shadowcheck.scenario.loader import load_behaviours

    if raw is None:
        return ()
    form = "'glue' is a list of {provides: [BEHAVIOUR-ID, ...], what: what the glue is}"
    if not isinstance(raw, list):
        raise DescriptionError(form, at("glue"))
    catalogue = load_behaviours()
    out: list[Glue] = []
    for index, item in enumerate(raw):
        where = at(f"glue.{index}")
        if not isinstance(item, dict) or set(item) != {"provides", "what"}:
            raise DescriptionError(form, where)
        provides = _str_list(item["provides"], where, "glue.provides")
        if not provides:
            raise DescriptionError("glue.provides names no behaviour", where)
        unknown = [bid for bid in provides if bid not in catalogue]
        if unknown:
            raise DescriptionError(
                f"glue.provides: {unknown[0]!r} is not a behaviour of the catalogue "
                f"({', '.join(list(catalogue)[:3])}, ... {list(catalogue)[-1]}: README.md "
                "lists them)",
                where,
            )
        what = str(item["what"] or "").strip()
        if not what:
            raise DescriptionError("glue.what is empty: say what the glue is", where)
        out.append(Glue(tuple(provides), what))
    return tuple(out)


def _check_version(version: dict[str, Any], where: SourceRef) -> None:
    """A version that says nothing is an error, not an empty line in every report."""
    if "text" in version and not str(version["text"] or "").strip():
        raise DescriptionError("'version' is empty: name the MTA and its version", where)
    fmt = str(version.get("format", "{output}"))
    try:
        sample = fmt.format(output="4.2")
    except (KeyError, IndexError, ValueError) as exc:
        raise DescriptionError(
            f"version.format {fmt!r}: {{output}} is the only placeholder ({exc})", where
        ) from None
    if not sample.strip():
        raise DescriptionError(f"version.format {fmt!r} renders to nothing", where)


def version_from_output(description: Description, output: str) -> str:
    """The version from what the version command printed; nothing printed (or a format
    that renders to blank) is an error naming the description's ``version`` line."""
    text = output.strip()
    shown = " ".join(description.version_command)
    if not text:
        raise DescriptionError(
            f"the version command ({shown}) printed nothing: the version of the MTA "
            "under test would be blank in every report; fix the command or give "
            "version: {text: ...}",
            description.where("version"),
        )
    version = description.version_format.format(output=text).strip()
    if not version:
        raise DescriptionError(
            f"version.format {description.version_format!r} renders {text!r} to nothing",
            description.where("version"),
        )
    return version


def _readiness(raw: Any, where: SourceRef) -> Readiness:
    if raw is None:
        return Readiness()
    known = {"smtp_banner", "command", "control_path", "timeout"}
    if not isinstance(raw, dict) or set(raw) - known:
        raise DescriptionError(
            "'ready' takes smtp_banner (true/false), command [...], control_path, timeout", where
        )
    command = tuple(_str_list(raw.get("command") or [], where, "ready.command"))
    banner = bool(raw.get("smtp_banner", not command))
    try:
        timeout = parse_duration(raw.get("timeout", 30), where)
    except Exception as exc:
        raise DescriptionError(f"ready.timeout: {exc}", where) from None
    if not (banner or command or raw.get("control_path")):
        raise DescriptionError("'ready' needs at least one check", where)
    return Readiness(banner, command, raw.get("control_path"), timeout)


# --------------------------------------------------------------------------- rendering


def _hop(address: str) -> dict[str, Any]:
    host, _, port = address.rpartition(":")
    return {"host": host, "port": int(port), "address": address}


def cluster_context(plan: ClusterPlan, ports: dict[str, NodePorts]) -> dict[str, Any]:
    """The cluster file of the reference MTA (docs/contracts.md section 1), with every
    node's SMTP and control address: templates write it with ``cluster | to_yaml``."""
    from pytest_shadowcheck.targets.reference import cluster_document

    cluster = cluster_document(plan)
    for name, entry in cluster["nodes"].items():
        entry["smtp"] = f"{LISTEN_HOST}:{ports[name].smtp}"
        if ports[name].control is not None:
            entry["control"] = f"{LISTEN_HOST}:{ports[name].control}"
    return cluster


def node_context(
    plan: ClusterPlan,
    node: str,
    ports: dict[str, NodePorts],
    run_id: str,
    virtual_now: float | None = None,
    dns_server: str | None = None,
) -> dict[str, Any]:
    """The variables a template sees for ``node`` (listed in docs/targets.md)."""
    topo = plan.topology
    spec = topo.nodes[node]
    peers = {other: _hop(address) for other, address in plan.peers.get(node, {}).items()}
    next_hops = node_next_hops(plan, node)
    return {
        "node": node,
        "site": spec.site,
        "dag": spec.dag,
        "profile": spec.profile or topo.profile,
        "listen_host": LISTEN_HOST,
        "smtp_port": ports[node].smtp,
        "control_port": ports[node].control,
        "nodes": {
            name: {
                "site": s.site,
                "dag": s.dag,
                "smtp_port": ports[name].smtp,
                "control_port": ports[name].control,
            }
            for name, s in topo.nodes.items()
        },
        "peers": peers,
        "next_hops": next_hops,
        # the scenario's settings, then this node's own (node_settings) over them
        "settings": {**plan.settings, **plan.node_settings.get(node, {})},
        "boundary": topo.boundary,
        "clock": topo.clock,
        "clock_start": plan.clock_start,
        "virtual_now": virtual_now,
        "directory": topo.directory or {},
        "secret": plan.secret,
        "run_id": run_id,
        "cluster": cluster_context(plan, ports),
        # MX routing: the address of the harness DNS this node's resolv.conf names
        "dns_server": dns_server,
    }


def node_next_hops(plan: ClusterPlan, node: str) -> dict[str, dict[str, Any]]:
    """``next_hops`` as templates see it: per domain the proxy's host, port and
    address (host:port), kind, and with MX routing ``mx_host`` (the name the domain's
    MX record gives) and ``mx_address`` (where that proxy listens on port 25)."""
    peers = plan.peers.get(node, {})
    next_hops: dict[str, dict[str, Any]] = {}
    for domain, hop in plan.next_hops.get(node, {}).items():
        if "node" in hop:
            # another node of the cluster: reached through the harness proxy to it
            entry = {**_hop(peers[hop["node"]]), "kind": "node", "node": hop["node"]}
        else:
            entry = {**_hop(hop["address"]), "kind": hop.get("kind", "mailbox")}
        if entry["address"] in plan.mx_addresses:
            entry["mx_host"] = mx_host(domain)
            entry["mx_address"] = plan.mx_addresses[entry["address"]]
        next_hops[domain] = entry
    return next_hops


def _template_line(exc: BaseException) -> int | None:
    """Line inside the template where rendering failed (Jinja2 keeps it in the traceback)."""
    line = getattr(exc, "lineno", None)
    tb = exc.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code.co_filename == "<template>":
            line = tb.tb_lineno
        tb = tb.tb_next
    return line


def render_node(
    description: Description,
    plan: ClusterPlan,
    node: str,
    ports: dict[str, NodePorts],
    run_id: str,
    virtual_now: float | None = None,
    dns_server: str | None = None,
) -> RenderedNode:
    """Fill every template for ``node``; a template error names the description line.
    Command items that render to nothing are left out."""
    import jinja2

    env = _template_env()
    context = node_context(plan, node, ports, run_id, virtual_now, dns_server)
    context["routing"] = description.routing

    def render(source: str, where: SourceRef, first_line: int | None = None) -> str:
        try:
            return str(env.from_string(source).render(context))
        except jinja2.TemplateError as exc:
            line = where
            lineno = _template_line(exc)
            if first_line and lineno:
                line = SourceRef(where.path, first_line + lineno - 1)
            raise DescriptionError(f"cannot render for node {node}: {exc}", line) from None

    files: dict[str, tuple[bytes, int]] = {}
    written: dict[str, FileTemplate] = {}
    for f in description.files:
        path_where = SourceRef(f.where.path, f.path_line or f.where.line)
        path = _check_path(render(f.path, path_where).strip(), f.path, path_where, node)
        if path in written:
            other = written[path]
            raise DescriptionError(
                f"files {other.path!r} (line {other.path_line}) and {f.path!r} both render to "
                f"{path} for node {node}: each file of a node needs a path of its own",
                path_where,
            )
        written[path] = f
        files[path] = (render(f.source, f.where, f.first_line).encode(), f.mode)
    command = [render(item, description.where("command")) for item in description.command]
    command = [item for item in command if item.strip()]
    environment = {
        name: render(value, description.where("environment"))
        for name, value in description.environment.items()
    }
    return RenderedNode(files, command, environment)
