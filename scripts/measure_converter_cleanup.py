"""Measure what the TFLite converter already cleans up, before adding passes that would do it.

Question 1 (fold-constants, remove-identity): does a graph whose Identity chains are
removed and whose constant subgraphs are folded (by TF's own grappler) convert to a
different .tflite than the graph as loaded? A TF1-style graph is built with what
those passes would target: Identity chains, constant arithmetic on weights, and a
``tf.shape(x)[0]`` reshape chain.

Question 2 (pin-shapes): how many SHAPE/STRIDED_SLICE/PACK ops reach the .tflite of
keras.applications models exported with a dynamic batch and converted by the
converter alone, vs edgeconv's export, which always converts through a signature
with the pinned static shapes (whether the graph was traced with ``None`` or not)?

Run: python scripts/measure_converter_cleanup.py  (about 2 minutes on 2 cores)
"""

from __future__ import annotations

import copy
import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np

from edgeconv.calibration.checks import CalibrationSet
from edgeconv.converters.tflite_export import ExportOptions, tflite_from_graph
from edgeconv.converters.tflite_reader import parse_tflite
from edgeconv.ir import FrozenGraph, TensorSpec

CHAINS = {"SHAPE", "STRIDED_SLICE", "PACK"}


def calib(shapes: dict[str, tuple[int, ...]], samples: int = 8) -> CalibrationSet:
    rng = np.random.default_rng(0)
    arrays = {k: rng.normal(size=(samples, *s[1:])).astype(np.float32) for k, s in shapes.items()}
    return CalibrationSet("npz", Path("random"), "0" * 64, samples, 0, tuple(range(samples)), arrays)


def convert(graph: FrozenGraph) -> tuple[bytes, Counter[str]]:
    with tempfile.TemporaryDirectory() as work:
        exported = tflite_from_graph(graph, calib({i.name: i.shape for i in graph.inputs}),
                                     ExportOptions("int8", "int8", True, 1), Path(work))
    model = parse_tflite(exported.tflite, "m.tflite")
    return exported.tflite, Counter(op.type for op in model.ops)


def tf1_graph() -> FrozenGraph:
    import tensorflow as tf

    rng = np.random.default_rng(1)
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [1, 8, 7, 3], name="x")
        w = tf.constant(rng.normal(size=(3, 3, 3, 4)).astype(np.float32))
        w = tf.identity(tf.identity(w * 0.5 + 0.1))  # constant arithmetic behind an Identity chain
        h = tf.identity(tf.nn.relu(tf.nn.conv2d(x, w, 1, "SAME")))
        h = tf.reshape(h, tf.stack([tf.shape(h)[0], -1]))  # a TF1 flatten
        d = tf.constant(rng.normal(size=(8 * 7 * 4, 5)).astype(np.float32))
        tf.identity(tf.matmul(h, tf.transpose(tf.transpose(d))), name="y")
    return FrozenGraph(graph.as_graph_def(), (TensorSpec("x", "x:0", (1, 8, 7, 3), "float32"),),
                       (TensorSpec("y", "y:0", (1, 5), "float32"),))


def without_identities(graph: FrozenGraph) -> FrozenGraph:
    from edgeconv.passes.graph import GraphEditor

    ed = GraphEditor(graph)
    for node in list(ed.graph_def.node):
        if node.op == "Identity" and node.name not in {o.node for o in graph.outputs}:
            ed.reroute(node.name, ed.data_inputs(node)[0])
    ed.prune()
    return ed.finish()


def folded(graph: FrozenGraph) -> FrozenGraph:
    """TF's grappler constant folding (what a fold-constants pass would call)."""
    import tensorflow as tf
    from tensorflow.lite.python.util import get_grappler_config, run_graph_optimizations

    g = tf.Graph()
    with g.as_default():
        tf.compat.v1.import_graph_def(graph.graph_def, name="")
    inputs = [g.get_tensor_by_name(i.tensor) for i in graph.inputs]
    outputs = [g.get_tensor_by_name(o.tensor) for o in graph.outputs]
    out = run_graph_optimizations(copy.deepcopy(graph.graph_def), inputs, outputs,
                                  get_grappler_config(["constfold"]), graph=g)
    return graph.replace(graph_def=out)


def app(name: str, batch: int | None) -> FrozenGraph:
    import keras
    import tensorflow as tf

    from edgeconv.converters.freeze import freeze_concrete_function

    model = getattr(keras.applications, name)(weights=None, input_shape=(96, 96, 3), include_top=True,
                                              classes=10)
    spec = tf.TensorSpec([batch, 96, 96, 3], tf.float32, name="image")
    cf = tf.function(lambda x: {"y": model(x, training=False)}, input_signature=[spec]).get_concrete_function()
    out = cf.structured_outputs["y"]
    return FrozenGraph(freeze_concrete_function(cf, []), (TensorSpec("image", cf.inputs[0].name, (1, 96, 96, 3),
                                                                     "float32"),),
                       (TensorSpec("y", out.name, (1, 10), "float32"),))


def direct_dynamic(name: str) -> Counter[str]:
    """The plain converter on the model exported with a dynamic batch (no shape pinning), int8 calibrated."""
    import keras
    import tensorflow as tf

    model = getattr(keras.applications, name)(weights=None, input_shape=(96, 96, 3), include_top=True,
                                              classes=10)
    with tempfile.TemporaryDirectory() as work:
        model.export(work, verbose=False)
        converter = tf.lite.TFLiteConverter.from_saved_model(work)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        rng = np.random.default_rng(0)
        converter.representative_dataset = lambda: ([rng.normal(size=(1, 96, 96, 3)).astype(np.float32)]
                                                    for _ in range(8))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        data = converter.convert()
    return Counter(op.type for op in parse_tflite(data, "direct.tflite").ops)


def graph_ops(graph: FrozenGraph) -> int:
    return len(graph.graph_def.node)


def main() -> None:
    base = tf1_graph()
    variants: dict[str, Any] = {"as loaded": base, "identities removed": without_identities(base),
                                "constants folded (grappler)": folded(base),
                                "both": folded(without_identities(base))}
    print("Q1: TF1-style graph (Identity chains, constant arithmetic, tf.shape flatten)")
    reference = None
    for label, graph in variants.items():
        data, ops = convert(graph)
        same = "" if reference is None else ("  identical .tflite bytes" if data == reference else "  DIFFERENT")
        reference = reference or data
        print(f"  {label:30s} graph nodes {graph_ops(graph):3d} -> tflite ops {dict(sorted(ops.items()))}{same}")
    print("Q2: keras.applications at 96x96, traced with a dynamic vs a static batch")
    for name in ("MobileNetV3Small", "EfficientNetB0"):
        ops = direct_dynamic(name)
        chain = {k: v for k, v in ops.items() if k in CHAINS}
        print(f"  {name:18s} converter alone, batch None: tflite ops {sum(ops.values()):4d}, shape chains {chain}")
        for batch in (None, 1):
            _, ops = convert(app(name, batch))
            chain = {k: v for k, v in ops.items() if k in CHAINS}
            print(f"  {name:18s} edgeconv, traced batch={batch!s:4s}: tflite ops {sum(ops.values()):4d}, "
                  f"shape chains {chain}")


if __name__ == "__main__":
    main()
