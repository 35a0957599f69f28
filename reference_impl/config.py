"""The cluster file: boundary, nodes, next hops, directory and settings.

One YAML file describes a whole boundary; every node process reads the same
file and picks its own entry (``--name``), so nodes agree on who their peers
are, which site each is in, and the secret they authenticate with (if the
file has none, one is made per run: credentials.py).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .settings import PROFILES, Settings, SettingsError


class ConfigError(ValueError):
    """The cluster file is malformed; the message names the offending key."""


@dataclass(frozen=True)
class NextHop:
    """Where mail for one accepted domain goes.

    ``kind`` is ``mailbox`` (a mailbox server: delivery ends the transport's
    responsibility and feeds Safety Net), ``boundary`` (another transport
    boundary: crossing it ends shadow tracking, CR-9) or ``node`` (another
    node of this cluster, reached through the peer table).
    """

    domain: str
    kind: str = "mailbox"
    address: tuple[str, int] | None = None
    node: str | None = None

    def describe(self) -> str:
        if self.node:
            return f"node {self.node}"
        assert self.address is not None
        return f"{self.kind} {self.address[0]}:{self.address[1]}"

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind}
        if self.address:
            out["address"] = f"{self.address[0]}:{self.address[1]}"
        if self.node:
            out["node"] = self.node
        return out


@dataclass(frozen=True)
class NodeConfig:
    name: str
    site: str
    dag: str | None = None
    profile: str = "2013"
    smtp: tuple[str, int] = ("127.0.0.1", 0)
    control: tuple[str, int] = ("127.0.0.1", 0)
    peers: dict[str, tuple[str, int]] = field(default_factory=dict)
    next_hops: dict[str, NextHop] = field(default_factory=dict)
    #: this node's own values of some settings, over the cluster's ``settings:``
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ClusterConfig:
    boundary: str
    secret: str
    nodes: dict[str, NodeConfig]
    next_hops: dict[str, NextHop]
    recipients: dict[str, str]
    groups: dict[str, list[str]]
    settings: Settings
    clock_mode: str = "real"
    clock_start: float | None = None
    #: the control API's bearer token: None not given (one is generated per run,
    #: see credentials.py), "" none wanted (the API then listens on loopback only)
    control_token: str | None = None

    def node(self, name: str) -> NodeConfig:
        try:
            return self.nodes[name]
        except KeyError:
            raise ConfigError(
                f"no node {name!r} in the cluster file (nodes: {', '.join(self.nodes)})"
            ) from None

    def settings_for(self, name: str) -> Settings:
        """The cluster's settings with the node's own values over them."""
        own = self.node(name).settings
        return Settings.from_mapping(own, base=self.settings) if own else self.settings

    def next_hops_for(self, name: str) -> dict[str, NextHop]:
        """The cluster-wide routes, overridden by the node's own."""
        return {**self.next_hops, **self.node(name).next_hops}


def parse_address(text: Any, where: str) -> tuple[str, int]:
    if not isinstance(text, str) or ":" not in text:
        raise ConfigError(f"{where}: expected host:port, got {text!r}")
    host, _, port = text.rpartition(":")
    try:
        number = int(port)
    except ValueError:
        raise ConfigError(f"{where}: port must be a number in {text!r}") from None
    if not 0 <= number <= 65535:
        raise ConfigError(f"{where}: port out of range in {text!r}")
    return host.strip("[]"), number


def parse_time(value: Any, where: str) -> float:
    """Epoch seconds, or an ISO 8601 timestamp (UTC when no zone is given)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if isinstance(value, dt.datetime):
        moment = value
    elif isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
        try:
            moment = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
        except ValueError:
            raise ConfigError(f"{where}: not a time: {value!r}") from None
    else:
        raise ConfigError(f"{where}: not a time: {value!r}")
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()


def parse_next_hop(domain: str, raw: Any, where: str) -> NextHop:
    if isinstance(raw, str):
        return NextHop(domain=domain.lower(), address=parse_address(raw, where))
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected host:port or a mapping, got {raw!r}")
    unknown = set(raw) - {"address", "kind", "node"}
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    if "node" in raw:
        return NextHop(domain=domain.lower(), kind="node", node=str(raw["node"]))
    kind = raw.get("kind", "mailbox")
    if kind not in ("mailbox", "boundary"):
        raise ConfigError(f"{where}.kind: expected mailbox or boundary, got {kind!r}")
    return NextHop(
        domain=domain.lower(), kind=kind, address=parse_address(raw.get("address"), where)
    )


def _mapping(raw: Any, where: str) -> dict[str, Any]:
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: expected a mapping, got {type(raw).__name__}")
    return raw


def parse_cluster(raw: Any) -> ClusterConfig:
    top = _mapping(raw, "cluster file")
    unknown = set(top) - {
        "boundary",
        "secret",
        "control_token",
        "profile",
        "clock",
        "nodes",
        "next_hops",
        "directory",
        "settings",
    }
    if unknown:
        raise ConfigError(f"cluster file: unknown keys {sorted(unknown)}")
    boundary = str(top.get("boundary", "boundary"))
    default_profile = str(top.get("profile", "2013"))
    routes = {
        domain.lower(): parse_next_hop(domain, value, f"next_hops.{domain}")
        for domain, value in _mapping(top.get("next_hops"), "next_hops").items()
    }
    nodes_raw = _mapping(top.get("nodes"), "nodes")
    if not nodes_raw:
        raise ConfigError("cluster file: 'nodes' must name at least one node")
    nodes = {
        name: _parse_node(str(name), spec, default_profile) for name, spec in nodes_raw.items()
    }
    for node in nodes.values():
        for hop in [*routes.values(), *node.next_hops.values()]:
            if hop.node and hop.node not in nodes:
                raise ConfigError(f"next hop {hop.domain}: no node {hop.node!r} in the cluster")
    directory = _mapping(top.get("directory"), "directory")
    unknown = set(directory) - {"recipients", "groups"}
    if unknown:
        raise ConfigError(f"directory: unknown keys {sorted(unknown)}")
    recipients = {
        str(k).lower(): str(v)
        for k, v in _mapping(directory.get("recipients"), "directory.recipients").items()
    }
    groups = {
        str(k).lower(): [str(m).lower() for m in (v or [])]
        for k, v in _mapping(directory.get("groups"), "directory.groups").items()
    }
    try:
        settings = Settings.from_mapping(_mapping(top.get("settings"), "settings"))
    except SettingsError as exc:
        raise ConfigError(f"settings: {exc}") from None
    for node in nodes.values():
        try:
            Settings.from_mapping(node.settings, base=settings)
        except SettingsError as exc:
            raise ConfigError(f"nodes.{node.name}.settings: {exc}") from None
    clock = _mapping(top.get("clock"), "clock")
    mode = str(clock.get("mode", "real"))
    if mode not in ("real", "virtual"):
        raise ConfigError(f"clock.mode: expected real or virtual, got {mode!r}")
    start = parse_time(clock["start"], "clock.start") if "start" in clock else None
    return ClusterConfig(
        boundary=boundary,
        # No built-in secret: "" until credentials.resolve() fills one in.
        secret=str(top["secret"]) if top.get("secret") else "",
        control_token=_control_token(top),
        nodes=nodes,
        next_hops=routes,
        recipients=recipients,
        groups=groups,
        settings=settings,
        clock_mode=mode,
        clock_start=start,
    )


def _control_token(top: dict[str, Any]) -> str | None:
    if "control_token" not in top:
        return None
    value = top["control_token"]
    if value is None or value == "":
        return ""
    if not isinstance(value, str) or len(value) < 16:
        raise ConfigError("control_token: expected text of at least 16 characters, or null")
    return value


def _parse_node(name: str, raw: Any, default_profile: str) -> NodeConfig:
    where = f"nodes.{name}"
    spec = _mapping(raw, where)
    unknown = set(spec) - {
        "site",
        "dag",
        "profile",
        "smtp",
        "control",
        "peers",
        "next_hops",
        "settings",
    }
    if unknown:
        raise ConfigError(f"{where}: unknown keys {sorted(unknown)}")
    profile = str(spec.get("profile", default_profile))
    if profile not in PROFILES:
        raise ConfigError(f"{where}.profile: expected one of {PROFILES}, got {profile!r}")
    return NodeConfig(
        name=name,
        site=str(spec.get("site", "site-a")),
        dag=str(spec["dag"]) if spec.get("dag") is not None else None,
        profile=profile,
        smtp=parse_address(spec["smtp"], f"{where}.smtp") if "smtp" in spec else ("127.0.0.1", 0),
        control=(
            parse_address(spec["control"], f"{where}.control")
            if "control" in spec
            else ("127.0.0.1", 0)
        ),
        peers={
            str(peer): parse_address(addr, f"{where}.peers.{peer}")
            for peer, addr in _mapping(spec.get("peers"), f"{where}.peers").items()
        },
        next_hops={
            domain.lower(): parse_next_hop(domain, value, f"{where}.next_hops.{domain}")
            for domain, value in _mapping(spec.get("next_hops"), f"{where}.next_hops").items()
        },
        settings=dict(_mapping(spec.get("settings"), f"{where}.settings")),
    )


def load_cluster(path: str | Path) -> ClusterConfig:
    try:
        raw = yaml.safe_load(Path(path).read_text())
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from None
    except OSError as exc:
        raise ConfigError(f"{path}: {exc.strerror}") from None
    return parse_cluster(raw)
