"""strip-training: remove what only training needs from a frozen inference graph."""

from __future__ import annotations

from typing import Any, ClassVar

from .._record import record
from ..errors import ModelError
from ..ir import FrozenGraph, scopes_naming
from .base import PassResult, Removal, Rewrite
from .control_flow import fold_constant_conds
from .graph import GraphEditor, canonical, const_value, node_of

# Ops that draw random numbers, or compute seeds/keys for them.
RANDOM_OPS = frozenset({
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal",
    "ParameterizedTruncatedNormal", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
    "RandomShuffle", "Multinomial", "StatelessRandomUniform", "StatelessRandomUniformV2",
    "StatelessRandomUniformInt", "StatelessRandomUniformIntV2", "StatelessRandomUniformFullInt",
    "StatelessRandomUniformFullIntV2", "StatelessRandomNormal", "StatelessRandomNormalV2",
    "StatelessTruncatedNormal", "StatelessTruncatedNormalV2", "StatelessParameterizedTruncatedNormal",
    "StatelessRandomGammaV2", "StatelessRandomGammaV3", "StatelessRandomPoisson",
    "StatelessRandomBinomial", "StatelessMultinomial", "StatelessRandomGetKeyCounter",
    "StatelessRandomGetKeyCounterAlg", "StatelessRandomGetAlg", "StatelessShuffle",
    "RngReadAndSkip", "RngSkip", "StatefulUniform", "StatefulUniformInt", "StatefulUniformFullInt",
    "StatefulStandardNormal", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
    "StatefulRandomBinomial", "NonDeterministicInts",
})
SEED_OPS = frozenset({"StatelessRandomGetKeyCounter", "StatelessRandomGetKeyCounterAlg", "StatelessRandomGetAlg",
                      "RngReadAndSkip", "RngSkip"})
# Ops whose output 0 is their input 0 (IdentityN: output i is input i).
IDENTITY_OPS = frozenset({"Identity", "IdentityN", "Snapshot", "StopGradient", "PreventGradient"})
# Debug checks that pass their input through, or only run for their side effect.
DEBUG_PASSTHROUGH_OPS = frozenset({"CheckNumerics", "CheckNumericsV2", "EnsureShape", "Print",
                                   "DebugIdentity", "DebugIdentityV2"})
DEBUG_SIDE_EFFECT_OPS = frozenset({"Assert", "PrintV2", "NoOp"})
# Variable updates (batch-norm moving averages, seed generators, counters).
STATE_WRITE_OPS = frozenset({"AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp",
                             "Assign", "AssignAdd", "AssignSub"})
STATE_OPS = STATE_WRITE_OPS | {"ReadVariableOp", "VarHandleOp", "VariableV2", "ResourceGather"}

_SELECT = ("SelectV2", "Select")
_SCALE = ("Mul", "RealDiv")

REASON_RANDOM = "training-only random subgraph (dropout/noise), replaced by its inference identity"
REASON_IDENTITY = "identity op (passes its input through)"
REASON_DEBUG = "debug or control-only op"
REASON_STATE = "variable update (training-only state write)"
REASON_UNUSED = "no longer used by any output"


@record
class StripTrainingPass:
    """Fold tf.cond on bound predicates, remove dropout and random-number subgraphs,
    identity chains, debug ops and variable updates; refuse random ops and batch
    statistics whose inference meaning is not clear."""

    name: ClassVar[str] = "strip-training"
    summary: ClassVar[str] = (
        "Fold tf.cond on constant (bound) predicates; remove Dropout/noise subgraphs (random ops and what only "
        "feeds them), Identity chains, Assert/CheckNumerics/NoOp debug nodes and variable updates; refuse batch "
        "norm in training mode.")

    def apply(self, graph: FrozenGraph) -> tuple[FrozenGraph, PassResult]:
        ed = GraphEditor(graph)
        folded = fold_constant_conds(ed)
        reasons: dict[str, str] = {}
        rewrites = folded.rewrites + self._rewrite_random(ed, reasons)
        bypass: dict[str, str] = {}  # rerouted at once: one walk over the graph, not one per Identity
        for node in list(ed.graph_def.node):
            if node.op in IDENTITY_OPS or node.op in DEBUG_PASSTHROUGH_OPS:
                data = ed.data_inputs(node)
                outputs = range(len(data)) if node.op == "IdentityN" else range(1)
                for i in outputs:
                    bypass[canonical(f"{node.name}:{i}")] = data[i]
                reasons[node.name] = REASON_IDENTITY if node.op in IDENTITY_OPS else REASON_DEBUG
            elif node.op in DEBUG_SIDE_EFFECT_OPS:
                reasons[node.name] = REASON_DEBUG
            elif node.op in STATE_WRITE_OPS:
                # The write, its variable handle and the value it computes go together.
                for name in ed.ancestors([node.name]):
                    reasons.setdefault(name, REASON_STATE)
                reasons[node.name] = REASON_STATE
        ed.reroute_many(bypass)
        # A control edge must not keep alive what this pass removes (an Assert, a bypassed Identity).
        ed.drop_control_inputs(to=lambda n: n.name in reasons)
        removed = tuple(folded.removed) + tuple(
            Removal(n.op, n.name, ed.layers_of(n.name), reasons.get(n.name, REASON_UNUSED))
            for n in ed.prune())
        self._refuse_leftovers(ed)
        result_graph = ed.finish()
        notes = tuple(_untraced_training_layers(graph))
        return result_graph, PassResult(self.name, graph.op_counts(), result_graph.op_counts(),
                                        removed, tuple(rewrites), notes)

    def _rewrite_random(self, ed: GraphEditor, reasons: dict[str, str]) -> list[Rewrite]:
        """Replace each dropout/noise subgraph by the tensor it modulates."""
        with ed.fixed_nodes():
            rewrites, bypass = self._random_joins(ed, reasons)
        ed.reroute_many(bypass)  # at once: chained dropouts resolve as if rerouted one by one
        return rewrites

    def _random_joins(self, ed: GraphEditor, reasons: dict[str, str]) -> tuple[list[Rewrite], dict[str, str]]:
        nodes = ed.nodes
        live = ed.depends_on_inputs()
        consumers = ed.consumers()
        # Generators first, seed/key plumbing last, so a refusal names the op that draws the numbers.
        random_nodes = sorted((n for n in ed.graph_def.node if n.op in RANDOM_OPS),
                              key=lambda n: n.op in SEED_OPS)
        rewrites: list[Rewrite] = []
        bypass: dict[str, str] = {}
        done: set[str] = set()
        for rnd in random_nodes:
            region = _mask_region(rnd.name, consumers, live, ed)
            # The region and what feeds it (seeds, keys, shapes, rates) go together.
            for name in ed.ancestors(region) - live:
                reasons.setdefault(name, REASON_RANDOM)
            joins = sorted({c.name for n in region for c in consumers.get(n, [])
                            if c.name in live and any(node_of(t) == n for t in ed.data_inputs(c))})
            for join_name in joins:
                if join_name in done:
                    continue
                done.add(join_name)
                join = nodes[join_name]
                replacement, how = _inference_value(join, region, live, ed)
                layers = ed.layers_of(join_name)
                if replacement is None:
                    raise ModelError(_refusal(rnd, join, layers, ed, how))
                bypass[join_name] = replacement
                reasons[join_name] = REASON_RANDOM
                scale = nodes.get(node_of(_data_input(join, region, ed) or ""))
                if scale is not None and canonical(scale.name) != canonical(replacement):
                    reasons[scale.name] = REASON_RANDOM
                rewrites.append(Rewrite(layers, join_name, how))
        return rewrites, bypass

    def _refuse_leftovers(self, ed: GraphEditor) -> None:
        for node in ed.graph_def.node:
            layers = ed.layers_of(node.name)
            where = f"layer {layers[-1]!r}" if layers else f"node {node.name!r}"
            if node.op in RANDOM_OPS:
                raise ModelError(
                    f"random op {node.op} ({where}) still feeds the model outputs after strip-training; "
                    "it is not a dropout/noise pattern edgeconv can replace safely. Fix: make the layer "
                    "deterministic in inference (call it with training=False) or remove it")
            if node.op in STATE_OPS or (node.op == "Placeholder" and node.attr["dtype"].type == 20):
                raise ModelError(
                    f"{where} uses variable state at inference time ({node.op}); the model must be "
                    "frozen. Fix: call the layer with training=False so it does not update variables")
            if node.op.startswith("FusedBatchNorm") and node.attr["is_training"].b:
                raise ModelError(
                    f"{node.op} {node.name!r} ({where}) normalises with the statistics of each batch "
                    "(is_training=true): batch norm in training mode, and the graph does not say which moving "
                    "statistics inference should use. Fix: export the graph with is_training=False, or bind "
                    "the placeholder that selects training mode (model.bind)")
        moments = _batch_moments(ed)
        if moments is not None:
            layers = ed.layers_of(moments.name)
            where = f"layer {layers[-1]!r}" if layers else f"node {moments.name!r}"
            raise ModelError(
                f"{where} computes batch-norm moments over the batch axis at inference time (Mean "
                f"{moments.name!r} over axis 0): batch norm in training mode. Fix: call the layer with "
                "training=False (do not pass training=True inside call())")


def _batch_moments(ed: GraphEditor) -> Any:
    """A Mean over the batch axis feeding a SquaredDifference (the batch moments of
    batch norm in training mode), on the data path; None when there is none."""
    nodes = ed.nodes
    live = ed.depends_on_inputs()
    consumers = ed.consumers()
    for node in ed.graph_def.node:
        if node.op != "Mean" or node.name not in live:
            continue
        data = ed.data_inputs(node)
        axes = const_value(nodes[node_of(data[1])]) if len(data) == 2 and node_of(data[1]) in nodes else None
        if axes is None or 0 not in axes.reshape(-1).tolist():
            continue
        if any(c.op == "SquaredDifference" for c in consumers.get(node.name, [])):
            return node
    return None


def _mask_region(start: str, consumers: dict[str, list[Any]], live: set[str], ed: GraphEditor) -> set[str]:
    """The random node and everything computed from it that does not touch model inputs
    (the random mask or noise, up to where it meets the data path)."""
    region: set[str] = set()
    todo = [start]
    while todo:
        name = todo.pop()
        if name in region:
            continue
        region.add(name)
        todo.extend(c.name for c in consumers.get(name, []) if c.name not in live)
    return region


def _data_input(join: Any, region: set[str], ed: GraphEditor) -> str | None:
    data = ed.data_inputs(join)
    if join.op in _SELECT and len(data) == 3:
        return data[1]
    others = [t for t in data if node_of(t) not in region]
    return others[0] if len(others) == 1 else None


def _is_constant(tensor: str, live: set[str], region: set[str], ed: GraphEditor) -> bool:
    # The walk stops at the first live or random node: one is enough to answer, and the data path above
    # a dropout is the whole model (walking it for every dropout would be quadratic).
    deps = ed.ancestors([tensor], stop=lambda n: n.name in live or n.name in region)
    return not deps & live and not deps & region


def _inference_value(join: Any, region: set[str], live: set[str], ed: GraphEditor) -> tuple[str | None, str]:
    """What the join node computes in inference mode, and how we know."""
    nodes = ed.nodes
    data = ed.data_inputs(join)
    layers = ed.layers_of(join.name)
    roles = {ed.layer(name).training_only for name in layers}
    if join.op in _SELECT and len(data) == 3:
        cond, kept, dropped = data
        if node_of(cond) not in region or not _is_constant(dropped, live, region, ed):
            return None, f"{join.op} mixes random values into the data path"
    elif join.op == "Mul" and len(data) == 2:
        kept = data[0] if node_of(data[1]) in region else data[1]
    elif join.op in ("AddV2", "Add") and len(data) == 2 and "noise" in roles:
        kept = data[0] if node_of(data[1]) in region else data[1]
        return kept, f"additive noise ({join.op}) removed: noise layers are the identity in inference"
    else:
        return None, f"random values reach the data path through {join.op}"
    producer = nodes.get(node_of(kept))
    if producer is not None and producer.op in _SCALE:
        pin = ed.data_inputs(producer)
        x = [t for t in pin if node_of(t) in live]
        if len(x) == 1 and len(pin) == 2 and _is_constant(pin[1] if pin[0] == x[0] else pin[0], live, region, ed):
            return x[0], f"inverted dropout ({producer.op} by the keep probability, then {join.op} " \
                         "by a random mask) replaced by its input"
    if roles & {"dropout", "noise"} and join.op == "Mul":
        return kept, f"multiplicative noise ({join.op}) removed: the layer is the identity in inference"
    return None, "a random mask without the inverted-dropout scaling (inference value is ambiguous)"


def _refusal(rnd: Any, join: Any, layers: tuple[str, ...], ed: GraphEditor, how: str) -> str:
    where = f"layer {layers[-1]!r}" if layers else f"node {join.name!r}"
    return (f"random op {rnd.op} in {where} feeds the model outputs and edgeconv cannot tell its "
            f"inference behaviour ({how}). Fix: call the layer with training=False, or remove the "
            "random computation from the inference model")


def _untraced_training_layers(graph: FrozenGraph) -> list[str]:
    """Training-only layers that left no op in the traced graph (already inference identities)."""
    wanted = {layer.name for layer in graph.layers if layer.training_only}
    found = {layer for n in graph.graph_def.node for layer in scopes_naming(n.name, wanted)}
    notes = []
    for layer in graph.layers:
        if not layer.training_only:
            continue
        hit = layer.name in found
        detail = f", {layer.detail}" if layer.detail else ""
        if not hit:
            notes.append(f"{layer.class_name} layer {layer.name!r}{detail}: no ops in the traced graph; "
                         "tracing with training=False already made it an identity")
        else:
            notes.append(f"{layer.class_name} layer {layer.name!r}{detail}: had ops in the traced graph "
                         "(it forces training behaviour); replaced by its inference identity")
    return notes
