"""YAML reading that keeps line numbers, so errors can point at the mistake."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import ConfigError, EdgeconvError, rel


def compose_file(path: Path) -> yaml.Node:
    """Parse a YAML file into a node tree (values keep their line numbers).

    Raises ConfigError for a missing/unreadable file or invalid YAML.
    """
    from .inputs import MAX_TEXT_BYTES, read_bytes

    shown = rel(path)
    try:
        text = read_bytes(path, MAX_TEXT_BYTES, what="YAML file").decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{shown}: not a UTF-8 text file ({exc.reason})"]) from None
    except EdgeconvError as exc:
        raise ConfigError([str(exc)]) from None
    if len(text) > MAX_CHARS:
        raise ConfigError([f"{shown}: {len(text):,} characters; a pipeline file may have at most {MAX_CHARS:,}"])
    scanned = _scan(text, shown)
    node = _compose_with_libyaml(text) if scanned else None
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
    if not scanned:  # libyaml refused what the pure loader took: its events get the same bounds
        _scan(text, shown, yaml.SafeLoader)
    return node


def _compose_with_libyaml(text: str) -> yaml.Node | None:
    """The node tree by libyaml (a target file in a tenth of the time), or None when the file is invalid,
    empty, nested too deep or libyaml is missing: then the pure-Python loader composes it, or says what is
    wrong with the messages the tests pin.

    Called only after :func:`_scan` (libyaml's composer recurses in C, past Python's recursion limit, and
    follows no budget). Plain scalars get the pure loader's style (None, libyaml says '').
    """
    if not getattr(yaml, "__with_libyaml__", False):
        return None
    try:
        node = yaml.compose(text, Loader=yaml.CSafeLoader)
    except yaml.YAMLError:
        return None
    stack = [node] if node is not None else []
    seen: set[int] = set()  # an alias shares its node: each is visited once
    while stack:
        item = stack.pop()
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, yaml.ScalarNode):
            if item.style == "":
                item.style = None
        elif isinstance(item, yaml.SequenceNode):
            stack.extend(item.value)
        elif isinstance(item, yaml.MappingNode):
            stack.extend(child for pair in item.value for child in pair)
    return node


def _line(event: Any) -> int:
    mark = event.start_mark
    return int(mark.line) + 1 if mark is not None else 1


def _scan(text: str, shown: str, loader: Any = None) -> bool:
    """One pass over the parser's events before anything is composed. Refuses a file with more than
    :data:`MAX_NODES` nodes, whose aliases form a cycle (``x: &a [*a]``: every reader of the tree would walk
    it forever) or would expand to more than :data:`MAX_ALIAS_NODES` nodes (an alias bomb: ``&b [*a, *a]``
    nested a few levels doubles at each). Each anchor's expanded size is known when its node ends, an alias
    adds that size, and an alias to an anchor whose node is still open is a cycle.

    False when the file is nested deeper than :data:`MAX_DEPTH` or the parser rejects it: the pure loader
    composes it then, and words the error."""
    if loader is None:
        loader = yaml.CSafeLoader if getattr(yaml, "__with_libyaml__", False) else yaml.SafeLoader
    sizes: dict[str, int] = {}
    frames: list[list[Any]] = []  # [anchor, expanded size so far] per open collection
    nodes = expanded = 0
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, yaml.AliasEvent):
                if any(frame[0] == event.anchor for frame in frames):
                    raise ConfigError([f"{shown}:{_line(event)}: the alias *{event.anchor} refers to "
                                       f"the node &{event.anchor} that holds it (a cycle); write the value out"])
                size = sizes.get(event.anchor or "", 0)
                expanded += size
                if expanded > MAX_ALIAS_NODES:
                    raise ConfigError([f"{shown}:{_line(event)}: the aliases expand to more than "
                                       f"{MAX_ALIAS_NODES:,} nodes (an alias bomb?); a pipeline file needs a few"])
            elif isinstance(event, (yaml.ScalarEvent, yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                nodes += 1
                if nodes > MAX_NODES:
                    raise ConfigError([f"{shown}:{_line(event)}: more than {MAX_NODES:,} values; a "
                                       "pipeline or target file holds a few thousand at most"])
                size = 1
                if isinstance(event, yaml.ScalarEvent):
                    if event.anchor:
                        sizes[event.anchor] = 1
                else:
                    frames.append([event.anchor, 1])
                    if len(frames) > MAX_DEPTH:
                        return False
                    continue
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                anchor, size = frames.pop()
                if anchor:
                    sizes[anchor] = size
            else:
                continue
            if frames:
                frames[-1][1] += size
    except yaml.YAMLError:
        return False
    return True


MAX_ALIAS_NODES = 10_000  # what aliases may add; the built-in target files add a few hundred
MAX_NODES = 20_000  # values in one file; the largest built-in target file holds about 1,500
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
