"""Parse one JUnit XML document into report rows (pure Python, runs inside Spark workers).

Every JUnit flavour the project meets is handled here: pytest xunit1 and xunit2,
Ant/Jenkins and Maven Surefire, with a ``testsuites`` or a bare ``testsuite`` root,
nested suites, ``failure``/``error``/``skipped`` results and the Surefire
``flaky*``/``rerun*`` elements.

No value in a file can stop a build: a document that cannot be used yields exactly
one file rejection row, and a test case with an unusable value (a time that is
not a number, verdicts that do not parse) yields a case rejection row instead of
its data, each with a reason that names the value (see parse_document).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from junitparser import JUnitXmlError
from junitparser.xunit2 import JUnitXml
from lxml import etree

from reports.verdicts import (
    CERTIFICATION_PROPERTY,
    PARTIAL_PROPERTY,
    VERDICTS_PROPERTY,
    fallback_status,
    parse_verdicts,
)

__all__ = [
    "BEHAVIOUR_ID",
    "ROW_FIELDS",
    "FileIdentity",
    "behaviours_of",
    "parse_document",
]

# Behaviour IDs of the catalogue (spec/BEHAVIOURS.md); lookarounds instead of \b
# because pytest names glue IDs to underscores ("test_CR_4" no, "test_CR-4_x" yes).
BEHAVIOUR_ID = re.compile(r"(?<![A-Za-z0-9])(?:CR|DI|PR|SN|XS|TO)-\d+(?!\d)")

PROP_RUN_ID = "shadowcheck.run_id"
PROP_TARGET = "shadowcheck.target"
PROP_TARGET_VERSION = "shadowcheck.target_version"
PROP_HARNESS_VERSION = "shadowcheck.harness_version"
PROP_BEHAVIOURS = "shadowcheck.behaviours"

# Jenkins' convention for per-test properties inside system-out, used by tools
# whose schema (e.g. xunit2) forbids <properties> on <testcase>.
SYSTEM_OUT_PROPERTY = re.compile(r"\[\[PROPERTY\|([^=\]]+)=([^\]]*)\]\]")

MESSAGE_LIMIT = 500
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

# Limits that keep one file from costing the table more than it is worth; each
# rejection names the limit it broke.
NAME_LIMIT = 4096  # characters of a test case name or classname
IDENTITY_LIMIT = 200  # characters of a run id or version
TARGET_DIR_LIMIT = 200  # bytes of the target as a partition directory name (255 max)
BEHAVIOUR_LIMIT = 64  # behaviours of one test case (each is a row)
SUITE_DEPTH_LIMIT = 64  # nested testsuites (Ant nests a few)
FUTURE_SLACK = timedelta(days=1)  # a clock a little ahead is not an error

# Surefire writes "1,234.5" for long tests; nothing else may carry a comma.
_THOUSANDS = re.compile(r"\d{1,3}(,\d{3})+(\.\d*)?")
_DECIMAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
# What Spark escapes in a partition directory name (ExternalCatalogUtils.charToEscape).
_ESCAPED = set('"#%\'*/:=?\\\x7f{[]^')

# Order of the tuples produced by parse_document (started_at in microseconds since
# the epoch, UTC); reports.table holds the Spark schema.
ROW_FIELDS = (
    "run_id",
    "started_at",
    "target",
    "target_version",
    "harness_version",
    "scenario",
    "classname",
    "behaviour",
    "outcome",
    "duration_s",
    "message",
    "reruns",
    "status",
    "partial",
    "certification",
    "source_file",
    "file_sha1",
    "reject_reason",
)
_DATA_FIELDS = ROW_FIELDS.index("source_file")
_SCENARIO = ROW_FIELDS.index("scenario")


class Rejected(Exception):
    """A value that makes the whole file unusable; the message is the reason."""


class CaseRejected(Exception):
    """A value that makes one test case unusable; the message is the reason."""


@dataclass(frozen=True)
class FileIdentity:
    """Where a document came from and the identity given on the command line."""

    path: str
    modified_at: datetime
    run_id: str | None = None
    target: str | None = None
    target_version: str | None = None


def _path_segments(path: str) -> dict[str, str]:
    """Hive-style ``key=value`` directory names, the last-resort identity source."""
    found: dict[str, str] = {}
    for segment in path.split("/"):
        key, sep, value = segment.partition("=")
        if sep and value:
            found[key] = value
    return found


def _identity_from_path(path: str) -> dict[str, str]:
    segments = _path_segments(path)
    return {
        "run_id": segments.get("run_id") or segments.get("run") or path.removesuffix(".xml"),
        "target": segments.get("target") or "unknown",
        "target_version": segments.get("target_version") or segments.get("version") or "unknown",
        "harness_version": segments.get("harness_version") or "unknown",
    }


def _quoted(value: str, limit: int = 60) -> str:
    return repr(value if len(value) <= limit else value[:limit] + "...")


def _parse_timestamp(text: str | None, now: datetime) -> datetime | None:
    """The suite's start in UTC; None when absent; Rejected when unusable."""
    if not text or not text.strip():
        return None
    try:
        stamp = datetime.fromisoformat(text.strip())
        # JUnit writers disagree on zones; a naive stamp is taken as UTC.
        stamp = stamp.replace(tzinfo=UTC) if stamp.tzinfo is None else stamp.astimezone(UTC)
    except ValueError:
        raise Rejected(f"testsuite timestamp {_quoted(text)} is not an ISO 8601 time") from None
    except OverflowError:  # 9999-12-31T23:59:59-01:00 is in year 10000 in UTC
        raise Rejected(f"testsuite timestamp {_quoted(text)} is out of range in UTC") from None
    if stamp < EPOCH:
        raise Rejected(f"testsuite timestamp {_quoted(text)} is before 1970")
    if stamp > now + FUTURE_SLACK:
        raise Rejected(
            f"testsuite timestamp {_quoted(text)} is in the future "
            f"(after {(now + FUTURE_SLACK).isoformat(timespec='seconds')})"
        )
    return stamp


def _duration(text: str | None) -> float:
    """A case's ``time`` in seconds; a missing time is 0, a bad one rejects the case."""
    if text is None or not text.strip():
        return 0.0
    value = text.strip()
    if _THOUSANDS.fullmatch(value):
        value = value.replace(",", "")
    if not _DECIMAL.fullmatch(value):
        raise CaseRejected(f"testcase time {_quoted(text)} is not a number")
    seconds = float(value)
    if not math.isfinite(seconds):
        raise CaseRejected(f"testcase time {_quoted(text)} is not a finite number")
    if seconds < 0:
        raise CaseRejected(f"testcase time {_quoted(text)} is negative")
    return seconds


def _check_identity(name: str, value: str) -> None:
    if len(value) > IDENTITY_LIMIT:
        raise Rejected(f"{name} is {len(value)} characters long (limit {IDENTITY_LIMIT})")


def _check_target(value: str) -> None:
    size = sum(3 if c in _ESCAPED or ord(c) < 0x20 else len(c.encode()) for c in value)
    if size > TARGET_DIR_LIMIT:
        raise Rejected(
            f"target {_quoted(value)} is {size} bytes as a directory name "
            f"(limit {TARGET_DIR_LIMIT})"
        )


def behaviours_of(name: str, properties: dict[str, str]) -> list[str]:
    """Behaviour IDs from the property when present, else from IDs in the name."""
    declared = properties.get(PROP_BEHAVIOURS)
    if declared is not None:
        ids = [part.strip() for part in declared.split(",") if part.strip()]
    else:
        ids = BEHAVIOUR_ID.findall(name)
    return list(dict.fromkeys(ids))  # de-duplicated, order kept


def _case_details(case: Any) -> tuple[str, str | None, int, dict[str, str]]:
    """(outcome, message, reruns, properties) in one pass over the case's children.

    junitparser's TestCase accessors rescan the children once per question and
    allocate a wrapper per child: 4.3 ms instead of 1.9 ms for a 500-case file.
    """
    results: dict[str, Any] = {}
    reruns = 0
    props: dict[str, str] = {}
    system_out = None
    for child in case:
        tag = child.tag
        if tag in ("error", "failure", "skipped"):
            results.setdefault(tag, child)
        elif tag in ("flakyFailure", "flakyError", "rerunFailure", "rerunError"):
            reruns += 1
        elif tag == "properties":
            for prop in child.iterfind("property"):
                props[prop.get("name") or ""] = prop.get("value") or ""
        elif tag == "system-out":
            system_out = child.text
    if system_out and "[[PROPERTY|" in system_out:
        for key, value in SYSTEM_OUT_PROPERTY.findall(system_out):
            props.setdefault(key.strip(), value.strip())
    for tag, outcome in (("error", "error"), ("failure", "failed"), ("skipped", "skipped")):
        elem = results.get(tag)
        if elem is not None:
            message = elem.get("message")
            if not message:  # first line of the text, without copying a huge one
                text = elem.text or ""
                message = text[: MESSAGE_LIMIT * 4].strip().split("\n", 1)[0]
            return outcome, (message[:MESSAGE_LIMIT] or None), reruns, props
    return "passed", None, reruns, props


def _suite_properties(suite: Any) -> dict[str, str]:
    found: dict[str, str] = {}
    for block in suite.iterfind("properties"):
        for prop in block.iterfind("property"):
            found[prop.get("name") or ""] = prop.get("value") or ""
    return found


def _walk_suites(root: Any) -> Iterator[tuple[Any, dict[str, str]]]:
    """Suites that hold test cases, with their effective properties (inherited by nesting).

    Iterative and depth-limited: Ant nests suites, a hostile file could nest thousands.
    """
    stack: list[tuple[Any, dict[str, str], int]] = [(s, {}, 1) for s in reversed(list(root))]
    while stack:
        suite, inherited, depth = stack.pop()
        if depth > SUITE_DEPTH_LIMIT:
            raise Rejected(f"testsuites nested more than {SUITE_DEPTH_LIMIT} deep")
        props = dict(inherited)
        props.update(_suite_properties(suite))
        props.setdefault("__timestamp__", suite.get("timestamp") or "")
        if suite.find("testcase") is not None:
            yield suite, props
        children = list(suite.iterfind("testsuite"))
        stack.extend((child, props, depth + 1) for child in reversed(children))


# huge_tree: a 50 MB failure text is legitimate (libxml2's default limit is 10 MB per
# text node). Entities are not expanded and nothing is loaded, so a "billion laughs"
# document or an external entity costs nothing.
_PARSER = etree.XMLParser(
    huge_tree=True, resolve_entities=False, no_network=True, load_dtd=False
)


def _root(content: bytes) -> Any:
    try:
        element = etree.fromstring(content, _PARSER)
    except etree.XMLSyntaxError as exc:
        text = str(exc)
        # libxml2's own limits, named as such: a well-formed file can hit them.
        if "huge text node" in text.lower():
            raise Rejected(f"text node over libxml2's limit: {text}"[:MESSAGE_LIMIT]) from None
        if "excessive depth" in text.lower():
            raise Rejected(f"nested deeper than libxml2's limit: {text}"[:MESSAGE_LIMIT]) from None
        raise Rejected(f"malformed XML: {type(exc).__name__}: {text}"[:MESSAGE_LIMIT]) from None
    if element is None:
        raise Rejected("malformed XML: no root element")
    try:
        # xunit2 flavour of junitparser: wraps a bare <testsuite> root, refuses others.
        return JUnitXml.fromroot(element)._elem
    except JUnitXmlError as exc:
        raise Rejected(f"not JUnit XML: root element <{element.tag}>: {exc}") from None


def parse_document(
    content: bytes, origin: FileIdentity, now: datetime | None = None
) -> Iterator[tuple]:
    """Rows (in ROW_FIELDS order) for one document.

    Three kinds, told apart by ``reject_reason`` and ``scenario``: data rows (no
    reason); case rejections (reason and the case's name, every data field
    empty); or a file rejection (reason, no scenario), then the only row.
    """
    sha1 = hashlib.sha1(content).hexdigest()
    if not content.strip():
        yield (None,) * _DATA_FIELDS + (origin.path, sha1, "empty file")
        return
    try:
        rows = _document_rows(content, origin, now or datetime.now(UTC))
    except Rejected as exc:
        yield (None,) * _DATA_FIELDS + (origin.path, sha1, str(exc))
        return
    except (RecursionError, MemoryError, ValueError, TypeError) as exc:
        # Nothing in a file may stop the build: whatever slipped past the checks above
        # rejects this file, named by its exception.
        reason = f"unusable JUnit XML: {type(exc).__name__}: {exc}"[:MESSAGE_LIMIT]
        yield (None,) * _DATA_FIELDS + (origin.path, sha1, reason)
        return
    if not any(row[-1] is None for row in rows):
        if rows:  # every case was rejected: the reasons, then the file's
            for row in rows:
                yield (*row[:-1], origin.path, sha1, row[-1])
        reason = f"every test case was rejected ({len(rows)})" if rows else "no test cases"
        yield (None,) * _DATA_FIELDS + (origin.path, sha1, reason)
        return
    for row in rows:
        yield (*row[:-1], origin.path, sha1, row[-1])


def _document_rows(content: bytes, origin: FileIdentity, now: datetime) -> list[tuple]:
    """Data rows and case rejections, each ending with its reason (None for data)."""
    root = _root(content)
    fallback = _identity_from_path(origin.path)
    rows: list[tuple] = []
    for suite, props in _walk_suites(root):
        run_id = props.get(PROP_RUN_ID) or origin.run_id or fallback["run_id"]
        target = props.get(PROP_TARGET) or origin.target or fallback["target"]
        version = (
            props.get(PROP_TARGET_VERSION) or origin.target_version or fallback["target_version"]
        )
        harness = props.get(PROP_HARNESS_VERSION) or fallback["harness_version"]
        _check_identity("run id", run_id)
        _check_identity("target version", version)
        _check_identity("harness version", harness)
        _check_target(target)
        certification = props.get(CERTIFICATION_PROPERTY) or None
        if certification is not None and len(certification) > 2048:
            raise Rejected(f"{CERTIFICATION_PROPERTY} is {len(certification)} characters long")
        partial = frozenset(
            part.strip() for part in props.get(PARTIAL_PROPERTY, "").split(",") if part.strip()
        )
        started = _parse_timestamp(props.get("__timestamp__"), now) or origin.modified_at
        # Microseconds, not datetime: a row without Python-side conversions goes
        # to the JVM as-is, which is ~30% of the ingest time on a million rows.
        started_us = (started - EPOCH) // timedelta(microseconds=1)
        head = (run_id, started_us, target, version, harness)
        for case in suite.iterfind("testcase"):
            try:
                rows.extend(_case_rows(case, head, partial, certification))
            except CaseRejected as exc:
                name = (case.get("name") or "")[:NAME_LIMIT]
                empty = (None,) * (_DATA_FIELDS - _SCENARIO - 1)
                rows.append((None,) * _SCENARIO + (name, *empty, str(exc)))
    return rows


def _case_rows(
    case: Any, head: tuple, partial: frozenset[str], certification: str | None
) -> list[tuple]:
    name = case.get("name") or ""
    classname = case.get("classname") or ""
    if len(name) > NAME_LIMIT or len(classname) > NAME_LIMIT:
        raise CaseRejected(f"testcase name or classname longer than {NAME_LIMIT} characters")
    duration = _duration(case.get("time"))
    outcome, message, reruns, props = _case_details(case)
    verdicts = {}
    if VERDICTS_PROPERTY in props:
        try:
            verdicts = parse_verdicts(props[VERDICTS_PROPERTY])
        except ValueError as exc:
            raise CaseRejected(
                f"testcase property {VERDICTS_PROPERTY} {_quoted(props[VERDICTS_PROPERTY])} "
                f"is not valid: {exc}"
            ) from None
    ids = list(dict.fromkeys([*behaviours_of(name, props), *verdicts]))
    if len(ids) > BEHAVIOUR_LIMIT:
        raise CaseRejected(f"testcase names {len(ids)} behaviours (limit {BEHAVIOUR_LIMIT})")
    scenario_status = fallback_status(outcome, message)
    common = (*head, name, classname)
    behaviours: list[str | None] = list(ids) or [None]
    return [
        (
            *common, b, outcome, duration, message, reruns,
            str(verdicts[b]) if b in verdicts else scenario_status,
            b in partial, certification, None,
        )
        for b in behaviours
    ]
