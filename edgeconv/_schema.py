"""Typed config models from YAML nodes, their JSON Schema, and their YAML dump.

Config sections are frozen dataclasses. Field metadata (see :func:`setting`)
carries the documentation, bounds and allowed names; the same metadata drives
validation (errors with file, line, key, bad value, allowed values and "did you
mean"), the generated JSON Schema and the resolved-pipeline dump, so the three
cannot drift apart.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import types
import typing
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any, Union

import yaml

from ._yaml import is_null, line_of
from .errors import allowed_list, did_you_mean

INVALID: Any = object()  # marks a value that failed validation (problem already recorded)


class Ctx:
    """Where we are: the file shown in messages, the folder paths resolve against,
    and the problems found so far."""

    def __init__(self, file: str, base_dir: Path, *, check_files: bool = True, project: Path | None = None) -> None:
        self.file = file
        self.base_dir = base_dir
        # The folder the files the pipeline names must lie in (edgeconv.inputs.project_of); None: not checked.
        self.project = project
        self.problems: list[str] = []
        # False: the model and data files may be absent (fetched in CI from DVC, LFS or a bucket); what their
        # presence would decide is not checked. Target files, which the pipeline's rules come from, still are.
        self.check_files = check_files

    def error(self, node: yaml.Node | None, key: str, message: str) -> Any:
        where = f"{self.file}:{line_of(node)}" if node is not None else self.file
        self.problems.append(f"{where}: {key}: {message}" if key else f"{where}: {message}")
        return INVALID


def setting(
    doc: str,
    *,
    default: Any = dataclasses.MISSING,
    factory: Callable[[], Any] | None = None,
    choices: Callable[[], Iterable[str]] | None = None,
    minimum: float | None = None,
    maximum: float | None = None,
    must_exist: bool = False,
    no_link: bool = False,
    parse: Callable[[yaml.Node, str, Ctx], Any] | None = None,
    json_schema: Callable[[], dict[str, Any]] | None = None,
    dump: Callable[[Any, Path], Any] | None = None,
) -> Any:
    """A documented config field. ``choices`` names a registry; ``parse``/``json_schema``/
    ``dump`` replace the type-driven behaviour for unusual fields."""
    meta = {
        "doc": doc,
        "choices": choices,
        "minimum": minimum,
        "maximum": maximum,
        "must_exist": must_exist,
        "no_link": no_link,
        "parse": parse,
        "json_schema": json_schema,
        "dump": dump,
    }
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


def _show(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        return repr(node.value)
    return "a mapping" if isinstance(node, yaml.MappingNode) else "a list"


def _optional_inner(tp: Any) -> Any | None:
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        args = [a for a in typing.get_args(tp) if a is not type(None)]
        if len(args) == 1 and len(typing.get_args(tp)) == 2:
            return args[0]
    return None


def parse_node(tp: Any, node: yaml.Node, key: str, ctx: Ctx, meta: Mapping[str, Any]) -> Any:
    """Validate ``node`` against type ``tp``; record problems in ``ctx``."""
    if meta.get("parse") is not None:
        return meta["parse"](node, key, ctx)
    inner = _optional_inner(tp)
    if inner is not None:
        return None if is_null(node) else parse_node(inner, node, key, ctx, meta)
    if dataclasses.is_dataclass(tp):
        return parse_dataclass(typing.cast(type, tp), node, key, ctx)
    origin = typing.get_origin(tp)
    if origin is tuple:
        item_tp = typing.get_args(tp)[0]
        if not isinstance(node, yaml.SequenceNode):
            return ctx.error(node, key, f"expected a list, got {_show(node)}")
        items = [parse_node(item_tp, n, f"{key}[{i}]", ctx, meta) for i, n in enumerate(node.value)]
        return INVALID if any(i is INVALID for i in items) else tuple(items)
    if origin in (dict, Mapping) or origin is typing.get_origin(Mapping[str, int]):
        value_tp = typing.get_args(tp)[1]
        if not isinstance(node, yaml.MappingNode):
            return ctx.error(node, key, f"expected a mapping, got {_show(node)}")
        return parse_mapping(node, key, ctx, lambda v_node, sub: parse_node(value_tp, v_node, sub, ctx, {}))
    if not isinstance(node, yaml.ScalarNode):
        return ctx.error(node, key, f"expected {_type_word(tp)}, got {_show(node)}")
    return _parse_scalar(tp, node, key, ctx, meta)


def parse_mapping(node: yaml.MappingNode, key: str, ctx: Ctx, value: Callable[[yaml.Node, str], Any]) -> Any:
    """A mapping of names to values, each parsed by ``value(node, key)``; a duplicate name is an error."""
    out: dict[str, Any] = {}
    for k_node, v_node in node.value:
        name = str(k_node.value)
        if name in out:
            ctx.error(k_node, f"{key}.{name}", "duplicate key")
            continue
        out[name] = value(v_node, f"{key}.{name}")
    return INVALID if any(v is INVALID for v in out.values()) else types.MappingProxyType(out)


def _type_word(tp: Any) -> str:
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return "one of " + allowed_list(str(m.value) for m in tp)
    return {bool: "true or false", int: "an integer", float: "a number", str: "a string",
            Path: "a file path"}.get(tp, str(tp))


def _parse_scalar(tp: Any, node: yaml.ScalarNode, key: str, ctx: Ctx, meta: Mapping[str, Any]) -> Any:
    text = node.value
    plain = node.style is None
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        values = [str(m.value) for m in tp]
        if text in values:
            return tp(text)
        return ctx.error(node, key, f"unknown value {text!r} (allowed: {allowed_list(values)})"
                         f"{did_you_mean(text, values)}")
    if tp is bool:
        if plain and text.lower() in ("true", "false"):
            return text.lower() == "true"
        return ctx.error(node, key, f"expected true or false, got {text!r}")
    if tp is int:
        try:
            if not plain:
                raise ValueError
            value: float = int(text, 0) if text.lower().startswith(("0x", "0o", "0b")) else int(text)
        except ValueError:
            return ctx.error(node, key, f"expected an integer, got {text!r}")
        return _check_bounds(value, node, key, ctx, meta)
    if tp is float:
        try:
            if not plain:
                raise ValueError
            value = float(text)
            if not math.isfinite(value):
                raise ValueError
        except ValueError:
            return ctx.error(node, key, f"expected a number, got {text!r}")
        return _check_bounds(value, node, key, ctx, meta)
    if is_null(node):
        return ctx.error(node, key, f"expected {_type_word(tp)}, got null")
    if tp is str:
        choices = meta.get("choices")
        if choices is not None:
            allowed = list(choices())
            if text not in allowed:
                return ctx.error(node, key, f"unknown name {text!r} (allowed: {allowed_list(allowed)})"
                                 f"{did_you_mean(text, allowed)}")
        if not text:
            return ctx.error(node, key, "expected a non-empty string")
        return text
    if tp is Path:
        if not text:
            return ctx.error(node, key, "expected a non-empty path")
        bad = _unusable_path(text)
        if bad:
            return ctx.error(node, key, f"{bad}: {_shorten(text)!r}")
        link = _link_in(ctx.base_dir / text) if meta.get("no_link") else None
        if link is not None:
            return ctx.error(node, key, f"{_shorten(text)!r} {link}; name a real folder")
        try:
            path = (ctx.base_dir / text).resolve()
            exists = path.exists()
        except (OSError, ValueError) as exc:  # too long for the file system, a loop of links
            return ctx.error(node, key, f"not a usable path: {_shorten(text)!r} ({exc.strerror or exc})"
                             if isinstance(exc, OSError) else f"not a usable path: {_shorten(text)!r}")
        from .inputs import not_a_regular_file, outside_project

        special = not_a_regular_file(path) if exists else None
        if special:
            return ctx.error(node, key, f"{_shorten(text)!r} {special}")
        if meta.get("must_exist") and ctx.project is not None:  # an input the build reads
            outside = outside_project(ctx.base_dir / text, ctx.project)
            if outside:
                return ctx.error(node, key, f"{_shorten(text)!r} {outside}")
        if meta.get("must_exist") and not exists and ctx.check_files:
            return ctx.error(node, key, f"file not found: {text!r} (resolved to {path})")
        return path
    raise TypeError(f"unsupported config type {tp!r}")  # a bug in a config model


PATH_MAX = 4096  # Linux's limit on a whole path; one name may be at most NAME_MAX
NAME_MAX = 255


def _unusable_path(text: str) -> str:
    """Why a path from the pipeline file can be no file name on any system edgeconv runs on ('' if none)."""
    if "\0" in text:
        return "a path cannot contain a NUL character"
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in text):
        # A newline or escape in a path would become a line of its own in CI logs, $GITHUB_OUTPUT and
        # annotations: no model or data file needs one.
        return "a path cannot contain a control character (newline, tab, escape, ...)"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "a path must be valid Unicode (it holds a lone surrogate)"
    if len(text.encode("utf-8")) > PATH_MAX:
        return f"a path must be at most {PATH_MAX} bytes long"
    if any(len(part.encode("utf-8")) > NAME_MAX for part in text.split("/")):
        return f"a file or folder name in a path must be at most {NAME_MAX} bytes long"
    return ""


def _link_in(given: Path) -> str | None:
    """How ``given`` leads somewhere else: it is a symbolic link, or lies below one that points nowhere (the
    folder would be made wherever the link points); None when neither."""
    import os

    try:
        for part in (given, *given.parents):
            if part.is_symlink() and (part == given or not part.exists()):
                where = "is a symbolic link" if part == given else f"is below {part.name!r}, a symbolic link to nothing"
                return f"{where} (-> {os.readlink(part)})"
    except OSError:
        return None
    return None


def _shorten(text: str, keep: int = 60) -> str:
    shown = text.encode("utf-8", "backslashreplace").decode("utf-8")
    return shown if len(shown) <= keep else f"{shown[:keep]}... ({len(shown)} characters)"


def _check_bounds(value: float, node: yaml.Node, key: str, ctx: Ctx, meta: Mapping[str, Any]) -> Any:
    lo, hi = meta.get("minimum"), meta.get("maximum")
    if lo is not None and value < lo:
        return ctx.error(node, key, f"must be >= {lo}, got {node.value}")
    if hi is not None and value > hi:
        return ctx.error(node, key, f"must be <= {hi}, got {node.value}")
    return value


def config_fields(cls: type) -> list[dataclasses.Field[Any]]:
    """The fields a user can set (fields with ``init=False`` are derived, not config)."""
    return [f for f in dataclasses.fields(cls) if f.init]


@functools.cache
def _fields_and_hints(cls: type) -> tuple[dict[str, dataclasses.Field[Any]], dict[str, Any]]:
    """A config class's settable fields and their resolved types, worked out once per process (resolving
    the annotations is most of the cost of parsing a pipeline; a zoo parses hundreds)."""
    return {f.name: f for f in config_fields(cls)}, typing.get_type_hints(cls)


def parse_dataclass(cls: type, node: yaml.Node, key: str, ctx: Ctx) -> Any:
    where = key or "top level"
    if not isinstance(node, yaml.MappingNode):
        return ctx.error(node, key, f"expected a mapping, got {_show(node)}")
    fields, hints = _fields_and_hints(cls)
    seen: dict[str, yaml.Node] = {}
    values: dict[str, Any] = {}
    for k_node, v_node in node.value:
        name = str(k_node.value)
        sub = f"{key}.{name}" if key else name
        if name in seen:
            ctx.error(k_node, sub, f"duplicate key (first given on line {line_of(seen[name])})")
            continue
        seen[name] = k_node
        if name not in fields:
            ctx.error(k_node, where, f"unknown key {name!r} (allowed: {allowed_list(fields)})"
                      f"{did_you_mean(name, fields)}")
            continue
        values[name] = parse_node(hints[name], v_node, sub, ctx, fields[name].metadata)
    for name, f in fields.items():
        if name not in values and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            ctx.error(node, where, f"missing required key {name!r}")
            values[name] = INVALID
    if any(v is INVALID for v in values.values()):
        return INVALID
    return cls(**values)


def json_schema_of(tp: Any, meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """JSON Schema (draft 2020-12) for a config type."""
    meta = meta or {}
    if meta.get("json_schema") is not None:
        schema: dict[str, Any] = dict(meta["json_schema"]())
    elif (inner := _optional_inner(tp)) is not None:
        schema = {"anyOf": [json_schema_of(inner, {**meta, "doc": None}), {"type": "null"}]}
    elif dataclasses.is_dataclass(tp):
        schema = dataclass_schema(typing.cast(type, tp))
    elif typing.get_origin(tp) is tuple:
        schema = {"type": "array", "items": json_schema_of(typing.get_args(tp)[0], {**meta, "doc": None})}
    elif typing.get_origin(tp) in (dict, Mapping) or typing.get_origin(tp) is typing.get_origin(Mapping[str, int]):
        schema = {"type": "object", "additionalProperties": json_schema_of(typing.get_args(tp)[1])}
    elif isinstance(tp, type) and issubclass(tp, enum.Enum):
        schema = {"enum": [m.value for m in tp]}
    else:
        scalars: dict[Any, dict[str, Any]] = {
            bool: {"type": "boolean"}, int: {"type": "integer"}, float: {"type": "number"},
            str: {"type": "string", "minLength": 1}, Path: {"type": "string", "minLength": 1}}
        schema = dict(scalars[tp])
        if meta.get("choices") is not None:
            schema = {"enum": sorted(meta["choices"]())}
        if meta.get("minimum") is not None:
            schema["minimum"] = meta["minimum"]
        if meta.get("maximum") is not None:
            schema["maximum"] = meta["maximum"]
    if meta.get("doc"):
        schema["description"] = meta["doc"]
    return schema


def dataclass_schema(cls: type) -> dict[str, Any]:
    hints = typing.get_type_hints(cls)
    props: dict[str, Any] = {}
    required: list[str] = []
    for f in config_fields(cls):
        props[f.name] = json_schema_of(hints[f.name], f.metadata)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            required.append(f.name)
        else:
            factory: Any = f.default_factory
            default = f.default if f.default is not dataclasses.MISSING else factory()
            if f.metadata.get("dump") is None and (d := _json_default(default)) is not None:
                props[f.name]["default"] = d
    schema: dict[str, Any] = {"type": "object", "properties": props, "additionalProperties": False}
    if required:
        schema["required"] = required
    if cls.__doc__:
        schema["description"] = " ".join(cls.__doc__.split())
    return schema


def _json_default(value: Any) -> Any:
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple) and all(isinstance(v, (str, int, float)) for v in value):
        return list(value)
    return None


def dump_value(value: Any, base_dir: Path, meta: Mapping[str, Any] | None = None) -> Any:
    """Plain YAML data for a config value; paths relative to ``base_dir``."""
    meta = meta or {}
    if meta.get("dump") is not None:
        return meta["dump"](value, base_dir)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: dump_value(getattr(value, f.name), base_dir, f.metadata)
                for f in config_fields(type(value))}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, Path):
        return relpath(value, base_dir)
    if isinstance(value, tuple):
        return [dump_value(v, base_dir) for v in value]
    if isinstance(value, Mapping):
        return {k: dump_value(v, base_dir) for k, v in value.items()}
    return value


def relpath(path: Path, base_dir: Path) -> str:
    import os

    return os.path.relpath(path, base_dir)
