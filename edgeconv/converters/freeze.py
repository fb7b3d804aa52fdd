"""Freeze a traced concrete function into a GraphDef with no variables.

TF's own freezer (``convert_variables_to_constants_v2``) handles control flow and
nested functions but refuses graphs that write variables, which is exactly what a
layer stuck in training mode does (Keras 3 dropout advances its seed generator,
batch norm updates its moving averages). For those graphs we freeze the reads
ourselves and leave the writes in place, marked, for the strip-training pass to
remove and report; if they survive the passes the build stops naming the layer.
"""

from __future__ import annotations

from typing import Any

from ..errors import ModelError
from ..ir import source_layers
from ..passes.strip_training import STATE_WRITE_OPS

DT_RESOURCE = 20


def freeze_concrete_function(cf: Any, layers: list[str]) -> Any:
    """Return a frozen ``GraphDef`` for ``cf`` (reads of variables become constants)."""
    from tensorflow.python.framework.convert_to_constants import convert_variables_to_constants_v2

    graph_def = cf.graph.as_graph_def()
    writes = [n for n in graph_def.node if n.op in STATE_WRITE_OPS]
    if not writes:
        # Keep functional control flow (While/If): lowered v1 frames cannot be re-imported and pruned.
        return convert_variables_to_constants_v2(cf, lower_control_flow=False).graph.as_graph_def()
    return _freeze_reads(cf, graph_def, layers)


def _freeze_reads(cf: Any, graph_def: Any, layers: list[str]) -> Any:
    import tensorflow as tf

    variables = {id(v.handle): v for v in cf.graph.variables}
    values = {}
    for external, internal in cf.graph.captures:
        var = variables.get(id(external))
        if var is not None:
            values[internal.name.split(":")[0]] = var.numpy()
    if graph_def.library.function:
        raise ModelError(_stuck_message(graph_def, layers, "and uses nested functions, so it cannot be frozen"))
    for node in graph_def.node:
        if node.op == "ReadVariableOp" and node.input[0].split(":")[0] in values:
            value = values[node.input[0].split(":")[0]]
            node.op = "Const"
            del node.input[:]
            node.attr.clear()
            node.attr["dtype"].type = tf.as_dtype(value.dtype).as_datatype_enum
            node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(value))
    used = {i.split(":")[0].lstrip("^") for n in graph_def.node for i in n.input}
    kept = [n for n in graph_def.node if not (n.name in values and n.name not in used)]
    del graph_def.node[:]
    graph_def.node.extend(kept)  # handles of variables that are only read are gone now
    resource_users = [n for n in graph_def.node if n.op not in STATE_WRITE_OPS and n.op != "Placeholder"
                      and any(i.split(":")[0] in values for i in n.input)]
    if resource_users:
        raise ModelError(_stuck_message(graph_def, layers, f"and reads it through {resource_users[0].op}, "
                                        "which edgeconv cannot freeze"))
    return graph_def


def _stuck_message(graph_def: Any, layers: list[str], why: str) -> str:
    writers = [n for n in graph_def.node if n.op in STATE_WRITE_OPS]
    names = sorted({layer for n in writers for layer in source_layers(n.name, layers)})
    where = f"layer(s) {', '.join(repr(n) for n in names)}" if names else f"node {writers[0].name!r}"
    return (f"{where} update variables at inference time ({writers[0].op}) {why}. Fix: call the layer with "
            "training=False (a layer that forces training=True inside call() cannot be exported)")
