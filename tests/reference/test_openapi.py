"""reference_impl/openapi.yaml: well-formed, complete, and true of a running node.

The document is checked against a small embedded subset of the OpenAPI 3.1
structure, every ``$ref`` must resolve, every schema must be a valid JSON
Schema 2020-12, and the paths must be exactly the control API's ``ROUTES``.
Then two real nodes run in-process (a primary and its shadow, delivering to
an in-process aiosmtpd sink), real traffic fills their queues, Safety Nets
and counters, and every GET route's real answer (plus the answers of the
writes the test makes, and one error) must validate against the document.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import aiosmtplib
import jsonschema
import pytest
import yaml
from aiosmtpd.smtp import SMTP, Envelope, Session

from reference_impl.config import parse_cluster
from reference_impl.control_api import ROUTES, start_control
from reference_impl.node import Node

SPEC_PATH = Path(__file__).resolve().parents[2] / "reference_impl" / "openapi.yaml"
METHODS = {"get", "put", "post", "delete", "patch", "head", "options", "trace"}

# A subset of the OpenAPI 3.1 document schema: what this file must look like.
OPENAPI_SUBSET: dict[str, Any] = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["openapi", "info", "paths", "components"],
    "properties": {
        "openapi": {"type": "string", "pattern": r"^3\.1\.\d+$"},
        "info": {
            "type": "object",
            "required": ["title", "version"],
            "properties": {"title": {"type": "string"}, "version": {"type": "string"}},
        },
        "paths": {
            "type": "object",
            "propertyNames": {"pattern": "^/"},
            "additionalProperties": {
                "type": "object",
                "propertyNames": {"enum": [*sorted(METHODS), "parameters", "summary"]},
                "additionalProperties": {"$ref": "#/$defs/operation"},
            },
        },
        "components": {
            "type": "object",
            "properties": {
                "schemas": {"type": "object", "additionalProperties": {"type": "object"}},
                "responses": {
                    "type": "object",
                    "additionalProperties": {"$ref": "#/$defs/response"},
                },
            },
        },
    },
    "$defs": {
        "operation": {
            "type": "object",
            "required": ["operationId", "responses"],
            "properties": {
                "operationId": {"type": "string"},
                "parameters": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "required": ["name", "in", "schema"],
                        "properties": {
                            "in": {"enum": ["path", "query", "header", "cookie"]},
                            "required": {"type": "boolean"},
                        },
                    },
                },
                "requestBody": {
                    "type": "object",
                    "required": ["content"],
                    "properties": {"content": {"$ref": "#/$defs/content"}},
                },
                "responses": {
                    "type": "object",
                    "minProperties": 1,
                    "propertyNames": {"pattern": "^[1-5][0-9][0-9]$"},
                    "additionalProperties": {
                        "oneOf": [
                            {"$ref": "#/$defs/response"},
                            {
                                "type": "object",
                                "required": ["$ref"],
                                "properties": {"$ref": {"type": "string"}},
                                "additionalProperties": False,
                            },
                        ]
                    },
                },
            },
        },
        "response": {
            "type": "object",
            "required": ["description"],
            "not": {"required": ["$ref"]},
            "properties": {
                "description": {"type": "string"},
                "content": {"$ref": "#/$defs/content"},
            },
        },
        "content": {
            "type": "object",
            "minProperties": 1,
            "additionalProperties": {
                "type": "object",
                "required": ["schema"],
                "properties": {"schema": {"type": "object"}},
            },
        },
    },
}


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    loaded = yaml.safe_load(SPEC_PATH.read_text())
    assert isinstance(loaded, dict)
    return loaded


def aiohttp_to_openapi(path: str) -> str:
    """aiohttp's ``/a/{name}`` and OpenAPI's are the same, but drop any ``:regex``."""
    return re.sub(r"\{(\w+)(:[^}]*)?\}", r"{\1}", path)


def walk_refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from walk_refs(value)
    elif isinstance(node, list):
        for item in node:
            yield from walk_refs(item)


def resolve(spec: dict[str, Any], ref: str) -> Any:
    assert ref.startswith("#/"), f"only local references are used: {ref}"
    target: Any = spec
    for part in ref[2:].split("/"):
        part = part.replace("~1", "/").replace("~0", "~")
        assert isinstance(target, dict) and part in target, f"unresolvable $ref {ref}"
        target = target[part]
    return target


def test_document_is_well_formed_openapi_31(spec: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator.check_schema(OPENAPI_SUBSET)
    errors = sorted(
        jsonschema.Draft202012Validator(OPENAPI_SUBSET).iter_errors(spec), key=lambda e: e.path
    )
    assert not errors, "\n".join(f"{list(e.path)}: {e.message}" for e in errors)
    for ref in walk_refs(spec):
        resolve(spec, ref)
    for name, schema in spec["components"]["schemas"].items():
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            pytest.fail(f"components.schemas.{name} is not JSON Schema 2020-12: {exc.message}")
    operation_ids = [
        op["operationId"]
        for item in spec["paths"].values()
        for method, op in item.items()
        if method in METHODS
    ]
    assert len(operation_ids) == len(set(operation_ids)), "operationIds must be unique"


def test_paths_and_methods_are_exactly_the_routes(spec: dict[str, Any]) -> None:
    routes = {(method.lower(), aiohttp_to_openapi(path)) for method, path, _ in ROUTES}
    documented = {
        (method, path)
        for path, item in spec["paths"].items()
        for method in item
        if method in METHODS
    }
    assert routes - documented == set(), "routes missing from openapi.yaml"
    assert documented - routes == set(), "openapi.yaml documents routes that do not exist"


def test_path_parameters_are_declared(spec: dict[str, Any]) -> None:
    for path, item in spec["paths"].items():
        wanted = set(re.findall(r"\{(\w+)\}", path))
        for method, op in item.items():
            if method not in METHODS:
                continue
            declared = {p["name"] for p in op.get("parameters", []) if p["in"] == "path"}
            assert declared == wanted, f"{method.upper()} {path}: path parameters {declared}"
            assert all(p.get("required") for p in op.get("parameters", []) if p["in"] == "path")


# -- against a running node ----------------------------------------------------------------


def response_schema(spec: dict[str, Any], method: str, path: str, status: int) -> dict[str, Any]:
    responses = spec["paths"][path][method]["responses"]
    assert str(status) in responses, f"{method.upper()} {path}: status {status} not documented"
    response = responses[str(status)]
    if "$ref" in response:
        response = resolve(spec, response["$ref"])
    schema = response["content"]["application/json"]["schema"]
    # Local references ("#/components/...") resolve against this root.
    return {**schema, "components": spec["components"]}


def check(spec: dict[str, Any], method: str, path: str, status: int, body: Any, where: str) -> None:
    validator = jsonschema.Draft202012Validator(response_schema(spec, method, path, status))
    errors = list(validator.iter_errors(body))
    assert not errors, f"{method.upper()} {where} -> {status}: " + "; ".join(
        f"{list(e.absolute_path)}: {e.message}" for e in errors[:5]
    )


class CountingSink:
    """aiosmtpd handler: the next hop, accepting everything."""

    def __init__(self) -> None:
        self.received: list[Envelope] = []

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        self.received.append(envelope)
        return "250 2.0.0 OK"


async def until(check_: Any, what: str, deadline: float = 8.0) -> None:
    """Poll an async predicate; a bound on a hang, not a timing assertion."""
    loop = asyncio.get_running_loop()
    end = loop.time() + deadline
    while not await check_():
        if loop.time() > end:
            pytest.fail(f"gave up waiting for {what}")
        await asyncio.sleep(0.02)


async def exercise(spec: dict[str, Any], data: Path) -> set[tuple[str, str]]:
    loop = asyncio.get_running_loop()
    sink = CountingSink()
    sink_server = await loop.create_server(lambda: SMTP(sink), "127.0.0.1", 0)
    sink_port = sink_server.sockets[0].getsockname()[1]
    cluster = parse_cluster(
        {
            "boundary": "dag1",
            "secret": "s3cret",
            "clock": {"mode": "virtual", "start": "2026-01-01T00:00:00Z"},
            "nodes": {"mbx1": {"site": "a", "dag": "dag1"}, "mbx2": {"site": "a", "dag": "dag1"}},
            "next_hops": {
                "corp.test": f"127.0.0.1:{sink_port}",
                "far.test": {"address": "127.0.0.1:9", "kind": "boundary"},
            },
            "directory": {
                "recipients": {"alice@corp.test": "DB1", "bob@corp.test": "DB2"},
                "groups": {"team@corp.test": ["alice@corp.test", "bob@corp.test"]},
            },
            "settings": {"ShadowHeartbeatFrequency": 3600, "TransientFailureRetryInterval": 3600},
        }
    )
    nodes = {name: Node(cluster, name, data / name) for name in ("mbx1", "mbx2")}
    runners = []
    base: dict[str, str] = {}
    seen: set[tuple[str, str]] = set()
    try:
        for name, node in nodes.items():
            await node.start(("127.0.0.1", 0))
            runner, (host, port) = await start_control(node, "127.0.0.1", 0)
            runners.append(runner)
            base[name] = f"http://{host}:{port}"
        for name, node in nodes.items():
            for other, peer in nodes.items():
                if other != name:
                    node.peers[other] = peer.smtp_address

        async with aiohttp.ClientSession() as http:

            async def call(
                method: str, node: str, path: str, template: str | None = None, **kw: Any
            ) -> tuple[int, Any]:
                async with http.request(method, base[node] + path, **kw) as response:
                    body = await response.json()
                check(spec, method.lower(), template or path, response.status, body, path)
                seen.add((method.lower(), template or path))
                return response.status, body

            # Real traffic: one message delivered (primary Safety Net, discard event,
            # shadow copy on mbx2), one stuck on an unreachable boundary (active queue).
            host, port = nodes["mbx1"].smtp_address
            for rcpt, subject in (("team@corp.test", "delivered"), ("x@far.test", "stuck")):
                await aiosmtplib.send(
                    f"Message-ID: <{subject}@test>\r\nSubject: {subject}\r\n\r\nbody\r\n",
                    sender="s@outside.test",
                    recipients=[rcpt],
                    hostname=host,
                    port=port,
                )

            async def delivered() -> bool:
                return len(sink.received) == 1 and bool(nodes["mbx1"].db.discard_events())

            await until(delivered, "the delivery and its discard event")
            # DI-2: the shadow's heartbeat session takes the discard (shadow Safety Net).
            await nodes["mbx2"].shadowing.heartbeat("mbx1")

            status, settings = await call("PUT", "mbx1", "/settings", json={"ReplayLagTime": 1e9})
            assert status == 200 and settings["ReplayLagTime"] == 1e9
            status, error = await call(
                "PUT",
                "mbx1",
                "/settings",
                json={"ReceiveConnectionInactivityTimeout": 10, "ReceiveConnectionTimeout": 5},
            )
            assert status == 400 and "ReceiveConnectionTimeout" in error["error"]
            status, _ = await call(
                "POST",
                "mbx1",
                "/safetynet/resubmit",
                json={"database": "DB9", "start": 0, "end": "2030-01-01T00:00:00Z"},
            )
            assert status == 202
            status, clock = await call("POST", "mbx1", "/clock", json={"advance": 1.5})
            assert status == 200 and clock["mode"] == "virtual"
            await call(
                "PUT",
                "mbx1",
                "/directory/groups/ops@corp.test",
                "/directory/groups/{group}",
                json={"members": ["alice@corp.test"]},
            )
            await call(
                "PUT",
                "mbx1",
                "/directory/recipients/carol@corp.test",
                "/directory/recipients/{address}",
                json={"database": "DB3"},
            )
            status, peers = await call(
                "PUT",
                "mbx1",
                "/topology/peers",
                json={"mbx2": "{}:{}".format(*nodes["mbx2"].smtp_address)},
            )
            assert status == 200 and set(peers) == {"mbx2"}
            status, hops = await call(
                "PUT", "mbx1", "/topology/next_hops", json={"chain.test": {"node": "mbx2"}}
            )
            assert status == 200 and hops["chain.test"] == {"kind": "node", "node": "mbx2"}
            status, _ = await call("GET", "mbx1", "/safetynet/other", "/safetynet/{kind}")
            assert status == 404

            # Every GET route, on both nodes, with what the traffic left behind.
            for _, path, _ in [r for r in ROUTES if r[0] == "GET"]:
                for target in base:
                    if path == "/safetynet/{kind}":
                        for kind in ("primary", "shadow"):
                            status, _ = await call("GET", target, f"/safetynet/{kind}", path)
                            assert status == 200
                    else:
                        status, _ = await call("GET", target, path)
                        assert status == 200

            # The answers were not trivially empty: the schemas saw real items.
            _, active = await call("GET", "mbx1", "/queues/active")
            assert [m["message_id"] for m in active] == ["<stuck@test>"]
            _, primary_net = await call("GET", "mbx1", "/safetynet/primary", "/safetynet/{kind}")
            assert sorted(primary_net[0]["databases"]) == ["DB1", "DB2"]
            _, shadow_net = await call("GET", "mbx2", "/safetynet/shadow", "/safetynet/{kind}")
            assert [e["recipients"] for e in shadow_net] == [["team@corp.test"]]
            _, shadows = await call("GET", "mbx2", "/queues/shadow")
            assert list(shadows) == ["mbx1/far.test"]
            _, events = await call("GET", "mbx1", "/discard-events")
            assert [e["handed_out_at"] is not None for e in events] == [True]
            _, warnings = await call("GET", "mbx1", "/config/warnings")
            assert [w["code"] for w in warnings] == ["SN-6"]
            _, stats = await call("GET", "mbx1", "/stats")
            assert stats["shadow_copies_made"] == 2 and stats["shadow_attempts"]
            _, requests = await call("GET", "mbx1", "/safetynet/requests")
            assert [r["database"] for r in requests] == ["DB9"]
    finally:
        for runner in runners:
            await runner.cleanup()
        for node in nodes.values():
            await node.stop()
        sink_server.close()
    return seen


def test_real_responses_match_the_document(spec: dict[str, Any], tmp_path: Path) -> None:
    seen = asyncio.run(asyncio.wait_for(exercise(spec, tmp_path), 30))
    gets = {(m.lower(), aiohttp_to_openapi(p)) for m, p, _ in ROUTES if m == "GET"}
    assert gets <= seen, f"GET routes not exercised: {sorted(gets - seen)}"
