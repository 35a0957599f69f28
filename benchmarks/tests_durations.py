"""Write ``tests/durations.json``: how long each slow test of the project took in a run.

The project's tests start the slow ones first under pytest-xdist (tests/conftest.py), so
that the longest do not start last and run alone. Refresh the file from a full run's
JUnit XML now and then; a test it does not name is ordered by its ``slow`` marker.

    python3 -m pytest -n 4 --junitxml=/tmp/junit.xml
    python3 benchmarks/tests_durations.py /tmp/junit.xml
"""

from __future__ import annotations

import argparse
import json
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "durations.json"
#: shorter tests are left out: their order changes nothing
AT_LEAST = 2.0


def node_id(classname: str, name: str) -> str | None:
    """``tests.a.test_b.TestC`` + ``test_d[x]`` -> ``tests/a/test_b.py::TestC::test_d[x]``."""
    parts = classname.split(".")
    for cut in range(len(parts), 0, -1):
        path = "/".join(parts[:cut]) + ".py"
        if (ROOT / path).is_file():
            return "::".join([path, *parts[cut:], name])
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("junit", type=Path, help="JUnit XML of a full run of the tests")
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args(argv)
    times: dict[str, float] = {}
    for case in ET.parse(args.junit).getroot().iter("testcase"):
        nodeid = node_id(case.get("classname", ""), case.get("name", ""))
        seconds = float(case.get("time") or 0)
        if nodeid is not None and seconds >= AT_LEAST:
            times[nodeid] = round(times.get(nodeid, 0.0) + seconds, 1)
    ordered = dict(sorted(times.items(), key=lambda kv: -kv[1]))
    args.out.write_text(json.dumps(ordered, indent=1) + "\n", encoding="utf-8")
    total = sum(ordered.values())
    print(f"{len(ordered)} tests of {AT_LEAST:g} s or more, {total:.0f} s: {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
