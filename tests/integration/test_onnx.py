"""ONNX beside the .tflite: the float model from the cleaned graph, the INT8 QDQ model from the built
.tflite, both checked and run with ONNX Runtime; bad requests refused with nothing written."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

import edgeconv
from edgeconv.cli import main
from edgeconv.report import SCHEMA_PATH

from ..conftest import EXAMPLE, REPO, tree
from .test_loaders import images, project, tf1_fixture

ONNX_OUTPUT = "output:\n  dir: build/digits\n  onnx: {}"
EVAL = np.load(EXAMPLE / "eval.npz")


def ort_session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("onnx")
    shutil.copytree(EXAMPLE, root / "examples" / "digits")
    text = (REPO / "pipeline.yaml").read_text().replace("output:\n  dir: build/digits", ONNX_OUTPUT)
    assert ONNX_OUTPUT in text
    (root / "pipeline.yaml").write_text(text)
    result = edgeconv.build(root / "pipeline.yaml")
    return {"root": root, "out": result.output_dir, "report": result.report, "tflite": result.tflite_path}


def test_both_models_are_written_and_pass_the_full_checker(example: dict[str, Any]) -> None:
    import onnx

    out = example["out"]
    assert sorted(p.name for p in out.iterdir()) == [
        ".edgeconv-output", "digits.int8.onnx", "digits.onnx", "digits.tflite", "explorer", "pipeline.resolved.yaml",
        "report.json", "report.md"]
    for name in ("digits.onnx", "digits.int8.onnx"):
        onnx.checker.check_model(onnx.load(str(out / name)), full_check=True)
    jsonschema.validate(example["report"], json.loads(SCHEMA_PATH.read_text()))
    models = example["report"]["onnx"]["models"]
    assert models["float"]["ops"] == {"Conv": 2, "Gemm": 2, "MaxPool": 2, "Relu": 3, "Reshape": 2, "Softmax": 1,
                                      "Transpose": 1}
    assert models["float"]["inputs"] == [{"name": "image", "dtype": "float32", "shape": [1, 16, 16, 1]}]
    assert models["int8"]["inputs"] == [{"name": "image", "dtype": "int8", "shape": [1, 16, 16, 1]}]
    assert models["int8"]["outputs"] == [{"name": "digit", "dtype": "int8", "shape": [1, 10]}]
    assert models["int8"]["ops"]["QuantizeLinear"] > 0 and models["int8"]["ops"]["DequantizeLinear"] > 0
    assert models["float"]["from_tf"]["Conv2D"] == {"Conv": 2} and models["float"]["from_tf"]["MatMul"] == {"Gemm": 2}
    assert example["report"]["toolchain"]["tf2onnx"] and example["report"]["toolchain"]["onnxruntime"]


def test_float_onnx_computes_what_keras_computes(example: dict[str, Any]) -> None:
    import keras

    keras_model = keras.saving.load_model(EXAMPLE / "model.keras")
    session = ort_session(example["out"] / "digits.onnx")
    x = EVAL["image"].astype(np.float32)
    got = np.concatenate([session.run(["digit"], {"image": xi[None]})[0] for xi in x])
    want = keras_model.predict(x, verbose=0)
    assert np.abs(got - want).max() <= 1e-5
    figures = example["report"]["onnx"]["parity"]["float"]
    assert figures["samples"] == 360
    assert figures["outputs"]["digit"]["onnx_float"]["max_abs_error"] == pytest.approx(np.abs(got - want).max(),
                                                                                       abs=1e-6)
    assert figures["accuracy"]["onnx_float"] == pytest.approx(np.mean(got.argmax(1) == EVAL["label"]))


def test_int8_onnx_agrees_with_the_int8_tflite(example: dict[str, Any]) -> None:
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(example["tflite"]))
    runner = interpreter.get_signature_runner()
    scale, zero = runner.get_input_details()["image"]["quantization"]
    session = ort_session(example["out"] / "digits.int8.onnx")
    x = np.clip(np.round(EVAL["image"].astype(np.float32) / scale + zero), -128, 127).astype(np.int8)
    tfl = np.concatenate([runner(image=xi[None])["digit"] for xi in x])
    onx = np.concatenate([session.run(["digit"], {"image": xi[None]})[0] for xi in x])
    agreement = np.mean(tfl.argmax(1) == onx.argmax(1))
    assert agreement >= 0.99
    out_scale, _ = runner.get_output_details()["digit"]["quantization"]
    max_diff = np.abs(tfl.astype(np.float32) - onx.astype(np.float32)).max() * out_scale
    figures = example["report"]["onnx"]["parity"]["int8"]
    assert figures["outputs"]["digit"]["onnx_int8"]["top1_agreement"] == pytest.approx(agreement)
    assert figures["outputs"]["digit"]["onnx_int8"]["max_abs_error"] == pytest.approx(max_diff, abs=1e-6)
    assert figures["bit_exact"] == pytest.approx(np.mean(tfl == onx))
    text = (example["out"] / "report.md").read_text()
    assert f"- INT8 ONNX vs the built .tflite, output `digit`: top-1 agreement {agreement:.2%}" in text


def test_onnx_bytes_are_the_same_on_a_rebuild(example: dict[str, Any]) -> None:
    again = edgeconv.build(example["root"] / "pipeline.yaml", out=example["root"] / "again")
    for name in ("digits.onnx", "digits.int8.onnx"):
        assert (again.output_dir / name).read_bytes() == (example["out"] / name).read_bytes()


def test_check_lists_the_ops_of_a_built_onnx(example: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", str(example["out"] / "digits.int8.onnx"), "--format", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ops"] == example["report"]["onnx"]["models"]["int8"]["ops"]
    assert data["warnings"] == []


def test_dropout_never_reaches_onnx(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A TF1 graph whose dropout and batch norm switch on a bool placeholder, bound to inference."""
    import tensorflow as tf

    monkeypatch.chdir(tmp_path)
    (tmp_path / "src").mkdir()
    pb = tf1_fixture(tmp_path / "src" / "graph.pb", "--control-flow", "v1")
    graph_def = tf.compat.v1.GraphDef.FromString(pb.read_bytes())
    assert {"RandomUniform", "Switch"} <= {n.op for n in graph_def.node}  # what must not reach ONNX
    pipeline = project(tmp_path, pb, "  bind: {is_training: false}\n", extra="output: {onnx: {}}\n")
    result = edgeconv.build(pipeline)
    import onnx

    model = onnx.load(str(result.output_dir / "graph.onnx"))
    ops = {n.op_type for n in model.graph.node}
    assert not ops & {"Dropout", "RandomUniform", "RandomUniformLike", "RandomNormal", "If", "Loop"}, ops
    x = images(3, seed=4)
    session = ort_session(result.output_dir / "graph.onnx")
    got = np.concatenate([session.run(["probs"], {"image": xi[None]})[0] for xi in x])
    from .test_loaders import tf1_session_outputs

    want = tf1_session_outputs(pb, x, {"is_training": False})
    assert np.abs(got - want).max() <= 1e-5


BUCKETIZE = textwrap.dedent("""
    import sys
    import numpy as np
    import tensorflow as tf

    class M(tf.Module):
        def __init__(self):
            self.w = tf.Variable(np.random.default_rng(0).normal(size=(7, 5)).astype(np.float32))

        @tf.function(input_signature=[tf.TensorSpec([1, 7], tf.float32, name="x")])
        def __call__(self, x):
            with tf.name_scope("dense"):
                h = tf.matmul(x, self.w)
            with tf.name_scope("bucket"):
                b = tf.cast(tf.raw_ops.Bucketize(input=h, boundaries=[-1.0, 0.0, 1.0]), tf.float32)
            return {"y": h + b}

    m = M()
    tf.saved_model.save(m, sys.argv[1], signatures={"serving_default": m.__call__})
""")


def test_an_op_tf2onnx_cannot_convert_is_named_and_nothing_is_written(tmp_path: Path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    subprocess.run([sys.executable, "-c", BUCKETIZE, str(tmp_path / "sm")], check=True, capture_output=True)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(1).normal(size=(40, 7)).astype(np.float32))
    (tmp_path / "pipeline.yaml").write_text("version: 1\nmodel: {path: sm}\ncalibration: {path: cal.npz, samples: 32}"
                                            "\ntargets: [generic-int8]\noutput: {onnx: {opset: 16}}\n")
    before = tree(tmp_path)
    assert main(["build", str(tmp_path / "pipeline.yaml"), "-q"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "edgeconv: error: tf2onnx cannot convert TensorFlow op(s) Bucketize (layer 'bucket') to ONNX opset 16: "
        "tf2onnx has no ONNX conversion for them; rewrite them with common ops, or remove output.onnx"]
    assert tree(tmp_path) == before and not (tmp_path / "build").exists()
