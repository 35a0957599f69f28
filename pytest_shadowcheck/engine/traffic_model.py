"""Realistic workload traffic: what production mail looks like, drawn from a seed.

The tidy workload (a few hundred bytes, 1-3 recipients, unique Message-IDs) never shows
the defects that hide in real mail. With ``traffic: realistic`` every message draws its
own shape (:class:`Shape`) when the workload is planned: a heavy-tailed size up to
``max_size``, 8-bit and UTF-8 text, lines starting with a dot and lines of up to 998
octets, a MIME multipart with a base64 attachment, 1-50 recipients over every next-hop
domain, a new session or an RSET before it, a shared or missing Message-ID, a burst of
messages sent in the same second. The same seed gives the same shapes.

The content is rendered at send time (:func:`render_shaped`) for what the server
advertised: 8-bit bodies with ``BODY=8BITMIME`` only where 8BITMIME is offered, raw UTF-8
header fields with ``SMTPUTF8`` only where it is offered (otherwise an RFC 2047
encoded-word), 7-bit text otherwise. What was sent is summed up in a digest
(:func:`pytest_shadowcheck.checks.integrity_workload.digest`) small enough for the
history, whatever the message's size: the integrity check compares every delivered copy
with it.
"""

from __future__ import annotations

import base64
import math
import random
from collections import Counter
from dataclasses import dataclass
from email.header import Header
from email.utils import formatdate
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pytest_shadowcheck.scenario.workload_spec import TrafficSpec

__all__ = [
    "Rendered",
    "Shape",
    "draw_recipients",
    "draw_shape",
    "histogram",
    "render_shaped",
]

#: words for the text, some of them 8-bit (UTF-8) when the shape says so
_ASCII_WORDS = (
    "queue", "relay", "shadow", "copy", "delivery", "transport", "message", "mailbox",
    "retry", "heartbeat", "the", "a", "of", "to", "and", "in", "for", "with", "on", "by",
    "acknowledged", "promoted", "redundancy",
)  # fmt: skip
_UTF8_WORDS = ("Grüße", "naïve", "café", "Ærøskøbing", "señor", "Zürich", "日本語", "メール",
               "Привет", "½", "€")  # fmt: skip
_UTF8_SUBJECTS = ("Grüße aus Zürich", "Réunion à 15 h", "日本語のメール", "Привет, мир")
SIZE_BUCKETS = (
    (1024, "< 1 KB"),
    (10 * 1024, "1-10 KB"),
    (100 * 1024, "10-100 KB"),
    (1024 * 1024, "100 KB-1 MB"),
    (math.inf, ">= 1 MB"),
)
RECIPIENT_BUCKETS = ((1, "1"), (3, "2-3"), (10, "4-10"), (20, "11-20"), (math.inf, "21+"))
SESSION_BUCKETS = ((1, "1"), (3, "2-3"), (6, "4-6"), (math.inf, "7+"))
#: recipients of a message that has few: one mostly
_FEW = (1,) * 12 + (2, 2, 2, 3, 3, 4, 5)
#: the longest line RFC 5321 allows (4.5.3.1.6), without its CRLF
LONGEST_LINE = 998


@dataclass(frozen=True)
class Shape:
    """How one realistic message differs from a tidy one (all drawn from the seed)."""

    eight_bit: bool = False
    utf8_subject: bool = False
    mime: bool = False
    dot_lines: int = 0
    long_lines: int = 0
    #: "unique", "shared" (the Message-ID of an earlier message) or "none"
    id_kind: str = "unique"
    #: open a new session before this message / send RSET before its MAIL
    new_session: bool = False
    rset_before: bool = False
    #: send the content with BDAT where the server offers CHUNKING
    bdat: bool = False
    #: seconds from the workload's start when it is due (bursts share one)
    due: float = 0.0


def _bucket(value: float, buckets: tuple[tuple[float, str], ...]) -> str:
    return next(label for limit, label in buckets if value <= limit or limit == math.inf)


def draw_size(rng: random.Random, traffic: TrafficSpec) -> int:
    """Log-normal around ``typical_size`` (most messages a few KB), with a share drawn
    log-uniformly from 64 KB to ``max_size``: the tail of real mail."""
    if rng.random() < traffic.large and traffic.max_size > 64 * 1024:
        size = math.exp(rng.uniform(math.log(64 * 1024), math.log(traffic.max_size)))
    else:
        size = rng.lognormvariate(math.log(traffic.typical_size), 1.0)
    return int(min(max(size, 600), traffic.max_size))


def draw_recipients(rng: random.Random, traffic: TrafficSpec, to: tuple[str, ...]) -> list[str]:
    """1-``max_recipients`` recipients spread over every domain of ``to`` (its local
    parts extended to user1..userN, so 50 recipients are 50 different addresses)."""
    domains = sorted({a.rpartition("@")[2] for a in to})
    if rng.random() < traffic.many_recipients:
        count = rng.randint(min(10, traffic.max_recipients), traffic.max_recipients)
    else:
        # most mail has one recipient
        count = min(rng.choice(_FEW), traffic.max_recipients)
    pool = [f"user{i}@{d}" for i in range(1, traffic.max_recipients + 1) for d in domains]
    return rng.sample(pool, min(count, len(pool)))


def draw_shape(rng: random.Random, traffic: TrafficSpec, due: float, first: bool) -> Shape:
    """One message's shape; ``first``: the workload's first message (nothing to share)."""
    long_lines = rng.randint(1, 3) if rng.random() < traffic.long_lines else 0
    dots = rng.randint(1, 4) if rng.random() < traffic.dot_lines else 0
    roll = rng.random()
    id_kind = "unique"
    if roll < traffic.missing_ids:
        id_kind = "none"
    elif roll < traffic.missing_ids + traffic.duplicate_ids and not first:
        id_kind = "shared"
    return Shape(
        eight_bit=rng.random() < traffic.eight_bit,
        utf8_subject=rng.random() < traffic.utf8_headers,
        mime=rng.random() < traffic.mime,
        dot_lines=dots,
        long_lines=long_lines,
        id_kind=id_kind,
        new_session=rng.random() < 1 / max(1, traffic.transactions),
        rset_before=rng.random() < traffic.rset,
        bdat=rng.random() < 0.5,
        due=due,
    )


def burst_dues(rng: random.Random, traffic: TrafficSpec, count: int, rate: float) -> list[float]:
    """When each message is due: evenly at ``rate``, except bursts of ``burst_size``
    messages all due at the burst's first (the workload lasts no longer)."""
    dues = [i / rate if rate > 0 else 0.0 for i in range(count)]
    i = 0
    while i < count:
        if rng.random() < traffic.bursts / max(1, traffic.burst_size):
            for j in range(i + 1, min(count, i + traffic.burst_size)):
                dues[j] = dues[i]
            i += traffic.burst_size
        else:
            i += 1
    return dues


@dataclass(frozen=True)
class Rendered:
    """A message's bytes for one server, and how it was sent."""

    raw: bytes
    #: MAIL FROM parameters (BODY=8BITMIME, SMTPUTF8, SIZE=)
    params: tuple[str, ...]
    #: "7bit", "8bitmime" or "smtputf8"
    body: str


def _text_line(rng: random.Random, eight_bit: bool) -> str:
    words = [rng.choice(_ASCII_WORDS) for _ in range(rng.randint(6, 11))]
    if eight_bit:
        words[rng.randrange(len(words))] = rng.choice(_UTF8_WORDS)
    return " ".join(words)


def _text_body(rng: random.Random, shape: Shape, target: int, eight_bit: bool) -> bytes:
    """Text lines up to ``target`` bytes, with the shape's dot-leading and long lines."""
    lines = [_text_line(rng, eight_bit) for _ in range(24)]  # a pool: MB bodies stay cheap
    out: list[bytes] = []
    total = 0
    while total < target:
        line = rng.choice(lines).encode()
        out.append(line)
        total += len(line) + 2
    specials = [b"." * rng.randint(1, 2) + b" " + lines[0].encode() for _ in range(shape.dot_lines)]
    if shape.dot_lines:
        specials.append(b".")  # a line that is only a dot: the end of data, unstuffed
    for _ in range(shape.long_lines):
        specials.append(b"L" + bytes(rng.choice(b"abcdefghij") for _ in range(LONGEST_LINE - 1)))
    for special in specials:
        out.insert(rng.randint(0, len(out)), special)
    return b"\r\n".join(out) + b"\r\n"


def render_shaped(
    shape: Shape,
    seed: str,
    size: int,
    header: dict[str, str],
    caps: frozenset[str],
) -> Rendered:
    """The message for a server offering ``caps`` (EHLO keywords, upper case).

    ``seed`` makes the content the same for the same message; ``header``: the fields
    the engine sets (From, To, Subject, Message-ID...), in order; a UTF-8 Subject is sent
    raw only under SMTPUTF8."""
    rng = random.Random(seed)
    eight_bit = shape.eight_bit and "8BITMIME" in caps
    utf8 = shape.utf8_subject and "SMTPUTF8" in caps
    fields = dict(header)
    subject = fields.get("Subject", "")
    if shape.utf8_subject:
        word = rng.choice(_UTF8_SUBJECTS)
        text = f"{word} {subject}"
        # without SMTPUTF8 an RFC 2047 encoded-word, folded with CRLF like every line
        fields["Subject"] = text if utf8 else Header(text, "utf-8").encode(linesep="\r\n")
    fields.update({"Date": formatdate(localtime=False), "MIME-Version": "1.0"})
    cte = "8bit" if eight_bit else "7bit"
    budget = max(size - 400 - sum(len(k) + len(v) + 4 for k, v in fields.items()), 200)
    if shape.mime:
        boundary = f"=_shadowcheck_{rng.getrandbits(48):012x}"
        fields["Content-Type"] = f'multipart/mixed; boundary="{boundary}"'
        part = _text_body(rng, shape, min(budget // 4, 4000), eight_bit)
        blob = rng.randbytes(max(budget - len(part), 64) * 3 // 4)
        encoded = base64.encodebytes(blob).replace(b"\n", b"\r\n")
        b = boundary.encode()
        body = (
            b"This is a multi-part message in MIME format.\r\n--" + b + b"\r\n"
            b"Content-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: "
            + cte.encode() + b"\r\n\r\n" + part + b"--" + b + b"\r\n"
            b"Content-Type: application/octet-stream\r\nContent-Transfer-Encoding: base64\r\n"
            b'Content-Disposition: attachment; filename="report.bin"\r\n\r\n'
            + encoded + b"--" + b + b"--\r\n"
        )  # fmt: skip
    else:
        fields["Content-Type"] = "text/plain; charset=utf-8"
        fields["Content-Transfer-Encoding"] = cte
        body = _text_body(rng, shape, budget, eight_bit)
    head = "".join(f"{name}: {_fold(value)}\r\n" for name, value in fields.items())
    raw = head.encode() + b"\r\n" + body
    params = [f"SIZE={len(raw)}"] if "SIZE" in caps else []
    if eight_bit:
        params.append("BODY=8BITMIME")
    if utf8:
        params.append("SMTPUTF8")
    kind = "smtputf8" if utf8 else "8bitmime" if eight_bit else "7bit"
    return Rendered(raw, tuple(params), kind)


def _fold(value: str) -> str:
    """Fold a long address list after its commas (a header line stays under 998)."""
    if len(value) < 900 or ", " not in value:
        return value
    return ",\r\n ".join(value.split(", "))


def histogram(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What a workload sent, in buckets: one row per attempt (size, recipients, body,
    mime, session, tx, bdat, pipelined, id_kind, null, sent)."""
    sessions: dict[tuple[str, int], int] = {}
    per_second: Counter[int] = Counter()
    for row in rows:
        key = (str(row["session"][0]), int(row["session"][1]))
        sessions[key] = max(sessions.get(key, 0), int(row["tx"]))
        per_second[int(row["sent"])] += 1

    def share(test: Any) -> int:
        return sum(1 for row in rows if test(row))

    def counted(values: list[float], buckets: tuple[tuple[float, str], ...]) -> dict[str, int]:
        # smallest bucket first, as a histogram reads
        found = Counter(_bucket(v, buckets) for v in values)
        return {label: found[label] for _, label in buckets if found[label]}

    return {
        "messages": len(rows),
        "sizes": counted([r["size"] for r in rows], SIZE_BUCKETS),
        "largest": max((int(r["size"]) for r in rows), default=0),
        "recipients": counted([r["rcpts"] for r in rows], RECIPIENT_BUCKETS),
        "most_recipients": max((int(r["rcpts"]) for r in rows), default=0),
        "eight_bit": share(lambda r: r["body"] == "8bitmime"),
        "smtputf8": share(lambda r: r["body"] == "smtputf8"),
        "utf8_headers": share(lambda r: r["utf8_subject"]),
        "mime": share(lambda r: r["mime"]),
        "dot_lines": share(lambda r: r["dot_lines"]),
        "long_lines": share(lambda r: r["long_lines"]),
        "transactions_per_session": counted(list(sessions.values()), SESSION_BUCKETS),
        "rset": share(lambda r: r["rset"]),
        "bdat": share(lambda r: r["bdat"]),
        "pipelined": share(lambda r: r["pipelined"]),
        "duplicate_ids": share(lambda r: r["id_kind"] == "shared"),
        "missing_ids": share(lambda r: r["id_kind"] == "none"),
        "null_senders": share(lambda r: r["null"]),
        "burst_peak_per_second": max(per_second.values(), default=0),
    }
