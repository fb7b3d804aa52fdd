"""Run a frozen graph with TensorFlow, and save it as a SavedModel for the converter."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import import_tf
from ..errors import InternalError
from ..ir import FrozenGraph


def concrete_function(graph: FrozenGraph) -> Any:
    """A concrete function over the graph: named inputs in order, a dict of named outputs."""
    tf = import_tf()

    def _import() -> None:
        tf.compat.v1.import_graph_def(graph.graph_def, name="")

    try:
        wrapped = tf.compat.v1.wrap_function(_import, [])
        feeds = [wrapped.graph.get_tensor_by_name(i.tensor) for i in graph.inputs]
        fetches = {o.name: wrapped.graph.get_tensor_by_name(o.tensor) for o in graph.outputs}
        return wrapped.prune(feeds, fetches)
    except (ValueError, KeyError, tf.errors.OpError) as exc:
        raise InternalError("passes", f"the cleaned graph is not a valid TF graph: {exc}") from exc


def run_graph(graph: FrozenGraph, feeds: Mapping[str, np.ndarray], fn: Any = None) -> dict[str, np.ndarray]:
    tf = import_tf()
    fn = fn or concrete_function(graph)
    result = fn(*[tf.constant(feeds[i.name]) for i in graph.inputs])
    return {k: np.asarray(v) for k, v in result.items()}


def save_serving_model(graph: FrozenGraph, directory: Path, graph_fn: Any = None) -> None:
    """Save the graph (``graph_fn``: its concrete function, if made already) as a SavedModel with a
    ``serving_default`` signature whose inputs and outputs carry the model's names (the .tflite signature
    inherits them)."""
    tf = import_tf()
    module = tf.Module()
    module.graph_fn = graph_fn if graph_fn is not None else concrete_function(graph)
    signature = [tf.TensorSpec(i.shape, i.dtype, name=i.name) for i in graph.inputs]

    def call(*args: Any) -> Any:
        return module.graph_fn(*args)

    serve = tf.function(call, input_signature=signature)
    module.serve = serve
    # The frozen graph keeps the custom-gradient attributes of ops such as swish; inference needs no
    # gradients, and saving them fails on captured constants ("invalid capture ... custom gradients").
    tf.saved_model.save(module, str(directory), signatures={"serving_default": serve},
                        options=tf.saved_model.SaveOptions(experimental_custom_gradients=False))
