"""Load a Keras 3 ``.keras`` model and trace it, in inference mode, into a frozen graph."""

from __future__ import annotations

import importlib
import re
import sys
import zipfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._tf import import_tf
from ..errors import ModelError, rel
from ..ir import FrozenGraph, Layer, TensorSpec
from .freeze import freeze_concrete_function
from .model import LoadedModel, Runner, pin_shapes


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


def custom_object_classes(objects: Mapping[str, str], base_dir: Path) -> dict[str, Any]:
    """{ClassName: 'module:Class'} -> the classes, imported from next to the pipeline file."""
    out = {}
    sys.path.insert(0, str(base_dir))
    try:
        for name, ref in objects.items():
            module_name, _, attr = ref.partition(":")
            try:
                found: Any = importlib.import_module(module_name)
                for part in attr.split("."):
                    found = getattr(found, part)
            except (ImportError, AttributeError) as exc:
                raise ModelError(f"model.custom_objects.{name}: cannot import {ref!r} ({exc}); the module is looked "
                                 f"up next to the pipeline file ({base_dir}) and on the Python path") from None
            out[name] = found
    finally:
        sys.path.remove(str(base_dir))
    return out


def _load(path: Path, fmt: str, custom_objects: Mapping[str, Any] | None = None, trust_code: bool = False) -> Any:
    """The Keras model at ``path``. A Lambda layer's Python function is stored in the file as bytecode, which
    loading would run: Keras's safe mode refuses it unless ``trust_code``."""
    import keras

    shown = rel(path)
    if fmt == "keras" and not zipfile.is_zipfile(path):
        raise ModelError(f"{shown}: not a Keras 3 .keras archive (a .keras file is a zip archive)")
    if fmt == "h5":
        import h5py

        if not h5py.is_hdf5(path):
            raise ModelError(f"{shown}: not an HDF5 file (a legacy Keras .h5 model is HDF5)")
        with h5py.File(path, "r") as f:
            if "model_config" not in f.attrs:
                raise ModelError(f"{shown}: holds weights only (no model_config); save the whole model "
                                 "(model.save), not model.save_weights")
    try:
        return keras.models.load_model(path, compile=False, custom_objects=dict(custom_objects or {}),
                                       safe_mode=not trust_code)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        if "deserialization of a `Lambda` layer" in text and not trust_code:
            raise ModelError(f"{shown}: the model has a Lambda layer whose Python function is stored in the file; "
                             "loading it runs that code. Fix: set model.trust_code: true if you trust the model "
                             "file, or replace the Lambda with a registered layer (model.custom_modules)") from None
        unregistered = _unregistered(exc)
        if unregistered is None and (text.startswith("Unknown layer:") or text.startswith("Unknown ")):
            unregistered = ("class", text.split(":", 1)[1].split(".")[0].strip(" '"), None)
        if unregistered is not None:
            raise ModelError(f"{shown}: {_unregistered_words(*unregistered)}") from None
        raise ModelError(f"{shown}: cannot load the Keras model: {text.splitlines()[0]}") from None
    except Exception as exc:  # Keras raises many kinds for a bad file; all mean "cannot load"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ModelError(f"{shown}: cannot load the Keras model: {first}") from None


_NOT_LOCATED = re.compile(r"Could not locate (class|function) '([^'\n]*)'")
_CONFIG_MODULE = re.compile(r"'module': '([^'\n]*)'")
_IDENTIFIER = re.compile(r"[A-Za-z_][\w.]*")


def _unregistered(exc: BaseException) -> tuple[str, str, str | None] | None:
    """The custom class or function Keras could not find, from the innermost error that names it (a layer's
    activation is reported inside the layer's and the model's own deserialization errors): its kind, name and
    the module the model file says it came from."""
    found = None
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        text = str(error)
        located = _NOT_LOCATED.search(text)
        if located:
            module = _CONFIG_MODULE.search(text, located.end())
            found = (located.group(1), located.group(2), module.group(1) if module else None)
        error = error.__cause__ or error.__context__
    return found


def _unregistered_words(kind: str, name: str, module: str | None) -> str:
    """What to write in the pipeline for an unregistered class or function. The model file's module is only
    suggested as the place to import it from when it is a module name (a function defined in a script is
    saved as from ``builtins`` or ``__main__``); names the file holds are quoted, never pasted as they are."""
    placeholder = "module:Class" if kind == "class" else "module:function"
    safe = _IDENTIFIER.fullmatch(name) is not None
    ref = f"{module}:{name}" if module and safe and _IDENTIFIER.fullmatch(module) and module not in (
        "builtins", "__main__") and not module.startswith("keras") else placeholder
    entry = "{" + (name if safe else "Name") + f": '{ref}'}}"
    return (f"the model uses the custom {kind} {name!r}, which is not registered; name it in the pipeline "
            f"(model.custom_objects: {entry}, with model.trust_code: true), or list the module that registers "
            "it with @keras.saving.register_keras_serializable in model.custom_modules")


def _declared_inputs(model: Any, path: Path, input_shapes: Mapping[str, tuple[int, ...]] | None = None,
                     ) -> list[tuple[str, tuple[int | None, ...], str]]:
    """(name, shape, dtype) of each model input.

    A functional model has symbolic inputs named by its InputLayers. A subclassed
    model has none; its build config holds the shape it was built with, and its
    ``call()`` argument names the input. A model built with its default ``build()``
    argument records no shape (``shapes_dict: {}``): then the pipeline's
    ``model.input_shapes`` tells it, else the shape its first layer was built with.
    """
    import inspect

    import keras

    if getattr(model, "inputs", None):
        # The InputLayer's name (what Input(name=...) set) names the input; Keras gives the tensor
        # itself a different, generated name before the model is saved.
        return [(_input_name(t), tuple(t.shape), keras.backend.standardize_dtype(t.dtype)) for t in model.inputs]
    config = model.get_build_config() if model.built else None
    shape = (config or {}).get("input_shape")
    params = [p for p in inspect.signature(model.call).parameters.values()
              if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.name != "self"]
    name = params[0].name if params else "input"
    given = dict(input_shapes or {})
    if not _is_shape(shape) and len(given) == 1:
        name, shape = next(iter(given.items()))
    if not _is_shape(shape):
        first = next(iter(model._flatten_layers(include_self=False, recursive=False)), None)
        built = first.get_build_config() if first is not None and getattr(first, "built", False) else None
        shape = (built or {}).get("input_shape")
    if not _is_shape(shape):
        raise ModelError(f"{rel(path)}: the subclassed model records no input shape (built with build()'s default "
                         "argument, or never built) and its first layer tells none; give it in the pipeline: "
                         f"model.input_shapes: {{{name}: [1, ...]}}, or save a functional model")
    assert shape is not None
    # The batch the model happened to be built with is not part of the model.
    return [(name, (None, *shape[1:]), keras.backend.standardize_dtype(getattr(model, "input_dtype", None)
                                                                          or "float32"))]


def _is_shape(shape: Any) -> bool:
    return bool(shape) and isinstance(shape, (list, tuple)) and all(isinstance(d, (int, type(None))) for d in shape)


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


def graph_from_keras(path: Path, *, batch_size: int, input_shapes: Mapping[str, tuple[int, ...]],
                     custom_modules: Sequence[str] = (), base_dir: Path | None = None,
                     fmt: str = "keras", custom_objects: Mapping[str, str] | None = None,
                     trust_code: bool = False) -> LoadedModel:
    """Load ``path`` (a Keras 3 ``.keras`` or a legacy ``.h5``), pin its input shapes,
    trace it with ``training=False`` and freeze it. ``trust_code``: Lambda layers' stored functions load."""
    tf = import_tf()
    import keras

    import_custom_modules(custom_modules, base_dir or path.parent)
    model = _load(path, fmt, custom_object_classes(custom_objects or {}, base_dir or path.parent), trust_code)
    declared = _declared_inputs(model, path, input_shapes)
    in_names = [n for n, _, _ in declared]
    shapes = pin_shapes([(n, s) for n, s, _ in declared], batch_size=batch_size, input_shapes=input_shapes)
    dtypes = {n: d for n, _, d in declared}
    out_names = _output_names(model)
    layers = _layers(model)

    def call(args: Sequence[Any]) -> dict[str, Any]:
        result = model(list(args) if len(args) > 1 else args[0], training=False)
        if isinstance(result, dict):
            # output_names can name an op output by the op ("argmax") where the dict says "cls": the dict's keys
            return {k: result[k] for k in (out_names if set(out_names) == set(result) else sorted(result))}
        flat = result if isinstance(result, (list, tuple)) else [result]
        names = out_names if len(out_names) == len(flat) else [f"output_{i}" for i in range(len(flat))]
        return dict(zip(names, flat))

    signature = [tf.TensorSpec(shapes[n], dtypes[n], name=n) for n in in_names]
    fn = tf.function(lambda *args: call(args), input_signature=signature)
    try:
        cf = fn.get_concrete_function()
    except Exception as exc:
        raise ModelError(f"{rel(path)}: tracing the model with training=False failed: {_traced_error(exc)}") \
            from None
    graph_def = freeze_concrete_function(cf, [layer.name for layer in layers])
    inputs = tuple(TensorSpec(n, t.name, shapes[n], dtypes[n]) for n, t in zip(in_names, cf.inputs))
    outputs = tuple(TensorSpec(n, t.name, tuple(t.shape), t.dtype.name) for n, t in cf.structured_outputs.items())

    reference = _compiled_runner(tf, call, in_names, shapes, dtypes, fn)

    def reference_without(names: Sequence[str]) -> Runner:
        chosen = [layer for layer in model._flatten_layers(include_self=False, recursive=True)
                  if layer.name in names]
        # Traced afresh while the layers are the identity: the trace keeps rate/stddev 0 for every later call.
        fresh = tf.function(lambda *args: call(args), input_signature=signature)
        compiled = _compiled_runner(tf, call, in_names, shapes, dtypes, fresh)

        def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
            saved = [(layer, attr, getattr(layer, attr)) for layer in chosen
                     for attr in ("rate", "stddev") if hasattr(layer, attr)]
            try:
                for layer, attr, _ in saved:
                    setattr(layer, attr, 0.0)  # dropout/noise with rate/stddev 0 is the identity
                return compiled(feeds)
            finally:
                for layer, attr, value in saved:
                    setattr(layer, attr, value)

        return run

    graph = FrozenGraph(graph_def, inputs, outputs, layers)
    notes = []
    if not getattr(model, "inputs", None):
        notes.append(f"subclassed model {type(model).__name__}: input {in_names[0]!r} (the call() argument) "
                     f"traced with shape {list(shapes[in_names[0]])} from its build config")
    if fmt == "h5":
        notes.append(f"legacy Keras HDF5 model (saved by Keras {_h5_keras_version(path)}), loaded by "
                     f"Keras {keras.__version__} with compile=False")
    return LoadedModel(graph, reference, fmt, f"keras {keras.__version__}", reference_without, tuple(notes),
                       any_batch=True)


def _compiled_runner(tf: Any, call: Any, in_names: Sequence[str], shapes: Mapping[str, tuple[int, ...]],
                     dtypes: Mapping[str, Any], fixed: Any) -> Runner:
    """The model in inference mode as a compiled function (a graph, not eager layer calls: measured 22 ms
    -> under 1 ms per sample on the digits CNN) that takes any number of samples per call. It is traced with
    an open batch dimension on first use; a model that needs its static batch runs ``fixed`` (traced at
    model.batch_size) slice by slice instead."""
    tf_any: list[Any] = []  # the open-batch function, once traced; [None] when the model cannot have one
    batch = shapes[in_names[0]][0] if shapes[in_names[0]] else 1

    def any_batch() -> Any:
        if not tf_any:
            spec = [tf.TensorSpec((None, *shapes[n][1:]), dtypes[n], name=n) for n in in_names]
            f = tf.function(lambda *args: call(args), input_signature=spec)
            try:
                f.get_concrete_function()
                tf_any.append(f)
            except Exception:
                tf_any.append(None)
        return tf_any[0]

    def run(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        n = len(feeds[in_names[0]])
        f = any_batch() if n != batch else None
        if f is not None:
            result = f(*[tf.constant(feeds[k]) for k in in_names])
            return {k: np.asarray(v) for k, v in result.items()}
        parts = [fixed(*[tf.constant(feeds[k][i:i + batch]) for k in in_names]) for i in range(0, n, batch)]
        return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}

    return run


_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_KERAS_CALL = re.compile(r"(?:(\w+): )?Exception encountered when calling (\S+?)\.?$")


def _traced_error(exc: Exception) -> str:
    """What went wrong in a trace, in one line. TensorFlow wraps an error raised in the model's code as "in
    user code:", the stack (frames indented, their code indented further), then the error at the frames'
    indent; Keras wraps a layer's as "ValueError: Exception encountered when calling Bad.call().", the
    message, then the arguments. So: "ValueError in Bad.call(): the message". Terminal escapes and control
    characters (the model's text, Keras's bold) are left out."""
    text = "".join(c if c.isprintable() or c == "\n" else " " for c in _ANSI.sub("", str(exc)))
    raw = [line for line in text.splitlines() if line.strip()]
    frames = [i for i, line in enumerate(raw) if line.lstrip().startswith("File ")]
    if raw and raw[0].strip() == "in user code:" and frames:
        indent = len(raw[frames[-1]]) - len(raw[frames[-1]].lstrip())
        raw = [line for line in raw[frames[-1] + 1:] if len(line) - len(line.lstrip()) <= indent] or raw[-1:]
    lines = [line.strip() for line in raw]
    if not lines:
        return type(exc).__name__
    called = _KERAS_CALL.match(lines[0])
    if called is not None and len(lines) > 1:
        return f"{called[1] or type(exc).__name__} in {called[2]}: {lines[1]}"
    return lines[0]


def _output_names(model: Any) -> list[str]:
    names = getattr(model, "output_names", None)
    if names:
        return [str(n) for n in names]
    outputs = getattr(model, "outputs", None)
    return [f"output_{i}" for i in range(len(outputs))] if outputs else []


def _h5_keras_version(path: Path) -> str:
    import h5py

    with h5py.File(path, "r") as f:
        version = f.attrs.get("keras_version", "unknown")
    return version.decode() if isinstance(version, bytes) else str(version)
