"""Time per graph node of every built-in pass on generated graphs of 2,000 to 20,000 nodes.

    python scripts/bench_passes.py [--sizes 2000 5000 10000 20000]

The graph: a chain of blocks, each a layer scope ``blk{k}`` of four nodes: a weight Const,
``Mul``, an ``Identity`` (what Keras and TF1 graphs are full of) and a ``Relu``; every tenth block
adds a dropout-style subgraph (``RandomUniform`` -> ``GreaterEqual`` -> ``Cast`` -> ``Mul``) behind
a ``Dropout`` layer, so strip-training bypasses a quarter of the nodes and rewrites the dropouts.
A linear pass shows a flat time per node across the sizes; a quadratic one grows with the size.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def graph(nodes: int):  # type: ignore[no-untyped-def]
    import numpy as np
    from tensorflow.core.framework import graph_pb2

    from edgeconv.ir import FrozenGraph, Layer, TensorSpec

    graph_def = graph_pb2.GraphDef()
    types = {"T", "dtype", "SrcT", "DstT"}

    # Nodes are appended directly: the names are unique by construction (GraphEditor.add_node checks that
    # by scanning the graph, which would make building it quadratic; the passes are what is measured).
    def node(name: str, op: str, inputs: list[str], **attrs: int) -> str:
        n = graph_def.node.add()
        n.name, n.op = name, op
        n.input.extend(inputs)
        for key, value in attrs.items():
            if key in types:
                n.attr[key].type = value
            else:
                n.attr[key].i = value
        return name

    def const(name: str, value: np.ndarray) -> str:
        dtype = {np.dtype("int32"): 3, np.dtype("float32"): 1}[value.dtype]
        node(name, "Const", [], dtype=dtype)
        tensor = graph_def.node[-1].attr["value"].tensor
        tensor.dtype = dtype
        for d in value.shape:
            tensor.tensor_shape.dim.add().size = int(d)
        tensor.tensor_content = value.tobytes()
        return name

    node("x", "Placeholder", [], dtype=1)
    for d in (1, 8):
        graph_def.node[-1].attr["shape"].shape.dim.add().size = d
    last, layers, k = "x", [], 0
    while len(graph_def.node) < nodes:
        scope = f"blk{k}"
        layers.append(Layer(scope, "Dense"))
        w = const(f"{scope}/w", np.array(1.0 + k % 3, np.float32))
        mul = node(f"{scope}/mul", "Mul", [last, w], T=1)
        ident = node(f"{scope}/Identity", "Identity", [mul], T=1)
        last = node(f"{scope}/relu", "Relu", [ident], T=1)
        if k % 10 == 9:
            drop = f"drop{k}"
            layers.append(Layer(drop, "Dropout", "dropout", "rate=0.5"))
            shape = const(f"{drop}/shape", np.array([1, 8], np.int32))
            rnd = node(f"{drop}/random_uniform", "RandomUniform", [shape], T=3, dtype=1)
            rate = const(f"{drop}/rate", np.array(0.5, np.float32))
            keep = node(f"{drop}/GreaterEqual", "GreaterEqual", [rnd, rate], T=1)
            mask = node(f"{drop}/Cast", "Cast", [keep], SrcT=10, DstT=1)
            scale = node(f"{drop}/scale", "Mul", [last, const(f"{drop}/inv", np.array(2.0, np.float32))], T=1)
            last = node(f"{drop}/mul_1", "Mul", [scale, mask], T=1)
        k += 1
    out = node("probs", "Identity", [last], T=1)
    return FrozenGraph(graph_def, (TensorSpec("x", "x:0", (1, 8), "float32"),),
                       (TensorSpec("probs", f"{out}:0", (1, 8), "float32"),), tuple(layers))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", type=int, default=[2000, 5000, 10000, 20000])
    args = parser.parse_args()
    from edgeconv.passes import PASSES

    print("| pass | nodes | removed | seconds | µs per node |")
    print("|---|---|---|---|---|")
    for name, cls in sorted(PASSES.items()):
        for size in args.sizes:
            g = graph(size)
            start = time.perf_counter()
            _, result = cls().apply(g)
            took = time.perf_counter() - start
            n = len(g.graph_def.node)
            print(f"| {name} | {n} | {len(result.removed)} | {took:.3f} | {took / n * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
