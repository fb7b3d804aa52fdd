"""JSON read through its JSON Schema: the first problem, with its JSON path, or None.

``diff`` and ``--baseline`` read report.json files a pull request may have written by hand. They are
checked against the generated report schema before any part is read, so a malformed report is exit 2
naming where it is wrong (``$.targets[0].counts.supported: expected an integer, got a string``), never a
crash. This validates the keywords the generated schemas use (``$ref`` into ``$defs``, ``type``,
``properties``, ``required``, ``additionalProperties``, ``items``, ``anyOf``, ``const``, ``enum``,
``minimum``, ``minLength``, ``pattern``), with JSON's types: ``true`` is a boolean, never the integer 1.
Without the ``jsonschema`` package, so the light install can read reports.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from typing import Any

MAX_DEPTH = 64  # a report nests about 8 levels
_TYPES = {"object": "an object", "array": "an array", "string": "a string", "integer": "an integer",
          "number": "a number", "boolean": "a boolean", "null": "null"}


_JSON_TYPES = ((type(None), "null"), (bool, "boolean"), (int, "integer"), (float, "number"), (str, "string"),
               (list, "array"), (dict, "object"))  # bool before int: JSON's true is no integer


_EXACT = {kind: name for kind, name in _JSON_TYPES}


def json_type(value: Any) -> str:
    name = _EXACT.get(type(value))  # what json.loads makes; a subclass goes through isinstance
    return name if name is not None else next((name for kind, name in _JSON_TYPES if isinstance(value, kind)),
                                              type(value).__name__)


def depth_problem(value: Any) -> str | None:
    """Where ``value`` nests deeper than :data:`MAX_DEPTH` (walked without recursion), or None. The walk
    keeps each container's parent and key, not its path: the path is spelled only for the one too deep."""
    todo: list[tuple[Any, int, Any]] = [(value, 1, None)]  # item, depth, (parent entry, key) or None
    while todo:
        entry = todo.pop()
        item, depth, _ = entry
        if isinstance(item, (dict, list)):
            if depth > MAX_DEPTH:
                keys = []
                while entry[2] is not None:
                    entry, key = entry[2]
                    keys.append(key)
                path = "$"
                for key in reversed(keys):
                    path = _child(path, key)
                return f"{path}: nested more than {MAX_DEPTH} levels deep"
            pairs = item.items() if isinstance(item, dict) else enumerate(item)
            todo.extend((v, depth + 1, (entry, k)) for k, v in pairs if isinstance(v, (dict, list)))
    return None


def _child(path: str, key: Any) -> str:
    return f"{path}[{key}]" if isinstance(key, int) else path + _member(str(key))


@functools.lru_cache(maxsize=4096)
def _member(key: str) -> str:
    """How a JSON path names member ``key``: ``.key`` for a plain name, else ``['key']``."""
    return f".{key}" if _PLAIN.fullmatch(key) else f"[{key!r}]"


_PLAIN = re.compile(r"[A-Za-z_][\w-]*")


def _same(a: Any, b: Any) -> bool:
    """JSON equality: 1 and true differ, 1 and 1.0 do not."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    return bool(a == b)


def first_problem(value: Any, schema: Mapping[str, Any]) -> str | None:
    """The first place ``value`` breaks ``schema`` (the root, with its ``$defs``), or None."""
    problem = depth_problem(value)
    if problem:
        return problem
    return _check(value, schema, schema.get("$defs", {}), "$")


def _check(value: Any, schema: Mapping[str, Any], defs: Mapping[str, Any], path: str) -> str | None:
    if "$ref" in schema:
        name = str(schema["$ref"]).rsplit("/", 1)[-1]
        return _check(value, defs[name], defs, path)
    if "anyOf" in schema:
        problems = [_check(value, option, defs, path) for option in schema["anyOf"]]
        if problems and all(problems):
            return _any_of(problems, path)
    given = json_type(value)
    kinds = schema.get("type")
    if kinds is not None:
        allowed = [kinds] if isinstance(kinds, str) else list(kinds)
        if given not in allowed and not (given == "integer" and "number" in allowed):
            return f"{path}: expected {' or '.join(_TYPES.get(k, k) for k in allowed)}, got {_TYPES.get(given, given)}"
    if "const" in schema and not _same(value, schema["const"]):
        return f"{path}: expected {schema['const']!r}, got {value!r}"
    if "enum" in schema and not any(_same(value, option) for option in schema["enum"]):
        return f"{path}: {value!r} is not one of {', '.join(repr(o) for o in schema['enum'])}"
    if given in ("integer", "number") and "minimum" in schema and value < schema["minimum"]:
        return f"{path}: {value!r} is less than {schema['minimum']!r}"
    if given == "string":
        if len(value) < schema.get("minLength", 0):
            return f"{path}: shorter than {schema['minLength']} character(s)"
        if "pattern" in schema and not re.search(schema["pattern"], value):
            return f"{path}: {value[:60]!r} does not match {schema['pattern']}"
    if given == "array" and "items" in schema:
        for i, item in enumerate(value):
            problem = _check(item, schema["items"], defs, f"{path}[{i}]")
            if problem:
                return problem
    if given == "object":
        return _check_object(value, schema, defs, path)
    return None


def _any_of(problems: list[str | None], path: str) -> str:
    """No option fits: their expected types together when each failed on the value's type itself, else the
    problem found deepest (the option the value came closest to)."""
    prefix = f"{path}: expected "
    if all(p and p.startswith(prefix) and ", got " in p for p in problems):
        kinds = [str(p).removeprefix(prefix).rsplit(", got ", 1) for p in problems]
        return f"{prefix}{' or '.join(dict.fromkeys(k for k, _ in kinds))}, got {kinds[0][1]}"
    return max((p for p in problems if p), key=lambda p: (len(p.split(":")[0]), p))


def _check_object(value: Mapping[str, Any], schema: Mapping[str, Any], defs: Mapping[str, Any],
                  path: str) -> str | None:
    for key in schema.get("required", []):
        if key not in value:
            return f"{path}: missing {key!r}"
    properties = schema.get("properties", {})
    extra = schema.get("additionalProperties", True)
    for key, item in value.items():
        if key in properties:
            problem = _check(item, properties[key], defs, _child(path, key))
        elif extra is False:
            problem = f"{_child(path, key)}: not a field of this section"
        elif isinstance(extra, dict):
            problem = _check(item, extra, defs, _child(path, key))
        else:
            problem = None
        if problem:
            return problem
    return None
