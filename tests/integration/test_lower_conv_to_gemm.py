"""lower-conv-to-gemm: every Conv2D becomes im2col + MatMul with the same outputs, and the
INT8 model has no CONV_2D and still passes generic-int8."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

import edgeconv
from edgeconv import ModelError
from edgeconv.converters.freeze import freeze_concrete_function
from edgeconv.converters.tf_graph import run_graph
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.ir import FrozenGraph, TensorSpec
from edgeconv.passes import LowerConvToGemmPass

from . import models


def conv_graph(x_shape: tuple[int, ...], kernel: np.ndarray, **conv: Any) -> FrozenGraph:
    import tensorflow as tf

    fn = tf.function(lambda x: {"y": tf.nn.conv2d(x, tf.constant(kernel), **conv)},
                     input_signature=[tf.TensorSpec(x_shape, tf.float32, name="x")])
    cf = fn.get_concrete_function()
    out = cf.structured_outputs["y"]
    return FrozenGraph(freeze_concrete_function(cf, []), (TensorSpec("x", "x:0", x_shape, "float32"),),
                       (TensorSpec("y", out.name, tuple(out.shape), "float32"),))


@pytest.mark.parametrize(("x_shape", "k", "conv", "gemm"), [
    ((1, 9, 7, 3), (3, 3, 3, 5), {"strides": 1, "padding": "SAME"}, "M=63 x K=27 x N=5"),
    ((2, 9, 7, 3), (3, 3, 3, 5), {"strides": 2, "padding": "SAME"}, "M=40 x K=27 x N=5"),
    # Odd total padding: TF pads one more row/column after than before.
    ((1, 8, 10, 3), (3, 3, 3, 4), {"strides": 2, "padding": "SAME"}, "M=20 x K=27 x N=4"),
    ((1, 6, 5, 2), (2, 4, 2, 3), {"strides": 1, "padding": "SAME"}, "M=30 x K=16 x N=3"),
    ((1, 10, 8, 4), (3, 2, 4, 6), {"strides": [1, 3, 2, 1], "padding": "VALID"}, "M=12 x K=24 x N=6"),
    ((1, 11, 9, 2), (3, 3, 2, 4), {"strides": 1, "padding": "SAME", "dilations": 2}, "M=99 x K=18 x N=4"),
    ((1, 8, 6, 3), (3, 3, 3, 2), {"strides": 1, "padding": [[0, 0], [2, 0], [1, 1], [0, 0]]}, "M=48 x K=27 x N=2"),
    ((1, 8, 6, 5), (1, 1, 5, 7), {"strides": 1, "padding": "VALID"}, "M=48 x K=5 x N=7"),
    ((1, 8, 6, 5), (1, 1, 5, 7), {"strides": 2, "padding": "SAME"}, "M=12 x K=5 x N=7"),
])
def test_lowered_convolution_matches_conv2d(x_shape: tuple[int, ...], k: tuple[int, ...], conv: dict[str, Any],
                                            gemm: str) -> None:
    rng = np.random.default_rng(sum(x_shape) + sum(k))
    graph = conv_graph(x_shape, rng.normal(size=k).astype(np.float32), **conv)
    lowered, result = LowerConvToGemmPass().apply(graph)
    assert "Conv2D" not in lowered.op_counts() and "MatMul" in lowered.op_counts()
    (rewrite,) = result.rewrites
    assert f"GEMM {gemm}" in rewrite.description
    x = rng.normal(size=x_shape).astype(np.float32)
    want, got = run_graph(graph, {"x": x})["y"], run_graph(lowered, {"x": x})["y"]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=1e-5)
    assert np.abs(want).max() > 0.5  # the comparison is over real values, not zeros


def convs_model(path: Path) -> Any:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((13, 11, 3), name="image")
    x = keras.layers.Conv2D(8, 3, strides=2, padding="same", activation="relu", name="c3s2")(inp)
    x = keras.layers.Conv2D(6, 3, padding="valid", name="c3")(x)
    x = keras.layers.Conv2D(5, 1, name="c1")(x)
    x = keras.layers.Conv2D(4, 1, strides=2, use_bias=False, name="c1s2")(x)
    model = keras.Model(inp, keras.layers.Dense(3, name="head")(keras.layers.Flatten(name="flat")(x)))
    model.save(path / "convs.keras")
    np.savez(path / "cal.npz", image=IMAGES)
    return model


IMAGES = models.photos(24, 13, 11, seed=1)


def pipeline(path: Path, passes: str) -> Path:
    (path / "pipeline.yaml").write_text(
        "version: 1\nmodel: {path: convs.keras}\ncalibration: {path: cal.npz, samples: 16}\n"
        f"passes: {passes}\ntargets: [generic-int8]\n")
    return path / "pipeline.yaml"


def test_build_without_conv2d_passes_generic_int8_and_reports_the_gemms(tmp_path: Path) -> None:
    model = convs_model(tmp_path)
    result = edgeconv.build(pipeline(tmp_path, "[strip-training, lower-conv-to-gemm]"))
    assert result.passed, result.report["gate"]
    ops = {op.type for op in read_tflite(result.tflite_path).ops}
    assert "CONV_2D" not in ops and "FULLY_CONNECTED" in ops
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5
    lowered = result.report["passes"][1]
    assert lowered["name"] == "lower-conv-to-gemm"
    assert [(r["layers"], r["description"]) for r in lowered["rewrites"]] == [
        (["c3s2"], "Conv2D 3x3 stride 2x2 SAME on [1, 13, 11, 3] -> im2col + MatMul: GEMM M=42 x K=27 x N=8 "
                   "(+ bias), output [1, 7, 6, 8]"),
        (["c3"], "Conv2D 3x3 stride 1x1 VALID on [1, 7, 6, 8] -> im2col + MatMul: GEMM M=20 x K=72 x N=6 "
                 "(+ bias), output [1, 5, 4, 6]"),
        (["c1"], "Conv2D 1x1 stride 1x1 VALID on [1, 5, 4, 6] -> 1x1 convolution + MatMul: GEMM M=20 x K=6 x N=5 "
                 "(+ bias), output [1, 5, 4, 5]"),
        (["c1s2"], "Conv2D 1x1 stride 2x2 VALID on [1, 5, 4, 5] -> 1x1 convolution + MatMul: GEMM M=6 x K=5 x "
                   "N=4, output [1, 3, 2, 4]"),
    ]
    assert lowered["removed"] == {"BiasAdd": 3, "Conv2D": 4}
    want = model(IMAGES[:4], training=False).numpy()
    got = np.concatenate([models.run_tflite(result.tflite_path, {"image": im[None]})["head"] for im in IMAGES[:4]])
    np.testing.assert_allclose(got, want, atol=0.05 * float(np.abs(want).max()))


def test_layers_option_lowers_only_the_named_layers(tmp_path: Path) -> None:
    convs_model(tmp_path)
    result = edgeconv.build(pipeline(tmp_path, "[strip-training, {name: lower-conv-to-gemm, layers: [c3s2, c1]}]"))
    assert [r["layers"] for r in result.report["passes"][1]["rewrites"]] == [["c3s2"], ["c1"]]
    assert [op.type for op in read_tflite(result.tflite_path).ops].count("CONV_2D") == 2
    resolved = (tmp_path / "build" / "convs" / "pipeline.resolved.yaml").read_text()
    assert "- name: lower-conv-to-gemm\n  layers: [c3s2, c1]\n" in resolved


def test_layers_option_names_must_have_convolutions(tmp_path: Path) -> None:
    convs_model(tmp_path)
    with pytest.raises(ModelError) as err:
        edgeconv.build(pipeline(tmp_path, "[{name: lower-conv-to-gemm, layers: [c3s3]}]"))
    assert str(err.value) == ("pass lower-conv-to-gemm: layers: 'c3s3' has no Conv2D (layers with convolutions: c1, "
                              "c1s2, c3, c3s2); did you mean 'c3s2'?")
    assert not (tmp_path / "build").exists()
