"""Parsing every JUnit flavour, without Spark: reports.ingest runs inside the workers."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from reports.ingest import EPOCH, ROW_FIELDS, FileIdentity, behaviours_of, parse_document

DATA = Path(__file__).parent / "data"
MTIME = datetime(2024, 12, 31, 23, 0, tzinfo=UTC)


def parse(path: Path, **identity: str) -> list[dict]:
    origin = FileIdentity(str(path), MTIME, **identity)
    parsed = parse_document(path.read_bytes(), origin)
    rows = [dict(zip(ROW_FIELDS, row, strict=True)) for row in parsed]
    for row in rows:
        if row["started_at"] is not None:
            row["started_at"] = EPOCH + timedelta(microseconds=row["started_at"])
    return rows


def by_case(rows: list[dict]) -> dict[str, dict]:
    return {row["scenario"]: row for row in rows}


def test_pytest_xunit1_properties_outcomes_and_identity() -> None:
    rows = parse(DATA / "flavours" / "pytest_xunit1.xml")
    assert {r["reject_reason"] for r in rows} == {None}
    identity = {(r["run_id"], r["target"], r["target_version"], r["harness_version"]) for r in rows}
    assert identity == {("ci-1001", "reference", "0.1.0", "0.1.0")}
    # The suite timestamp (+01:00) is the run's time, kept in UTC.
    assert {r["started_at"] for r in rows} == {datetime(2025, 3, 1, 9, 0, 0, 123456, tzinfo=UTC)}
    crash = [r for r in rows if r["scenario"] == "test_primary_crash_before_ack"]
    assert sorted(r["behaviour"] for r in crash) == ["CR-1", "CR-4"]
    cases = by_case(rows)
    # The testcase property wins over an ID in the name.
    assert cases["test_shadow_lost_CR-9"]["behaviour"] == "CR-2"
    assert cases["test_shadow_lost_CR-9"]["outcome"] == "failed"
    assert cases["test_shadow_lost_CR-9"]["message"].startswith("message lost")
    assert cases["test_discard_after_heartbeat[DI-2]"]["outcome"] == "error"
    assert cases["test_resubmit_lagged_copy"]["outcome"] == "skipped"
    assert cases["test_cli_help"]["behaviour"] is None
    assert cases["test_cli_help"]["outcome"] == "passed"
    assert cases["test_shadow_lost_CR-9"]["duration_s"] == pytest.approx(1.25)


def test_pytest_xunit2_testsuite_root_names_and_system_out() -> None:
    rows = parse(DATA / "flavours" / "pytest_xunit2.xml")
    pairs = sorted((r["scenario"], r["behaviour"], r["outcome"]) for r in rows)
    assert pairs == [
        ("test_inactivity_timeout", "TO-1", "passed"),
        ("test_inactivity_timeout", "TO-2", "passed"),
        ("test_remote_site_preference[XS-3-XS-4]", "XS-3", "failed"),
        ("test_remote_site_preference[XS-3-XS-4]", "XS-4", "failed"),
        ("test_xfail_TO-3", "TO-3", "skipped"),
        ("test_xshadow_advertised[XS-1]", "XS-1", "passed"),
    ]
    # A naive timestamp is read as UTC.
    assert {r["started_at"] for r in rows} == {datetime(2025, 3, 2, 8, 30, tzinfo=UTC)}
    assert {r["harness_version"] for r in rows} == {"0.1.1"}


def test_surefire_flaky_and_rerun_elements_and_comma_times() -> None:
    rows = by_case(parse(DATA / "flavours" / "surefire.xml"))
    flaky = rows["resubmitsFromSafetyNet SN-4"]
    assert (flaky["outcome"], flaky["reruns"], flaky["behaviour"]) == ("passed", 1, "SN-4")
    assert flaky["duration_s"] == pytest.approx(1200.5)
    rerun = rows["holdTimeHonoured SN-2"]
    assert (rerun["outcome"], rerun["reruns"]) == ("failed", 1)
    assert rows["lagCopyLimit SN-10"]["outcome"] == "skipped"
    # No suite timestamp: the file's modification time stands in.
    assert {r["started_at"] for r in rows.values()} == {MTIME}
    assert {r["target"] for r in rows.values()} == {"javamta"}


def test_ant_nested_suites_identity_from_path() -> None:
    path = next((DATA / "flavours").rglob("ant_jenkins.xml"))
    rows = by_case(parse(path))
    assert set(rows) == {
        "primaryKeepsMessage PR-1",
        "primaryPromotes PR-2",
        "safetyNetHoldsTwoDays SN-1",
    }
    assert {(r["run_id"], r["target"], r["target_version"]) for r in rows.values()} == {
        ("ant-7", "postfix", "3.8")
    }
    assert rows["primaryPromotes PR-2"]["classname"] == "org.example.mta.ShadowSuite$Primary"
    assert rows["safetyNetHoldsTwoDays SN-1"]["outcome"] == "error"


def test_flags_fill_identity_but_never_override_properties() -> None:
    path = next((DATA / "flavours").rglob("ant_jenkins.xml"))
    flagged = parse(path, target="exim", target_version="4.97", run_id="nightly-3")
    assert {(r["run_id"], r["target"], r["target_version"]) for r in flagged} == {
        ("nightly-3", "exim", "4.97")
    }
    own = parse(DATA / "flavours" / "pytest_xunit1.xml", target="exim", run_id="x")
    assert {(r["run_id"], r["target"]) for r in own} == {("ci-1001", "reference")}


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("empty.xml", "empty file"),
        ("truncated.xml", "malformed XML"),
        ("not_junit.xml", "not JUnit XML"),
        ("no_cases.xml", "no test cases"),
        ("binary.xml", "malformed XML"),
    ],
)
def test_unusable_documents_give_one_rejection_row(name: str, reason: str) -> None:
    rows = parse(DATA / "malformed" / name)
    assert len(rows) == 1
    assert rows[0]["reject_reason"].startswith(reason)
    assert rows[0]["source_file"].endswith(name)
    assert rows[0]["scenario"] is None


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("test_CR-4_kill_primary", ["CR-4"]),
        ("test_x[SN-12-TO-3]", ["SN-12", "TO-3"]),
        ("test_XCR-4 and CR-44", ["CR-44"]),  # XCR is not a catalogue family
        ("test_AB-1_XS-2_XS-2", ["XS-2"]),
        ("test_nothing", []),
    ],
)
def test_behaviour_ids_in_names(name: str, expected: list[str]) -> None:
    assert behaviours_of(name, {}) == expected
