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
    from edgeconv.passes.graph import GraphEditor

    def const(ed: GraphEditor, name: str, value: float) -> str:
        return ed.add_const(name, np.array(value, np.float32))

    empty = FrozenGraph(graph_pb2.GraphDef(), (), ())
    ed = GraphEditor(empty)
    x = ed.add_node("x", "Placeholder", [], dtype=1)
    x.attr["shape"].shape.dim.add().size = 1
    x.attr["shape"].shape.dim.add().size = 8
    last, layers, k = "x", [], 0
    while len(ed.graph_def.node) < nodes:
        scope = f"blk{k}"
        layers.append(Layer(scope, "Dense"))
        w = const(ed, f"{scope}/w", 1.0 + k % 3)
        mul = ed.add_node(f"{scope}/mul", "Mul", [last, w], T=1).name
        ident = ed.add_node(f"{scope}/Identity", "Identity", [mul], T=1).name
        last = ed.add_node(f"{scope}/relu", "Relu", [ident], T=1).name
        if k % 10 == 9:
            drop = f"drop{k}"
            layers.append(Layer(drop, "Dropout", "dropout", "rate=0.5"))
            shape = ed.add_const(f"{drop}/shape", np.array([1, 8], np.int32))
            rnd = ed.add_node(f"{drop}/random_uniform", "RandomUniform", [shape], T=3, dtype=1)
            rate = const(ed, f"{drop}/rate", 0.5)
            keep = ed.add_node(f"{drop}/GreaterEqual", "GreaterEqual", [rnd.name, rate], T=1).name
            mask = ed.add_node(f"{drop}/Cast", "Cast", [keep], SrcT=10, DstT=1).name
            scale = ed.add_node(f"{drop}/scale", "Mul", [last, const(ed, f"{drop}/inv", 2.0)], T=1).name
            last = ed.add_node(f"{drop}/mul_1", "Mul", [scale, mask], T=1).name
        k += 1
    out = ed.add_node("probs", "Identity", [last], T=1).name
    return FrozenGraph(ed.graph_def, (TensorSpec("x", "x:0", (1, 8), "float32"),),
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
            out, result = cls().apply(g)
            took = time.perf_counter() - start
            n = len(g.graph_def.node)
            print(f"| {name} | {n} | {len(result.removed)} | {took:.3f} | {took / n * 1e6:.1f} |", flush=True)


if __name__ == "__main__":
    main()
