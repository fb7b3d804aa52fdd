"""The report's ``targets`` section: each target's results as JSON, op by op.

``edgeconv check --format json`` writes exactly this section, so it is a module of its own: the JSON needs
none of the Markdown the rest of :mod:`edgeconv.report` writes (``check`` imports neither), and the build's
report, the graph explorer and ``check`` all take it from here.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable, Sequence

from .targets.checker import OpResult, TargetResult
from .targets.target import Effect, Placement, Target

if typing.TYPE_CHECKING:
    from . import report_model as rm


def op_json(result: OpResult, layers: Sequence[str] | None) -> rm.OpVerdict:
    op = result.op
    entry: rm.OpVerdict = {
        "index": op.index,
        "subgraph": op.subgraph,
        "type": op.type,
        "version": op.version,
        "name": op.name,
        "status": result.status.value,
        "violations": [
            {"rule": v.rule, "text": v.text, "detail": v.detail, "fix": v.fix, "effect": v.effect.value,
             "source": v.source}
            for v in result.violations
        ],
        "macs": result.cost.macs,
        "weight_bytes": result.cost.weight_bytes,
    }
    if result.cost.gemm is not None:
        entry["gemm"] = dict(zip(("m", "n", "k"), result.cost.gemm))
    if result.follows_blocking:
        entry["follows_blocking_op"] = True
    if result.blocked_by is not None:
        entry["blocked_by"] = result.blocked_by
    if op.custom_code is not None:
        entry["custom_code"] = op.custom_code
    if layers is not None:
        entry["source_layers"] = op_layers(result, layers)
    return entry


def op_layers(result: OpResult, layers: Sequence[str]) -> list[str]:
    """Source layers of an op: from its output names, else from its weights (a model output
    is named after the signature, its weights after their layer), else from its other
    inputs (a QUANTIZE/DEQUANTIZE the converter added is named after its neighbour)."""
    from .ir import source_layers  # a build's (layer names come from its graph); `check` has none

    op = result.op
    inputs = [t for t in op.inputs if t is not None]
    for tensors in (op.outputs, [t for t in inputs if t.constant], [t for t in inputs if not t.constant]):
        found = sorted({layer for t in tensors for layer in source_layers(t.name, layers)})
        if found:
            return found
    return []


def targets_json(results: Iterable[TargetResult], layers: Sequence[str] | None = None) -> list[rm.TargetVerdict]:
    out = []
    for r in results:
        entry: rm.TargetVerdict = {
            "name": r.target.name,
            "title": r.target.title,
            "verdict": r.verdict.value,
            "counts": r.counts(),
            "macs": r.macs(),
            "shares": r.shares(),
            "warnings": sum(len(o.warnings) for o in r.ops),
            "weight_bytes": sum(o.cost.weight_bytes for o in r.ops),
            "ops": [op_json(o, layers) for o in r.ops],
        }
        if r.target.placement is Placement.SEGMENT:
            entry["first_blocking_op"] = (_blocking_json(r.first_blocking, layers) if r.first_blocking is not None
                                          else None)
            entry["blocking_ops"] = [_blocking_json(b, layers) for b in r.blocking]
        if r.error is not None:
            entry["error"] = r.error
        if r.estimates is not None:
            entry["estimates"] = dict(r.estimates)
            entry["estimates_basis"] = estimates_basis(r.target)
        out.append(entry)
    return out


def _blocking_json(result: OpResult, layers: Sequence[str] | None) -> rm.BlockingOp:
    """A root cause of a segment placement's CPU fallback: the op, its reasons, its layers."""
    blocking = [v for v in result.violations if v.effect is not Effect.WARNING]
    entry: rm.BlockingOp = {"index": result.op.index, "type": result.op.type, "name": result.op.name,
                            "rules": [v.rule for v in blocking], "reasons": [v.detail for v in blocking],
                            "fixes": sorted({v.fix for v in blocking if v.fix})}
    if layers is not None:
        entry["source_layers"] = op_layers(result, layers)
    return entry


def estimates_basis(target: Target) -> str:
    """What the estimates assumed: Vela's system config and memory mode, or the target file's layout."""
    if target.compiler is not None:
        return (f"system config {target.compiler.system_config or 'Vela default'}, "
                f"memory mode {target.compiler.memory_mode or 'Vela default'}")
    memory = target.parameter_memory
    return f"parameter_memory of the target file (source {memory.source})" if memory is not None else ""
