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
        try:
            return _constants_v2(cf)
        except AttributeError:  # a TensorFlow without the private steps: its public function, all of it
            return convert_variables_to_constants_v2(cf, lower_control_flow=False).graph.as_graph_def()
    return _freeze_reads(cf, graph_def, layers)


def _constants_v2(cf: Any) -> Any:
    """What ``convert_variables_to_constants_v2(cf, lower_control_flow=False).graph.as_graph_def()`` gives,
    without its last step: that imports the frozen GraphDef into a new concrete function, pruned to what the
    outputs need, only for us to export it straight back (0.75 s of CPU for MobileNetV2, 2.5 s for ResNet50:
    scripts/bench_freeze.py).
    Its first steps replace the variables (TensorFlow's own ``_replace_variables_by_constants``); the pruning
    is :func:`_needed`. The GraphDefs differ only in attributes that the import adds or drops (a read's
    ``_has_manual_control_dependencies``, an input's ``_user_specified_name``) and in node order; the built
    .tflite is the same byte for byte (tests/integration/test_freeze.py)."""
    from tensorflow.python.framework import convert_to_constants as c2c

    data = c2c._FunctionConverterDataInEager(func=cf, lower_control_flow=False, aggressive_inlining=False)
    graph_def, converted = c2c._replace_variables_by_constants(converter_data=data)
    captures = cf.graph.internal_captures
    gone = {id(captures[i]) for i in converted}  # the variables' handles: constants now, no longer inputs
    feeds = [t.name.split(":")[0] for t in cf.inputs if id(t) not in gone]
    return _needed(graph_def, [t.name.split(":")[0] for t in cf.outputs], feeds)


def _needed(graph_def: Any, fetches: list[str], feeds: list[str]) -> Any:
    """``graph_def`` with only the feeds and the nodes the fetches read, data or control (in its order)."""
    nodes = {n.name: n for n in graph_def.node}
    kept = set(feeds)
    todo = [name for name in fetches if name not in kept]
    while todo:
        name = todo.pop()
        if name in kept:
            continue
        kept.add(name)
        todo.extend(i.split(":")[0].lstrip("^") for i in nodes[name].input)
    chosen = [n for n in graph_def.node if n.name in kept]
    del graph_def.node[:]
    graph_def.node.extend(chosen)
    return graph_def


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
