"""The build report: JSON (versioned, with a JSON Schema) and Markdown for people.

``targets_json`` is shared with ``edgeconv check``, whose JSON output is exactly
the report's ``targets`` section.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .converters.tflite_reader import TensorInfo, TFLiteModel
from .ir import source_layers
from .passes.base import PassResult
from .targets.checker import OpResult, TargetResult, Verdict
from .targets.target import OpStatus

REPORT_SCHEMA_VERSION = 1
SCHEMA_PATH = Path(__file__).parent / "schemas" / "report.schema.json"


def op_json(result: OpResult, layers: Sequence[str] | None) -> dict[str, Any]:
    op = result.op
    entry: dict[str, Any] = {
        "index": op.index,
        "subgraph": op.subgraph,
        "type": op.type,
        "version": op.version,
        "name": op.name,
        "status": result.status.value,
        "violations": [
            {"rule": v.rule, "text": v.text, "detail": v.detail, "fix": v.fix, "status": v.status.value,
             "source": v.source}
            for v in result.violations
        ],
    }
    if op.custom_code is not None:
        entry["custom_code"] = op.custom_code
    if layers is not None:
        entry["source_layers"] = op_layers(result, layers)
    return entry


def op_layers(result: OpResult, layers: Sequence[str]) -> list[str]:
    """Source layers of an op: from its output names, else from its non-constant inputs
    (a QUANTIZE/DEQUANTIZE the converter added is named after its neighbour)."""
    op = result.op
    for tensors in (op.outputs, [t for t in op.inputs if t is not None and not t.constant]):
        found = sorted({layer for t in tensors for layer in source_layers(t.name, layers)})
        if found:
            return found
    return []


def targets_json(results: Iterable[TargetResult], layers: Sequence[str] | None = None) -> list[dict[str, Any]]:
    return [{
        "name": r.target.name,
        "title": r.target.title,
        "verdict": r.verdict.value,
        "counts": r.counts(),
        "ops": [op_json(o, layers) for o in r.ops],
    } for r in results]


def tensor_json(t: TensorInfo) -> dict[str, Any]:
    out: dict[str, Any] = {"name": t.name, "dtype": t.dtype.value, "shape": list(t.shape)}
    if t.quantization is not None and not t.quantization.per_axis:
        out["scale"] = t.quantization.scale[0]
        out["zero_point"] = t.quantization.zero_point[0] if t.quantization.zero_point else 0
    return out


def model_json(model: TFLiteModel) -> dict[str, Any]:
    sg = model.main
    sig = model.signatures[0] if model.signatures else None
    by_index_in = {v: k for k, v in sig.inputs.items()} if sig else {}
    by_index_out = {v: k for k, v in sig.outputs.items()} if sig else {}

    def io(indices: Sequence[int], names: Mapping[int, str]) -> list[dict[str, Any]]:
        items = []
        for i in indices:
            entry = tensor_json(sg.tensors[i])
            if i in names:
                entry["signature_name"] = names[i]
            items.append(entry)
        return items

    return {
        "sha256": model.sha256,
        "bytes": model.size,
        "subgraphs": len(model.subgraphs),
        "ops": len(model.ops),
        "op_types": dict(sorted(Counter(op.label for op in model.ops).items())),
        "inputs": io(sg.inputs, by_index_in),
        "outputs": io(sg.outputs, by_index_out),
    }


def pass_json(result: PassResult) -> dict[str, Any]:
    return {
        "name": result.name,
        "removed": result.removed_counts(),
        "removed_by_layer": result.removed_by_layer(),
        "removed_by_reason": result.removed_by_reason(),
        "ops_before": result.ops_before,
        "ops_after": result.ops_after,
        "rewrites": [{"layers": list(r.layers), "node": r.node, "description": r.description}
                     for r in result.rewrites],
        "notes": list(result.notes),
    }


def gate_json(results: Sequence[TargetResult], extra_reasons: Sequence[str] = ()) -> dict[str, Any]:
    reasons = list(extra_reasons)
    for r in results:
        if r.verdict is Verdict.FAIL:
            bad = Counter(o.op.label for o in r.ops if o.status is OpStatus.UNSUPPORTED)
            listed = ", ".join(f"{k} x{v}" for k, v in sorted(bad.items()))
            reasons.append(f"target {r.target.name}: {sum(bad.values())} unsupported op(s): {listed}")
    return {"verdict": "fail" if reasons else "pass", "reasons": reasons}


def dumps(report: Mapping[str, Any]) -> str:
    return json.dumps(report, indent=2, sort_keys=False, allow_nan=False) + "\n"


# -- Markdown -----------------------------------------------------------------------------------

def _fmt_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{k} x{v}" for k, v in counts.items()) or "nothing"


def _esc(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def targets_markdown(targets: Sequence[Mapping[str, Any]]) -> list[str]:
    lines = ["| target | verdict | supported | cpu_fallback | unsupported |", "|---|---|---|---|---|"]
    for t in targets:
        c = t["counts"]
        lines.append(f"| {t['name']} | **{t['verdict'].upper()}** | {c['supported']} | {c['cpu_fallback']} | "
                     f"{c['unsupported']} |")
    for t in targets:
        groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
        for op in t["ops"]:
            if op["status"] == "supported":
                continue
            for v in op["violations"]:
                groups.setdefault((op["type"], v["rule"], v["status"]), []).append({**op, "v": v})
        if not groups:
            continue
        lines += ["", f"### Ops not supported by {t['name']}", "",
                  "| op type | status | rule | reason (first seen) | ops | source layers | fix |",
                  "|---|---|---|---|---|---|---|"]
        for (op_type, rule, status), ops in sorted(groups.items()):
            first = ops[0]["v"]
            indices = ", ".join(f"#{o['index']}" for o in ops[:8]) + (" ..." if len(ops) > 8 else "")
            layers = sorted({layer for o in ops for layer in o.get("source_layers", [])})
            lines.append(f"| {op_type} | {status} | `{rule}` | {_esc(first['text'])} Observed: "
                         f"{_esc(first['detail'])} | {indices} | {_esc(', '.join(layers)) or '-'} | "
                         f"{_esc(first['fix']) or '-'} |")
    return lines


def to_markdown(report: Mapping[str, Any]) -> str:
    gate = report["gate"]
    tfl = report["artifacts"]["tflite"]
    q = report["quantization"]
    lines = [f"# edgeconv report: {report['name']}", "",
             f"**Gate: {gate['verdict'].upper()}**. Built `{tfl['path']}` ({tfl['bytes']:,} bytes, "
             f"{q['mode']}, {q['input_type']} in / {q['output_type']} out) from `{report['model']['path']}`.", ""]
    for reason in gate["reasons"]:
        lines.append(f"- {reason}")
    if gate["reasons"]:
        lines.append("")
    lines += ["## Targets", ""] + targets_markdown(report["targets"]) + [""]
    lines += ["## What the passes changed", ""]
    for p in report["passes"]:
        lines += [f"### {p['name']}", "", f"Removed: {_fmt_counts(p['removed'])}.", ""]
        if p["removed_by_layer"]:
            lines += ["| source layer | removed ops |", "|---|---|"]
            lines += [f"| {layer} | {_fmt_counts(c)} |" for layer, c in p["removed_by_layer"].items()]
            lines.append("")
        if p["removed_by_reason"]:
            lines += ["| why | removed ops |", "|---|---|"]
            lines += [f"| {_esc(reason)} | {_fmt_counts(c)} |" for reason, c in p["removed_by_reason"].items()]
            lines.append("")
        for r in p["rewrites"]:
            lines.append(f"- rewrite in {', '.join(r['layers']) or r['node']}: {r['description']}")
        for note in p["notes"]:
            lines.append(f"- {note}")
        lines.append("")
    eq = report["equivalence"]
    lines += ["## Passes changed nothing that matters", "",
              f"Max abs difference between the model in inference mode and the cleaned graph over "
              f"{eq['samples']} calibration samples: **{eq['max_abs_diff']:.3g}** (limit {eq['tolerance']:g}): "
              f"{'ok' if eq['passed'] else 'FAILED'}.", ""]
    cal = q["calibration"]
    lines += ["## Calibration", "",
              f"{cal['samples']} of {cal['available']} samples from `{cal['path']}` ({cal['source']}, seed "
              f"{cal['seed']}), samples sha256 `{cal['samples_sha256'][:16]}...`.", ""]
    lines += ["| input | min | max | mean | std |", "|---|---|---|---|---|"]
    lines += [f"| {name} | {s['min']:.4g} | {s['max']:.4g} | {s['mean']:.4g} | {s['std']:.4g} |"
              for name, s in cal["stats"].items()]
    lines.append("")
    return "\n".join(lines)
