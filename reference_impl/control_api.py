"""The control API: what a black box cannot show, over HTTP/JSON on loopback.

Schema: ``reference_impl/openapi.yaml``. Times are the node clock's epoch
seconds. Errors are ``{"error": "..."}`` with a 4xx status.

Every request needs ``Authorization: Bearer <token>`` (the cluster run's
token, credentials.py) and a Host naming this listener; a request with a body
needs ``Content-Type: application/json``; a browser's cross-site request
(a foreign ``Origin``) is refused. Without a token (``control_token: null``)
the API listens on loopback only.
"""

from __future__ import annotations

import hmac
import ipaddress
import json
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiohttp import web

from . import __version__
from .config import ConfigError, parse_address, parse_next_hop, parse_time
from .settings import SettingsError

if TYPE_CHECKING:
    from .node import Node

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

NODE_KEY = web.AppKey("node", object)
#: {"hosts": Host header values this listener answers to, or None: any (a wildcard
#: bind)}; filled in once bound, when the app can no longer take new keys
HOSTS_KEY = web.AppKey("hosts", dict)


def _node(request: web.Request) -> Node:
    return request.app[NODE_KEY]  # type: ignore[return-value]


def _json(data: Any, status: int = 200) -> web.Response:
    return web.json_response(data, status=status, dumps=lambda d: json.dumps(d, default=str))


def _error(status: int, message: str) -> web.Response:
    return _json({"error": message}, status)


async def _body(request: web.Request) -> dict[str, Any]:
    try:
        body = await request.json()
    except json.JSONDecodeError as exc:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"body is not JSON: {exc}"}), content_type="application/json"
        ) from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "body must be a JSON object"}),
            content_type="application/json",
        )
    return body


def _without_content(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "content"}


async def health(request: web.Request) -> web.Response:
    node = _node(request)
    return _json(
        {
            "status": "ok",
            "node": node.name,
            "profile": node.profile,
            "queue_db_id": node.db.db_id,
            "version": __version__,
            "clock_mode": node.clock.mode,
            "smtp": f"{node.smtp_address[0]}:{node.smtp_address[1]}",
        }
    )


async def queue_db(request: web.Request) -> web.Response:
    node = _node(request)
    return _json({"id": node.db.db_id, "created_at": node.db.created_at})


async def active_queue(request: web.Request) -> web.Response:
    node = _node(request)
    out = []
    for message in node.db.messages():
        forks = node.db.forks_of(message.id)
        out.append(
            {
                "id": message.id,
                "message_id": message.message_id,
                "sender": message.sender,
                "recipients": message.recipients,
                "origin": message.origin,
                "forks": {f.domain: f.state for f in forks},
                "attempts": {f.domain: f.attempts for f in forks},
                "shadow_node": message.shadow_node,
                "shadow_hop": message.shadow_hop,
                "received_at": message.received_at,
            }
        )
    return _json(out)


async def shadow_queues(request: web.Request) -> web.Response:
    return _json(_node(request).shadowing.shadow_queues())


async def safety_net(request: web.Request) -> web.Response:
    node = _node(request)
    kind = request.match_info["kind"]
    if kind not in ("primary", "shadow"):
        return _error(404, "Safety Net kinds are primary and shadow")
    return _json([_without_content(e) for e in node.db.safety_net(kind)])


async def discard_events(request: web.Request) -> web.Response:
    return _json(_node(request).db.discard_events())


async def get_settings(request: web.Request) -> web.Response:
    return _json(_node(request).settings.as_dict())


async def put_settings(request: web.Request) -> web.Response:
    node = _node(request)
    try:
        settings = node.update_settings(await _body(request))
    except SettingsError as exc:
        return _error(400, str(exc))
    return _json(settings.as_dict())


async def config_warnings(request: web.Request) -> web.Response:
    return _json(_node(request).settings.warnings())


async def resubmit(request: web.Request) -> web.Response:
    node = _node(request)
    body = await _body(request)
    try:
        database = str(body["database"])
        start = parse_time(body["start"], "start")
        end = parse_time(body["end"], "end")
    except KeyError as exc:
        return _error(400, f"missing field {exc}")
    except ConfigError as exc:
        return _error(400, str(exc))
    if end <= start:
        return _error(400, "end must be after start")
    request_ = node.safety_net.request(database, start, end)
    return _json({"request_id": request_["request_id"]}, 202)


async def resubmit_requests(request: web.Request) -> web.Response:
    return _json(_node(request).db.requests())


async def get_clock(request: web.Request) -> web.Response:
    node = _node(request)
    return _json({"mode": node.clock.mode, "now": node.clock.now()})


async def post_clock(request: web.Request) -> web.Response:
    node = _node(request)
    body = await _body(request)
    try:
        if "advance" in body:
            now = node.advance_clock(seconds=float(body["advance"]))
        elif "set" in body:
            now = node.advance_clock(moment=parse_time(body["set"], "set"))
        else:
            return _error(400, "give 'advance' (seconds) or 'set' (time)")
    except RuntimeError as exc:
        return _error(409, str(exc))
    except (ValueError, ConfigError) as exc:
        return _error(400, str(exc))
    return _json({"mode": node.clock.mode, "now": now})


async def get_directory(request: web.Request) -> web.Response:
    return _json(_node(request).directory.as_dict())


async def put_group(request: web.Request) -> web.Response:
    node = _node(request)
    members = (await _body(request)).get("members")
    if not isinstance(members, list) or not all(isinstance(m, str) for m in members):
        return _error(400, "members must be a list of addresses")
    node.directory.set_group(request.match_info["group"], members)
    return _json(node.directory.as_dict())


async def put_recipient(request: web.Request) -> web.Response:
    node = _node(request)
    database = (await _body(request)).get("database")
    if database is not None and not isinstance(database, str):
        return _error(400, "database must be a name or null")
    node.directory.set_recipient(request.match_info["address"], database)
    return _json(node.directory.as_dict())


async def put_peers(request: web.Request) -> web.Response:
    node = _node(request)
    body = await _body(request)
    try:
        for peer, address in body.items():
            if peer not in node.cluster.nodes:
                return _error(400, f"no node {peer!r} in the cluster")
            node.peers[peer] = parse_address(address, f"peers.{peer}")
    except ConfigError as exc:
        return _error(400, str(exc))
    return _json({k: f"{h}:{p}" for k, (h, p) in node.peers.items()})


async def put_next_hops(request: web.Request) -> web.Response:
    node = _node(request)
    body = await _body(request)
    # every hop is read before any is applied: a request with one bad hop changes nothing
    try:
        parsed = {
            domain.lower(): None if raw is None
            else parse_next_hop(domain, raw, f"next_hops.{domain}")
            for domain, raw in body.items()
        }  # fmt: skip
    except ConfigError as exc:
        return _error(400, str(exc))
    for domain, hop in parsed.items():
        if hop is None:
            node.routes.pop(domain, None)
        else:
            node.routes[domain] = hop
    node.admin.record_routes(body)
    node.shadowing.retry_awaiting_route()
    return _json({d: hop.as_dict() for d, hop in node.routes.items()})


async def stats(request: web.Request) -> web.Response:
    node = _node(request)
    if node.workers is not None:
        counters, attempts = await node.workers.stats()
    else:
        counters, attempts = node.stats, node.shadowing.attempt_log
    return _json({**counters, "shadow_attempts": attempts[-50:]})


@web.middleware
async def push_to_workers(request: web.Request, handler: Handler) -> web.StreamResponse:
    """A change (settings, directory, routes, peers, clock) reaches the node's SMTP-in
    workers before its answer does: the next session sees it, whichever worker takes it."""
    response = await handler(request)
    workers = _node(request).workers
    if workers is not None and request.method != "GET":
        await workers.sync()
    return response


@web.middleware
async def guard(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Token, Host, Origin and content type, before any handler runs."""
    hosts: set[str] | None = request.app[HOSTS_KEY]["hosts"]
    host = request.headers.get("Host", "").lower()
    if hosts is not None and host not in hosts:
        # DNS rebinding: a browser page under another name must not reach us.
        return _error(421, f"Host {host!r} is not this control API ({', '.join(sorted(hosts))})")
    origin = request.headers.get("Origin")
    if origin is not None and (hosts is None or origin.lower().partition("://")[2] not in hosts):
        return _error(403, f"cross-origin requests are refused (Origin {origin!r})")
    token = _node(request).cluster.control_token
    if token:
        scheme, _, given = request.headers.get("Authorization", "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(
            given.strip().encode(), token.encode()
        ):
            response = _error(
                401, "give Authorization: Bearer <token> (the token the node printed at start)"
            )
            response.headers["WWW-Authenticate"] = 'Bearer realm="shadowcheck control API"'
            return response
    if request.method != "GET" and request.content_type != "application/json":
        # A browser form or a text/plain fetch cannot send this content type cross-site.
        return _error(415, f"send the body as application/json, not {request.content_type}")
    return await handler(request)


ROUTES: list[tuple[str, str, Handler]] = [
    ("GET", "/health", health),
    ("GET", "/queue-db", queue_db),
    ("GET", "/queues/active", active_queue),
    ("GET", "/queues/shadow", shadow_queues),
    ("GET", "/safetynet/requests", resubmit_requests),
    ("GET", "/safetynet/{kind}", safety_net),
    ("GET", "/discard-events", discard_events),
    ("GET", "/settings", get_settings),
    ("PUT", "/settings", put_settings),
    ("GET", "/config/warnings", config_warnings),
    ("POST", "/safetynet/resubmit", resubmit),
    ("GET", "/clock", get_clock),
    ("POST", "/clock", post_clock),
    ("GET", "/directory", get_directory),
    ("PUT", "/directory/groups/{group}", put_group),
    ("PUT", "/directory/recipients/{address}", put_recipient),
    ("PUT", "/topology/peers", put_peers),
    ("PUT", "/topology/next_hops", put_next_hops),
    ("GET", "/stats", stats),
]


def make_app(node: Node) -> web.Application:
    app = web.Application(middlewares=[guard, push_to_workers])
    app[NODE_KEY] = node
    app[HOSTS_KEY] = {"hosts": set()}  # set once the listener is bound (start_control)
    for method, path, handler in ROUTES:
        app.router.add_route(method, path, handler)
    return app


def is_loopback(host: str) -> bool:
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def allowed_hosts(host: str, port: int) -> set[str] | None:
    """Host header values for a listener on host:port; None for a wildcard bind,
    whose names cannot be known (the token is then what protects it)."""
    if host in ("", "0.0.0.0", "::"):
        return None
    names = {host.lower(), f"[{host}]" if ":" in host else host}
    if is_loopback(host):
        names |= {"localhost", "127.0.0.1", "[::1]"}
    return {f"{name}:{port}" for name in names}


async def start_control(node: Node, host: str, port: int) -> tuple[web.AppRunner, tuple[str, int]]:
    if not node.cluster.control_token and not is_loopback(host):
        raise ConfigError(
            f"the control API would listen on {host} without a token: listen on loopback "
            "(127.0.0.1), or drop control_token: null from the cluster file so that one is made"
        )
    app = make_app(node)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    await site.start()
    # aiohttp does not expose the bound port of an ephemeral site publicly.
    # (uvloop's Server is not an asyncio.Server, but has the same ``sockets``.)
    sockets = getattr(site._server, "sockets", None)
    assert sockets, "the control API site is not listening"
    sockname = sockets[0].getsockname()
    app[HOSTS_KEY]["hosts"] = allowed_hosts(host, sockname[1])
    return runner, (sockname[0], sockname[1])
