"""The freezer's shortcut (``freeze._constants_v2``) against TensorFlow's whole
``convert_variables_to_constants_v2``: the same nodes, and the same .tflite byte for byte.

The shortcut leaves out the whole function's last step, which imports the frozen GraphDef into a new
concrete function only for the loader to export it again (0.75 s of CPU for MobileNetV2, 2.7 s for
ResNet50). Models with distinct sizes: convolutions with batch norm and dropout, an LSTM (a While loop, kept
functional), two inputs and two outputs, and an embedding fed integer ids.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import edgeconv
from edgeconv.converters import freeze
from edgeconv.converters.keras_loader import graph_from_keras

from . import models

# Attributes the whole function's import adds (to reads) or drops (from inputs): nothing else may differ.
IMPORT_ATTRIBUTES = ("_has_manual_control_dependencies", "_user_specified_name")


def _conv(keras: Any) -> Any:
    inp = keras.Input((7, 6, 3), name="image")
    x = keras.layers.Conv2D(4, 3, name="conv")(inp)
    x = keras.layers.BatchNormalization(name="norm")(x)
    x = keras.layers.ReLU(name="relu")(x)
    x = keras.layers.Dropout(0.3, name="drop")(x)
    return keras.Model(inp, keras.layers.Dense(2, name="head")(keras.layers.Flatten(name="flat")(x)))


def _lstm(keras: Any) -> Any:
    inp = keras.Input((5, 4), name="series")
    return keras.Model(inp, keras.layers.Dense(2, name="head")(keras.layers.LSTM(3, name="lstm")(inp)))


def _two_by_two(keras: Any) -> Any:
    a, b = keras.Input((6,), name="left"), keras.Input((4,), name="right")
    x = keras.layers.Concatenate(name="cat")([keras.layers.Dense(5, name="da")(a), keras.layers.Dense(3, name="db")(b)])
    return keras.Model([a, b], [keras.layers.Dense(2, name="p")(x), keras.layers.Dense(7, name="q")(x)])


def _embedding(keras: Any) -> Any:
    inp = keras.Input((9,), dtype="int32", name="ids")
    x = keras.layers.Embedding(11, 4, name="embed")(inp)
    return keras.Model(inp, keras.layers.Dense(3, name="head")(keras.layers.GlobalAveragePooling1D(name="pool")(x)))


MODELS: dict[str, Callable[[Any], Any]] = {"conv": _conv, "lstm": _lstm, "two_by_two": _two_by_two,
                                           "embedding": _embedding}


def _whole(*args: Any) -> Any:
    raise AttributeError("the whole function, as on a TensorFlow without the private steps")


def _saved(tmp_path: Path, name: str) -> Path:
    import keras

    keras.utils.set_random_seed(3)
    path = tmp_path / f"{name}.keras"
    MODELS[name](keras).save(path)
    return path


def _text(message: Any) -> str:
    """A node or library as text, its functions' names without the numbers that count them in the process
    (``..._while_body_frozen_345``, ``..._while_cond_242___redundant_placeholder0``: each freeze makes new
    ones, whichever way)."""
    return re.sub(r"_(frozen|cond|body)_\d+", r"_\1_N", str(message))


def _nodes(graph_def: Any) -> dict[str, str]:
    out = {}
    for node in graph_def.node:
        copy = type(node)()
        copy.CopyFrom(node)
        for key in IMPORT_ATTRIBUTES:
            if key in copy.attr:
                del copy.attr[key]
        out[node.name] = _text(copy)
    return out


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_shortcut_freezes_the_nodes_the_whole_function_does(name: str, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    path = _saved(tmp_path, name)
    short = graph_from_keras(path, batch_size=1, input_shapes={}).graph.graph_def
    monkeypatch.setattr(freeze, "_constants_v2", _whole)
    whole = graph_from_keras(path, batch_size=1, input_shapes={}).graph.graph_def
    assert not any(n.op in ("VarHandleOp", "ReadVariableOp") for n in short.node)
    assert _nodes(short) == _nodes(whole)
    assert sorted(map(_text, short.library.function)) == sorted(map(_text, whole.library.function))
    assert len(short.node) == len(whole.node)


def test_the_shortcut_keeps_an_input_no_output_reads_and_drops_what_no_output_needs() -> None:
    """_needed: the feeds stay even when nothing reads them; a node no fetch reads (data or control) goes."""
    from tensorflow.core.framework import graph_pb2

    graph = graph_pb2.GraphDef()
    for name, inputs in (("unused_input", []), ("x", []), ("w", []), ("stray", ["x"]), ("gate", []),
                         ("mul", ["x", "w:0", "^gate"]), ("out", ["mul:0"])):
        node = graph.node.add(name=name, op="Placeholder" if "input" in name or name == "x" else "Identity")
        node.input.extend(inputs)
    kept = freeze._needed(graph, ["out"], ["x", "unused_input"])
    assert [n.name for n in kept.node] == ["unused_input", "x", "w", "gate", "mul", "out"]


CALIBRATION = {"conv": {"image": (7, 6, 3)}, "two_by_two": {"left": (6,), "right": (4,)}, "embedding": {"ids": (9,)}}


@pytest.mark.parametrize("name", sorted(CALIBRATION))  # the LSTM: TF 2.21's converter crashes on its int8 loop
def test_a_build_with_the_shortcut_is_the_same_tflite(name: str, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """A test of a conversion converts: both builds, the same bytes, the same verdict and pass report."""
    path = _saved(tmp_path, name)
    rng = np.random.default_rng(5)
    np.savez(tmp_path / "cal.npz", **{key: rng.integers(0, 11, (24, *shape)).astype(np.int32) if key == "ids"
                                      else rng.normal(size=(24, *shape)).astype(np.float32)
                                      for key, shape in CALIBRATION[name].items()})
    built = []
    for whole in (False, True):
        if whole:
            monkeypatch.setattr(freeze, "_constants_v2", _whole)
        pipeline = models.pipeline(tmp_path, path.name, "cal.npz", samples=24)
        result = edgeconv.build(pipeline, out=tmp_path / f"out-{whole}")
        built.append((result.tflite_path.read_bytes(), result.report["gate"], result.report["passes"]))
    assert built[0] == built[1]
