"""Fold ``tf.cond`` whose predicate is a constant (a bound ``is_training``).

Two encodings exist. TF1 control flow (v1) is ``Switch``/``Merge``: a ``Switch``
sends its input to output 1 when the predicate is true and to output 0 otherwise;
the other output is *dead*, deadness flows to everything computed from it (also
through control edges), and a ``Merge`` forwards whichever input is alive. TF2
control flow (v2) is an ``If``/``StatelessIf`` op whose branches are functions of
the graph library. With a constant predicate both reduce to the taken branch:
v1 by dead-branch propagation, v2 by inlining the taken function.

Used by strip-training; nothing here guesses: a cond whose predicate is not a
constant is left alone.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_import
from .base import Removal, Rewrite
from .graph import GraphEditor, canonical, const_value, is_control, node_of

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

SWITCH_OPS = ("Switch", "RefSwitch")
MERGE_OPS = ("Merge", "RefMerge")
IF_OPS = ("If", "StatelessIf")
_PASSTHROUGH = ("Identity", "Snapshot", "StopGradient")
_COMPARE = {  # TF op -> the NumPy function that folds it
    "Equal": "equal", "NotEqual": "not_equal", "Greater": "greater", "Less": "less",
    "GreaterEqual": "greater_equal", "LessEqual": "less_equal",
    "LogicalAnd": "logical_and", "LogicalOr": "logical_or",
}
_DST_TYPES = {1: "float32", 3: "int32", 9: "int64", 10: "bool"}  # TF DataType -> NumPy dtype


REASON_UNUSED = "no longer used by any output"


@dataclasses.dataclass
class Folded:
    """What folding did: the rewrites and every node it removed (the untaken branches,
    the Switch/Merge/If plumbing; nodes of untaken v2 branch functions too, though they
    never were top-level nodes)."""

    rewrites: list[Rewrite] = dataclasses.field(default_factory=list)
    removed: list[Removal] = dataclasses.field(default_factory=list)
    reasons: dict[str, str] = dataclasses.field(default_factory=dict)


class _Evaluator:
    """Constant values of small predicate expressions (bound placeholders, Identity,
    LogicalNot, comparisons, Cast); None for anything else."""

    def __init__(self, ed: GraphEditor, taken: dict[str, int]) -> None:
        self.nodes = ed.nodes
        self.taken = taken
        self.memo: dict[str, Any] = {}

    def value(self, tensor: str) -> Any:
        tensor = canonical(tensor)
        if tensor not in self.memo:
            self.memo[tensor] = None  # cycles (loops) are not constant
            self.memo[tensor] = self._compute(tensor)
        return self.memo[tensor]

    def _compute(self, tensor: str) -> Any:
        node = self.nodes.get(node_of(tensor))
        if node is None:
            return None
        port = int(tensor.split(":")[1]) if ":" in tensor else 0
        data = [t for t in node.input if not is_control(t)]
        if node.op == "Const":
            return const_value(node)
        if node.op in _PASSTHROUGH and data:
            return self.value(data[0])
        if node.op in SWITCH_OPS and self.taken.get(node.name) == port:
            return self.value(data[0])
        if node.op == "LogicalNot" and data:
            v = self.value(data[0])
            return None if v is None else np.logical_not(v)
        if node.op in _COMPARE and len(data) == 2:
            a, b = self.value(data[0]), self.value(data[1])
            return None if a is None or b is None else getattr(np, _COMPARE[node.op])(a, b)
        if node.op == "Cast" and data:
            v, dst = self.value(data[0]), _DST_TYPES.get(node.attr["DstT"].type)
            return None if v is None or dst is None else v.astype(dst)
        return None

    def predicate(self, tensor: str) -> bool | None:
        v = self.value(tensor)
        return bool(v.reshape(())) if v is not None and v.size == 1 else None

    def source(self, tensor: str) -> str:
        """The constant a predicate comes from, for messages: ``is_training=false``."""
        node = self.nodes.get(node_of(tensor))
        while node is not None and node.op in (*_PASSTHROUGH, "LogicalNot", "Cast", *SWITCH_OPS):
            node = self.nodes.get(node_of(next(t for t in node.input if not is_control(t))))
        if node is None:
            return node_of(tensor)
        v = const_value(node)
        shown = str(bool(v.reshape(()))).lower() if v is not None and v.dtype == np.bool_ else str(v)
        return f"{node.name}={shown}"


def fold_constant_conds(ed: GraphEditor) -> Folded:
    """Fold every cond whose predicate is constant; repeat for conds nested in taken branches."""
    folded = Folded()
    for _ in range(64):  # nested conds unfold one level per round
        changed = _fold_switches(ed, folded)
        changed = _inline_ifs(ed, folded) or changed
        if not changed:
            break
        folded.removed.extend(Removal(n.op, n.name, ed.layers_of(n.name), folded.reasons.get(n.name, REASON_UNUSED))
                              for n in ed.prune())
    _prune_library(ed.graph_def)
    return folded


def _fold_switches(ed: GraphEditor, folded: Folded) -> bool:
    taken: dict[str, int] = {}
    evaluator = _Evaluator(ed, taken)
    dead_nodes: set[str] = set()
    dead_tensors: set[str] = set()
    merges: dict[str, tuple[int, str]] = {}

    def dead(tensor: str) -> bool:
        return node_of(tensor) in dead_nodes or (not is_control(tensor) and canonical(tensor) in dead_tensors)

    for node in ed.topological():
        data = [t for t in node.input if not is_control(t)]
        if node.op in MERGE_OPS:
            live = [(i, t) for i, t in enumerate(data) if not dead(t)]
            if not live:
                dead_nodes.add(node.name)
            elif len(live) == 1 and len(data) > 1:
                merges[node.name] = live[0]
            continue
        if any(dead(t) for t in node.input):
            dead_nodes.add(node.name)
            continue
        if node.op in SWITCH_OPS and len(data) == 2:
            pred = evaluator.predicate(data[1])
            if pred is not None:
                port = 1 if pred else 0
                taken[node.name] = port
                dead_tensors.add(canonical(f"{node.name}:{1 - port}"))
                evaluator.memo.clear()
    if not taken:
        return False
    nodes = ed.nodes
    sources: dict[str, str] = {}
    for name, port in taken.items():
        sources[name] = evaluator.source(ed.data_inputs(nodes[name])[1])
        ed.reroute(f"{name}:{port}", ed.data_inputs(nodes[name])[0])
        folded.reasons.setdefault(name, f"tf.cond Switch folded ({sources[name]})")
    for name, (index, tensor) in merges.items():
        ed.reroute(f"{name}:0", tensor)
        _replace_value_index(ed, name, index)
        folded.reasons.setdefault(name, "tf.cond Merge folded (one branch left)")
        scope = name.rsplit("/", 1)[0]
        source = next((v for k, v in sources.items() if k.startswith(scope + "/")), "a constant predicate")
        # tf.cond builds Merge(false branch, true branch).
        branch = {0: "false", 1: "true"}.get(index, f"#{index}") if len(nodes[name].input) == 2 else f"#{index}"
        folded.rewrites.append(Rewrite(ed.layers_of(name), scope, f"tf.cond {scope!r} (Switch/Merge) folded: "
                                       f"kept its {branch} branch ({source}), dropped the other"))
    distinct = set(sources.values())
    decided = f" ({distinct.pop()})" if len(distinct) == 1 else ""
    for name in dead_nodes:
        folded.reasons.setdefault(name, f"in a tf.cond branch that a constant predicate never takes{decided}")
    # Drop control edges from live nodes into folded plumbing.
    ed.drop_control_inputs(to=lambda n: n.name in dead_nodes or n.name in taken)
    return True


def _replace_value_index(ed: GraphEditor, merge: str, index: int) -> None:
    users = [n for n in ed.graph_def.node if any(canonical(t) == f"{merge}:1" for t in n.input)]
    if not users:
        return
    const = ed.graph_def.node.add()
    const.name, const.op = f"{merge}/value_index", "Const"
    const.attr["dtype"].type = 3  # DT_INT32
    const.attr["value"].tensor.dtype = 3
    const.attr["value"].tensor.int_val.append(index)
    ed.reroute(f"{merge}:1", const.name)


def _inline_ifs(ed: GraphEditor, folded: Folded) -> bool:
    evaluator = _Evaluator(ed, {})
    library = {f.signature.name: f for f in ed.graph_def.library.function}
    changed = False
    for node in list(ed.graph_def.node):
        if node.op not in IF_OPS:
            continue
        data = ed.data_inputs(node)
        pred = evaluator.predicate(data[0])
        if pred is None:
            continue
        keep = node.attr["then_branch" if pred else "else_branch"].func.name
        drop = node.attr["else_branch" if pred else "then_branch"].func.name
        layers = ed.layers_of(node.name)
        source = evaluator.source(data[0])
        for inner in library[drop].node_def if drop in library else ():
            folded.removed.append(Removal(inner.op, f"{node.name}/{drop}/{inner.name}", layers,
                                          f"in a tf.cond branch that a constant predicate never takes ({source})"))
        _inline(ed, node, library[keep], data[1:])
        folded.reasons[node.name] = f"tf.cond If folded ({source})"
        folded.rewrites.append(Rewrite(layers, node.name, f"tf.cond {node.name!r} (If) folded: inlined its "
                                       f"{'then' if pred else 'else'} branch {keep!r} ({source}), dropped "
                                       f"{drop!r}"))
        changed = True
    if changed:
        ed.drop_control_inputs(to=lambda n: n.name in folded.reasons and n.op in IF_OPS)
    return changed


def _inline(ed: GraphEditor, call: Any, fdef: Any, args: list[str]) -> None:
    """Copy the body of ``fdef`` into the graph under ``call``'s scope and make uses of
    ``call``'s outputs use the body's results."""
    from tensorflow.python.framework.function_def_to_graph import function_def_to_graph_def

    body, nested_to_flat = function_def_to_graph_def(fdef)
    prefix = f"{call.name}/{fdef.signature.name}/"
    existing = {n.name for n in ed.graph_def.node}
    arg_names = [a.name for a in fdef.signature.input_arg]
    renamed = {n.name: prefix + n.name for n in body.node}
    if existing & set(renamed.values()):
        raise AssertionError(f"inlining {call.name!r} would collide with existing nodes")

    def rename(tensor: str) -> str:
        control = is_control(tensor)
        name = node_of(tensor)
        suffix = tensor.lstrip("^")[len(name):]
        return ("^" if control else "") + str(renamed.get(name, name)) + suffix

    for inner in body.node:
        new = ed.graph_def.node.add()
        new.CopyFrom(inner)
        new.name = renamed[inner.name]
        if inner.name in arg_names:  # the argument placeholder takes the call's input
            value = args[arg_names.index(inner.name)]
            dtype = inner.attr["dtype"].type
            new.op = "Identity"
            new.attr.clear()
            new.attr["T"].type = dtype
            del new.input[:]
            new.input.append(value)
            continue
        del new.input[:]
        new.input.extend(rename(t) for t in inner.input)
    for index, out in enumerate(fdef.signature.output_arg):
        result = nested_to_flat.get(fdef.ret[out.name], fdef.ret[out.name])
        ed.reroute(f"{call.name}:{index}", rename(result))


def _prune_library(graph_def: Any) -> None:
    """Drop library functions that no node uses any more (the folded branches)."""
    library = {f.signature.name: f for f in graph_def.library.function}
    if not library:
        return
    used: set[str] = set()
    todo = [n for n in graph_def.node]
    while todo:
        node = todo.pop()
        for attr in node.attr.values():
            names = [attr.func.name] if attr.HasField("func") else [f.name for f in attr.list.func]
            for name in names:
                if name in library and name not in used:
                    used.add(name)
                    todo.extend(library[name].node_def)
    kept = [library[n] for n in library if n in used]
    del graph_def.library.function[:]
    graph_def.library.function.extend(kept)
