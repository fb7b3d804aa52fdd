"""Run the built model on every calibration and evaluation sample before any verdict.

A model that converts can still fail to run on real data: TFLite's int8 DIV stops on a divisor that
quantizes to its zero point (``div.cc: data[i] != zero_point was not true``), as a spectrogram front end
dividing by (max - min) does on quiet windows. Such a model must not pass, and it is the model's
property, not an internal error: this names the op, its layer, how many samples failed and the
likely fix. Cheap next to calibration (one interpreter call per batch).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from .. import report_model as rm
from ..ir import source_layers
from .recorded import Recording
from .runner import TFLiteRunner

_NODE = re.compile(r"Node number (\d+) \((\w+)\) failed to (invoke|prepare)")
FIXES = {
    "DIV": "the divisor quantizes to zero on these inputs: add a small epsilon to it before dividing, or keep the "
           "DIV in float (quantization.keep_float)",
}


def invoke_all(tflite: bytes, data: Iterable[tuple[str, Iterable[Mapping[str, np.ndarray]]]],
               layers: Sequence[str], record: Recording | None = None) -> rm.Invoke:
    """Every batch of every sample set through the built model; what failed and where. The outputs on the
    sample set ``record`` is for are recorded there (parity reads them back)."""
    runner = TFLiteRunner(tflite)
    total = failed = 0
    first: str | None = None
    per_set: dict[str, dict[str, int]] = {}
    for role, batches in data:
        done = bad = ran = 0
        kept = record if record is not None and record.role == role else None
        for feeds in batches:
            size = len(next(iter(feeds.values())))
            done += size
            try:
                outputs = runner.run(feeds)
            except RuntimeError as exc:
                bad += size
                first = first or str(exc)
                continue
            ran += 1
            if kept is not None:
                kept.add(outputs)
        if kept is not None:
            kept.finish(ran if not bad else -1)
        per_set[role] = {"samples": done, "failed": bad}
        total, failed = total + done, failed + bad
    out: rm.Invoke = {"samples": total, "failed": failed, "per_set": per_set, "error": None, "op": None}
    if first is not None:
        out["error"] = " ".join(first.split())[:300].rstrip(".").replace("true.Node", "true. Node")
        found = _NODE.search(first)
        if found:
            index, op_type = int(found.group(1)), found.group(2)
            op = next((o for o in runner.model.ops if o.subgraph == 0 and o.index == index), None)
            names = [t.name for t in op.outputs] if op is not None else []
            out["op"] = {"index": index, "type": op_type, "name": names[0] if names else "",
                         "source_layers": sorted({x for n in names for x in source_layers(n, layers)}),
                         "fix": FIXES.get(op_type, f"check the range of the {op_type} inputs on these samples, or "
                                                    f"keep the {op_type} in float (quantization.keep_float)")}
    return out


def sentence(result: Mapping[str, Any]) -> str:
    """One line: how many samples fail, at which op and layer, and the likely fix."""
    if not result["failed"]:
        return f"the built model runs on all {result['samples']} calibration and evaluation samples"
    op = result["op"]
    where = ""
    fix = "check the model on these inputs"
    if op is not None:
        layer = (f" (layer {', '.join(op['source_layers'])})" if op["source_layers"] else
                 f" ('{op['name']}')" if op.get("name") else "")
        where = f" at op #{op['index']} {op['type']}{layer}"
        fix = op["fix"]
    return (f"the built model fails to run on {result['failed']} of {result['samples']} samples{where}: "
            f"{result['error']}. Likely fix: {fix}")


def invoke_stage(tflite: bytes, calib: Any, evaluation: Any, batch: int,
                 layers: Sequence[str], record: Recording | None = None) -> tuple[rm.Invoke, Any]:
    """Before any verdict, the built model must run on every sample the build has: the report's section
    and the runtime check (edgeconv.verdict)."""
    from .. import verdict

    sets = [(calib.role, calib.batches(batch)), *([("evaluation", evaluation.batches(batch))] if evaluation else [])]
    runs = invoke_all(tflite, sets, layers, record)
    return runs, verdict.simple("runtime.invoke", verdict.Kind.RUNTIME, not runs["failed"], sentence(runs),
                                runs["failed"], 0)
