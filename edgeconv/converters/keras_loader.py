"""Load a Keras 3 ``.keras`` model and trace it, in inference mode, into a frozen graph."""

from __future__ import annotations

import dataclasses
import importlib
import sys
import zipfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import import_tf
from ..errors import ModelError, did_you_mean, rel
from ..ir import FrozenGraph, Layer, TensorSpec
from .freeze import freeze_concrete_function

Runner = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclasses.dataclass(frozen=True)
class LoadedModel:
    """The frozen inference graph and a runner for the source model in inference mode.

    ``reference_without(layers)`` runs the model with the named training-only layers
    (dropout/noise) at their inference behaviour, the identity, even when their
    ``call()`` forces ``training=True``; it is the reference for a graph whose
    passes replaced those layers.
    """

    graph: FrozenGraph
    reference: Runner
    reference_without: Callable[[Sequence[str]], Runner]
    format: str
    framework: str


def import_custom_modules(modules: Sequence[str], base_dir: Path) -> None:
    """Import the modules that register a model's custom Keras classes."""
    if not modules:
        return
    sys.path.insert(0, str(base_dir))
    try:
        for name in modules:
            try:
                importlib.import_module(name)
            except ImportError as exc:
                raise ModelError(f"model.custom_modules: cannot import {name!r} ({exc}); it is looked up "
                                 f"next to the pipeline file ({base_dir}) and on the Python path") from None
    finally:
        sys.path.remove(str(base_dir))


def _load(path: Path) -> Any:
    import keras

    shown = rel(path)
    if not zipfile.is_zipfile(path):
        raise ModelError(f"{shown}: not a Keras 3 .keras archive (a .keras file is a zip archive)")
    try:
        return keras.models.load_model(path, compile=False)
    except TypeError as exc:
        text = str(exc)
        if "Could not locate class" in text:
            missing = text.split("Could not locate class", 1)[1].split(".")[0].strip(" '")
            raise ModelError(f"{shown}: the model uses the custom class {missing!r}, which is not registered; "
                             "list the Python module that defines it (decorated with "
                             "@keras.saving.register_keras_serializable) in model.custom_modules") from None
        raise ModelError(f"{shown}: cannot load the Keras model: {text.splitlines()[0]}") from None
    except Exception as exc:  # Keras raises many kinds for a bad file; all mean "cannot load"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{shown}: cannot load the Keras model: {first}") from None


def _input_name(tensor: Any) -> str:
    history = getattr(tensor, "_keras_history", None)
    operation = getattr(history, "operation", None)
    return str(getattr(operation, "name", None) or tensor.name)


def _layers(model: Any) -> tuple[Layer, ...]:
    import keras

    out = []
    for layer in model._flatten_layers(include_self=False, recursive=True):
        role, detail = "", ""
        if isinstance(layer, (keras.layers.Dropout, keras.layers.GaussianDropout, keras.layers.AlphaDropout)):
            role, detail = "dropout", f"rate={layer.rate}"
        elif isinstance(layer, keras.layers.GaussianNoise):
            role, detail = "noise", f"stddev={layer.stddev}"
        out.append(Layer(layer.name, type(layer).__name__, role, detail))
    return tuple(out)


def pin_shapes(declared: Sequence[tuple[str, tuple[int | None, ...]]], *, batch_size: int,
               input_shapes: Mapping[str, tuple[int, ...]]) -> dict[str, tuple[int, ...]]:
    """Static shape per input: config pins first, then the batch size; anything still open is an error."""
    names = [n for n, _ in declared]
    problems = [f"model.input_shapes: {name!r} is not a model input (inputs: {', '.join(names)})"
                f"{did_you_mean(name, names)}" for name in input_shapes if name not in names]
    pinned: dict[str, tuple[int, ...]] = {}
    still_open = []
    for name, shape in declared:
        if name in input_shapes:
            want = input_shapes[name]
            if len(want) != len(shape) or any(d is not None and d != w for d, w in zip(shape, want)):
                problems.append(f"model.input_shapes.{name}: {list(want)} does not fit the model's input shape "
                                f"{_show(shape)}")
            pinned[name] = tuple(want)
            continue
        dims = list(shape)
        if dims and dims[0] is None:
            dims[0] = batch_size
        elif dims and dims[0] != batch_size:
            problems.append(f"model input {name!r} has a fixed batch of {dims[0]} but model.batch_size is "
                            f"{batch_size}; set model.batch_size: {dims[0]}")
        if any(d is None for d in dims):
            still_open.append(f"{name!r} {_show(shape)}")
        pinned[name] = tuple(int(d) for d in dims if d is not None)
    if still_open:
        problems.append("model inputs with open dimensions: " + ", ".join(still_open) +
                        "; pin them with model.input_shapes (full shape, batch included)")
    if problems:
        raise ModelError("\n".join(problems))
    return pinned


def _show(shape: Sequence[int | None]) -> str:
    return "(" + ", ".join("None" if d is None else str(d) for d in shape) + ")"


def graph_from_keras(path: Path, *, batch_size: int, input_shapes: Mapping[str, tuple[int, ...]],
                     custom_modules: Sequence[str] = (), base_dir: Path | None = None) -> LoadedModel:
    """Load ``path``, pin its input shapes, trace it with ``training=False`` and freeze it."""
    tf = import_tf()
    import keras

    import_custom_modules(custom_modules, base_dir or path.parent)
    model = _load(path)
    if not getattr(model, "inputs", None):
        raise ModelError(f"{rel(path)}: the model has no defined inputs (a subclassed model that was never "
                         "built); save it after calling it once, or as a functional model")
    # The InputLayer's name (what Input(name=...) set) names the input; Keras gives the tensor
    # itself a different, generated name before the model is saved.
    in_names = [_input_name(t) for t in model.inputs]
    declared = [(n, tuple(t.shape)) for n, t in zip(in_names, model.inputs)]
    shapes = pin_shapes(declared, batch_size=batch_size, input_shapes=input_shapes)
    dtypes = {n: keras.backend.standardize_dtype(t.dtype) for n, t in zip(in_names, model.inputs)}
    out_names = list(getattr(model, "output_names", None) or [f"output_{i}" for i in range(len(model.outputs))])
    layers = _layers(model)

    def call(args: Sequence[Any]) -> dict[str, Any]:
        result = model(list(args) if len(args) > 1 else args[0], training=False)
        flat = result if isinstance(result, (list, tuple)) else [result]
        if isinstance(result, dict):
            flat = [result[k] for k in out_names]
        return dict(zip(out_names, flat))

    signature = [tf.TensorSpec(shapes[n], dtypes[n], name=n) for n in in_names]
    fn = tf.function(lambda *args: call(args), input_signature=signature)
    try:
        cf = fn.get_concrete_function()
    except Exception as exc:
        raise ModelError(f"{rel(path)}: tracing the model with training=False failed: "
                         f"{str(exc).strip().splitlines()[0]}") from None
    graph_def = freeze_concrete_function(cf, [layer.name for layer in layers])
    inputs = tuple(TensorSpec(n, t.name, shapes[n], dtypes[n]) for n, t in zip(in_names, cf.inputs))
    outputs = tuple(TensorSpec(n, cf.structured_outputs[n].name, tuple(cf.structured_outputs[n].shape),
                               cf.structured_outputs[n].dtype.name) for n in out_names)

    def reference(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        result = call([tf.constant(feeds[n]) for n in in_names])
        return {k: np.asarray(v) for k, v in result.items()}

    def reference_without(names: Sequence[str]) -> Runner:
        chosen = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
                  if layer.name in names]

        def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            saved = [(layer, attr, getattr(layer, attr)) for layer in chosen
                     for attr in ("rate", "stddev") if hasattr(layer, attr)]
            try:
                for layer, attr, _ in saved:
                    setattr(layer, attr, 0.0)  # dropout/noise with rate/stddev 0 is the identity
                return reference(feeds)
            finally:
                for layer, attr, value in saved:
                    setattr(layer, attr, value)

        return run

    graph = FrozenGraph(graph_def, inputs, outputs, layers)
    return LoadedModel(graph, reference, reference_without, "keras", f"keras {keras.__version__}")
