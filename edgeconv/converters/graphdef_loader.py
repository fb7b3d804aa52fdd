"""Load a TF1 frozen GraphDef (``.pb``): bind placeholders, choose inputs and outputs, pin shapes.

TF1 graphs carry their training switch with them: a boolean ``is_training`` (or
``keras_learning_phase``) placeholder that picks a branch of every ``tf.cond``, or
a ``keep_prob`` placeholder that scales dropout. Left as a model input, it becomes
a BOOL input of the ``.tflite`` with IF ops and live dropout on the device. So a
placeholder that decides a cond or feeds a random op must be bound to a constant
(``model.bind``); edgeconv refuses to guess, names it, and says how to bind it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import import_tf
from ..errors import ModelError, did_you_mean, rel
from ..ir import FrozenGraph, TensorSpec
from ..passes.graph import node_of
from ..passes.strip_training import RANDOM_OPS
from .inspect_graph import check_graph_def
from .model import LoadedModel, pin_shapes, scope_layers, show_shape

PLACEHOLDERS = ("Placeholder", "PlaceholderWithDefault")
VARIABLE_OPS = frozenset({"VariableV2", "Variable", "VarHandleOp", "TemporaryVariable"})
# Sinks that are not model outputs.
NOT_OUTPUTS = frozenset({"Const", "NoOp", "Assert", "Placeholder", "PlaceholderWithDefault", "SaveV2", "RestoreV2",
                         "Save", "Restore", "MergeV2Checkpoints", "PrintV2", "Print"}) | VARIABLE_OPS
_STALE_ATTRS = ("_output_shapes", "_class")  # shapes and colocations from before freezing/pruning
_DT_BOOL = 10


def read_graph_def(path: Path) -> Any:
    """Parse a binary GraphDef, with a clear error for what is not one."""
    tf = import_tf()
    from google.protobuf.message import DecodeError

    data = path.read_bytes()
    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(data)
    except DecodeError:
        graph_def = None
    if graph_def is None or not graph_def.node or not all(n.op for n in graph_def.node):
        if path.name == "saved_model.pb":
            raise ModelError(f"{rel(path)}: is the graph of a SavedModel; set model.path to its folder "
                             f"({rel(path.parent)})")
        raise ModelError(f"{rel(path)}: not a binary TensorFlow GraphDef (a frozen graph .pb)")
    return graph_def


def graph_from_graphdef(path: Path, *, batch_size: int, input_shapes: Mapping[str, tuple[int, ...]],
                        inputs: Iterable[str] = (), outputs: Iterable[str] = (),
                        bind: Mapping[str, bool | int | float] | None = None,
                        trust_code: bool = False) -> LoadedModel:
    """Load a frozen GraphDef, apply ``bind``, and pin the input shapes."""
    tf = import_tf()
    return frozen_model(read_graph_def(path), rel(path), batch_size=batch_size, input_shapes=input_shapes,
                        inputs=inputs, outputs=outputs, bind=bind, fmt="graphdef", trust_code=trust_code,
                        framework=f"tensorflow {tf.__version__} (TF1 GraphDef)")


def frozen_model(graph_def: Any, shown: str, *, batch_size: int, input_shapes: Mapping[str, tuple[int, ...]],
                 inputs: Iterable[str] = (), outputs: Iterable[str] = (),
                 bind: Mapping[str, bool | int | float] | None = None, names: Mapping[str, str] | None = None,
                 reference: Any = None, fmt: str, framework: str, notes: Iterable[str] = (),
                 trust_code: bool = False) -> LoadedModel:
    """The IR of a frozen graph: bind placeholders, check what still switches training
    behaviour, choose inputs and outputs, pin shapes.

    ``inputs`` are placeholder names and ``outputs`` tensor names (default: the
    unbound placeholders and the sink nodes); ``names`` gives them user-facing names
    (a SavedModel signature's keys). ``reference`` runs the source model; by default
    it is the bound graph run by a TF1 session. Before anything of it runs, every node the outputs need
    must be one edgeconv may run (:mod:`.inspect_graph`), unless ``trust_code``.
    """
    tf = import_tf()
    names = dict(names or {})
    for node in graph_def.node:
        for attr in _STALE_ATTRS:
            if attr in node.attr:
                del node.attr[attr]
    nodes = {n.name: n for n in graph_def.node}
    variables = sorted(n.name for n in graph_def.node if n.op in VARIABLE_OPS)
    if variables:
        raise ModelError(f"{shown}: the graph still holds variables ({', '.join(variables[:3])}"
                         f"{', ...' if len(variables) > 3 else ''}); it is not frozen. Freeze it "
                         "(tf.compat.v1.graph_util.convert_variables_to_constants) or load the SavedModel")
    placeholders = [n.name for n in graph_def.node if n.op in PLACEHOLDERS]
    notes = list(notes)
    bind = dict(bind or {})
    _bind(graph_def, nodes, bind, placeholders, shown)
    notes.extend(f"placeholder {name!r} bound to {_yaml(value)} (model.bind)" for name, value in bind.items())

    in_names = list(inputs) or [n for n in placeholders if n not in bind and nodes[n].op == "Placeholder"]
    for name in in_names:
        if name in bind:
            raise ModelError(f"model.inputs: {name!r} is bound to a constant by model.bind; it cannot also be "
                             "an input")
        if name not in nodes or nodes[name].op not in PLACEHOLDERS:
            what = f"is a {nodes[name].op} node" if name in nodes else "is not in the graph"
            raise ModelError(f"model.inputs: {name!r} {what}; inputs are placeholders "
                             f"({', '.join(placeholders) or 'the graph has none'})"
                             f"{did_you_mean(name, placeholders)}")
    out_tensors = list(outputs) or _sinks(graph_def)
    if not out_tensors:
        raise ModelError(f"{shown}: cannot tell the model outputs (every node feeds another); set model.outputs")
    for tensor in out_tensors:
        if node_of(tensor) not in nodes:
            raise ModelError(f"model.outputs: {tensor!r} is not a node of the graph"
                             f"{did_you_mean(node_of(tensor), list(nodes))}")
    if not outputs:
        notes.append(f"outputs not set; using the graph's sink nodes: {', '.join(out_tensors)}")
    _prune(graph_def, [node_of(t) for t in out_tensors], keep=in_names)
    if not trust_code:
        check_graph_def(graph_def, shown)
    nodes = {n.name: n for n in graph_def.node}
    problems = []
    for name in placeholders:
        if name not in nodes or name in bind:
            continue
        gate = _gates(name, graph_def)
        if gate:
            problems.append(gate)
        elif nodes[name].op == "Placeholder" and name not in in_names:
            problems.append(f"placeholder {name!r} is needed by the outputs but is neither a model input nor "
                            "bound; add it to model.inputs or bind it with model.bind")
    if problems:
        raise ModelError("\n".join(problems))
    for name in placeholders:
        node = nodes.get(name)
        if node is not None and node.op == "PlaceholderWithDefault" and name not in in_names:
            node.op = "Identity"  # what it is when nobody feeds it: its default
            dtype = node.attr["dtype"].type
            node.attr.clear()
            node.attr["T"].type = dtype
            notes.append(f"placeholder {name!r} (with default) left unfed: it takes its default value")

    declared = [(names.get(name, name), _placeholder_shape(nodes[name])) for name in in_names]
    pinned = pin_shapes(declared, batch_size=batch_size, input_shapes=input_shapes)
    shapes = {name: pinned[names.get(name, name)] for name in in_names}
    for name in in_names:
        node = nodes[name]
        dtype = node.attr["dtype"].type
        node.op = "Placeholder"
        del node.input[:]
        node.attr.clear()
        node.attr["dtype"].type = dtype
        node.attr["shape"].shape.CopyFrom(tf.TensorShape(shapes[name]).as_proto())

    # The session that runs the source model takes any number of samples (parity feeds it chunks) when
    # every input's batch dimension was open; the converted graph keeps the pinned shapes.
    open_batch = reference is None and bool(declared) and all(shape and shape[0] is None for _, shape in declared)
    graph = _import_graph(graph_def, shown, open_batch=[nodes[n] for n in in_names] if open_batch else [])
    open_batch = open_batch and graph.get_tensor_by_name(f"{in_names[0]}:0").shape[0] is None
    in_specs = tuple(TensorSpec(names.get(n, n), f"{n}:0", shapes[n],
                                graph.get_tensor_by_name(f"{n}:0").dtype.name) for n in in_names)
    out_specs = []
    for tensor in out_tensors:
        full = tensor if ":" in tensor else f"{tensor}:0"
        try:
            t = graph.get_tensor_by_name(full)
        except (KeyError, ValueError):
            raise ModelError(f"model.outputs: {tensor!r}: node {node_of(tensor)!r} has no such output") from None
        name = names.get(tensor) or (node_of(tensor) if full.endswith(":0") else full.replace(":", "_"))
        dims = tuple(-1 if d is None else int(d) for d in t.shape) if t.shape.rank is not None else (-1,)
        out_specs.append(TensorSpec(name, full, dims, t.dtype.name))
    layers = scope_layers((n.name for n in graph_def.node), skip=in_names)
    runner = reference or _session_runner(graph, in_specs, tuple(out_specs), any_batch=open_batch)
    if any(-1 in o.shape for o in out_specs):
        # Static shape inference could not see through the graph (e.g. a Merge, unknown rank); one run can.
        zeros = runner({i.name: np.zeros(i.shape, i.dtype) for i in in_specs})
        out_specs = [o.__class__(o.name, o.tensor, tuple(zeros[o.name].shape), o.dtype) for o in out_specs]
    frozen = FrozenGraph(graph_def, in_specs, tuple(out_specs), layers)
    return LoadedModel(frozen, runner, fmt, framework, notes=tuple(notes), any_batch=open_batch)


def _import_graph(graph_def: Any, shown: str, open_batch: list[Any]) -> Any:
    """``graph_def`` as a tf.Graph; the ``open_batch`` placeholders with their batch dimension open (the
    graph_def itself keeps its pinned shapes). A graph that cannot take an open batch is imported as
    pinned."""
    tf = import_tf()
    pinned = [tf.TensorShape(node.attr["shape"].shape) for node in open_batch]
    for node, shape in zip(open_batch, pinned):
        node.attr["shape"].shape.CopyFrom(tf.TensorShape([None, *shape[1:]]).as_proto())
    graph = tf.Graph()
    try:
        with graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
    except (ValueError, tf.errors.OpError) as exc:
        if open_batch:
            return _import_graph(graph_def, shown, [])
        raise ModelError(f"{shown}: TensorFlow cannot import the graph: {str(exc).strip().splitlines()[0]}") \
            from None
    finally:
        for node, shape in zip(open_batch, pinned):
            node.attr["shape"].shape.CopyFrom(shape.as_proto())
    return graph


def _bind(graph_def: Any, nodes: dict[str, Any], bind: Mapping[str, Any], placeholders: list[str],
          shown: str) -> None:
    tf = import_tf()
    for name, value in bind.items():
        node = nodes.get(name)
        if node is None or node.op not in PLACEHOLDERS:
            what = f"is a {node.op} node, not a placeholder" if node is not None else "is not in the graph"
            raise ModelError(f"model.bind: {name!r} {what} (placeholders of {shown}: "
                             f"{', '.join(placeholders) or 'none'}){did_you_mean(name, placeholders)}")
        dtype = tf.as_dtype(node.attr["dtype"].type)
        shape = _placeholder_shape(node)
        if shape:
            raise ModelError(f"model.bind: {name!r} has shape {show_shape(shape)}; only scalar placeholders "
                             "can be bound")
        if dtype == tf.bool and not isinstance(value, bool):
            raise ModelError(f"model.bind: {name!r} is a bool placeholder; bind it to true or false, "
                             f"not {_yaml(value)}")
        if dtype != tf.bool and isinstance(value, bool):
            raise ModelError(f"model.bind: {name!r} is a {dtype.name} placeholder; bind it to a number, "
                             f"not {_yaml(value)}")
        if dtype.is_integer and not float(value).is_integer():
            raise ModelError(f"model.bind: {name!r} is a {dtype.name} placeholder; {value} is not an integer")
        if not (dtype.is_bool or dtype.is_integer or dtype.is_floating):
            raise ModelError(f"model.bind: {name!r} is a {dtype.name} placeholder; only bool and numeric "
                             "placeholders can be bound")
        node.op = "Const"
        del node.input[:]
        node.attr.clear()
        node.attr["dtype"].type = dtype.as_datatype_enum
        node.attr["value"].tensor.CopyFrom(tf.make_tensor_proto(np.array(value, dtype=dtype.as_numpy_dtype)))


def _placeholder_shape(node: Any) -> tuple[int | None, ...] | None:
    if "shape" not in node.attr or node.attr["shape"].shape.unknown_rank:
        return None
    return tuple(None if d.size < 0 else int(d.size) for d in node.attr["shape"].shape.dim)


def _sinks(graph_def: Any) -> list[str]:
    used = {node_of(i) for n in graph_def.node for i in n.input}
    return [n.name for n in graph_def.node if n.name not in used and n.op not in NOT_OUTPUTS
            and not n.op.startswith("Assign")]


def _prune(graph_def: Any, roots: list[str], keep: list[str]) -> None:
    nodes = {n.name: n for n in graph_def.node}
    needed = set(keep)
    todo = list(roots)
    while todo:
        name = todo.pop()
        if name in needed or name not in nodes:
            needed.add(name)
            continue
        needed.add(name)
        todo.extend(node_of(i) for i in nodes[name].input)
    kept = [n for n in graph_def.node if n.name in needed]
    del graph_def.node[:]
    graph_def.node.extend(kept)


def _gates(name: str, graph_def: Any) -> str:
    """Why an unbound placeholder decides training behaviour, or "" when it does not."""
    consumers: dict[str, list[tuple[Any, int]]] = {}
    for node in graph_def.node:
        for index, tensor in enumerate(node.input):
            consumers.setdefault(node_of(tensor), []).append((node, index))
    found: dict[str, None] = {}
    seen = {name}
    todo = [name]
    while todo:
        current = todo.pop()
        for node, index in consumers.get(current, []):
            if node.op in ("Switch", "RefSwitch") and index == 1:
                found.setdefault(f"tf.cond {_cond_scope(node.name)!r} (Switch/Merge)")
            elif node.op in ("If", "StatelessIf") and index == 0:
                found.setdefault(f"tf.cond {node.name!r} (If)")
            elif node.op in RANDOM_OPS:
                found.setdefault(f"random op {node.op} {node.name!r}")
            elif node.name not in seen and node.op not in ("Switch", "If", "StatelessIf"):
                seen.add(node.name)
                todo.append(node.name)
    placeholder = next(n for n in graph_def.node if n.name == name)
    if _placeholder_shape(placeholder) == ():
        # A scalar that meets random values (keep_prob, a dropout rate) decides how dropout behaves.
        randomized = _forward(consumers, [n.name for n in graph_def.node if n.op in RANDOM_OPS])
        meets = sorted(seen & randomized)
        if meets:
            found.setdefault(f"the dropout at {meets[0]!r} (it meets random values there)")
    if not found:
        return ""
    is_bool = placeholder.attr["dtype"].type == _DT_BOOL
    value = "false" if is_bool else "1.0" if "keep" in name.lower() else "<its inference value>"
    decides = sorted(found)
    shown = ", ".join(decides[:3]) + (f" and {len(decides) - 3} more" if len(decides) > 3 else "")
    return (f"placeholder {name!r} ({'bool' if is_bool else 'numeric'}) is not bound and switches training "
            f"behaviour: it decides {shown}; edgeconv will not guess its inference value. "
            f"Fix: bind it in the pipeline file, model.bind: {{{name}: {value}}}")


def _forward(consumers: Mapping[str, list[tuple[Any, int]]], start: list[str]) -> set[str]:
    seen = set(start)
    todo = list(start)
    while todo:
        for node, _ in consumers.get(todo.pop(), []):
            if node.name not in seen:
                seen.add(node.name)
                todo.append(node.name)
    return seen


def _cond_scope(switch: str) -> str:
    """The tf.cond a v1 Switch belongs to: its name up to the last ``cond``/``cond_N`` scope."""
    parts = switch.split("/")
    for i in range(len(parts) - 1, 0, -1):
        if re.fullmatch(r"cond(_\d+)?", parts[i - 1]):
            return "/".join(parts[:i])
    return switch.rsplit("/", 1)[0] if "/" in switch else switch


def _session_runner(graph: Any, inputs: tuple[TensorSpec, ...], outputs: tuple[TensorSpec, ...],
                    any_batch: bool) -> Any:
    """Run the bound graph the way TF1 does: a session over the imported graph. With ``any_batch`` (the
    placeholders' batch dimension open) a call takes any number of samples at once, unless the first such
    call shows the graph mixes samples (its first batch differs from the same batch alone: a reduction
    over the batch axis): then, and without ``any_batch``, a call runs the samples one batch at a time."""
    tf = import_tf()
    session = tf.compat.v1.Session(graph=graph)
    fetches = {o.name: graph.get_tensor_by_name(o.tensor) for o in outputs}
    batch = inputs[0].shape[0] if inputs and inputs[0].shape else 1
    batched: list[bool] = [] if any_batch else [False]  # decided on the first call with more than a batch

    def once(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = session.run(fetches, {graph.get_tensor_by_name(i.tensor): feeds[i.name] for i in inputs})
        return {k: np.asarray(v) for k, v in result.items()}

    def by_batch(feeds: Mapping[str, np.ndarray], n: int) -> dict[str, np.ndarray]:
        parts = [once({k: v[i:i + batch] for k, v in feeds.items()}) for i in range(0, n, batch)]
        return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(feeds[inputs[0].name]) if inputs else batch
        if n == batch or batched == [False]:
            return once(feeds) if n == batch else by_batch(feeds, n)
        try:
            result = once(feeds)
        except (ValueError, tf.errors.OpError):
            result = None
        if not batched:
            alone = once({k: v[:batch] for k, v in feeds.items()})
            batched.append(result is not None and all(
                result[k].shape[:1] == (n,) and np.allclose(result[k][:batch], alone[k], rtol=1e-5,
                                                            atol=1e-6 * max(1.0, float(np.max(np.abs(alone[k])))))
                for k in alone))
        return result if batched[0] and result is not None else by_batch(feeds, n)

    return run


def _yaml(value: object) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)
