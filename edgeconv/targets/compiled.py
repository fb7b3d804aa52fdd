"""The built-in targets, validated, as JSON: what loading a built-in target reads instead of its YAML.

``edgeconv check`` loads one or two built-in targets; parsing and validating their YAML (and importing the
YAML library) was a fifth of the command's own work. Each ``data/<name>.yaml`` has a twin
``compiled/<name>.json``: the :class:`Target` that :func:`load_target_file` made of it, with the SHA-256 of
the YAML bytes it was made from; ``compiled/runtime_versions.json`` is the same for the op-version table
(``targets/runtime_versions.yaml``). A twin is used only when that digest is the YAML file's now, so an
edited file is parsed and validated again (a twin never stands for a file it was not made from).
``python scripts/gen_compiled_targets.py`` writes the twins; tests/unit/test_targets.py requires each to be
what that writes and to load into a Target equal to the YAML's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .parameter_memory import ParameterMemory
from .target import Compiler, Effect, KnownOp, OpEntry, Placement, QuantPolicy, Rule, Target
from .twins import COMPILED_DIR, stamp, twin_of


def _rule(rule: Rule) -> dict[str, Any]:
    return {"id": rule.id, "check": rule.check, "params": dict(rule.params), "source": rule.source, "fix": rule.fix,
            "effect": rule.effect.value}


def _from_rule(doc: dict[str, Any]) -> Rule:
    return Rule(doc["id"], doc["check"], doc["params"], doc["source"], doc["fix"], Effect(doc["effect"]))


def to_json(target: Target, yaml_bytes: bytes) -> dict[str, Any]:
    """``target`` as the JSON twin of the YAML file whose bytes are ``yaml_bytes``."""
    compiler = target.compiler
    q = target.quantization
    return {
        **stamp(yaml_bytes),
        "name": target.name, "title": target.title, "description": target.description,
        "sources": dict(target.sources), "placement": target.placement.value,
        "segment_rule": None if target.segment_rule is None else _rule(target.segment_rule),
        "all_ops": [_rule(r) for r in target.all_ops],
        "ops": {name: {"source": e.source, "rules": [_rule(r) for r in e.rules], "note": e.note}
                for name, e in target.ops.items()},
        "unlisted": _rule(target.unlisted),
        "notes": {name: {"detail": k.detail, "fix": k.fix} for name, k in target.notes.items()},
        "compiler": None if compiler is None else {
            "tool": compiler.tool, "accelerator_config": compiler.accelerator_config,
            "system_config": compiler.system_config, "memory_mode": compiler.memory_mode,
            "rule": _rule(compiler.rule)},
        "quantization": {"modes": list(q.modes), "float_fallback": q.float_fallback, "source": q.source,
                         "why": q.why},
        "accelerator_name": target.accelerator_name,
        "parameter_memory": None if target.parameter_memory is None else vars(target.parameter_memory).copy(),
    }


def from_json(doc: dict[str, Any], path: Path) -> Target:
    """The Target a twin holds (``path``: its YAML file, as the Target records it)."""
    c = doc["compiler"]
    q = doc["quantization"]
    pm = doc["parameter_memory"]
    return Target(
        doc["name"], doc["title"], doc["description"], path, doc["sources"], Placement(doc["placement"]),
        None if doc["segment_rule"] is None else _from_rule(doc["segment_rule"]),
        tuple(_from_rule(r) for r in doc["all_ops"]),
        {name: OpEntry(name, e["source"], tuple(_from_rule(r) for r in e["rules"]), e["note"])
         for name, e in doc["ops"].items()},
        _from_rule(doc["unlisted"]),
        {name: KnownOp(k["detail"], k["fix"]) for name, k in doc["notes"].items()},
        None if c is None else Compiler(c["tool"], c["accelerator_config"], c["system_config"], c["memory_mode"],
                                        _from_rule(c["rule"])),
        QuantPolicy(tuple(q["modes"]), q["float_fallback"], q["source"], q["why"]),
        doc["accelerator_name"],
        None if pm is None else ParameterMemory(**pm),
    )


def load_compiled(name: str, yaml_path: Path) -> Target | None:
    """Built-in target ``name`` from its twin (see :func:`.twins.twin_of`), or None."""
    doc = twin_of(yaml_path, COMPILED_DIR / f"{name}.json")
    return None if doc is None else from_json(doc, yaml_path)


def runtime_versions_json(data: dict[str, Any], yaml_bytes: bytes) -> dict[str, Any]:
    """The twin of ``runtime_versions.yaml`` (``data``: its parsed contents)."""
    return {**stamp(yaml_bytes),
            "ops": {op: {str(v): str(r) for v, r in versions.items()} for op, versions in data["ops"].items()}}
