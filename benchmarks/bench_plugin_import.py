"""What the pytest11 entry point costs a pytest session that does not use the plugin.

pytest imports ``pytest_shadowcheck.plugin`` in every session of a project that has the
package installed. This measures, with ``python -X importtime``, the import time the
entry point adds on top of ``import pytest`` (pytest imported first, then the plugin:
the sum of the cumulative times of the top-level imports after pytest's), median of N
fresh interpreters, and the heavy modules it loaded.

    python3 benchmarks/bench_plugin_import.py [--runs 5]
"""

from __future__ import annotations

import argparse
import ast
import statistics
import subprocess
import sys

HEAVY = ("aiohttp", "aiosmtplib", "aiosmtpd", "yaml", "jsonschema", "uvloop", "docker")


def added_us(module: str) -> tuple[int, list[str]]:
    code = (
        f"import pytest, sys; import {module}; "
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code],
        capture_output=True,
        text=True,
        check=True,
    )
    lines = [line for line in proc.stderr.splitlines() if line.startswith("import time:")]
    # the top-level imports (no indentation in the name column) after pytest's own
    names = [line.split("|") for line in lines[1:]]
    after = False
    total = 0
    for _, cumulative, name in names:
        if not name.startswith("  ") and name.strip() == "pytest":
            after = True
            continue
        if after and not name[1:].startswith(" "):
            total += int(cumulative)
    return total, list(ast.literal_eval(proc.stdout.strip()))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--module", default="pytest_shadowcheck.plugin")
    args = parser.parse_args()
    samples = []
    heavy: list[str] = []
    for _ in range(args.runs):
        us, heavy = added_us(args.module)
        samples.append(us)
    print(
        f"{args.module}: adds {statistics.median(samples) / 1000:.1f} ms to import pytest "
        f"(median of {args.runs}: {', '.join(f'{s / 1000:.1f}' for s in samples)} ms); "
        f"heavy modules loaded: {', '.join(heavy) or 'none'}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
