"""smtp_in's shortcuts around aiosmtpd give aiosmtpd's own results.

NodeSMTP lists only hook names in ``dir()`` (aiosmtpd scans it on every
connection) and parses plain ``<local@domain>`` paths itself; both must
leave aiosmtpd's view of the session exactly as its full versions would.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from aiosmtpd.smtp import SMTP

from reference_impl.config import load_cluster
from reference_impl.node import Node
from reference_impl.smtp_in import _SIMPLE_PATH, NodeHandler, NodeSMTP

CLUSTER = """\
boundary: b
secret: fast-paths-secret
nodes:
  n1: {site: s}
  n2: {site: s}
next_hops:
  corp.test: 127.0.0.1:2600
"""


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    (tmp_path / "cluster.yaml").write_text(CLUSTER)
    made = Node(load_cluster(str(tmp_path / "cluster.yaml")), "n1", tmp_path / "data")
    yield made
    made.db.close()


def _session(node: Node) -> NodeSMTP:
    async def make() -> NodeSMTP:
        return NodeSMTP(node)

    return asyncio.run(make())


class _FullScan(NodeSMTP):
    """NodeSMTP with the ordinary dir(), protocol and handler alike."""

    def __init__(self, node: Node) -> None:
        super().__init__(node)
        self.event_handler = _FullScanHandler(node)

    def __dir__(self) -> list[str]:
        return list(object.__dir__(self))


class _FullScanHandler(NodeHandler):
    def __dir__(self) -> list[str]:
        return list(object.__dir__(self))


def test_short_dir_gives_aiosmtpd_the_same_verbs_hooks_and_mechanisms(node: Node) -> None:
    fast = _session(node)

    async def full_tables() -> tuple[set[str], set[str], set[str]]:
        full = _FullScan(node)
        # What SMTP.__init__ would have built with the full scans:
        SMTP.__init__(
            full,
            full.event_handler,
            hostname="n1",
            auth_require_tls=False,
            authenticator=lambda *a: None,
            auth_exclude_mechanism=["LOGIN"],
        )
        return set(full._smtp_methods), set(full._handle_hooks), set(full._auth_methods)

    verbs, hooks, mechanisms = asyncio.run(full_tables())
    assert set(fast._smtp_methods) == verbs
    assert {"XSHADOW", "XSHADOWCOPY", "XQDISCARD", "XRESUBMIT", "MAIL", "DATA"} <= verbs
    assert set(fast._handle_hooks) == hooks == {"EHLO", "RCPT", "DATA"}
    assert set(fast._auth_methods) == mechanisms == {"PLAIN"}
    # The bound methods are this session's own.
    assert fast._smtp_methods["XQDISCARD"].__self__ is fast


def _candidates() -> Iterator[str]:
    plain = [
        "<alice@corp.test>",
        "<alice@corp.test> SIZE=100",
        "<alice@corp.test>\tBODY=8BITMIME",
        "<a.b.c@x-y.z.test>  SIZE=1 BODY=7BIT",
        "<o'hara+tag@corp.test>",
        "<{weird}=~#$%&*/?^_`|!@corp.test>",
    ]
    tricky = [
        "",
        "<>",
        " <alice@corp.test>",
        "alice@corp.test",
        "<alice@corp.test> (comment) SIZE=1",
        "<alice@corp.test>(comment)",
        "<a..b@corp.test>",
        "<.a@corp.test>",
        "<a.@corp.test>",
        '<"quoted local"@corp.test>',
        "<alice@[127.0.0.1]>",
        "<alice@corp..test>",
        "<alice@corp.test.>",
        "<@route:alice@corp.test>",
        "<alice@corp.test",
        "<alice>",
        "<alice@corp_test.x>",
        "<al ice@corp.test>",
        "<alice@corp.test>>",
    ]
    yield from plain + tricky
    rng = random.Random(20260101)
    alphabet = "ab.-_+@<>()[]\"\\ \t:;,'=!#é"
    for _ in range(1000):
        local = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 6)))
        domain = "".join(rng.choice("ab.-@[]( ") for _ in range(rng.randint(0, 6)))
        tail = rng.choice(["", " ", " SIZE=10", "\t(x) A", "(c)", "  B=1 ", ">"])
        yield f"<{local}@{domain}>{tail}"
        yield f"<{local}>{tail}"
        # Mostly plain ones, with dots and hyphens in every position.
        local = "".join(rng.choice("ab.+=_'~") for _ in range(rng.randint(1, 5)))
        domain = "".join(rng.choice("ab-.9") for _ in range(rng.randint(1, 5)))
        yield f"<{local}@{domain}>{tail}"


def _outcome(parse: Callable[[str], object], arg: str) -> object:
    try:
        return parse(arg)
    except Exception as exc:  # the stdlib parser fails on some garbage: so must we
        return type(exc)


@pytest.mark.parametrize("limit", [0, 3])
def test_plain_path_parser_agrees_with_aiosmtpd(node: Node, limit: int) -> None:
    session = _session(node)
    session.local_part_limit = limit
    fast_paths = 0
    for arg in _candidates():
        expected = _outcome(lambda a: SMTP._getaddr(session, a), arg)
        assert _outcome(session._getaddr, arg) == expected, arg
        fast_paths += bool(arg) and _SIMPLE_PATH.match(arg) is not None
    assert fast_paths > 100  # the comparison covered the shortcut, not only the fallback
