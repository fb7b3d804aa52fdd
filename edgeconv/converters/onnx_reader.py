"""Read an ONNX model without TensorFlow: op types and counts, opsets, inputs and outputs, and
what an edge toolchain may not run (custom domains, ops ONNX does not define). Needs the
``onnx`` package (``edgeconv[onnx]``)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from .. import report_model as rm
from ..errors import EdgeconvError, ModelFileError, rel
from ..inputs import MAX_MODEL_BYTES, read_bytes

STANDARD_DOMAINS = ("", "ai.onnx", "ai.onnx.ml")
ONNX_HINT = "pip install 'edgeconv[onnx]'"


def read_onnx(path: str | Path) -> rm.OnnxSummary:
    """The summary of an .onnx file; a file that is not an ONNX model is a clear error."""
    try:
        import onnx
    except ImportError:
        raise EdgeconvError(f"reading an .onnx model needs the onnx package, which is not installed: {ONNX_HINT}") \
            from None
    path = Path(path)
    if not path.is_file():
        raise ModelFileError(f"{rel(path)}: no such file")
    data = read_bytes(path, MAX_MODEL_BYTES, ModelFileError, "model file")  # a regular file, at most 2 GiB
    try:
        # The weights a model keeps in external files are not needed to list its ops, and are not read: a
        # missing .data file is no reason to refuse the model, and the files a model names are its author's
        # to choose.
        proto = onnx.load_model_from_string(data)
    except Exception as exc:  # protobuf DecodeError and friends
        raise ModelFileError(f"{rel(path)}: not an ONNX model ({type(exc).__name__}: {exc})") from None
    if not proto.graph.node and not proto.graph.output:
        raise ModelFileError(f"{rel(path)}: not an ONNX model (no graph in it)")
    return summary(proto)


def unknown_ops(proto: Any) -> dict[str, list[str]]:
    """Ops in a standard domain that ONNX does not define (tf2onnx leaves the TF op there): type -> node names."""
    import onnx

    found: dict[str, list[str]] = {}
    for graph in graphs(proto.graph):
        for node in graph.node:
            if node.domain in STANDARD_DOMAINS and not onnx.defs.has(node.op_type, _onnx_domain(node.domain)):
                found.setdefault(node.op_type, []).append(node.name)
    return found


def _onnx_domain(domain: str) -> str:
    return "" if domain == "ai.onnx" else domain


def graphs(graph: Any) -> Iterator[Any]:
    """The graph and every subgraph of its control-flow nodes."""
    yield graph
    for node in graph.node:
        for attr in node.attribute:
            if attr.HasField("g"):
                yield from graphs(attr.g)
            for sub in attr.graphs:
                yield from graphs(sub)


def summary(proto: Any) -> rm.OnnxSummary:
    """Op types and counts, opsets, inputs and outputs, custom domains and ops ONNX does not define."""
    data = proto.SerializeToString()
    weights = {i.name for i in proto.graph.initializer}  # older IR versions list them as inputs too
    ops = Counter(n.op_type if n.domain in STANDARD_DOMAINS else f"{n.domain}.{n.op_type}"
                  for g in graphs(proto.graph) for n in g.node)
    custom = sorted({n.domain for g in graphs(proto.graph) for n in g.node if n.domain not in STANDARD_DOMAINS})
    out: rm.OnnxSummary = {
        "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest(), "ir_version": proto.ir_version,
        "opsets": {(o.domain or "ai.onnx"): o.version for o in proto.opset_import},
        "inputs": [_value(v) for v in proto.graph.input if v.name not in weights],
        "outputs": [_value(v) for v in proto.graph.output],
        "ops": dict(sorted(ops.items())), "custom_domains": custom, "unknown_ops": sorted(unknown_ops(proto)),
    }
    return out


def _value(v: Any) -> dict[str, Any]:
    import onnx

    if not v.type.HasField("tensor_type"):
        return {"name": v.name, "dtype": v.type.WhichOneof("value"), "shape": None}
    t = v.type.tensor_type
    dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in t.shape.dim]
    return {"name": v.name, "dtype": onnx.helper.tensor_dtype_to_np_dtype(t.elem_type).name, "shape": dims}


