"""Load a SavedModel folder: one signature, traced with static shapes and frozen.

TF2 SavedModels are loaded with ``tf.saved_model.load``; the chosen signature is
traced with the pinned input shapes and frozen (freezing inlines the function
calls, so passes see every op). TF1 SavedModels (a MetaGraph without an object
graph), and Keras-2-era SavedModels that TF 2.16+ cannot revive without
``tf-keras``, go through the TF1 loader: a session restores the variables and the
signature's graph is frozen with ``convert_variables_to_constants``.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import import_tf
from ..errors import ModelError, did_you_mean, rel
from .freeze import freeze_concrete_function
from .graphdef_loader import frozen_model
from .inspect_graph import check_savedmodel
from .model import LoadedModel, pin_shapes

SERVE = "serve"
KERAS2_HINT = ("it looks like a Keras 2 SavedModel, which TF 2.16+ revives only with the tf-keras package: "
               "pip install 'tf-keras~={tf}' (and, when it needs the Keras 2 objects, export it again with "
               "tf-keras as a SavedModel with a serving signature)")


def _is_tf1(path: Path) -> bool:
    """A SavedModel without an object graph was written by TF1 (``SavedModelBuilder``)."""
    from tensorflow.core.protobuf import saved_model_pb2

    from ..inputs import MAX_MODEL_BYTES, read_bytes

    proto = saved_model_pb2.SavedModel()
    pb = path / "saved_model.pb"
    if not pb.exists():
        return False
    try:
        proto.ParseFromString(read_bytes(pb, MAX_MODEL_BYTES, ModelError, "saved_model.pb"))
    except ModelError:
        raise
    except Exception:  # a broken file: let the loader report it
        return False
    return all(not m.object_graph_def.nodes for m in proto.meta_graphs)


def graph_from_savedmodel(path: Path, *, signature: str, batch_size: int,
                          input_shapes: Mapping[str, tuple[int, ...]],
                          bind: Mapping[str, bool | int | float] | None = None,
                          trust_code: bool = False) -> LoadedModel:
    """Unless ``trust_code``, the SavedModel's protobuf is checked before either loader runs any of it."""
    tf = import_tf()
    if not trust_code:
        check_savedmodel(path)
    if _is_tf1(path):
        return _from_tf1(path, signature=signature, batch_size=batch_size, input_shapes=input_shapes, bind=bind,
                         notes=["TF1 SavedModel (no object graph): loaded with the TF1 session loader"],
                         trust_code=trust_code)
    try:
        obj = tf.saved_model.load(str(path))
    except Exception as exc:  # TF raises many kinds for a SavedModel it cannot revive
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        try:
            return _from_tf1(path, signature=signature, batch_size=batch_size, input_shapes=input_shapes,
                             bind=bind, notes=[f"tf.saved_model.load failed ({first}); loaded with the TF1 "
                                               "session loader instead"], trust_code=trust_code)
        except ModelError as fallback:
            hint = KERAS2_HINT.format(tf=".".join(tf.__version__.split(".")[:2])) \
                if "_UserObject" in first or "add_slot" in first or "keras" in first.lower() else ""
            raise ModelError(f"{rel(path)}: TensorFlow cannot load the SavedModel: {first}"
                             f"{'; ' + hint if hint else ''}; the TF1 loader failed too: {fallback}") from None
    signatures = dict(obj.signatures)
    fn = _pick(signatures, signature, path)
    _, kwargs = fn.structured_input_signature
    in_names = sorted(kwargs)  # a signature's inputs are a map: no order of their own
    declared = [(n, tuple(kwargs[n].shape) if kwargs[n].shape.rank is not None else None) for n in in_names]
    shapes = pin_shapes(declared, batch_size=batch_size, input_shapes=input_shapes)
    specs = [tf.TensorSpec(shapes[n], kwargs[n].dtype, name=n) for n in in_names]
    out_names = sorted(fn.structured_outputs)

    def call(*args: Any) -> dict[str, Any]:
        result = fn(**dict(zip(in_names, args)))
        return {k: result[k] for k in out_names}

    try:
        cf = tf.function(call, input_signature=specs).get_concrete_function()
    except Exception as exc:
        raise ModelError(f"{rel(path)}: tracing signature {signature!r} with shapes "
                         f"{ {n: list(s) for n, s in shapes.items()} } failed: "
                         f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
    graph_def = freeze_concrete_function(cf, [])
    in_nodes = [t.name.split(":")[0] for t in cf.inputs[:len(in_names)]]
    out_tensors = [cf.structured_outputs[k].name for k in out_names]

    def reference(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = fn(**{n: tf.constant(feeds[n]) for n in in_names})
        return {k: np.asarray(result[k]) for k in out_names}

    names = {**dict(zip(in_nodes, in_names)), **dict(zip(out_tensors, out_names))}
    return frozen_model(graph_def, rel(path), batch_size=batch_size, input_shapes={}, inputs=in_nodes,
                        outputs=out_tensors, bind=bind, names=names, reference=reference, fmt="savedmodel",
                        trust_code=trust_code,
                        framework=f"tensorflow {tf.__version__} (SavedModel signature {signature!r})")


def _pick(signatures: Mapping[str, Any], signature: str, path: Path) -> Any:
    if signature in signatures:
        return signatures[signature]
    if not signatures:
        raise ModelError(f"{rel(path)}: the SavedModel has no signatures; save it with "
                         "tf.saved_model.save(obj, path, signatures=...) or keras Model.export()")
    raise ModelError(f"model.signature: {signature!r} is not a signature of {rel(path)} (available: "
                     f"{', '.join(sorted(signatures))}){did_you_mean(signature, list(signatures))}")


def _from_tf1(path: Path, *, signature: str, batch_size: int, input_shapes: Mapping[str, tuple[int, ...]],
              bind: Mapping[str, bool | int | float] | None, notes: list[str], trust_code: bool) -> LoadedModel:
    tf = import_tf()
    graph = tf.Graph()
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        try:
            meta = tf.compat.v1.saved_model.loader.load(session, [SERVE], str(path))
        except Exception as exc:
            raise ModelError(f"{rel(path)}: the TF1 loader cannot load it: "
                             f"{(str(exc).strip().splitlines() or [type(exc).__name__])[0]}") from None
        sig = _pick(dict(meta.signature_def), signature, path)
        in_nodes = {key: sig.inputs[key].name.split(":")[0] for key in sorted(sig.inputs)}
        out_tensors = {key: sig.outputs[key].name for key in sorted(sig.outputs)}
        graph_def = tf.compat.v1.graph_util.convert_variables_to_constants(
            session, graph.as_graph_def(), sorted({t.split(":")[0] for t in out_tensors.values()}))
    graph_def = _inline_calls(graph_def, list(in_nodes.values()), list(out_tensors.values()))
    names = {**{node: key for key, node in in_nodes.items()}, **{t: key for key, t in out_tensors.items()}}
    return frozen_model(graph_def, rel(path), batch_size=batch_size, input_shapes=input_shapes,
                        inputs=list(in_nodes.values()), outputs=list(out_tensors.values()), bind=bind, names=names,
                        fmt="savedmodel", notes=notes, trust_code=trust_code,
                        framework=f"tensorflow {tf.__version__} (TF1 SavedModel signature {signature!r})")


def _inline_calls(graph_def: Any, inputs: list[str], outputs: list[str]) -> Any:
    """Inline function calls (a TF2 graph's StatefulPartitionedCall) so that passes see every op."""
    if not any(n.op in ("StatefulPartitionedCall", "PartitionedCall") for n in graph_def.node):
        return graph_def
    tf = import_tf()
    from tensorflow.lite.python.util import get_grappler_config, run_graph_optimizations

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.import_graph_def(graph_def, name="")
    return run_graph_optimizations(graph_def, [graph.get_tensor_by_name(f"{n}:0") for n in inputs],
                                   [graph.get_tensor_by_name(t) for t in outputs],
                                   get_grappler_config(["function"]), graph=graph)
