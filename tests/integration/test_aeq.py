"""quantization.engine: ai-edge-quantizer on real conversions: the ranges it is given (min/max, or a
percentile that clips rare outliers), int16 activations for named ops of an int8 model, and the clear
errors of a recipe that does not fit the model."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import edgeconv
from edgeconv.cli import main
from edgeconv.converters import aeq
from edgeconv.converters.tflite_reader import parse_tflite

pytestmark = pytest.mark.tf

FEATURES, HIDDEN, CLASSES = 7, 11, 4


@pytest.fixture(scope="module")
def keras_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """features -> dense 'mix' (relu) -> dense 'head' -> softmax."""
    import keras

    keras.utils.set_random_seed(2)
    inp = keras.Input((FEATURES,), name="features")
    mix = keras.layers.Dense(HIDDEN, activation="relu", name="mix")(inp)
    head = keras.layers.Dense(CLASSES, name="head")(mix)
    model = keras.Model(inp, keras.layers.Softmax(name="probs")(head))
    path = tmp_path_factory.mktemp("aeq") / "model.keras"
    model.save(path)
    return path


def _data(count: int, seed: int, glitch: bool = False) -> np.ndarray:
    """Uniform features; with ``glitch``, sample 50 has a rare large value (feature 0 at 80)."""
    x = np.random.default_rng(seed).uniform(-1, 1, (count, FEATURES)).astype("float32")
    if glitch:
        x[50, 0] = 80.0
    return x


@pytest.fixture(scope="module")
def float_tflite(keras_model: Path) -> bytes:
    import keras
    import tensorflow as tf

    return bytes(tf.lite.TFLiteConverter.from_keras_model(keras.models.load_model(keras_model)).convert())


def _values(model: bytes, data: np.ndarray) -> dict[str, np.ndarray]:
    """Every float activation of the model on each sample (the oracle: LiteRT with every tensor kept)."""
    from ai_edge_litert.interpreter import Interpreter

    graph = parse_tflite(model).main
    names = {graph.tensors[i].name for i in graph.inputs} | {t.name for op in graph.ops for t in op.outputs}
    with warnings.catch_warnings():  # LiteRT's note that keeping every tensor is for debugging
        warnings.simplefilter("ignore")
        interpreter = Interpreter(model_content=model, experimental_preserve_all_tensors=True)
    runner = interpreter.get_signature_runner()
    key = next(iter(runner.get_input_details()))
    tensors = {d["index"]: d["name"] for d in interpreter.get_tensor_details() if d["name"] in names}
    out: dict[str, list[np.ndarray]] = {n: [] for n in tensors.values()}
    for k in range(len(data)):
        runner(**{key: data[k:k + 1]})
        for i, n in tensors.items():
            out[n].append(interpreter.get_tensor(i).ravel())
    return {n: np.concatenate(v) for n, v in out.items()}


def test_ranges_are_the_calibration_min_and_max_or_their_percentiles(float_tflite: bytes) -> None:
    data = _data(200, 0, glitch=True)
    values = _values(float_tflite, data)
    batches = lambda: ({"features": data[k:k + 1]} for k in range(len(data)))  # noqa: E731
    exact = aeq._ranges(float_tflite, batches, None)
    assert set(exact) == set(values)
    for name, (shape, lo, hi) in exact.items():
        assert (lo, hi) == (float(values[name].min()), float(values[name].max())), name
        assert shape == (1, 1)
    clipped = aeq._ranges(float_tflite, batches, 99.9)
    for name, (_, lo, hi) in clipped.items():
        v = values[name]
        step = (v.max() - v.min()) / aeq.BINS
        # At most 0.1 % of the values clip on each side, and one histogram bin less would clip more.
        assert np.mean(v < lo) <= 0.001 < np.mean(v < lo + step * 1.001), name
        assert np.mean(v > hi) <= 0.001 < np.mean(v > hi - step * 1.001), name
        assert v.min() <= lo and hi <= v.max()
    # The rare value is clipped from the input's range: 80 is 1 of the 1,400 input values.
    assert exact["serving_default_features:0"][2] == 80.0
    assert clipped["serving_default_features:0"][2] < 1.0 + 81 / aeq.BINS  # within a bin of the largest other value


def test_the_statistics_are_measured_once_per_model_and_data_and_give_the_same_ranges(
        float_tflite: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    """Repair trials quantize the same float model from the same calibration: the min and max are measured
    in one run over the batches, the histograms in one more the first time a percentile is asked, and
    every range is what a fresh measurement gives."""
    data = _data(200, 0, glitch=True)
    runs: list[int] = []

    def batches() -> Any:
        runs.append(0)
        return ({"features": data[k:k + 1]} for k in range(len(data)))

    monkeypatch.setattr(aeq, "_MEASURED", {})
    fresh = {p: aeq._ranges(float_tflite, batches, p) for p in (None, 99.9, 99.99)}
    assert len(runs) == 5  # without a data key: every call measures (min and max; with a percentile, histograms)
    runs.clear()
    kept = {p: aeq._ranges(float_tflite, batches, p, "the build's calibration") for p in (None, 99.9, None, 99.99)}
    assert len(runs) == 2 and kept == fresh
    assert aeq._ranges(float_tflite, batches, 99.9, "other samples") == fresh[99.9] and len(runs) == 4
    assert len(aeq._MEASURED) == aeq._KEEP
    aeq._ranges(float_tflite, batches, None, "a third calibration")  # the oldest is forgotten
    assert len(runs) == 5 and len(aeq._MEASURED) == aeq._KEEP
    aeq._ranges(float_tflite, batches, None, "the build's calibration")
    assert len(runs) == 6


def _pipeline(tmp_path: Path, keras_model: Path, quantization: str, targets: str = "[tflm-cmsis-nn]") -> Path:
    shutil.copy(keras_model, tmp_path / keras_model.name)  # a pipeline reads only inside its project
    np.savez(tmp_path / "cal.npz", features=_data(120, 1))
    np.savez(tmp_path / "eval.npz", features=_data(90, 2))
    (tmp_path / "pipeline.yaml").write_text(
        f"version: 1\nname: aeq\nmodel: {{path: {keras_model.name}}}\ncalibration: {{path: cal.npz, samples: 120}}\n"
        f"evaluation: {{path: eval.npz}}\nquantization: {quantization}\ntargets: {targets}\n")
    return tmp_path / "pipeline.yaml"


def test_int16_ops_gives_the_named_op_int16_activations_and_the_rest_int8(tmp_path: Path,
                                                                          keras_model: Path) -> None:
    result = edgeconv.build(_pipeline(tmp_path, keras_model, "{engine: ai-edge-quantizer, int16_ops: ['/mix']}"))
    assert result.passed, result.report["gate"]["reasons"]
    model = parse_tflite(result.tflite_path.read_bytes())
    kinds = [(op.type, op.outputs[0].dtype.value) for op in model.ops]
    # AI Edge Quantizer requantizes the int8 input for the int16 op, and its output for the int8 one.
    assert kinds == [("QUANTIZE", "int16"), ("FULLY_CONNECTED", "int16"), ("QUANTIZE", "int8"),
                     ("FULLY_CONNECTED", "int8"), ("SOFTMAX", "int8")]
    assert "/mix" in model.ops[1].outputs[0].name
    io = [model.main.tensors[i].dtype.value for i in (*model.main.inputs, *model.main.outputs)]
    assert io == ["int8", "int8"]
    q = result.report["quantization"]
    assert (q["engine"], q["int16_ops"], q["range_percentile"]) == ("ai-edge-quantizer", ["/mix"], None)
    # The per-op ranking measures the converter's quantization: with this engine there is none, and report.md
    # says so where the ranking would be.
    assert result.report["culprits"] is None
    md = (result.output_dir / "report.md").read_text()
    assert "int8, int8 in / int8 out, quantized by AI Edge Quantizer (int16 activations for /mix)" in md
    assert "Not measured: the per-op ranking compares the TFLite converter's quantization op by op" in md


@pytest.mark.parametrize(("int16_ops", "message"), [
    ("['nomatch']", "quantization.int16_ops: 'nomatch' matches no op output of the model (e.g. "),
    ("['^PartitionedCall:0$']",
     "model output 'probs' is int16, not the configured int8: quantization.int16_ops gives int16 activations to "
     "the op that writes it. Fix: leave that op out of int16_ops"),
])
def test_a_recipe_that_does_not_fit_the_model_is_exit_2_and_writes_nothing(
        tmp_path: Path, keras_model: Path, capsys: pytest.CaptureFixture[str], int16_ops: str, message: str) -> None:
    pipeline = _pipeline(tmp_path, keras_model, f"{{engine: ai-edge-quantizer, int16_ops: {int16_ops}}}")
    assert main(["build", str(pipeline), "-q"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"edgeconv: error: {message}") and len(err.splitlines()) == 1, err
    assert not (tmp_path / "build").exists()


def test_the_report_schema_takes_the_engine_keys(tmp_path: Path, keras_model: Path) -> None:
    import jsonschema

    from edgeconv.report import SCHEMA_PATH

    result = edgeconv.build(_pipeline(tmp_path, keras_model, "{engine: ai-edge-quantizer, range_percentile: 99.5}",
                                      targets="[arm-neon]"))
    report = json.loads((result.output_dir / "report.json").read_text())
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert report["quantization"]["range_percentile"] == 99.5
