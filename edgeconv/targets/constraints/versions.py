"""Op versions against the runtime (or compiler) release that knows them."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from ...converters.tflite_reader import OpInfo, TFLiteModel
from .registry import OK, Check, constraint

TABLE = Path(__file__).resolve().parent.parent / "runtime_versions.yaml"


def parse_table() -> dict[str, Any]:
    """runtime_versions.yaml as PyYAML reads it (libyaml's safe loader when PyYAML has it)."""
    import yaml

    data: dict[str, Any] = yaml.load(TABLE.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    return data


@functools.cache
def runtime_versions() -> dict[str, dict[int, str]]:
    """(op, version) -> minimum TFLite runtime release, from runtime_versions.yaml (edgeconv's own data), through
    its JSON twin (targets/twins.py) while the twin was made from the file as it is."""
    from ..twins import COMPILED_DIR, twin_of

    data = twin_of(TABLE, COMPILED_DIR / "runtime_versions.json") or parse_table()
    return {op: {int(v): str(r) for v, r in versions.items()} for op, versions in data["ops"].items()}


def _key(version: str) -> tuple[int, ...]:
    return tuple(int(p) for p in version.split("."))


@constraint
def op_version_runtime(op: OpInfo, model: TFLiteModel, *, max_runtime: str) -> Check:
    """The op's version is known to TFLite runtime {max_runtime} (versions added in later releases are
    rejected with "Didn't find op for builtin opcode")."""
    if op.custom_code is not None:
        return OK
    known = runtime_versions().get(op.type)
    if not known:
        return False, f"{op.type} is not in the runtime version table"
    needed = known.get(op.version)
    if needed is None:
        return False, f"{op.type} version {op.version} is newer than any version in the table"
    return (_key(needed) <= _key(max_runtime)), f"{op.type} version {op.version} needs runtime {needed}"
