"""strip-training on real traced graphs: what it removes, what it refuses, and that
the outputs do not change."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv import ModelError
from edgeconv.cli import main
from edgeconv.converters.freeze import freeze_concrete_function
from edgeconv.converters.tf_graph import run_graph
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.ir import FrozenGraph, Layer, TensorSpec
from edgeconv.passes import StripTrainingPass

from ..conftest import EXAMPLE, REPO
from . import models

X = np.random.default_rng(5).normal(size=(1, 7)).astype(np.float32)


def frozen(body: Callable[[Any], Any], layers: tuple[Layer, ...] = ()) -> FrozenGraph:
    """Trace ``body`` on a (1, 7) input named x, freeze it, wrap it as the IR."""
    import tensorflow as tf

    fn = tf.function(lambda x: {"y": body(x)}, input_signature=[tf.TensorSpec([1, 7], tf.float32, name="x")])
    cf = fn.get_concrete_function()
    graph_def = freeze_concrete_function(cf, [layer.name for layer in layers])
    out = cf.structured_outputs["y"]
    return FrozenGraph(graph_def, (TensorSpec("x", "x:0", (1, 7), "float32"),),
                       (TensorSpec("y", out.name, tuple(out.shape), "float32"),), layers)


def test_tf2_dropout_becomes_the_identity() -> None:
    import tensorflow as tf

    w = tf.constant(np.random.default_rng(0).normal(size=(7, 4)).astype(np.float32))
    graph = frozen(lambda x: tf.matmul(tf.nn.dropout(tf.nn.relu(x), rate=0.3), w))
    assert "RandomUniform" in graph.op_counts()
    cleaned, result = StripTrainingPass().apply(graph)
    assert "RandomUniform" not in cleaned.op_counts() and "SelectV2" not in cleaned.op_counts()
    removed = result.removed_counts()
    assert removed["RandomUniform"] == 1 and removed["GreaterEqual"] == 1 and removed["SelectV2"] == 1
    assert [r.description for r in result.rewrites] == [
        "inverted dropout (Mul by the keep probability, then SelectV2 by a random mask) replaced by its input"]
    np.testing.assert_allclose(run_graph(cleaned, {"x": X})["y"], tf.matmul(tf.nn.relu(X), w).numpy(), atol=1e-6)


def test_tf1_style_dropout_with_keep_prob_becomes_the_identity() -> None:
    import tensorflow as tf

    def tf1_dropout(x: Any) -> Any:
        with tf.name_scope("dropout"):
            keep = tf.constant(0.6)
            mask = tf.floor(keep + tf.random.uniform(tf.shape(x)))
            return tf.math.divide(x, keep) * mask

    graph = frozen(lambda x: tf.tanh(tf1_dropout(x * 2.0)))
    cleaned, result = StripTrainingPass().apply(graph)
    assert {"RandomUniform", "Floor", "RealDiv"}.isdisjoint(cleaned.op_counts())
    assert result.rewrites[0].description.startswith("inverted dropout (RealDiv by the keep probability, then Mul")
    np.testing.assert_allclose(run_graph(cleaned, {"x": X})["y"], np.tanh(X * 2.0), atol=1e-6)


def test_identity_chains_and_debug_ops_are_removed() -> None:
    import tensorflow as tf

    def body(x: Any) -> Any:
        y = tf.identity(tf.identity(x * 3.0))
        y = tf.debugging.check_numerics(y, "bad")
        with tf.control_dependencies([tf.debugging.assert_all_finite(y, "nan")]):
            y = tf.stop_gradient(y + 1.0)
        return tf.identity(y)

    graph = frozen(body)
    before = graph.op_counts()
    assert before["Identity"] >= 3 and "CheckNumerics" in before
    cleaned, result = StripTrainingPass().apply(graph)
    assert set(cleaned.op_counts()) == {"Placeholder", "Const", "Mul", "AddV2"}
    assert set(result.removed_by_reason()) >= {"identity op (passes its input through)", "debug or control-only op"}
    np.testing.assert_allclose(run_graph(cleaned, {"x": X})["y"], X * 3.0 + 1.0, atol=1e-6)


@pytest.mark.parametrize(("body", "message"), [
    (lambda tf: (lambda x: x + tf.random.normal([1, 7])),
     "random op RandomStandardNormal in node 'add' feeds the model outputs and edgeconv cannot tell its inference "
     "behaviour (random values reach the data path through AddV2)"),
    (lambda tf: (lambda x: x * tf.cast(tf.random.uniform([1, 7]) > 0.5, tf.float32)),
     "random op RandomUniform in node 'mul' feeds the model outputs and edgeconv cannot tell its inference "
     "behaviour (a random mask without the inverted-dropout scaling (inference value is ambiguous))"),
])
def test_random_ops_in_real_computation_are_refused(body: Any, message: str) -> None:
    import tensorflow as tf

    graph = frozen(body(tf))
    with pytest.raises(ModelError) as info:
        StripTrainingPass().apply(graph)
    assert str(info.value).startswith(message)


# -- Keras models through the whole build ---------------------------------------------------

def _build(pipeline: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["build", str(pipeline), "-q"])
    return code, capsys.readouterr().err


def test_example_variant_with_training_true_baked_in_builds_clean(tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The example re-saved with Dropout(...)(x, training=True) in the functional graph."""
    import keras

    model = keras.models.load_model(EXAMPLE / "model.keras")
    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] == "Dropout":
            layer["inbound_nodes"][0]["kwargs"]["training"] = True
    variant = keras.Model.from_config(config)
    variant.set_weights(model.get_weights())
    variant.save(tmp_path / "variant.keras")
    shutil.copy(EXAMPLE / "calibration.npz", tmp_path / "cal.npz")
    code, err = _build(models.pipeline(tmp_path, "variant.keras", "cal.npz", samples=64), capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "build" / "variant" / "report.json").read_text())
    assert report["equivalence"]["max_abs_diff"] <= 1e-5
    ops = read_tflite(tmp_path / "build" / "variant" / "variant.tflite").ops
    assert not [op for op in ops if op.type.startswith("RANDOM") or op.custom_code]


def test_layer_forcing_training_is_stripped_and_reported(tmp_path: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    layers = models.write_custom_layers(tmp_path, "forced_layers")
    models.dense_model(tmp_path / "mc.keras", layers.MCDropout(0.3, name="mc"))
    models.calibration(tmp_path / "cal.npz")
    code, err = _build(models.pipeline(tmp_path, "mc.keras", "cal.npz", modules=("forced_layers",)), capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "build" / "mc" / "report.json").read_text())
    (strip,) = report["passes"]
    assert strip["removed_by_layer"]["mc"]["StatelessRandomUniformV2"] == 1
    assert strip["removed_by_layer"]["mc"]["AssignVariableOp"] == 1
    assert strip["rewrites"] == [{"layers": ["mc"], "node": "tiny_1/mc_1/stateless_dropout/SelectV2",
                                  "description": "inverted dropout (Mul by the keep probability, then SelectV2 by "
                                                 "a random mask) replaced by its input"}]
    assert strip["notes"] == ["MCDropout layer 'mc', rate=0.3: had ops in the traced graph (it forces training "
                              "behaviour); replaced by its inference identity"]
    assert report["equivalence"]["passed"] and report["equivalence"]["max_abs_diff"] <= 1e-5


def test_noise_layer_forcing_training_is_stripped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layers = models.write_custom_layers(tmp_path, "noise_layers")
    models.dense_model(tmp_path / "noisy.keras", layers.AlwaysNoise(0.2, name="noise"))
    models.calibration(tmp_path / "cal.npz")
    code, err = _build(models.pipeline(tmp_path, "noisy.keras", "cal.npz", modules=("noise_layers",)), capsys)
    assert code == 0, err
    report = json.loads((tmp_path / "build" / "noisy" / "report.json").read_text())
    assert report["passes"][0]["rewrites"][0]["description"] == (
        "additive noise (AddV2) removed: noise layers are the identity in inference")


def test_a_layer_that_is_random_on_purpose_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layers = models.write_custom_layers(tmp_path, "jitter_layers")
    models.dense_model(tmp_path / "jitter.keras", layers.Jitter(name="jitter"))
    models.calibration(tmp_path / "cal.npz")
    code, err = _build(models.pipeline(tmp_path, "jitter.keras", "cal.npz", modules=("jitter_layers",)), capsys)
    assert code == 2
    assert err.startswith("edgeconv: error: random op StatelessRandomNormalV2 in layer 'jitter' feeds the model "
                          "outputs and edgeconv cannot tell its inference behaviour")
    assert not (tmp_path / "build").exists()


def test_committed_fixtures_are_what_the_generator_makes(tmp_path: Path) -> None:
    import importlib.util

    spec = importlib.util.spec_from_file_location("make_test_models", REPO / "scripts" / "make_test_models.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for name, make in module.models().items():
        fresh = make()
        (tmp_path / f"{name}.tflite").write_bytes(fresh)
        committed = read_tflite(REPO / "tests" / "data" / f"{name}.tflite")
        regenerated = read_tflite(tmp_path / f"{name}.tflite")
        shape = [(op.label, op.version, [(t.dtype, t.shape) for t in op.inputs if t], [t.dtype for t in op.outputs])
                 for op in committed.ops]
        assert shape == [(op.label, op.version, [(t.dtype, t.shape) for t in op.inputs if t],
                          [t.dtype for t in op.outputs]) for op in regenerated.ops], name
