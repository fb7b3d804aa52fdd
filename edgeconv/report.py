"""The build report: its sections as JSON (typed by :mod:`edgeconv.report_model`, whose JSON Schema
is generated from that model) and Markdown for people.

The ``targets`` section, which ``edgeconv check`` writes as its JSON, is :mod:`edgeconv.report_targets`'s.
"""

from __future__ import annotations

import json
import typing
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from . import markdown as md
from .converters.tflite_reader import TensorInfo, TFLiteModel
from .targets.parameter_memory import memory_line
from .verdict import AGREEMENT, target_passes

if typing.TYPE_CHECKING:
    from . import report_model as rm
    from .passes.base import PassResult

SCHEMA_PATH = Path(__file__).parent / "schemas" / "report.schema.json"


def tensor_json(t: TensorInfo) -> rm.Tensor:
    out: rm.Tensor = {"name": t.name, "dtype": t.dtype.value, "shape": list(t.shape)}
    if t.quantization is not None and not t.quantization.per_axis:
        out["scale"] = t.quantization.scale[0]
        out["zero_point"] = t.quantization.zero_point[0] if t.quantization.zero_point else 0
    return out


def model_json(model: TFLiteModel) -> rm.TfliteSection:
    sg = model.main
    sig = model.signatures[0] if model.signatures else None
    by_index_in = {v: k for k, v in sig.inputs.items()} if sig else {}
    by_index_out = {v: k for k, v in sig.outputs.items()} if sig else {}

    def io(indices: Sequence[int], names: Mapping[int, str]) -> list[rm.Tensor]:
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


def pass_json(result: PassResult) -> rm.PassSection:
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


def estimates_line(target: rm.TargetVerdict) -> str | None:
    """A compiler's own estimates (Vela's summary) in one line, with the system config and memory mode it
    assumed, or the parameter-memory estimate of an accelerator whose compiler cannot run here: the numbers a
    firmware engineer runs the compiler for."""
    e = target.get("estimates")
    if not e:
        return None
    if "parameter_bytes" in e:
        return memory_line(target["name"], e)
    parts = []
    if "sram_kib" in e:
        parts.append(f"SRAM {e['sram_kib']:,.1f} KiB")
    flash = e.get("off_chip_flash_kib", 0.0) + e.get("on_chip_flash_kib", 0.0)
    if "off_chip_flash_kib" in e or "on_chip_flash_kib" in e:
        parts.append(f"flash {flash:,.1f} KiB")
    if e.get("dram_kib"):
        parts.append(f"DRAM {e['dram_kib']:,.1f} KiB")
    if "cycles_total" in e:
        npu = f" ({e['cycles_npu']:,.0f} on the NPU)" if "cycles_npu" in e and e["cycles_npu"] != e["cycles_total"] \
            else ""
        parts.append(f"{e['cycles_total']:,.0f} cycles{npu}")
    if "inference_time_s" in e:
        per_s = f", {e['inferences_per_second']:,.0f} inferences/s" if "inferences_per_second" in e else ""
        seconds = e["inference_time_s"]
        took = f"{seconds * 1e6:,.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:,.2f} ms"
        parts.append(f"{took} per inference{per_s}")
    basis = f" with {target['estimates_basis']}" if target.get("estimates_basis") else ""
    return f"{target['name']} (Vela estimate{basis}): {'; '.join(parts)}" if parts else None


def console_lines(report: rm.Report, served_in: float | None = None) -> list[str]:
    """What a reviewer needs first, rendered from the report's verdict: a line per target (accelerators as
    their compiler says it), accuracy, SQNR, size and arena, what the pipeline loosened, the verdict and
    the reason for every failure. ``served_in``: the report came from the build cache in that many seconds
    (its stage times are the cached build's, not this run's)."""
    gate = report["gate"]
    checks = gate.get("checks", [])
    accel = {c["target"]: c for c in checks if c["kind"] == "accelerator" and c.get("target")}
    lines = []
    for t in report["targets"]:
        c = t["counts"]
        if t.get("error"):
            lines.append(f"{t['name']}: ERROR: {t['error']}")
        elif t["name"] in accel:
            a = accel[t["name"]]
            verdict = "PASS" if target_passes(t, checks) else "FAIL"
            lines.append(f"{a['sentence']} [{verdict}]")
        else:
            uncertain = f", {c['uncertain']} uncertain" if c.get("uncertain") else ""
            lines.append(f"{t['name']}: {'PASS' if target_passes(t, checks) else 'FAIL'} ({c['supported']} "
                         f"supported{uncertain}, "
                         f"{c['cpu_fallback']} cpu_fallback, {c['unsupported']} unsupported)")
            stop = first_unsupported(t)
            if stop is not None:
                lines.append(f"  {stop}")
        estimated = estimates_line(t) if not t.get("error") else None
        if estimated is not None:
            lines.append(f"  {estimated}")
    parity = report.get("parity")
    if parity:
        acc = parity.get("accuracy")
        if acc:
            lines.append(f"accuracy: {acc['source']:.2%} in float -> {acc['built']:.2%} built "
                         f"(drop {acc['drop']['built'] * 100:.2f} points, on {parity['samples']} "
                         f"{parity.get('data', 'evaluation')} samples)")
        kinds = parity.get("kinds", {})
        for name, per in parity["outputs"].items():
            m, index = per["built"], kinds.get(name) == "index"
            said = [] if index else [f"SQNR {_num(m['sqnr_db'], '.1f')} dB"]  # an index output has none
            if m["top1_agreement"] is not None:
                said.append(f"{AGREEMENT.get(kinds.get(name, ''), 'top-1 agreement')} {m['top1_agreement']:.2%}")
            if m.get("mean_iou") is not None:
                said.append(f"mean box IoU {m['mean_iou']:.3f}")
            lines.append(f"output {name!r}: {', '.join(said)} against the float model "
                         f"({parity.get('data', 'evaluation')} samples)")
    lines += drift_lines(report.get("runtime_drift"))
    memory = report.get("memory")
    tfl = report["tflite"]
    lines.append(f"size: {tfl['bytes']:,} bytes" + (f"; TFLite Micro arena (estimated): {memory['arena_bytes']:,} bytes"
                                                    if memory else ""))
    warnings = [c for c in checks if c["outcome"] == "warn" and c["kind"] == "calibration"]
    if warnings:
        lines.append(f"calibration: {len(warnings)} warning(s) (report.md lists them; "
                     "gates.fail_on_calibration_warnings "
                     "makes them fail)")
    lines += [f"loosened: {note}" for note in gate.get("disabled", [])]
    repair = report.get("repair")
    if repair:
        lines.append(repair["summary"])
    timings = report.get("timings")
    if served_in is not None:
        took = f" (the build it holds took {timings['total_s']:.1f} s)" if timings else ""
        lines.append(f"time: served from the cache in {served_in:.1f} s{took}")
    elif timings:
        stages = ", ".join(f"{k} {v:.1f} s" for k, v in timings["stages_s"].items())
        lines.append(f"time: {stages} (total {timings['total_s']:.1f} s)")
    lines.append(f"gate: {gate['verdict'].upper()}")
    lines += [f"  - {reason}" for reason in gate["reasons"]]
    why = first_cause(report)
    if why is not None:
        lines.append(f"  {why}")
    return lines


ISLAND_EDGES = ("QUANTIZE", "DEQUANTIZE")


def first_unsupported(target: Mapping[str, Any]) -> str | None:
    """Where a target stops, in the model's terms: its first unsupported op (not a float island's QUANTIZE or
    DEQUANTIZE when another op is unsupported: they follow from the op between them), the layers it came
    from, what its first rule found and the fix; and how many other op types report.md lists."""
    stopped = [o for o in target.get("ops", []) if o.get("status") == "unsupported" and o.get("violations")]
    if not stopped:
        return None
    first = next((o for o in stopped if o["type"] not in ISLAND_EDGES), stopped[0])
    violation = first["violations"][0]
    layers = first.get("source_layers") or []
    where = f" (layer {', '.join(repr(name) for name in layers)})" if layers else ""
    others = len({o["type"] for o in stopped} - {first["type"]})
    more = f" ({others} more op type{'s' if others > 1 else ''} in report.md)" if others else ""
    return (f"first unsupported op #{first['index']} {first['type']}{where}: {violation['detail']}; fix: "
            f"{violation['fix']}{more}")


def first_cause(report: rm.Report) -> str | None:
    """The diagnosis' first cause in one line (the console's FAIL lines, the annotations)."""
    return cause_line(report.get("diagnosis"))


def cause_line(found: rm.Diagnosis | None) -> str | None:
    """A diagnosis' first cause, its fix, and how many more causes report.md lists."""
    if not found or not found["causes"]:
        return None
    c = found["causes"][0]
    more = len(found["causes"]) - 1
    return (f"cause ({c['id']}): {c['sentence']}; fix: {c['fix']}"
            + (f" ({more} more in report.md)" if more else ""))


def diagnosis_markdown(found: rm.Diagnosis | None) -> list[str]:
    if not found:
        return []
    lines = ["## Why the gates fail", "",
             f"The causes of {', '.join(md.code(f) for f in found['failed'])}, ranked: confirmed ones first (an "
             "input's quantization alone gives at least half the INT8 model's error, or the tensor's op is among the 3 "
             "that add the most error), then the op that adds the most error, then what was found but not "
             "confirmed.", "", "| rank | cause | confirmed | what | fix |", "|---|---|---|---|---|"]
    lines += [f"| {c['rank']} | {md.code(c['id'], cell=True)} | {'yes' if c['confirmed'] else 'no'} | "
              f"{md.text(c['sentence'])} | "
              f"{md.text(c['fix'])} |" for c in found["causes"]]
    return [*lines, ""]


def dumps(report: rm.Report) -> str:
    return json.dumps(report, indent=2, sort_keys=False, allow_nan=False) + "\n"


# -- Markdown -----------------------------------------------------------------------------------

def _fmt_counts(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{md.text(k)} x{v}" for k, v in sorted(counts.items())) or "nothing"


def targets_markdown(targets: Sequence[rm.TargetVerdict], checks: Sequence[rm.Check] = ()) -> list[str]:
    """The targets' table (each verdict with the gate checks made on it: verdict.target_passes), then per
    target what stops it and the ops not fully supported."""
    lines = ["| target | verdict | supported | uncertain | cpu_fallback | unsupported | warnings | share of MACs "
             "supported |", "|---|---|---|---|---|---|---|---|"]
    for t in targets:
        c = t["counts"]
        word = "PASS" if target_passes(t, checks) else "FAIL"
        lines.append(f"| {md.text(t['name'])} | **{word}** | {c['supported']} | {c.get('uncertain', 0)} | "
                     f"{c['cpu_fallback']} | {c['unsupported']} | {t['warnings']} | {t['shares']['macs']:.1%} |")
    for t in targets:
        if t.get("error"):
            lines += ["", f"**{md.text(t['name'])}: no verdict.** {md.text(t['error'])}"]
        estimated = estimates_line(t)
        if estimated is not None:
            lines += ["", md.text(estimated)]
    for t in targets:
        blocking = t.get("first_blocking_op")
        if blocking:
            where = md.text(", ".join(blocking.get("source_layers", []))) or "-"
            lines += ["", f"**{md.text(t['name'])}: first blocking op #{blocking['index']} "
                      f"{md.text(blocking['type'])}** (layers: {where}): {md.text('; '.join(blocking['reasons']))}. "
                      "Every op that depends on it runs on the CPU."]
        groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
        for op in t["ops"]:
            for v in op["violations"]:
                if op["status"] != "supported" or v["effect"] == "warning":
                    groups.setdefault((op["type"], v["rule"], v["effect"]), []).append({**op, "v": v})
        if not groups:
            continue
        lines += ["", f"### Ops not fully supported by {md.text(t['name'])}", "",
                  "| op type | effect | rule | reason (first seen) | ops | source layers | fix |",
                  "|---|---|---|---|---|---|---|"]
        for (op_type, rule, status), ops in sorted(groups.items()):
            first = ops[0]["v"]
            indices = ", ".join(f"#{o['index']}" for o in ops[:8]) + (" ..." if len(ops) > 8 else "")
            layers = sorted({layer for o in ops for layer in o.get("source_layers", [])})
            lines.append(f"| {md.text(op_type)} | {md.text(status)} | {md.code(rule, cell=True)} | "
                         f"{md.text(first['text'])} Observed: {md.text(first['detail'])} | "
                         f"{indices} | {md.text(', '.join(layers)) or '-'} | "
                         f"{md.text(first['fix']) or '-'} |")
    return lines


def _engine_text(q: rm.Quantization) -> str:
    """How AI Edge Quantizer quantized the model, when it did."""
    if q.get("engine") != "ai-edge-quantizer":
        return ""
    parts = [f"int16 activations for {md.text(', '.join(q['int16_ops']))}"] if q.get("int16_ops") else []
    if q.get("range_percentile") is not None:
        parts.append(f"activation ranges at the {q['range_percentile']:g}th percentile")
    return ", quantized by AI Edge Quantizer" + (f" ({'; '.join(parts)})" if parts else "")


def to_markdown(report: rm.Report) -> str:
    gate = report["gate"]
    tfl = report["artifacts"]["tflite"]
    q = report["quantization"]
    model = report["model"]
    how = (md.text(f"{q['mode']}, {q['input_type']} in / {q['output_type']} out")
           + (f", float kept for {md.text(', '.join(q['keep_float']))}" if q.get("keep_float") else "")
           + _engine_text(q) if q is not None else "an existing .tflite, checked as it is")
    lines = [f"# edgeconv report: {md.text(report['name'])}", "",
             f"**Gate: {md.text(gate['verdict'].upper())}**. Built {md.code(tfl['path'])} ({tfl['bytes']:,} bytes, "
             f"{how}) from "
             f"{md.code(model['path'])} ({md.text(model['format'])}).", ""]
    for reason in gate["reasons"]:
        lines.append(f"- {md.text(reason)}")
    if gate["reasons"]:
        lines.append("")
    lines += [f"- **loosened**: {md.text(note)}" for note in gate.get("disabled", [])]
    if gate.get("disabled"):
        lines.append("")
    if gate.get("checks"):
        lines += ["## Verdict", "", "| check | outcome | measured | limit | |", "|---|---|---|---|---|"]
        lines += [f"| {md.code(c['id'], cell=True)} | {md.text(c['outcome'])} | {_cell(c['measured'])} | "
                  f"{_cell(c['limit'])} | {md.text(c['sentence'])} |" for c in gate["checks"]]
        lines.append("")
    if model.get("notes"):
        lines += ["## Loading", ""] + [f"- {md.text(n)}" for n in model["notes"]] + [""]
    lines += ["## Targets", ""] + targets_markdown(report["targets"], report["gate"]["checks"]) + [""]
    overlays = [o["path"] for o in report["artifacts"].get("explorer", [])]
    if overlays:
        sqnr = (" and the per-op quantization SQNR" if any(p.endswith("quantization-sqnr.json") for p in overlays)
                else "")
        lines += [f"On the graph: `edgeconv view` on this folder opens the model in Model Explorer with each target's "
                  f"op status, rule and fix{sqnr} (node data files in `explorer/`; any Model Explorer loads them "
                  "with 'Add per-node data').", ""]
    if report["passes"]:
        lines += ["## What the passes changed", ""]
    for p in report["passes"]:
        lines += passes_markdown(p)
    eq = report["equivalence"]
    if eq is not None:
        lines += ["## Passes changed nothing that matters", "",
                  f"Max abs difference between the model in inference mode and the cleaned graph over "
                  f"{eq['samples']} {md.text(eq.get('inputs', 'calibration samples'))}:"
                  f" **{eq['max_abs_diff']:.3g}** (limit {eq['tolerance']:g}): "
                  f"{'ok' if eq['passed'] else 'FAILED'}.", ""]
    lines += verification_markdown(report)
    cal = q["calibration"] if q is not None else None
    if q is not None and cal is None:
        lines += ["## Calibration", "", f"None: mode {q['mode']} needs no calibration data.", ""]
    elif cal is not None:
        lines += ["## Calibration", ""]
        if cal["warnings"]:
            lines += [f"**{len(cal['warnings'])} warning(s)** about the calibration data:", ""]
            lines += [f"- {md.code(w['check'])}: {md.text(w['message'])}" for w in cal["warnings"]]
            lines.append("")
        lines += _data_markdown(cal)
        ev = report.get("evaluation")
        if ev is not None:
            lines += ["Evaluation data, for comparison:", ""] + _data_markdown(ev)
    return "\n".join(lines)


def _cell(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value) if isinstance(value, int) else md.text(value)


def _culprit_where(c: rm.Culprit) -> str:
    where = md.text(", ".join(c["source_layers"])) or md.code(c["tensor"], cell=True)
    return f"{where} (model output)" if c["model_output"] else where


def _num(value: Any, fmt: str) -> str:
    return "-" if value is None else format(value, fmt)


def _held(held: Mapping[str, Any] | None) -> str:
    if held is None:
        return "-"
    sqnr = ", ".join(_num(v, ".1f") for v in held["sqnr_db"].values())
    return f"{'fail' if held['failed'] else 'pass'} ({sqnr} dB)"


def repair_markdown(found: rm.Repair | None) -> list[str]:
    """The repair search: each trial with its costs, the chosen one and its snippet."""
    if not found:
        return []
    lines = ["## Repair", "", md.text(found["summary"]) + ".", ""]
    cause = found.get("as_configured")
    if cause is not None:
        lines += ["The build as configured (before the change):", ""]
        lines += [f"- failed: {md.text(f)}" for f in cause["failed"]]
        lines += [f"- calibration finding{' (severe)' if f['severe'] else ''}: {md.text(f['message'])}"
                  for f in cause["findings"]]
        lines.append("")
    lines += [f"- not tried: {md.text(why)}" for why in found["skipped"]] + ([""] if found["skipped"] else [])
    if found["snippet"]:
        lines += ["The output is built with this change; add it to the pipeline (merge the keys into the sections "
                  "it names) to build the same bytes without the search:", "", *md.fenced(found["snippet"], "yaml"), ""]
    samples = found.get("samples")
    if samples:
        lines += [f"The trials are compared on {samples['chosen_on']} evaluation samples; the last "
                  f"{samples['held_back']} are held back: the winner is validated on them (`held back`).", ""]
    targets = sorted({t for trial in found["trials"] for t in trial["mac_share"]})
    lines += ["| trial | change | gates | accuracy | SQNR (dB) | top-1 agreement | "
              + " | ".join(f"MACs supported on {md.text(t)}" for t in targets) + " | bytes | s | held back |",
              "|---|---|---|---|---|---|" + "---|" * len(targets) + "---|---|---|"]
    for t in found["trials"]:
        mark = " **(chosen)**" if t["trial"] == found["chosen"] else ""
        mark += f" (interface: {md.text(t['interface_change'])})" if t.get("interface_change") else ""
        gates = "pass" if t["passes_gates"] else "fail: " + "; ".join(t["failed"])
        lines.append(f"| {t['trial']}{mark} | {md.text(t['change'])} | {md.text(gates)} | "
                     f"{_num(t['accuracy'], '.2%')} | "
                     + ", ".join(_num(v, ".1f") for v in t["sqnr_db"].values()) + " | "
                     + ", ".join(_num(v, ".2%") for v in t["top1_agreement"].values()) + " | "
                     + " | ".join(f"{t['mac_share'].get(name, 0.0):.1%}" for name in targets)
                     + f" | {t['bytes']:,} | {t['seconds']:.1f} | {_held(t.get('held_back'))} |")
    return [*lines, ""]


def verification_markdown(report: rm.Report) -> list[str]:
    """Parity, the layers that add the most error, the keep-float search, memory and firmware files."""
    lines: list[str] = []
    parity = report.get("parity")
    if parity is not None:
        lines += ["## Parity: source model vs float .tflite vs built .tflite", "",
                  f"On {parity['samples']} {md.text(parity.get('data', 'evaluation'))} samples; the source model in "
                  "inference "
                  "mode is the reference.",
                  "", "| output | model | max abs error | mean abs error | cosine | SQNR (dB) | top-1 agreement |",
                  "|---|---|---|---|---|---|---|"]
        for name, per in parity["outputs"].items():
            for model, m in per.items():
                top1 = "-" if m["top1_agreement"] is None else f"{m['top1_agreement']:.2%}"
                top1 += f" (mean box IoU {m['mean_iou']:.3f})" if m.get("mean_iou") is not None else ""
                lines.append(f"| {md.text(name)} | {md.text(model)} | {m['max_abs_error']:.3g} | "
                             f"{m['mean_abs_error']:.3g} | "
                             f"{m['cosine']:.6f} | {_num(m['sqnr_db'], '.1f')} | {top1} |")
        acc = parity.get("accuracy")
        if acc is not None:
            lines += ["", f"Accuracy ({md.code(acc['output'])} against the labels): source {acc['source']:.2%}, float "
                      f".tflite {acc['tflite_float']:.2%}, built {acc['built']:.2%}: **drop "
                      f"{acc['drop']['built']:.2%}**."]
        lines.append("")
    lines += diagnosis_markdown(report.get("diagnosis"))
    culprits = report.get("culprits")
    if culprits:
        lines += ["## Where the quantization error comes from", "",
                  "Each quantized op next to the same op in float on the same inputs, ranked by the share of the "
                  "float op's (intermediate) output values its quantization erases to zero, then by its SQNR; "
                  "`rmse/scale` is the error it adds (plain rounding: about 0.29)."
                  + (" Measured on the calibration samples: the pipeline has no evaluation data."
                     if parity is not None and parity.get("data") == "calibration" else ""), "",
                  "| rank | op | source layers | erased | SQNR (dB) | rmse/scale |", "|---|---|---|---|---|---|"]
        lines += [f"| {c['rank']} | {md.text(c['op'])} | {_culprit_where(c)} | {c['erased']:.1%}"
                  f"{' (output: not ranked)' if c['model_output'] else ''} | {_num(c['sqnr_db'], '.1f')} | "
                  f"{c['rmse_per_scale']:.2f} |" for c in culprits]
        lines.append("")
    elif (q := report.get("quantization")) is not None and q.get("engine") == "ai-edge-quantizer" and report.get(
            "parity"):
        lines += ["## Where the quantization error comes from", "",
                  "Not measured: the per-op ranking compares the TFLite converter's quantization op by op (TF's "
                  "QuantizationDebugger), and AI Edge Quantizer quantized this model. The parity numbers above are "
                  "the built model's.", ""]
    suggestion = report.get("keep_float_suggestion")
    if suggestion is not None:
        lines += ["## Keeping layers in float", ""]
        if suggestion["found"]:
            lines += [f"Keeping **{md.text(', '.join(suggestion.get('layers') or []))}** in float meets the gates. "
                      "Add to the pipeline:", "",
                      *md.fenced("quantization:\n  keep_float:\n"
                                 + "".join(f"    - {json.dumps(p)}\n" for p in suggestion["keep_float"] or []),
                                 "yaml"), ""]
        else:
            lines += ["No set of the worst layers tried meets the gates.", ""]
        lines += ["| step | layers in float | gates | accuracy | bytes |", "|---|---|---|---|---|"]
        lines += [f"| {md.text(t['step'])} | {md.text(', '.join(t['layers']))} | "
                  f"{'pass' if t['passes_gates'] else 'fail'} | "
                  f"{_num(t['accuracy'], '.2%')} | {t['bytes']:,} |" for t in suggestion["steps"]]
        lines.append("")
    lines += repair_markdown(report.get("repair"))
    lines += drift_markdown(report.get("runtime_drift"))
    memory = report.get("memory")
    if memory is not None:
        lines += ["## Memory", "", f"Flash (the .tflite): {memory['flash_bytes']:,} bytes. TFLite Micro tensor arena, "
                  f"estimated: **{memory['arena_bytes']:,} bytes** ({memory['activations_bytes']:,} activations + "
                  f"{memory['bookkeeping_bytes']:,} bookkeeping, +{memory['margin']:.0%}; "
                  f"{md.text(memory['method'])}).", ""]
    firmware = report.get("firmware")
    if firmware and firmware["files"]:
        lines += ["## Firmware files", ""] + [f"- {md.code(f)}" for f in firmware["files"]] + [""]
        golden = (firmware.get("golden") or {}).get("reference")
        if golden:
            lines += [f"Golden vectors against edgeconv's NumPy reference (`edgeconv reference`): "
                      f"{golden_line(golden)}.", ""]
    onnx = report.get("onnx")
    if onnx is not None:
        lines += onnx_markdown(onnx)
    baseline = report.get("baseline")
    if baseline is not None:
        from .diff import diff_markdown

        lines += ["## Since the baseline", "", *diff_markdown(baseline["diff"], baseline["regressions"])]
    return lines


def onnx_model_markdown(m: Mapping[str, Any]) -> list[str]:
    """One ONNX model for `edgeconv check`: opsets, inputs, outputs, op counts, what is flagged."""
    opsets = md.text(", ".join(f"{k} {v}" for k, v in m["opsets"].items()))
    lines = [f"Opsets: {opsets}; IR version {m['ir_version']}; "
             f"{m['bytes']:,} bytes.", "", "| op | count |", "|---|---|"]
    lines += [f"| {md.text(op)} | {n} |" for op, n in m["ops"].items()]
    lines.append("")
    lines += [f"- {kind} {md.code(v['name'])} {md.text(str(v['dtype']) + ' ' + str(v['shape']))}"
              for kind, key in (("input", "inputs"), ("output", "outputs")) for v in m[key]]
    lines += [f"- **warning**: {md.text(w)}" for w in m.get("warnings", [])]
    return [*lines, ""]


def onnx_markdown(onnx: rm.Onnx) -> list[str]:
    """The ONNX models: files, op counts, where the ops came from, and how they agree."""
    lines = ["## ONNX", "", f"Opset {onnx['opset']}, checked with `onnx.checker` (full check) and run with ONNX "
             f"Runtime on the {onnx['data']} data.", "", "| model | file | bytes | inputs | outputs | ops |",
             "|---|---|---|---|---|---|"]
    for kind, m in onnx["models"].items():
        io = [md.text("; ".join(f"{v['name']} {v['dtype']} {v['shape']}" for v in m[key]))
              for key in ("inputs", "outputs")]
        lines.append(f"| {md.text(kind)} | {md.code(m['file'], cell=True)} | {m['bytes']:,} | {io[0]} | {io[1]} | "
                     f"{_fmt_counts(m['ops'])} |")
    lines.append("")
    origin = typing.cast("rm.FloatOnnxModel", onnx["models"]["float"]).get("from_tf")
    if origin:
        lines += ["| TensorFlow op (after the passes) | ONNX ops |", "|---|---|"]
        lines += [f"| {md.text(tf_op)} | {_fmt_counts(ops)} |" for tf_op, ops in origin.items()]
        lines.append("")
    flagged = [f"{kind}: custom domain(s) {', '.join(m['custom_domains'])}" for kind, m in onnx["models"].items()
               if m["custom_domains"]]
    lines += [f"- {md.text(f)}" for f in flagged]
    runs = onnx["parity"]
    for name, per in runs["float"]["outputs"].items():
        f = per["onnx_float"]
        lines.append(f"- float ONNX vs the source model, output {md.code(name)}: max abs error "
                     f"{f['max_abs_error']:.3g}, "
                     f"top-1 agreement {_num(f['top1_agreement'], '.2%')} on {runs['float']['samples']} samples")
    acc = runs["float"].get("accuracy")
    if acc:
        lines.append(f"- float ONNX accuracy: {acc['onnx_float']:.2%} (source {acc['source']:.2%})")
    if "int8" in runs:
        for name, per in runs["int8"]["outputs"].items():
            q = per["onnx_int8"]
            lines.append(f"- INT8 ONNX vs the built .tflite, output {md.code(name)}: top-1 agreement "
                         f"{_num(q['top1_agreement'], '.2%')}, max abs difference {q['max_abs_error']:.3g} "
                         f"(dequantized); {_num(runs['int8']['bit_exact'], '.2%')} of the raw output values "
                         "identical")
    return [*lines, ""]


def _data_markdown(data: rm.Data) -> list[str]:
    files = f", {data['file_count']} files" if data.get("file_count", 1) > 1 else ""
    lines = [f"{data['samples']} of {data['available']} samples from {md.code(data['path'])} "
             f"({md.text(data['source'])}{files}, "
             f"seed {data['seed']}), samples sha256 `{data['samples_sha256'][:16]}...`.", "",
             "| input | min | max | mean | std | neighbour correlation |", "|---|---|---|---|---|---|"]
    for name, s in data["stats"].items():
        corr = s.get("neighbour_correlation")
        lines.append(f"| {md.text(name)} | {s['min']:.4g} | {s['max']:.4g} | {s['mean']:.4g} | {s['std']:.4g} | "
                     f"{'-' if corr is None else f'{corr:.2f}'} |")
    lines.append("")
    return lines


def passes_markdown(p: rm.PassSection) -> list[str]:
    """One pass for a person: what it did per layer, why, and the op counts."""
    before, after = sum(p["ops_before"].values()), sum(p["ops_after"].values())
    lines = [f"### {md.text(p['name'])}", ""]
    if not p["removed"] and not p["rewrites"]:
        lines += [f"Nothing to do: {before} graph ops, none removed.", ""]
    else:
        lines += [f"{before} graph ops before, {after} after; removed {sum(p['removed'].values())}: "
                  f"{_fmt_counts(p['removed'])}.", ""]
    if p["rewrites"]:
        lines += ["| where | what changed |", "|---|---|"]
        lines += [f"| {md.text(', '.join(r['layers']) or r['node'])} | {md.text(r['description'])} |"
                  for r in p["rewrites"]]
        lines.append("")
    if p["removed_by_layer"]:
        lines += ["| source layer | removed ops |", "|---|---|"]
        lines += [f"| {md.text(layer)} | {_fmt_counts(c)} |" for layer, c in p["removed_by_layer"].items()]
        lines.append("")
    if p["removed_by_reason"]:
        lines += ["| why | removed ops |", "|---|---|"]
        lines += [f"| {md.text(reason)} | {_fmt_counts(c)} |" for reason, c in p["removed_by_reason"].items()]
        lines.append("")
    lines += [f"- {md.text(note)}" for note in p["notes"]]
    if p["notes"]:
        lines.append("")
    return lines


def target_lines(t: rm.TargetVerdict, checks: Sequence[rm.Check] = (), *, per_op: bool = True) -> list[str]:
    """A target's verdict (its own, and every gate check made on it: verdict.target_passes), counts and
    shares, then (``per_op``) each op's violations."""
    lines: list[str] = []
    c, shares = t["counts"], t["shares"]
    if t.get("error"):
        return [f"{t['name']}: ERROR: {t['error']}"]
    uncertain = f", {c['uncertain']} uncertain" if c.get("uncertain") else ""
    word = "PASS" if target_passes(t, checks) else "FAIL"
    lines.append(f"{t['name']}: {word} ({c['supported']} supported{uncertain}, "
                 f"{c['cpu_fallback']} cpu_fallback, {c['unsupported']} unsupported; {shares['macs']:.1%} of MACs "
                 "supported)")
    from .report import estimates_line

    estimated = estimates_line(t)
    if estimated is not None:
        lines.append(f"  {estimated}")
    blocking = t.get("first_blocking_op")
    if not per_op:
        return lines
    if isinstance(blocking, dict):
        lines.append(f"  first blocking op: #{blocking['index']} {blocking['type']}: "
                     f"{'; '.join(blocking['reasons'])}")
    ops = t["ops"]
    assert isinstance(ops, list)
    for op in ops:
        if op.get("follows_blocking_op"):
            continue
        for v in op["violations"]:
            lines.append(f"  #{op['index']} {op['type']} [{v['effect']}] {v['rule']}: {v['detail']}")
    following = sum(1 for op in ops if op.get("follows_blocking_op"))
    if following:
        lines.append(f"  {following} later op(s) run on the CPU only because they depend on a blocking op")
    return lines


def golden_line(golden: Mapping[str, Any]) -> str:
    """The golden vectors' cross-check with edgeconv.reference, in words, as Markdown."""
    if golden["verdict"] == "bit-exact":
        return f"bit-exact ({golden['tensors_compared']} tensor(s) compared)"
    if golden["verdict"] == "differs":
        d = golden["first_difference"]
        return (f"**differs**: first at op #{d['op']} {md.text(d['type'])} ('{md.text(d['tensor'])}'), up to "
                f"{d['max_lsb']} LSB on {d['differ']:.2%} of its values")
    return f"not computed: {md.text(golden['why'])}"


def drift_markdown(drift: rm.RuntimeDrift | None) -> list[str]:
    """Each target's runtime against edgeconv's reference, and the op outputs that differ."""
    if not drift:
        return []
    lines = ["## Runtimes against the reference", "",
             f"On {drift['samples']} {md.text(drift['data'])} samples, every op output a runtime exposes against "
             "edgeconv's "
             "NumPy reference of TFLite's reference kernels (`edgeconv reference`), in LSBs of the tensor's "
             "quantization.", ""]
    lines += [f"- {md.text(line.removeprefix('drift: '))}" for line in drift_lines(drift)]
    rows = [(kind, d) for kind, r in drift["runtimes"].items() for d in r.get("ops", [])]
    if rows:
        lines += ["", "| runtime | op | tensor | max LSB | values that differ |", "|---|---|---|---|---|"]
        lines += [f"| {md.text(kind)} | #{d['op']} {md.text(d['type'])} | {md.text(d['tensor'])} | {d['max_lsb']} | "
                  f"{d['differ']:.2%} |" for kind, d in rows]
    return [*lines, ""]


def drift_lines(drift: rm.RuntimeDrift | None) -> list[str]:
    """One line per runtime, for the console and `edgeconv check`."""
    if not drift:
        return []
    if not drift["runtimes"]:
        return ["drift: no target of this build has a runtime here (XNNPACK for arm-neon, LiteRT's optimized kernels "
                "for generic-int8, TFLite Micro for tflm-cmsis-nn)"]
    out = []
    for kind, r in drift["runtimes"].items():
        if r.get("error"):
            out.append(f"drift: {kind} ({r.get('target')}): not compared: {r['error']}")
            continue
        differ = f"{len(r['ops'])} of {r['tensors_compared']} op output(s) differ" if r["ops"] else \
            f"bit-exact on {r['tensors_compared']} op output(s)"
        first = r["ops"][0] if r["ops"] else None
        at = f"; first at op #{first['op']} {first['type']}" if first else ""
        out.append(f"drift: {kind} ({r.get('target')}): at most {r['max_lsb']} LSB from the reference, {differ}{at} "
                   f"({drift['samples']} {drift['data']} samples)")
    return out
