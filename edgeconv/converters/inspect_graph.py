"""What a model may run, decided from its protobufs before any loader executes a node of it.

edgeconv runs a model's graph to trace, compare and calibrate it, and TensorFlow's loaders run parts of
it as they load (a TF1 SavedModel's main op, a TF2 SavedModel's resource initializers). A model comes
from whoever opened the pull request, so what it may run is an allow-list, checked on the GraphDef and
the SavedModel's MetaGraph as parsed, not a deny-list checked after loading:

- an op TensorFlow registers as stateless (TF's ``is_stateful`` flag marks every op with a side effect:
  files, network, processes, queues, datasets, summaries, Python calls), or one of the stateful ops
  an inference graph needs (:data:`INFERENCE_STATEFUL_OPS`);
- no print stream or debug URL that names a file or a server (``PrintV2(output_stream="file://...")``,
  ``DebugIdentity(debug_urls=[...])``);
- no code the loader runs by itself: a TF1 SavedModel's main/init op, a TF2 SavedModel's init op and the
  initializers of its restored resources (a lookup table's ``_initialize``). Those run inside
  ``tf.saved_model.load`` whatever they hold, so they need ``model.trust_code: true``.

Every function a node calls (``attr.func``, lists of functions: ``If``/``While`` branches, partitioned
calls) is checked too. ``model.trust_code: true`` skips the check: the pipeline vouches for the model.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from ..errors import ModelError, rel

# Stateful in TF's registry, and what an inference graph holds: variables read (TF2 SavedModels before
# freezing), calls and control flow (their bodies are checked), random ops (strip-training removes or
# reports them), assertions and no-ops. None of them reads or writes outside the process.
INFERENCE_STATEFUL_OPS = frozenset({
    "VarHandleOp", "ReadVariableOp", "VariableV2", "Variable", "VarIsInitializedOp", "DestroyResourceOp",
    "StatefulPartitionedCall", "PartitionedCall", "If", "While", "Case", "StatelessIf", "StatelessWhile",
    "Assert", "NoOp", "Placeholder", "PlaceholderWithDefault",
    "RandomUniform", "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "RandomShuffle",
    "Multinomial", "RandomGamma", "RandomPoisson", "RandomPoissonV2",
    "StatefulUniform", "StatefulUniformInt", "StatefulStandardNormalV2", "StatefulTruncatedNormal",
    "RngReadAndSkip", "RngSkip",
    "Print", "PrintV2",  # where they print is checked below: a file stream is refused
    "AssignVariableOp", "AssignAddVariableOp", "AssignSubVariableOp", "Assign", "AssignAdd", "AssignSub",
    "ResourceGather", "ResourceGatherNd", "ResourceScatterUpdate", "ResourceScatterAdd", "ResourceScatterSub",
    "HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2", "MutableHashTableOfTensorsV2",
    "LookupTableFindV2", "LookupTableSizeV2", "LookupTableImportV2", "LookupTableExportV2",
    "InitializeTableV2", "AnonymousHashTable",
})

# Stateless in TF's registry, yet they read files, run Python or read what a reader queue holds.
STATELESS_WITH_EFFECTS = frozenset({
    "ReadFile", "MatchingFiles", "ImmutableConst", "InitializeTableFromTextFile", "GenerateVocabRemapping",
    "PyFuncStateless", "ReaderRead", "ReaderReadUpTo", "ReaderReset", "ReaderRestoreState", "ReaderSerializeState",
    "ReaderNumRecordsProduced", "ReaderNumWorkUnitsCompleted", "SnapshotDatasetReader",
    "SnapshotNestedDatasetReader",
})
# Attributes that name a file or a server the op reads from or writes to.
_DESCRIPTOR_ATTRS = ("descriptor_source",)  # DecodeProtoV2 / EncodeProto: "local://" or a file path
_PRINT_STREAMS = frozenset({"stderr", "stdout", "log(info)", "log(warning)", "log(error)", ""})
TRUST = ("set model.trust_code: true only if you trust the model, or export it again without it "
         "(inference needs none of it)")


def _op_def(op: str) -> Any:
    from tensorflow.python.framework import op_def_registry

    return op_def_registry.get(op)


def _refusal(node: Any, where: str) -> str | None:
    """Why this node may not run, or None."""
    op = str(node.op)
    if op == "PrintV2":
        stream = node.attr["output_stream"].s.decode(errors="replace") if "output_stream" in node.attr else ""
        if stream not in _PRINT_STREAMS:
            return f"PrintV2 {where!r} writes to {stream!r}"
        return None
    urls = [u.decode(errors="replace") for u in node.attr["debug_urls"].list.s] if "debug_urls" in node.attr else []
    urls += [u.decode(errors="replace") for u in node.attr["debug_ops_spec"].list.s] \
        if "debug_ops_spec" in node.attr else []
    if urls:
        return f"{op} {where!r} sends to {urls[0]!r}"
    for attr in _DESCRIPTOR_ATTRS:
        source = node.attr[attr].s.decode(errors="replace") if attr in node.attr else ""
        if source not in ("", "local://"):
            return f"{op} {where!r} reads {source!r}"
    if op in STATELESS_WITH_EFFECTS:
        return f"{op} {where!r} (an op that reads files or runs Python)"
    if op in INFERENCE_STATEFUL_OPS:
        return None
    op_def = _op_def(op)
    if op_def is None:
        return f"{op} {where!r} (not an op this TensorFlow knows: a custom op library would have to run)"
    if op_def.is_stateful:
        return f"{op} {where!r} (an op with effects outside the graph: files, network, processes or state)"
    return None


def _called(node: Any) -> Iterator[str]:
    for attr in node.attr.values():
        if attr.func.name:
            yield attr.func.name
        yield from (f.name for f in attr.list.func)


def refusals(nodes: Iterable[Any], functions: Mapping[str, Any], *, called: Iterable[str] = (),
             restore: bool = False) -> list[str]:
    """Every node of ``nodes``, of the functions named in ``called`` (the loader calls them itself), and of
    the functions they call (and those call) that may not run. With ``restore`` (what the loader runs to
    restore variables), a restore op inside a function may read the checkpoint its caller names (a
    function argument), and nothing else."""
    found: list[str] = []
    todo: list[tuple[Any, str, frozenset[str] | None]] = [(n, str(n.name), None) for n in nodes]
    seen: set[str] = set()

    def enter(name: str) -> None:
        if name in functions and name not in seen:
            seen.add(name)
            function = functions[name]
            args = frozenset(a.name for a in function.signature.input_arg)
            todo.extend((n, f"{name}/{n.name}", args) for n in function.node_def)

    for name in called:
        enter(name)
    while todo:
        node, where, args = todo.pop()
        if restore and args is not None and node.op in RESTORE_OPS:
            prefix = node.input[0].split(":")[0].lstrip("^") if node.input else ""
            problem = None if prefix in args else f"{node.op} {where!r} reads {prefix!r}, not the checkpoint " \
                                                  "the loader names"
        else:
            problem = _refusal(node, where)
        if problem:
            found.append(problem)
        for name in _called(node):
            enter(name)
    return sorted(found)


def _raise(shown: str, found: list[str], what: str) -> None:
    if found:
        listed = "; ".join(found[:3]) + (f"; and {len(found) - 3} more" if len(found) > 3 else "")
        raise ModelError(f"{shown}: {what}: {listed}. edgeconv runs the graph to trace and calibrate it, so "
                         f"it refuses them before anything runs; {TRUST}")


def check_graph_def(graph_def: Any, shown: str) -> None:
    """A frozen graph's nodes and functions: every one may run, or ModelError naming the first few."""
    functions = {f.signature.name: f for f in graph_def.library.function}
    _raise(shown, refusals(graph_def.node, functions), "the graph holds ops edgeconv does not run")


def check_savedmodel(path: Path) -> None:
    """A SavedModel folder before ``tf.saved_model.load`` or the TF1 loader touches it: no code the loader
    runs by itself (init ops, resource initializers), and only allowed ops reachable from the signatures."""
    from google.protobuf.message import DecodeError
    from tensorflow.core.protobuf import saved_model_pb2

    from ..inputs import MAX_MODEL_BYTES, read_bytes

    shown = rel(path)
    pb = path / "saved_model.pb"
    proto = saved_model_pb2.SavedModel()
    if not pb.exists():
        return  # not a SavedModel: the loader says what is wrong, before it runs anything
    try:
        proto.ParseFromString(read_bytes(pb, MAX_MODEL_BYTES, ModelError, "saved_model.pb"))
    except DecodeError:
        return  # TensorFlow's loaders cannot parse it either: they say so, before running any of it
    for meta in proto.meta_graphs:
        _check_meta_graph(meta, shown)


def _check_meta_graph(meta: Any, shown: str) -> None:
    graph = meta.graph_def
    nodes = {n.name: n for n in graph.node}
    functions = {f.signature.name: f for f in graph.library.function}
    runs_on_load = [f"a restored resource (object {index}) whose initializer runs on load"
                    for index, obj in enumerate(meta.object_graph_def.nodes) if obj.WhichOneof("kind") == "resource"]
    init = _reachable(_init_names(meta), nodes)
    runs_on_load += [f"{n.op} {n.name!r} in its init op" for n in init if n.op not in _INERT]
    if runs_on_load:
        listed = "; ".join(runs_on_load[:3]) + (f"; and {len(runs_on_load) - 3} more" if len(runs_on_load) > 3
                                                 else "")
        raise ModelError(f"{shown}: the SavedModel runs code of its own as it is loaded ({listed}); TensorFlow's "
                         f"loader runs it before edgeconv could check it: {TRUST}")
    outputs = [t.name for sig in meta.signature_def.values() for t in sig.outputs.values()]
    roots = _reachable(outputs, nodes) if meta.signature_def else list(nodes.values())
    _raise(shown, refusals(roots, functions), "the SavedModel's signatures need ops edgeconv does not run")
    _raise(shown, _restore_refusals(meta, nodes, functions), "the SavedModel restores its variables with ops "
           "edgeconv does not run")


RESTORE_OPS = frozenset({"RestoreV2", "Restore", "RestoreSlice"})  # read the checkpoint the loader names


def _restore_refusals(meta: Any, nodes: Mapping[str, Any], functions: Mapping[str, Any]) -> list[str]:
    """What the loader runs to restore the variables: the TF1 saver's restore op (its restore ops must read
    the checkpoint file the loader feeds, ``saver_def.filename_tensor_name``), and a TF2 object graph's
    save and restore functions. Everything else on those paths must be an op edgeconv may run."""
    found: list[str] = []
    saver = meta.saver_def
    if saver.restore_op_name:
        filename = saver.filename_tensor_name.split(":")[0]
        path = _reachable([saver.restore_op_name], nodes)
        for node in path:
            if node.op in RESTORE_OPS:
                source = node.input[0].split(":")[0].lstrip("^") if node.input else ""
                while source in nodes and nodes[source].op == "Identity" and nodes[source].input:
                    source = nodes[source].input[0].split(":")[0].lstrip("^")
                if source != filename:
                    found.append(f"{node.op} {node.name!r} reads {source!r}, not the checkpoint the loader names")
        found += refusals([n for n in path if n.op not in RESTORE_OPS], functions, restore=True)
    names = []
    for obj in meta.object_graph_def.nodes:
        for saveable in obj.saveable_objects.values():
            for ref in (saveable.save_function, saveable.restore_function):
                names += _concrete_functions(meta.object_graph_def.nodes, ref)
    return sorted(set(found + refusals((), functions, called=names, restore=True)))


def _concrete_functions(objects: Any, index: int) -> list[str]:
    if not 0 < index < len(objects):
        return []
    obj = objects[index]
    kind = obj.WhichOneof("kind")
    if kind == "function":
        return list(obj.function.concrete_functions)
    if kind == "bare_concrete_function":
        return [obj.bare_concrete_function.concrete_function_name]
    return []


_INERT = frozenset({"NoOp", "Const", "Identity"})  # what an init op that does nothing is made of


def _init_names(meta: Any) -> list[str]:
    """What the loader runs as it loads: the main/init op collections (TF1) and the init signature (TF2)."""
    names: list[str] = []
    for key in ("saved_model_main_op", "legacy_init_op", "table_initializer", "init_op"):
        if key in meta.collection_def:
            collection = meta.collection_def[key]
            names += [*collection.node_list.value, *(v.decode(errors="replace") for v in collection.bytes_list.value)]
    if "__saved_model_init_op" in meta.signature_def:
        names += [t.name for t in meta.signature_def["__saved_model_init_op"].outputs.values()]
    return names


def _reachable(tensors: Iterable[str], nodes: Mapping[str, Any]) -> list[Any]:
    """The nodes ``tensors`` need, following data and control inputs (the saver's nodes, which only the
    loader's own restore runs on the folder's variables, are not among a signature's)."""
    todo = [t.split(":")[0].lstrip("^") for t in tensors]
    seen: set[str] = set()
    kept = []
    while todo:
        name = todo.pop()
        if name in seen or name not in nodes:
            continue
        seen.add(name)
        kept.append(nodes[name])
        todo.extend(i.split(":")[0].lstrip("^") for i in nodes[name].input)
    return kept
