"""YAML that remembers where everything is: every mapping key, value and sequence item
keeps its 1-based (line, column), so a scenario error can name the file and line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import yaml

from pytest_shadowcheck.errors import ScenarioError, SourceRef

__all__ = ["SAFE_LOADER", "load_marked_yaml", "locate"]


class _Map(dict):
    """A mapping that remembers where its keys and values are."""

    start: tuple[int, int] = (0, 0)
    keys_at: dict[Any, tuple[int, int]]
    values_at: dict[Any, tuple[int, int]]


class _Seq(list):
    """A sequence that remembers where its items are."""

    start: tuple[int, int] = (0, 0)
    items_at: list[tuple[int, int]]


def _mark(node: yaml.Node) -> tuple[int, int]:
    return (node.start_mark.line + 1, node.start_mark.column + 1)


# libyaml's parser where PyYAML was built with it: the pure-Python one was half the
# CPU of collecting the library, paid again by every xdist worker
SAFE_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _LineLoader(SAFE_LOADER):
    """SafeLoader keeping 1-based (line, column) of every key, value and item."""

    path: Path = Path("?")

    def construct_mapping(self, node: yaml.Node, deep: bool = False) -> Any:
        assert isinstance(node, yaml.MappingNode)
        self.flatten_mapping(node)
        result = _Map()
        result.start = _mark(node)
        result.keys_at = {}
        result.values_at = {}
        for key_node, value_node in node.value:
            key = self.construct_object(key_node, deep=True)
            if key in result:
                line, col = _mark(key_node)
                raise ScenarioError(
                    f"duplicate key {key!r}", SourceRef(self.path, line, col), "each key once"
                )
            result[key] = self.construct_object(value_node, deep=True)
            result.keys_at[key] = _mark(key_node)
            result.values_at[key] = _mark(value_node)
        return result

    def construct_sequence(self, node: yaml.Node, deep: bool = False) -> Any:
        assert isinstance(node, yaml.SequenceNode)
        result = _Seq(self.construct_object(child, deep=True) for child in node.value)
        result.start = _mark(node)
        result.items_at = [_mark(child) for child in node.value]
        return result


_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _LineLoader.construct_mapping
)
_LineLoader.add_constructor(
    yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _LineLoader.construct_sequence
)


def load_marked_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(f"cannot read scenario file: {exc}", SourceRef(path)) from None
    loader = _LineLoader(text)
    loader.path = path
    try:
        return loader.get_single_data()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if mark is not None and mark.line >= len(text.splitlines()) and exc.context_mark:
            mark = exc.context_mark  # "got end of stream": point where the construct began
        where = SourceRef(path, mark.line + 1, mark.column + 1) if mark else SourceRef(path)
        problem = exc.problem or "invalid YAML"
        if exc.context:
            problem = f"{exc.context}, {problem}"
        raise ScenarioError(f"YAML syntax error: {problem}", where, "valid YAML") from None
    except yaml.YAMLError as exc:
        raise ScenarioError(f"YAML error: {exc}", SourceRef(path)) from None
    finally:
        loader.dispose()


def locate(root: Any, path: Iterator[Any] | list[Any], *, key: bool = False) -> tuple[int, int]:
    """Find the (line, column) of the value at ``path`` (or of its key with ``key``)."""
    node = root
    best = getattr(root, "start", (1, 1))
    steps = list(path)
    for index, part in enumerate(steps):
        last = index == len(steps) - 1
        if isinstance(node, _Map) and part in node:
            best = node.keys_at[part] if (key and last) else node.values_at[part]
            node = node[part]
        elif isinstance(node, _Seq) and isinstance(part, int) and part < len(node):
            best = node.items_at[part]
            node = node[part]
        else:
            break
    return best
