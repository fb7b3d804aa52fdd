"""Target files: what a target supports, as data, validated like the pipeline file.

A target file (YAML, one per target) lists its sources, how the target places ops
(``placement``), the rules every op must meet (``all_ops``), the supported-op table
(``ops``: rules per op type) and notes that explain well-known unsupported ops.
Each rule names a constraint kind from :mod:`edgeconv.targets.constraints` plus its
parameters, the source of the fact, the effect of breaking it (default: the target's
``default_effect``, else unsupported) and a fix hint.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import inspect
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_import
from .._record import record
from ..converters.tflite_ops import BUILTIN_OP_NAMES
from ..converters.tflite_reader import TensorType
from ..errors import ConfigError, allowed_list, controls, did_you_mean, rel
from .constraints import CONSTRAINTS, Constraint, params_of, rule_text
from .parameter_memory import ParameterMemory

if TYPE_CHECKING:
    import yaml

    from .. import _yaml
    from .._schema import Ctx
else:  # a built-in target loads from its compiled JSON (targets/compiled.py): no YAML to import
    yaml = lazy_import("yaml")
    _yaml = lazy_import("edgeconv._yaml")

TARGET_SCHEMA_VERSION = 1
OP_NAMES = BUILTIN_OP_NAMES
DTYPE_TOKENS = frozenset({t.value for t in TensorType} | {"any", "float32-io"})


class OpStatus(enum.Enum):
    SUPPORTED = "supported"
    # May run on the accelerator or fall back: a limit whose exact value no source gives (the report says
    # which size made it doubtful). Never counted as supported.
    UNCERTAIN = "uncertain"
    CPU_FALLBACK = "cpu_fallback"  # runs, but off the accelerator or off the optimized kernels
    UNSUPPORTED = "unsupported"  # will not run

    @property
    def rank(self) -> int:
        return {"supported": 0, "uncertain": 1, "cpu_fallback": 2, "unsupported": 3}[self.value]


class Effect(enum.Enum):
    """What breaking a rule does to the op."""

    UNSUPPORTED = "unsupported"
    CPU_FALLBACK = "cpu_fallback"
    UNCERTAIN = "uncertain"  # the op may fall back: past the largest size known to be accepted
    WARNING = "warning"  # reported; the op's status does not change (an unverified or size-dependent limit)

    @property
    def status(self) -> OpStatus:
        return OpStatus.SUPPORTED if self is Effect.WARNING else OpStatus(self.value)


class Placement(enum.Enum):
    INDEPENDENT = "independent"  # each op placed on its own (XNNPACK partitions, kernels)
    # One segment (Edge TPU compiler): an op is mapped when it can be and nothing it depends on is a CPU op
    # that itself depends on the segment. "prefix" is the older name of the same placement.
    SEGMENT = "segment"


@record
class Rule:
    id: str
    check: str
    params: Mapping[str, Any]
    source: str
    fix: str = ""
    effect: Effect = Effect.UNSUPPORTED

    @property
    def fn(self) -> Constraint:
        return CONSTRAINTS[self.check]

    @functools.cached_property
    def text(self) -> str:
        """The rule's text: its constraint's docstring with the parameters filled in (made once a rule: every
        op that breaks the rule quotes it)."""
        return rule_text(self.fn, dict(self.params))


@record
class OpEntry:
    name: str  # op type, or "CUSTOM:<code>" for a specific custom op
    source: str
    rules: tuple[Rule, ...]
    note: str = ""


@record
class KnownOp:
    """Why a well-known op type is not supported, and what to do about it."""

    detail: str
    fix: str


@record
class Compiler:
    """A target whose placement a real compiler decides (edgeconv runs it, it does not guess)."""

    tool: str  # "vela"
    accelerator_config: str
    system_config: str
    memory_mode: str
    rule: Rule  # the rule an op breaks when the compiler leaves it on the CPU


QUANT_MODES = ("int8", "int16x8", "dynamic", "float16", "none")


@record
class QuantPolicy:
    """Which quantization modes a target's verdicts hold for, and whether it runs float ops
    left in a quantized model (``quantization.keep_float``)."""

    modes: tuple[str, ...] = ("int8",)
    float_fallback: bool = False
    source: str = ""  # source key
    why: str = ""


@record
class Target:
    name: str
    title: str
    description: str
    path: Path
    sources: Mapping[str, str]
    placement: Placement
    segment_rule: Rule | None  # the rule ops that depend on a blocking op break (segment placement)
    all_ops: tuple[Rule, ...]
    ops: Mapping[str, OpEntry]
    unlisted: Rule
    notes: Mapping[str, KnownOp]
    compiler: Compiler | None = None
    quantization: QuantPolicy = QuantPolicy()
    accelerator_name: str = ""  # an accelerator target ("Edge TPU", "NPU"): its share of MACs is gated
    parameter_memory: ParameterMemory | None = None  # the compiler's parameter layout and on-chip cache

    @property
    def accelerator(self) -> bool:
        return bool(self.accelerator_name)

    def entry_for(self, op_type: str, custom_code: str | None) -> OpEntry | None:
        if custom_code is not None and f"{op_type}:{custom_code}" in self.ops:
            return self.ops[f"{op_type}:{custom_code}"]
        return self.ops.get(op_type)


_TOP_KEYS = ("schema_version", "name", "title", "description", "sources", "placement", "default_effect", "accelerator",
             "compiler", "quantization", "parameter_memory", "unlisted", "notes", "fixes", "all_ops", "ops")
COMPILERS = ("vela",)
_RULE_KEYS = ("check", "id", "source", "fix", "effect")
_EFFECTS = [e.value for e in Effect]


def load_target_file(path: Path, expected_name: str | None = None) -> Target:
    """Parse and validate a target file; raise ConfigError listing every problem."""
    from .._schema import Ctx

    node = _yaml.compose_file(path)
    ctx = Ctx(rel(path), path.parent)
    if not isinstance(node, yaml.MappingNode):
        raise ConfigError([f"{ctx.file}:1: expected a mapping at the top level"])
    top = _mapping(node, "", ctx, allowed=_TOP_KEYS, extra_prefix="x-")
    for key in ("schema_version", "name", "title", "sources", *(() if "compiler" in top else ("ops",))):
        if key not in top:
            ctx.error(node, "top level", f"missing required key {key!r}")
    if ctx.problems:
        raise ConfigError(ctx.problems)
    version = top["schema_version"]
    if getattr(version, "value", None) != str(TARGET_SCHEMA_VERSION):
        raise ConfigError([f"{ctx.file}:{_yaml.line_of(version)}: schema_version: unsupported target schema "
                           f"version {getattr(version, 'value', '?')!r} (supported: {TARGET_SCHEMA_VERSION})"])
    name = _scalar(top["name"], "name", ctx)
    if expected_name is not None and name != expected_name:
        ctx.error(top["name"], "name", f"{name!r} does not match the file name {expected_name!r}")
    sources = {k: _scalar(v, f"sources.{k}", ctx) for k, v in _mapping(top["sources"], "sources", ctx).items()}
    fixes: dict[str, str] = {}
    for check, fix_node in _mapping(top.get("fixes"), "fixes", ctx).items():
        if check not in CONSTRAINTS:
            ctx.error(fix_node, f"fixes.{check}", f"unknown constraint {check!r} (allowed: "
                      f"{allowed_list(CONSTRAINTS)}){did_you_mean(check, CONSTRAINTS)}")
        fixes[check] = _scalar(fix_node, f"fixes.{check}", ctx)
    placement, segment_rule = _placement(top.get("placement"), sources, ctx)
    default = _effect(top.get("default_effect"), "default_effect", ctx)
    all_ops = tuple(_rules(top.get("all_ops"), "all_ops", sources, ctx, fixes, default))
    compiler = _compiler(top.get("compiler"), sources, ctx)
    quantization = _quantization(top.get("quantization"), sources, ctx)
    parameter_memory = _parameter_memory(top.get("parameter_memory"), sources, ctx)
    ops: dict[str, OpEntry] = {}
    for op_name, op_node in _mapping(top.get("ops"), "ops", ctx).items():
        key = f"ops.{op_name}"
        base = op_name.split(":", 1)[0]
        if base not in OP_NAMES:
            ctx.error(op_node, key, f"unknown TFLite op {base!r}{did_you_mean(base, OP_NAMES)}")
            continue
        fields = _mapping(op_node, key, ctx, allowed=("source", "rules", "note"))
        source = _source(fields.get("source"), f"{key}.source", sources, ctx)
        rules = tuple(dataclasses.replace(r, source=r.source or source)
                      for r in _rules(fields.get("rules"), f"{key}.rules", sources, ctx, fixes, default))
        ids = [r.id for r in (*all_ops, *rules)]
        for dup in sorted({i for i in ids if ids.count(i) > 1}):
            ctx.error(op_node, key, f"two rules with id {dup!r}; give one an explicit 'id'")
        note = _scalar(fields["note"], f"{key}.note", ctx) if "note" in fields else ""
        ops[op_name] = OpEntry(op_name, source, rules, note)
    unlisted = Rule("op_listed", "op_listed", {}, next(iter(sources), ""))
    if (unlisted_node := top.get("unlisted")) is not None:
        fields = _mapping(unlisted_node, "unlisted", ctx, allowed=("source", "fix", "effect"))
        unlisted = Rule("op_listed", "op_listed", {}, _source(fields.get("source"), "unlisted.source", sources, ctx),
                        _scalar(fields["fix"], "unlisted.fix", ctx) if "fix" in fields else "",
                        _effect(fields.get("effect"), "unlisted.effect", ctx))
    notes: dict[str, KnownOp] = {}
    for op_name, note_node in _mapping(top.get("notes"), "notes", ctx).items():
        fields = _mapping(note_node, f"notes.{op_name}", ctx, allowed=("detail", "fix"))
        if op_name.split(":", 1)[0] not in OP_NAMES:
            ctx.error(note_node, f"notes.{op_name}", f"unknown TFLite op {op_name!r}{did_you_mean(op_name, OP_NAMES)}")
        notes[op_name] = KnownOp(_scalar(fields.get("detail"), f"notes.{op_name}.detail", ctx),
                                 _scalar(fields["fix"], f"notes.{op_name}.fix", ctx) if "fix" in fields else "")
    if ctx.problems:
        raise ConfigError(ctx.problems)
    description = " ".join(_scalar(top["description"], "description", ctx).split()) if "description" in top else ""
    accelerator = _scalar(top["accelerator"], "accelerator", ctx) if "accelerator" in top else ""
    title = _scalar(top["title"], "title", ctx)  # before the last check: its problems were never raised
    if ctx.problems:
        raise ConfigError(ctx.problems)
    return Target(name, title, description, path, sources, placement, segment_rule,
                  all_ops, ops, unlisted, notes, compiler, quantization, accelerator, parameter_memory)


_MEMORY_SIZES = ("array_rows", "row_multiple", "wide_row_multiple", "fc_row_multiple", "input_multiple",
                 "bytes_per_row", "cache_min_bytes", "cache_max_bytes")


def _parameter_memory(node: yaml.Node | None, sources: Mapping[str, str], ctx: Ctx) -> ParameterMemory | None:
    """``parameter_memory: {array_rows: 64, ..., cache_min_bytes: N, cache_max_bytes: N, source: KEY}``: every
    size a whole number of at least 1 (bytes_per_row at least 0), the cache range in order."""
    if node is None:
        return None
    fields = _mapping(node, "parameter_memory", ctx, allowed=(*_MEMORY_SIZES, "source"))
    sizes: dict[str, int] = {}
    for key in _MEMORY_SIZES:
        text = _scalar(fields.get(key), f"parameter_memory.{key}", ctx)
        least = 0 if key == "bytes_per_row" else 1
        if text and (not text.isdigit() or int(text) < least or len(text) > 12):
            ctx.error(fields.get(key), f"parameter_memory.{key}", f"expected a whole number of at least {least}, "
                      f"got {text!r}")
        sizes[key] = int(text) if text.isdigit() and len(text) <= 12 else least
    if sizes["cache_min_bytes"] > sizes["cache_max_bytes"]:
        ctx.error(fields.get("cache_min_bytes"), "parameter_memory.cache_min_bytes",
                  f"{sizes['cache_min_bytes']} is more than cache_max_bytes {sizes['cache_max_bytes']}")
    source = _source(fields.get("source"), "parameter_memory.source", sources, ctx)
    return ParameterMemory(**sizes, source=source)


def _quantization(node: yaml.Node | None, sources: Mapping[str, str], ctx: Ctx) -> QuantPolicy:
    """``quantization: {modes: [...], float_fallback: bool, source: KEY, why: text}``; default int8 only."""
    if node is None:
        return QuantPolicy()
    fields = _mapping(node, "quantization", ctx, allowed=("modes", "float_fallback", "source", "why"))
    modes: list[str] = []
    mode_node = fields.get("modes")
    if not isinstance(mode_node, yaml.SequenceNode) or not mode_node.value:
        ctx.error(mode_node or node, "quantization.modes", f"expected a non-empty list of modes "
                  f"({allowed_list(QUANT_MODES)})")
    else:
        for i, item in enumerate(mode_node.value):
            value = _scalar(item, f"quantization.modes[{i}]", ctx)
            if value not in QUANT_MODES:
                ctx.error(item, f"quantization.modes[{i}]", f"unknown mode {value!r} (allowed: "
                          f"{allowed_list(QUANT_MODES)}){did_you_mean(value, QUANT_MODES)}")
            modes.append(value)
    fallback = fields.get("float_fallback")
    flag = _scalar(fallback, "quantization.float_fallback", ctx) if fallback is not None else "false"
    if flag not in ("true", "false"):
        ctx.error(fallback or node, "quantization.float_fallback", f"expected true or false, got {flag!r}")
    return QuantPolicy(tuple(modes), flag == "true", _source(fields.get("source"), "quantization.source", sources, ctx),
                       " ".join(_scalar(fields["why"], "quantization.why", ctx).split()) if "why" in fields else "")


def _compiler(node: yaml.Node | None, sources: Mapping[str, str], ctx: Ctx) -> Compiler | None:
    if node is None:
        return None
    fields = _mapping(node, "compiler", ctx,
                      allowed=("tool", "accelerator_config", "system_config", "memory_mode", "source", "fix"))
    tool = _scalar(fields.get("tool"), "compiler.tool", ctx)
    if tool and tool not in COMPILERS:
        ctx.error(fields["tool"], "compiler.tool", f"unknown compiler {tool!r} (allowed: {allowed_list(COMPILERS)})"
                  f"{did_you_mean(tool, COMPILERS)}")
    optional = {k: _scalar(fields[k], f"compiler.{k}", ctx) if k in fields else "" for k in
                ("system_config", "memory_mode")}
    rule = Rule("compiler_placement", "compiler_placement", {},
                _source(fields.get("source"), "compiler.source", sources, ctx),
                _scalar(fields["fix"], "compiler.fix", ctx) if "fix" in fields else "", Effect.CPU_FALLBACK)
    return Compiler(tool, _scalar(fields.get("accelerator_config"), "compiler.accelerator_config", ctx),
                    optional["system_config"], optional["memory_mode"], rule)


def _placement(node: yaml.Node | None, sources: Mapping[str, str], ctx: Ctx) -> tuple[Placement, Rule | None]:
    if node is None:
        return Placement.INDEPENDENT, None
    fields = _mapping(node, "placement", ctx, allowed=("kind", "source", "fix"))
    kinds = [*(p.value for p in Placement), "prefix"]  # "prefix": the older name of "segment"
    kind = _scalar(fields.get("kind"), "placement.kind", ctx)
    kind = Placement.SEGMENT.value if kind == "prefix" else kind  # the older name
    if kind not in kinds:
        ctx.error(fields.get("kind", node), "placement.kind", f"unknown placement {kind!r} (allowed: "
                  f"{allowed_list(kinds)}){did_you_mean(kind, kinds)}")
        return Placement.INDEPENDENT, None
    if kind == Placement.INDEPENDENT.value:
        return Placement.INDEPENDENT, None
    rule = Rule("single_segment", "single_segment", {}, _source(fields.get("source"), "placement.source", sources, ctx),
                _scalar(fields["fix"], "placement.fix", ctx) if "fix" in fields else "", Effect.CPU_FALLBACK)
    return Placement.SEGMENT, rule


def _mapping(node: yaml.Node | None, key: str, ctx: Ctx, allowed: tuple[str, ...] | None = None,
             extra_prefix: str | None = None) -> dict[str, yaml.Node]:
    if node is None or _yaml.is_null(node):
        return {}
    if not isinstance(node, yaml.MappingNode):
        ctx.error(node, key, "expected a mapping")
        return {}
    out: dict[str, yaml.Node] = {}
    for k, v in node.value:
        name = str(k.value)
        if name in out:
            ctx.error(k, f"{key}.{name}" if key else name, "duplicate key")
        elif allowed is not None and name not in allowed and not (extra_prefix and name.startswith(extra_prefix)):
            ctx.error(k, key or "top level", f"unknown key {name!r} (allowed: {allowed_list(allowed)})"
                      f"{did_you_mean(name, allowed)}")
        elif not (extra_prefix and name.startswith(extra_prefix)):
            out[name] = v
    return out


# A target file is a pull request's to write, and its texts (title, sources, fixes, notes, rule ids and
# parameters) are printed as they are, to CI logs and terminals: none may hold a terminal control (an escape
# sequence, a carriage return that overwrites a line, DEL, a C1 control) or a bidirectional override that
# reorders what is shown. Tabs and line breaks are text.
def _printable(value: Any, node: yaml.Node, key: str, ctx: Ctx) -> None:
    """Refuse ``value`` (a text, or the texts in a list or mapping) when it holds a control character."""
    if isinstance(value, str):
        found = None if value.isprintable() else controls("\r").search(value)
        if found:
            ctx.error(node, key, f"holds a control character (U+{ord(found.group()):04X}): edgeconv prints a "
                      "target's texts as they are; write it without one")
    elif isinstance(value, (list, tuple)):
        for item in value:
            _printable(item, node, key, ctx)
    elif isinstance(value, dict):
        for k, item in value.items():
            _printable(k, node, key, ctx)
            _printable(item, node, key, ctx)


def _scalar(node: yaml.Node | None, key: str, ctx: Ctx) -> str:
    if node is None:
        ctx.error(None, key, "missing")
        return ""
    if not isinstance(node, yaml.ScalarNode) or _yaml.is_null(node) or not node.value:
        ctx.error(node, key, "expected a non-empty text value")
        return ""
    _printable(node.value, node, key, ctx)
    return str(node.value)


def _source(node: yaml.Node | None, key: str, sources: Mapping[str, str], ctx: Ctx) -> str:
    if node is None:
        ctx.error(None, key, "missing: every fact in a target file names its source")
        return ""
    value = _scalar(node, key, ctx)
    if value and value not in sources:
        ctx.error(node, key, f"unknown source {value!r} (defined: {allowed_list(sources)})"
                  f"{did_you_mean(value, sources)}")
    return value


def _effect(node: yaml.Node | None, key: str, ctx: Ctx, default: Effect = Effect.UNSUPPORTED) -> Effect:
    if node is None:
        return default
    value = _scalar(node, key, ctx)
    if value not in _EFFECTS:
        ctx.error(node, key, f"unknown effect {value!r} (allowed: {allowed_list(_EFFECTS)})"
                  f"{did_you_mean(value, _EFFECTS)}")
        return Effect.UNSUPPORTED
    return Effect(value)


def _rules(node: yaml.Node | None, key: str, sources: Mapping[str, str], ctx: Ctx,
           fixes: Mapping[str, str], default: Effect) -> list[Rule]:
    """Rules of a list; a rule without its own ``fix`` or ``effect`` takes the target's."""
    if node is None or _yaml.is_null(node):
        return []
    if not isinstance(node, yaml.SequenceNode):
        ctx.error(node, key, "expected a list of rules")
        return []
    rules = []
    for i, item in enumerate(node.value):
        sub = f"{key}[{i}]"
        fields = _mapping(item, sub, ctx)
        check = _scalar(fields.get("check"), f"{sub}.check", ctx) if "check" in fields else ""
        if not check:
            ctx.error(item, sub, "missing required key 'check'")
            continue
        if check not in CONSTRAINTS:
            ctx.error(fields["check"], f"{sub}.check", f"unknown constraint {check!r} "
                      f"(allowed: {allowed_list(CONSTRAINTS)}){did_you_mean(check, CONSTRAINTS)}")
            continue
        wanted = params_of(CONSTRAINTS[check])
        params: dict[str, Any] = {}
        for name, value_node in fields.items():
            if name in _RULE_KEYS:
                continue
            if name not in wanted:
                allowed = [*_RULE_KEYS, *wanted]
                ctx.error(value_node, sub, f"unknown key {name!r} for constraint {check!r} (allowed: "
                          f"{allowed_list(allowed)}){did_you_mean(name, allowed)}")
                continue
            params[name] = _param(value_node, f"{sub}.{name}", wanted[name], ctx)
        for name, p in wanted.items():
            if name not in params and p.default is inspect.Parameter.empty:
                ctx.error(item, sub, f"constraint {check!r} needs parameter {name!r}")
        rule_id = _scalar(fields["id"], f"{sub}.id", ctx) if "id" in fields else check
        fix = _scalar(fields["fix"], f"{sub}.fix", ctx) if "fix" in fields else fixes.get(check, "")
        source = _source(fields.get("source"), f"{sub}.source", sources, ctx) \
            if "source" in fields or key == "all_ops" else ""
        rules.append(Rule(rule_id, check, params, source, fix,
                          _effect(fields.get("effect"), f"{sub}.effect", ctx, default)))
    return rules


def _param(node: yaml.Node, key: str, param: inspect.Parameter, ctx: Ctx) -> Any:
    """A rule parameter, checked against the constraint's annotation."""
    value = _yaml.to_python(node)
    _printable(value, node, key, ctx)
    annotation = str(param.annotation)
    if annotation == "DtypeSpecs":
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            return ctx.error(node, key, "expected a list of dtype specs")
        for spec in value:
            for alt in spec.removesuffix("...").split("|"):
                if alt not in DTYPE_TOKENS:
                    ctx.error(node, key, f"unknown dtype {alt!r} (allowed: {allowed_list(DTYPE_TOKENS)})"
                              f"{did_you_mean(alt, DTYPE_TOKENS)}")
        return value
    if annotation == "list[str]":
        if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
            return ctx.error(node, key, f"expected a non-empty list of names, got {value!r}")
        return value
    if annotation == "list[int]":
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return ctx.error(node, key, f"expected a list of integers, got {value!r}")
        return value
    if annotation == "list[Any]":
        if not isinstance(value, list) or not value:
            return ctx.error(node, key, f"expected a non-empty list, got {value!r}")
        return value
    if annotation in ("float", "int") and (not isinstance(value, (int, float)) or isinstance(value, bool)):
        return ctx.error(node, key, f"expected a number, got {value!r}")
    if annotation == "int" and not isinstance(value, int):
        return ctx.error(node, key, f"expected an integer, got {value!r}")
    if annotation == "str" and (not isinstance(value, str) or not value):
        return ctx.error(node, key, f"expected a text value, got {value!r}")
    return value
