"""ONNX models of exactly the model the build made.

The float model is exported with tf2onnx from the cleaned, frozen, shape-pinned graph the
.tflite was converted from (after the passes: no Dropout or random op reaches ONNX either).
The INT8 model is the built int8 .tflite converted by tf2onnx's TFLite path into
QuantizeLinear/DequantizeLinear (QDQ) form: it carries the .tflite's own calibrated scales and
zero points, so it is the same quantized model, not a second calibration. (Measured on the
example, scripts/compare_onnx_int8.py: ONNX Runtime's static quantization of the float ONNX with
the same 200 calibration samples agrees on top-1 with the .tflite on 100 % of the held-out digits
but differs by up to 0.0046 in the outputs; the converted .tflite agrees bit for bit.)

Both are renamed to the model's input and output names, checked with ``onnx.checker``
(full check), and refused with the TF op and source layer when tf2onnx has no ONNX form for
an op. Needs ``edgeconv[onnx]``; TensorFlow is already loaded by the build.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import re
import warnings
from collections import Counter
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import InternalError, ModelError
from ..ir import FrozenGraph, source_layers
from .onnx_reader import graphs, summary, unknown_ops

__all__ = ["export_float", "export_quantized", "from_tf", "rename_io", "summary"]



@contextlib.contextmanager
def _converting() -> Iterator[None]:
    """tf2onnx quiet and deterministic. It logs every step at INFO and unsupported ops at ERROR
    (edgeconv reports them itself), and numbers the nodes it adds from a process-wide counter: reset,
    the same graph gets the same names, and the same bytes, in every build of a process."""
    import tf2onnx

    tf2onnx.utils.INTERNAL_NAME = 1
    logger = logging.getLogger("tf2onnx")
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # its TFLite path uses the deprecated tf.lite.Interpreter
            yield
    finally:
        logger.setLevel(level)


def export_float(graph: FrozenGraph, opset: int) -> Any:
    """The float ONNX ModelProto of ``graph``, inputs and outputs named as the model's."""
    import tf2onnx

    with _converting():
        proto, _ = tf2onnx.convert.from_graph_def(graph.graph_def, input_names=[i.tensor for i in graph.inputs],
                                                  output_names=[o.tensor for o in graph.outputs], opset=opset)
    unknown = unknown_ops(proto)
    if unknown:
        layers = graph.layer_names()
        found = []
        for op_type, names in sorted(unknown.items()):
            where = sorted({layer for n in names for layer in source_layers(n, layers)})
            found.append(f"{op_type} (layer {', '.join(repr(w) for w in where)})" if where else op_type)
        raise ModelError(f"tf2onnx cannot convert TensorFlow op(s) {', '.join(found)} to ONNX opset {opset}: tf2onnx "
                         "has no ONNX conversion for them; rewrite them with common ops, or remove output.onnx")
    rename_io(proto, {i.tensor: i.name for i in graph.inputs}, {o.tensor: o.name for o in graph.outputs})
    _finish(proto, "float")
    return proto


def export_quantized(tflite: bytes, names: Mapping[str, str], opset: int, workdir: Path, stem: str) -> Any:
    """The INT8 QDQ ONNX ModelProto of the built .tflite; ``names`` maps its tensor names to the model's."""
    import tf2onnx

    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{stem}.tflite"  # tf2onnx names the graph after the file
    path.write_bytes(tflite)
    with _converting():
        try:
            proto, _ = tf2onnx.convert.from_tflite(str(path), opset=opset)
        except Exception as exc:  # tf2onnx raises many types; all mean it cannot convert this .tflite
            raise ModelError(f"tf2onnx cannot convert the int8 .tflite to ONNX opset {opset}: {exc}; "
                             "set output.onnx.quantized: false to write the float ONNX model only") from exc
    unknown = unknown_ops(proto)
    if unknown:
        raise ModelError(f"tf2onnx cannot convert TFLite op(s) {', '.join(sorted(unknown))} of the int8 .tflite to "
                         f"ONNX opset {opset}; set output.onnx.quantized: false to write the float ONNX model only")
    inputs = {i.name: names.get(i.name, i.name) for i in proto.graph.input}
    outputs = {o.name: names.get(o.name, o.name) for o in proto.graph.output}
    rename_io(proto, inputs, outputs)
    _finish(proto, "int8")
    return proto


def rename_io(proto: Any, inputs: Mapping[str, str], outputs: Mapping[str, str]) -> None:
    """Give the graph's inputs and outputs the model's names (``image``, not ``image:0``)."""
    mapping = {old: new for old, new in {**inputs, **outputs}.items() if old != new}
    if not mapping:
        return
    g = proto.graph
    for value in (*g.input, *g.output, *g.value_info):
        value.name = mapping.get(value.name, value.name)
    for graph in graphs(g):
        for node in graph.node:
            for i, name in enumerate(node.input):
                if name in mapping:
                    node.input[i] = mapping[name]
            for i, name in enumerate(node.output):
                if name in mapping:
                    node.output[i] = mapping[name]


_NUMBER = re.compile(r"__(\d+)")


def canonicalize(proto: Any) -> None:
    """Same model, same bytes. tf2onnx orders some nodes by set iteration and numbers the nodes it adds
    (``Conv__17``) from a process-wide counter, so two exports of one graph differ in order and names.
    The nodes are put in a topological order whose ties are broken by what the node is (its name
    without numbers, op type, and its inputs: producers by their place, weights by their bytes), then
    every ``__N`` is renumbered in order of first use. Graph inputs and outputs keep their names."""
    import heapq

    g = proto.graph
    fixed = {v.name for v in (*g.input, *g.output)}
    weights = {}
    for init in g.initializer:
        body = type(init)()
        body.CopyFrom(init)
        body.name = ""
        weights[init.name] = hashlib.sha256(body.SerializeToString()).hexdigest()
    place: dict[str, str] = {}  # value name -> "#k:i", the k-th placed node's i-th output

    def input_key(name: str) -> str:
        return place.get(name) or weights.get(name) or (name if name in fixed or not name else "?")

    nodes = list(g.node)
    waiting = {id(n): sum(1 for i in set(n.input) if i and i not in weights and i not in fixed) for n in nodes}
    consumers: dict[str, list[Any]] = {}
    for n in nodes:
        for i in set(n.input):
            consumers.setdefault(i, []).append(n)
    heap: list[tuple[Any, int, Any]] = []

    def push(n: Any) -> None:
        key = (_NUMBER.sub("", n.name), n.op_type, n.domain, tuple(input_key(i) for i in n.input))
        heapq.heappush(heap, (key, len(heap) + len(ordered), n))

    ordered: list[Any] = []
    for n in nodes:
        if waiting[id(n)] == 0:
            push(n)
    while heap:
        _, _, n = heapq.heappop(heap)
        for k, out in enumerate(n.output):
            place[out] = f"#{len(ordered)}:{k}"
        ordered.append(n)
        for out in set(n.output):
            for c in consumers.get(out, []):
                waiting[id(c)] -= 1
                if waiting[id(c)] == 0:
                    push(c)
    if len(ordered) != len(nodes):  # a cycle or a dangling input: leave the order as tf2onnx wrote it
        ordered = nodes
    numbers: dict[str, str] = {}

    def renamed(name: str) -> str:
        if name in fixed:
            return name
        return _NUMBER.sub(lambda m: "__" + numbers.setdefault(m.group(1), str(len(numbers) + 1)), name)

    for n in ordered:
        n.name = renamed(n.name)
        n.input[:] = [renamed(i) for i in n.input]
        n.output[:] = [renamed(o) for o in n.output]
    for init in g.initializer:
        init.name = renamed(init.name)
    for v in g.value_info:
        v.name = renamed(v.name)
    _refill(g.node, ordered)
    _refill(g.initializer, sorted(g.initializer, key=lambda i: i.name))
    _refill(g.value_info, sorted(g.value_info, key=lambda v: v.name))


def _refill(field: Any, items: list[Any]) -> None:
    """Replace a repeated protobuf field's items with copies of ``items``, in that order."""
    copies = [type(x)() for x in items]
    for c, x in zip(copies, items):
        c.CopyFrom(x)
    del field[:]
    field.extend(copies)


def _finish(proto: Any, kind: str) -> None:
    import onnx

    canonicalize(proto)
    try:
        onnx.checker.check_model(proto, full_check=True)
    except Exception as exc:  # onnx.checker.ValidationError and shape-inference errors
        raise InternalError("onnx", f"onnx.checker rejected the {kind} ONNX model tf2onnx wrote: {exc}") from exc


def from_tf(proto: Any, graph: FrozenGraph) -> dict[str, dict[str, int]]:
    """TF op type -> ONNX op types it became (with counts). tf2onnx names a node after the TF node it
    converts (``conv1/Relu``, ``conv1/MatMul_Gemm__6``) or, for fused ops, names only its inputs
    (``Conv__17`` reads ``conv1/convolution/merged_input``): the longest TF node name that starts
    the node's name, else one of its inputs' names, is where it came from."""
    tf_ops: dict[str, str] = {n.name: str(n.op) for n in graph.graph_def.node}

    def origin(name: str) -> str | None:
        name = name.split(":")[0]
        while name:
            if name in tf_ops:
                return tf_ops[name]
            cut = max(name.rfind("/"), name.rfind("_"))
            if cut <= 0:
                return None
            name = name[:cut]
        return None

    weights = {i.name for i in proto.graph.initializer}
    table: dict[str, Counter[str]] = {}
    for node in proto.graph.node:
        # A fused node's weights carry its TF name better than its data input does.
        inputs = sorted(node.input, key=lambda name: name not in weights)
        op = origin(node.name) or next((o for o in map(origin, inputs) if o is not None), None)
        table.setdefault(op or "(new)", Counter())[node.op_type] += 1
    return {k: dict(sorted(v.items())) for k, v in sorted(table.items())}
