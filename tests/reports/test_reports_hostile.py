"""Hostile files: any value in any file rejects that file or that test case, never the build.

One build over a corpus of good and bad files (written here, real files on disk,
real Spark): every bad file is in rejected.csv with the reason that names its bad
value, every bad test case is there with its name, and every good file's rows are
in the table. The command line's summary line counts duplicates.
"""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

import pytest

from reports.build import build
from reports.table import read_cases

pytestmark = pytest.mark.spark

REPO = Path(__file__).resolve().parents[2]
GOOD_SUITE = '<testsuite name="s" timestamp="2025-05-01T10:00:00Z">'


def suite(cases: str, *, timestamp: str = "2025-05-01T10:00:00Z", props: str = "",
          run: str = "r1", target: str = "hostile") -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="s" timestamp="{timestamp}"><properties>'
        f'<property name="shadowcheck.run_id" value="{run}"/>'
        f'<property name="shadowcheck.target" value="{target}"/>'
        f'<property name="shadowcheck.target_version" value="1.0"/>{props}</properties>'
        f"{cases}</testsuite></testsuites>"
    )


def case(name: str, time: str = "0.5", body: str = "") -> str:
    return f'<testcase classname="c" name="{name}" time="{time}">{body}</testcase>'


# file name -> (content, the start of its reason in rejected.csv)
BAD_FILES: dict[str, tuple[str | bytes, str]] = {
    "ts_overflow.xml": (
        suite(case("t[CR-1]"), timestamp="9999-12-31T23:59:59-01:00"),
        "testsuite timestamp '9999-12-31T23:59:59-01:00' is out of range in UTC",
    ),
    "ts_future.xml": (
        suite(case("t[CR-1]"), timestamp="9999-12-31T00:00:00+00:00"),
        "testsuite timestamp '9999-12-31T00:00:00+00:00' is in the future",
    ),
    "ts_words.xml": (
        suite(case("t[CR-1]"), timestamp="yesterday"),
        "testsuite timestamp 'yesterday' is not an ISO 8601 time",
    ),
    "ts_ancient.xml": (
        suite(case("t[CR-1]"), timestamp="1900-01-01T00:00:00"),
        "testsuite timestamp '1900-01-01T00:00:00' is before 1970",
    ),
    "long_target.xml": (suite(case("t[CR-1]"), target="x" * 300), "target 'xxxx"),
    "slashy_target.xml": (suite(case("t[CR-1]"), target="/" * 70), "target '////"),
    "long_run.xml": (suite(case("t[CR-1]"), run="r" * 1000), "run id is 1000 characters long"),
    "html.xml": ("<html><body>hello</body></html>", "not JUnit XML: root element <html>"),
    "deep.xml": (
        "<testsuites>" + "<testsuite>" * 100 + case("t") + "</testsuite>" * 100 + "</testsuites>",
        "testsuites nested more than 64 deep",
    ),
    "deeper.xml": (
        "<testsuites>" + "<testsuite>" * 3000 + "</testsuite>" * 3000 + "</testsuites>",
        "nested deeper than libxml2's limit",
    ),
    "laughs.xml": (
        '<?xml version="1.0"?><!DOCTYPE testsuites [<!ENTITY a "aaaaaaaaaa">'
        + "".join(f'<!ENTITY a{i} "{("&a" + (str(i - 1) if i > 1 else "") + ";") * 10}">'
                  for i in range(1, 10))
        + ']><testsuites><testsuite><testcase name="t"><failure message="&a9;"/>'
        "</testcase></testsuite></testsuites>",
        "malformed XML: XMLSyntaxError: Maximum entity amplification",
    ),
    "bad_utf8.xml": (
        b'<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite>'
        b'<testcase name="\xff\xfe"/></testsuite></testsuites>',
        "malformed XML",
    ),
    "all_cases_bad.xml": (suite(case("t[CR-1]", time="fast")), "every test case was rejected (1)"),
    "empty.xml": ("   \n", "empty file"),
}

# test case name -> (its time or body, the reason in rejected.csv)
BAD_CASES: dict[str, tuple[str, str, str]] = {
    "fast[CR-1]": ("fast", "", "testcase time 'fast' is not a number"),
    "hex[CR-2]": ("0x10", "", "testcase time '0x10' is not a number"),
    "nan[CR-3]": ("nan", "", "testcase time 'nan' is not a number"),
    "big[CR-4]": ("1e400", "", "testcase time '1e400' is not a finite number"),
    "negative[CR-5]": ("-1", "", "testcase time '-1' is negative"),
    "verdicts[CR-6]": (
        "1",
        '<properties><property name="shadowcheck.verdicts" value="CR-6=MAYBE"/></properties>',
        "testcase property shadowcheck.verdicts 'CR-6=MAYBE' is not valid",
    ),
    "many": (
        "1",
        '<properties><property name="shadowcheck.behaviours" value="'
        + ",".join(f"CR-{i}" for i in range(100)) + '"/></properties>',
        "testcase names 100 behaviours (limit 64)",
    ),
}


def write_corpus(root: Path) -> dict[str, int]:
    """The corpus on disk; returns the good files' expected row counts by file name."""
    root.mkdir()
    for name, (content, _) in BAD_FILES.items():
        path = root / name
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
    good: dict[str, int] = {}
    mixed = [case(name, time, body) for name, (time, body, _) in BAD_CASES.items()]
    mixed += [case("surefire_time[DI-1]", "1,234.5"), case("plain[DI-2]", "0.25")]
    (root / "mixed.xml").write_text(suite("".join(mixed), run="mixed"))
    good["mixed.xml"] = 2
    # 50 MB of failure text in one node: over libxml2's default 10 MB text limit.
    huge = "x" * (50 * 1024 * 1024)
    (root / "huge.xml").write_text(
        suite(case("huge[PR-1]", body=f"<failure>first line\n{huge}</failure>"), run="huge")
    )
    good["huge.xml"] = 1
    latin = suite(case("caf\xe9[SN-1]"), run="latin").replace("utf-8", "iso-8859-1")
    (root / "latin1.xml").write_bytes(latin.encode("iso-8859-1"))
    good["latin1.xml"] = 1
    xxe = suite(case("xxe[XS-1]", body="<failure>&xxe;</failure>"), run="xxe").replace(
        "<testsuites>",
        '<!DOCTYPE testsuites [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><testsuites>',
    )
    (root / "xxe.xml").write_text(xxe)
    good["xxe.xml"] = 1
    (root / "plain.xml").write_text(suite(case("ok[TO-1]") + case("ok2[TO-2]"), run="plain"))
    good["plain.xml"] = 2
    (root / "plain_again.xml").write_bytes((root / "plain.xml").read_bytes())  # a duplicate
    return good


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def test_every_bad_value_rejects_only_its_file_or_case(spark, tmp_path: Path) -> None:
    good = write_corpus(tmp_path / "in")
    out = tmp_path / "out"
    result = build(spark, [str(tmp_path / "in")], str(out))

    rows = read_cases(spark, str(out)).collect()
    per_file: dict[str, int] = {}
    for row in rows:
        name = Path(row.source_file).name
        per_file[name] = per_file.get(name, 0) + 1
    assert per_file == good
    scenarios = {r.scenario for r in rows}
    assert {"surefire_time[DI-1]", "plain[DI-2]", "huge[PR-1]", "caf\xe9[SN-1]"} <= scenarios
    surefire = next(r for r in rows if r.scenario == "surefire_time[DI-1]")
    assert surefire.duration_s == pytest.approx(1234.5)
    assert next(r for r in rows if r.scenario == "huge[PR-1]").message == "first line"
    assert "root:" not in (next(r for r in rows if r.scenario == "xxe[XS-1]").message or "")

    rejected = read_csv(out / "rejected.csv")
    files = {Path(r["file"]).name: r["reason"] for r in rejected if not r["testcase"]}
    assert set(files) == set(BAD_FILES)
    for name, (_, reason) in BAD_FILES.items():
        assert files[name].startswith(reason), (name, files[name])
    cases = {r["testcase"]: r for r in rejected if r["testcase"]}
    assert set(cases) == set(BAD_CASES) | {"t[CR-1]"}
    for name, (_, _, reason) in BAD_CASES.items():
        assert cases[name]["reason"].startswith(reason), (name, cases[name])
        assert Path(cases[name]["file"]).name == "mixed.xml"
    assert result.ingest.duplicates == 1
    assert result.ingest.accepted == len(good)


def test_the_summary_line_counts_added_rejected_and_duplicate_files(tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    (root / "a.xml").write_text(suite(case("ok[TO-1]") + case("bad[TO-2]", "fast")))
    (root / "b.xml").write_bytes((root / "a.xml").read_bytes())
    (root / "c.xml").write_text(suite(case("t"), timestamp="9999-12-31T23:59:59-01:00"))
    done = subprocess.run(
        [sys.executable, "-m", "reports", "build", str(root), "--out", str(tmp_path / "out"),
         "--quiet", "--master", "local[1]"],
        cwd=REPO, capture_output=True, text=True, timeout=240,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert done.returncode == 0, done.stderr
    assert "3 files (0 already ingested, 1 added, 1 rejected, 1 duplicate); " \
        "1 test cases rejected" in done.stdout
