"""YAML reading that keeps line numbers, so errors can point at the mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, rel


def compose_file(path: Path) -> yaml.Node:
    """Parse a YAML file into a node tree (values keep their line numbers).

    Raises ConfigError for a missing/unreadable file or invalid YAML.
    """
    shown = rel(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ConfigError([f"{shown}: file not found"]) from None
    except IsADirectoryError:
        raise ConfigError([f"{shown}: is a directory, expected a YAML file"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{shown}: not a UTF-8 text file ({exc.reason})"]) from None
    except OSError as exc:
        raise ConfigError([f"{shown}: cannot read: {exc.strerror}"]) from None
    if len(text) > MAX_CHARS:
        raise ConfigError([f"{shown}: {len(text):,} characters; a pipeline file may have at most {MAX_CHARS:,}"])
    node = _compose_with_libyaml(text)
    if node is not None:
        return node
    try:
        loader = _DepthLimitedLoader(text)
        loader.shown = shown
        try:
            node = loader.get_single_node()
        finally:
            loader.dispose()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f"{shown}:{mark.line + 1}:{mark.column + 1}" if mark else shown
        problem = exc.problem or exc.context or "invalid YAML"
        raise ConfigError([f"{where}: invalid YAML: {problem}"]) from None
    except yaml.YAMLError as exc:
        raise ConfigError([f"{shown}: invalid YAML: {exc}"]) from None
    if node is None:
        raise ConfigError([f"{shown}: the file is empty"])
    return node


def _compose_with_libyaml(text: str) -> yaml.Node | None:
    """The node tree by libyaml (a target file in a tenth of the time), or None when the file is invalid,
    empty, nested too deep or libyaml is missing: then the pure-Python loader composes it, or says what is
    wrong with the messages the tests pin.

    The depth is counted over libyaml's events first (its parser keeps its own stack; its composer recurses
    in C, past Python's recursion limit). Plain scalars get the pure loader's style (None, libyaml says '').
    """
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    try:
        depth = 0
        for event in yaml.parse(text, Loader=yaml.CSafeLoader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                if depth > MAX_DEPTH:
                    return None
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
        node = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return None
    stack = [node] if node is not None else []
    while stack:
        item = stack.pop()
        if isinstance(item, yaml.ScalarNode):
            if item.style == "":
                item.style = None
        elif isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)
        elif isinstance(item, yaml.MappingNode):
            stack.extend(child for pair in item.value for child in pair)
    return node


MAX_CHARS = 1_000_000  # a pipeline file is a few KB; anything this large is not one
MAX_DEPTH = 32  # the deepest pipeline section nests 4 levels


class _DepthLimitedLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing deep nesting while it composes: its composer recurses once per
    level, so a file nested hundreds deep would end in a RecursionError."""

    shown = ""
    depth = 0

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        nested = self.check_event(yaml.MappingStartEvent, yaml.SequenceStartEvent)
        if nested:
            self.depth += 1
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                where = f"{self.shown}:{mark.line + 1}" if mark is not None else self.shown
                raise ConfigError([f"{where}: nested more than {MAX_DEPTH} levels deep; a pipeline file nests at "
                                   "most a few"])
        try:
            return super().compose_node(parent, index)
        finally:
            if nested:
                self.depth -= 1


def line_of(node: yaml.Node) -> int:
    return int(node.start_mark.line) + 1


def to_python(node: yaml.Node) -> Any:
    """The plain value of a composed node (what ``yaml.safe_load`` would give for its text)."""
    return yaml.SafeLoader("").construct_document(node)


def is_null(node: yaml.Node) -> bool:
    return isinstance(node, yaml.ScalarNode) and node.tag == "tag:yaml.org,2002:null"


def dump(data: Any) -> str:
    """Block-style YAML with keys in the given order."""
    return yaml.safe_dump(data, sort_keys=False, default_flow_style=None, width=100)
