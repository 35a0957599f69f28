"""The package layout keeps the data flow one way: scenario -> engine -> history ->
checks -> verdicts -> report, with pytest only in the plugin.

Read from the code's own imports with ``ast``: every ``import`` counts, also those under
``if TYPE_CHECKING:`` and inside functions, because a circle hidden by a late import is
still a circle a reader has to untangle.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: layer of each part of pytest_shadowcheck (first dotted part below the package, or
#: the module itself for the top-level leaves): a module may import its own layer or a
#: lower one, never a higher one
LAYERS: dict[str, int] = {
    "version": 0,
    "errors": 0,
    "statuses": 0,
    "verdict": 1,
    "history": 1,
    "progress": 1,
    "scenario": 2,
    "network": 3,
    "storage": 3,
    "targets": 4,
    "checks": 4,
    "engine": 5,
    "report": 6,
    "plugin": 7,
    # the package's facade: the public API for target authors, loaded lazily
    "__init__": 8,
    "__main__": 8,
    # thin shims at the old places the docs promised, for one release
    "hookspecs": 8,
    "images": 8,
    "catalogue": 8,
    "matrix": 8,
}

#: parts that must not import each other although their layers allow it
FORBIDDEN = {
    ("checks", "targets"): "checks read the scenario and the history, never a target",
    ("checks", "engine"): "checks read the scenario and the history, never the engine",
    ("targets", "checks"): "a target runs nodes; it does not judge them",
}

#: third-party modules and where they may be imported
ONLY_IN = {
    "pytest": {"plugin"},
    "_pytest": {"plugin"},
    "aiohttp": {"targets", "engine", "plugin"},
    "aiosmtplib": {"network"},
    "aiosmtpd": {"network"},
    "mfusepy": {"storage"},
}


def module_name(path: Path, package_root: Path) -> str:
    parts = list(path.relative_to(package_root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path, package_root: Path) -> set[str]:
    """Every module name ``path`` imports, relative imports resolved."""
    tree = ast.parse(path.read_text(), str(path))
    here = module_name(path, package_root).split(".")
    package = here if path.name == "__init__.py" else here[:-1]
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join([*base, *([node.module] if node.module else [])])
            else:
                name = node.module or ""
            found.add(name)
            # `from pkg import module` imports pkg.module
            found.update(f"{name}.{alias.name}" for alias in node.names)
    return found


def graph(package: str) -> dict[str, set[str]]:
    root = ROOT / package
    modules = {module_name(p, root): p for p in root.rglob("*.py")}
    out: dict[str, set[str]] = {}
    for name, path in modules.items():
        out[name] = {m for m in imports_of(path, root) if m in modules and m != name}
    return out


def third_party(package: str) -> dict[str, set[str]]:
    root = ROOT / package
    out: dict[str, set[str]] = {}
    for path in root.rglob("*.py"):
        out[module_name(path, root)] = {m.split(".")[0] for m in imports_of(path, root)}
    return out


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return found


def part(module: str) -> str:
    parts = module.split(".")
    if len(parts) == 1:
        return "__init__"
    return parts[1]


def test_the_cycle_finder_sees_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", ["pytest_shadowcheck", "reference_impl"])
def test_no_import_circle(package: str) -> None:
    assert circles(graph(package)) == []


def test_every_part_of_the_harness_has_a_layer() -> None:
    unplaced = {part(m) for m in graph("pytest_shadowcheck")} - set(LAYERS)
    assert not unplaced, f"give these a layer in LAYERS: {sorted(unplaced)}"


def test_no_import_runs_up_a_layer() -> None:
    wrong = []
    for module, deps in graph("pytest_shadowcheck").items():
        for dep in deps:
            a, b = part(module), part(dep)
            if LAYERS[a] < LAYERS[b]:
                wrong.append(f"{module} imports {dep}: {a} is below {b}")
            elif (a, b) in FORBIDDEN:
                wrong.append(f"{module} imports {dep}: {FORBIDDEN[a, b]}")
    assert not wrong, "\n".join(sorted(wrong))


def test_heavy_and_pytest_imports_stay_in_their_layer() -> None:
    wrong = []
    for module, names in third_party("pytest_shadowcheck").items():
        for name, allowed in ONLY_IN.items():
            if name in names and part(module) not in allowed:
                wrong.append(f"{module} imports {name} (only {', '.join(sorted(allowed))} may)")
    assert not wrong, "\n".join(sorted(wrong))


def test_the_layer_check_catches_an_upward_import(tmp_path: Path) -> None:
    """The rules above can fail: a check module importing the engine is caught."""
    package = tmp_path / "pytest_shadowcheck"
    (package / "checks").mkdir(parents=True)
    (package / "engine").mkdir()
    for init in ("__init__.py", "checks/__init__.py", "engine/__init__.py"):
        (package / init).write_text("")
    (package / "checks" / "wire.py").write_text("from pytest_shadowcheck.engine import run\n")
    (package / "engine" / "run.py").write_text("from ..checks import wire\n")
    root = package
    deps = {
        module_name(p, root): imports_of(p, root) for p in root.rglob("*.py")
    }
    assert "pytest_shadowcheck.engine.run" in deps["pytest_shadowcheck.checks.wire"]
    assert "pytest_shadowcheck.checks.wire" in deps["pytest_shadowcheck.engine.run"]
    edges = {m: {d for d in ds if d in deps} for m, ds in deps.items()}
    assert circles(edges) == [["pytest_shadowcheck.checks.wire", "pytest_shadowcheck.engine.run"]]


def test_the_entry_point_loads_nothing_heavy() -> None:
    """``pytest11`` imports the plugin in every pytest session of a project that has the
    package installed: without --shadowcheck it must cost no more than pytest itself."""
    code = textwrap.dedent(
        """
        import sys
        import pytest_shadowcheck.plugin
        heavy = ["aiohttp", "aiosmtplib", "aiosmtpd", "yaml", "jsonschema", "uvloop",
                 "docker", "jinja2"]
        ours = sorted(m for m in sys.modules if m.startswith("pytest_shadowcheck.")
                      and m != "pytest_shadowcheck.plugin")
        print(sorted(m for m in heavy if m in sys.modules), ours)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    assert out == "[] ['pytest_shadowcheck.version']"


def test_the_public_api_is_lazy_and_complete() -> None:
    code = textwrap.dedent(
        """
        import sys
        import pytest_shadowcheck as api
        before = "pytest_shadowcheck.targets.base" in sys.modules
        names = [api.Target, api.ClusterPlan, api.NodeHandle, api.TargetError, api.hookimpl]
        print(before, all(names), sorted(api.__all__))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT
    ).stdout.strip()
    assert out == (
        "False True ['ClusterPlan', 'NodeHandle', 'Target', 'TargetError', '__version__', "
        "'hookimpl']"
    )
