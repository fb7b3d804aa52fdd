"""Shared graph walking and editing for passes.

Works on ``GraphDef`` protobufs by their fields (``node``, ``op``, ``input``) and
imports no TensorFlow itself. Tensor names follow TF: ``node`` is output 0 of
``node`` (same as ``node:0``), ``node:1`` output 1, ``^node`` a control input.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterable, Iterator
from typing import Any

from ..ir import FrozenGraph, Layer, source_layers

# Ops whose value is the shape of their input, a constant once input shapes are pinned.
SHAPE_OPS = frozenset({"Shape", "ShapeN", "Size", "Rank"})


def node_of(tensor: str) -> str:
    return tensor.lstrip("^").split(":")[0]


def canonical(tensor: str) -> str:
    """``node`` and ``node:0`` name the same tensor; use the short form."""
    return tensor[:-2] if tensor.endswith(":0") else tensor


def is_control(tensor: str) -> bool:
    return tensor.startswith("^")


class GraphEditor:
    """A mutable copy of a frozen graph with the edits passes need.

    Passes describe *what* to match and *what* to do; traversal and bookkeeping
    (consumer lists, rerouting, pruning unreachable nodes) live here.
    """

    def __init__(self, graph: FrozenGraph) -> None:
        self.graph = graph
        self.graph_def = copy.deepcopy(graph.graph_def)
        self.outputs = [canonical(o.tensor) for o in graph.outputs]
        self._layers = frozenset(graph.layer_names())
        self._layer = {layer.name: layer for layer in graph.layers}
        self._fixed: dict[str, Any] | None = None

    # -- queries ---------------------------------------------------------------
    @property
    def nodes(self) -> dict[str, Any]:
        if self._fixed is not None:
            return self._fixed
        return {n.name: n for n in self.graph_def.node}

    @contextlib.contextmanager
    def fixed_nodes(self) -> Iterator[None]:
        """For edits that add and remove no node (reroutes only): ``nodes`` is built once, not on every
        query (a pass that queries per match stays linear)."""
        self._fixed = {n.name: n for n in self.graph_def.node}
        try:
            yield
        finally:
            self._fixed = None

    def data_inputs(self, node: Any) -> list[str]:
        return [canonical(t) for t in node.input if not is_control(t)]

    def consumers(self) -> dict[str, list[Any]]:
        """Node name -> nodes that use one of its outputs (data or control)."""
        table: dict[str, list[Any]] = {}
        for node in self.graph_def.node:
            for t in node.input:
                table.setdefault(node_of(t), []).append(node)
        return table

    def layer(self, name: str) -> Layer:
        """The source layer of that name (one of ``layers_of``'s answers)."""
        return self._layer[name]

    def layers_of(self, node_name: str) -> tuple[str, ...]:
        return tuple(source_layers(node_name, self._layers))

    def ancestors(self, start: Iterable[str], *, stop: Callable[[Any], bool] = lambda n: False) -> set[str]:
        """Names of nodes the given tensors depend on through data inputs (inclusive)."""
        nodes = self.nodes
        seen: set[str] = set()
        todo = [node_of(t) for t in start]
        while todo:
            name = todo.pop()
            if name in seen or name not in nodes:
                continue
            seen.add(name)
            if stop(nodes[name]):
                continue
            todo.extend(node_of(t) for t in self.data_inputs(nodes[name]))
        return seen

    def depends_on_inputs(self) -> set[str]:
        """Nodes whose value depends on the values of a model input (the data path).

        Input shapes are pinned, so a Shape/Size/Rank of a tensor on the data path is
        a constant (what TF1 graphs with a ``None`` batch compute, e.g. for the shape
        of a dropout mask), not data.
        """
        inputs = {i.node for i in self.graph.inputs}
        order = self.topological()
        live: set[str] = set()
        for node in order:
            if node.name in inputs or (node.op not in SHAPE_OPS
                                       and any(node_of(t) in live for t in self.data_inputs(node))):
                live.add(node.name)
        return live

    def topological(self) -> list[Any]:
        nodes = self.nodes
        done: set[str] = set()
        out: list[Any] = []
        for root in self.graph_def.node:
            stack: list[tuple[Any, Iterator[str]]] = [(root, iter(root.input))]
            if root.name in done:
                continue
            done.add(root.name)
            while stack:
                node, it = stack[-1]
                nxt = next(it, None)
                if nxt is None:
                    stack.pop()
                    out.append(node)
                    continue
                dep = node_of(nxt)
                if dep in nodes and dep not in done:
                    done.add(dep)
                    stack.append((nodes[dep], iter(nodes[dep].input)))
        return out

    # -- edits -----------------------------------------------------------------
    def reroute(self, old: str, new: str) -> None:
        """Make every use of tensor ``old`` use tensor ``new`` instead."""
        self.reroute_many({old: new})

    def reroute_many(self, mapping: dict[str, str]) -> None:
        """Every ``reroute(old, new)`` of ``mapping`` at once, in one walk over the graph (a pass that
        bypasses thousands of nodes stays linear). Chains resolve as if rerouted one by one: when ``a``
        goes to ``b`` and ``b`` to ``c``, uses of ``a`` end on ``c``."""
        table = {canonical(k): canonical(v) for k, v in mapping.items()}

        def final(tensor: str) -> str:
            seen = {tensor}
            while tensor in table and table[tensor] not in seen:
                tensor = table[tensor]
                seen.add(tensor)
            return tensor

        for node in self.graph_def.node:
            for i, t in enumerate(node.input):
                if not is_control(t) and canonical(t) in table:
                    node.input[i] = final(canonical(t))
        self.outputs = [final(o) for o in self.outputs]

    def add_node(self, name: str, op: str, inputs: Iterable[str], **attrs: Any) -> Any:
        """Append a node; ``attrs`` are type attributes (DataType enums, e.g. ``T=1``), bools or
        ints. Attributes with defaults can be left out: importing the graph fills them in."""
        assert self._fixed is None, "add_node inside fixed_nodes()"
        if name in self.nodes:
            raise AssertionError(f"node {name!r} already exists")
        node = self.graph_def.node.add()
        node.name, node.op = name, op
        node.input.extend(inputs)
        for key, value in attrs.items():
            if isinstance(value, bool):
                node.attr[key].b = value
            elif key in _TYPE_ATTRS:
                node.attr[key].type = value
            else:
                node.attr[key].i = value
        return node

    def add_const(self, name: str, value: Any) -> str:
        """Append a Const node holding a numpy array (int32, int64 or float32)."""
        import numpy as np

        value = np.asarray(value, order="C")  # (ascontiguousarray would make a scalar 1-d)
        dtype = {np.dtype("int32"): 3, np.dtype("int64"): 9, np.dtype("float32"): 1}[value.dtype]
        node = self.add_node(name, "Const", ())
        node.attr["dtype"].type = dtype
        tensor = node.attr["value"].tensor
        tensor.dtype = dtype
        for d in value.shape:
            tensor.tensor_shape.dim.add().size = int(d)
        tensor.tensor_content = value.tobytes()
        return name

    def drop_control_inputs(self, to: Callable[[Any], bool]) -> None:
        """Remove control edges that point at nodes matching ``to``."""
        nodes = self.nodes
        for node in self.graph_def.node:
            keep = [t for t in node.input
                    if not (is_control(t) and node_of(t) in nodes and to(nodes[node_of(t)]))]
            if len(keep) != len(node.input):
                del node.input[:]
                node.input.extend(keep)

    def prune(self) -> list[Any]:
        """Remove every node the outputs do not need; return the removed nodes.

        Model input placeholders are kept even when unused, so the signature stays.
        """
        needed = {i.node for i in self.graph.inputs}
        nodes = self.nodes
        todo = [node_of(o) for o in self.outputs]
        while todo:
            name = todo.pop()
            if name in needed or name not in nodes:
                continue
            needed.add(name)
            todo.extend(node_of(t) for t in nodes[name].input)
        removed = [n for n in self.graph_def.node if n.name not in needed]
        kept = [n for n in self.graph_def.node if n.name in needed]
        del self.graph_def.node[:]
        self.graph_def.node.extend(kept)
        return removed

    def finish(self) -> FrozenGraph:
        outputs = tuple(o.__class__(o.name, tensor if ":" in tensor else f"{tensor}:0", o.shape, o.dtype)
                        for o, tensor in zip(self.graph.outputs, self.outputs))
        return self.graph.replace(graph_def=self.graph_def, outputs=outputs)


_TYPE_ATTRS = frozenset({"T", "Tidx", "Tshape", "Index", "Tpaddings", "DstT", "SrcT", "dtype", "out_type"})

# DataType enum values of the TF protobufs (types.proto) and the numpy dtype of each.
_NUMPY_DTYPES = {1: "float32", 2: "float64", 3: "int32", 4: "uint8", 5: "int16", 6: "int8", 9: "int64", 10: "bool"}
_VALUE_FIELDS = {1: "float_val", 2: "double_val", 3: "int_val", 4: "int_val", 5: "int_val", 6: "int_val",
                 9: "int64_val", 10: "bool_val"}


def const_value(node: Any) -> Any:
    """The value of a ``Const`` node as a numpy array, or None when it is not a plain
    numeric/bool constant. Reads the TensorProto fields directly (no TensorFlow)."""
    import numpy as np

    if node.op != "Const" or "value" not in node.attr:
        return None
    tensor = node.attr["value"].tensor
    dtype = _NUMPY_DTYPES.get(tensor.dtype)
    if dtype is None:
        return None
    shape = tuple(int(d.size) for d in tensor.tensor_shape.dim)
    count = int(np.prod(shape)) if shape else 1
    if tensor.tensor_content:
        return np.frombuffer(tensor.tensor_content, dtype=dtype).reshape(shape)
    values = list(getattr(tensor, _VALUE_FIELDS[tensor.dtype]))
    if not values:
        return np.zeros(shape, dtype=dtype)
    values += [values[-1]] * (count - len(values))  # TF repeats the last value to fill the shape
    return np.array(values[:count], dtype=dtype).reshape(shape)
