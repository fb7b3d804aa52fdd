"""The per-op error analysis reads TF's debug model in one pass per tensor and gives what TF's own
QuantizationDebugger gives on it (a real calibration and debug model): counts, maxima and erased shares
exactly, sums of squares to a few parts in a million."""

from __future__ import annotations

import csv
import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv.converters import _tflite_worker as worker

pytestmark = pytest.mark.tf

SAMPLES = 12


def _erased(f: Any, q: Any, scale: float, zero_point: int) -> float:
    live = np.abs(np.ravel(f)) > 1e-6
    count = np.count_nonzero(live)
    return float(np.count_nonzero(np.ravel(q)[live] == zero_point) / count) if count else 0.0


def _signal(f: Any, q: Any, scale: float, zero_point: int) -> float:
    x = np.ravel(f).astype(np.float64)
    return float(x @ x / x.size)


def _noise(f: Any, q: Any, scale: float, zero_point: int) -> float:
    n = np.ravel(f).astype(np.float64) - (np.ravel(q).astype(np.float64) - zero_point) * scale
    return float(n @ n / n.size)


@pytest.fixture(scope="module")
def debug_model() -> tuple[bytes, list[list[np.ndarray]]]:
    """A conv (5x3 kernel, 6 channels, stride 2) -> depthwise -> ReLU6 -> dense 7 -> softmax on 18 x 11 x 2
    inputs, calibrated on seeded data; its debug model and SAMPLES samples of other data."""
    import keras
    import tensorflow as tf
    from tensorflow.lite.python import convert as tf_convert

    keras.utils.set_random_seed(3)
    inp = keras.Input((18, 11, 2), name="x")
    h = keras.layers.Conv2D(6, (5, 3), strides=2, padding="same", name="conv")(inp)
    h = keras.layers.DepthwiseConv2D(3, name="dw")(h)
    h = keras.layers.ReLU(6.0, name="relu6")(h)
    h = keras.layers.Dense(7, name="dense")(keras.layers.Flatten()(h))
    model = keras.Model(inp, keras.layers.Softmax(name="probs")(h))
    rng = np.random.default_rng(4)
    calibration = rng.normal(0, 1, (40, 18, 11, 2)).astype(np.float32)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = lambda: ([calibration[k:k + 1]] for k in range(len(calibration)))
    converter._experimental_calibrate_only = True
    calibrated = converter.convert()
    debug = tf_convert.mlir_quantize(calibrated, disable_per_channel=False, fully_quantize=False,
                                     enable_numeric_verify=True, denylisted_ops=None, denylisted_nodes=None)
    data = rng.normal(0.3, 1.4, (SAMPLES, 18, 11, 2)).astype(np.float32)  # wider than the calibration: clips
    return bytes(debug), [[data[k:k + 1]] for k in range(SAMPLES)]


# The oracle runs TF's own interpreter, deprecated, with every tensor kept: its warnings are expected here.
@pytest.mark.filterwarnings("ignore:.*tf.lite.Interpreter is deprecated:UserWarning",
                            "ignore:.*experimental_preserve_all_tensors:UserWarning",
                            "ignore:Statistics for quantized inputs were expected:UserWarning")
def test_the_per_op_numbers_are_the_quantization_debuggers(debug_model: tuple[bytes, list[list[np.ndarray]]]) -> None:
    import tensorflow as tf

    debug, batches = debug_model
    options = tf.lite.experimental.QuantizationDebugOptions(
        layer_direct_compare_metrics={"erased": _erased, "signal_power": _signal, "noise_power": _noise})
    debugger = tf.lite.experimental.QuantizationDebugger(quant_debug_model_content=debug,
                                                         debug_dataset=lambda: iter(batches), debug_options=options)
    debugger.run()
    text = io.StringIO()
    debugger.layer_statistics_dump(text)
    want = list(csv.DictReader(io.StringIO(text.getvalue())))
    got = worker.debug_statistics(debug, batches)
    assert len(got) == len(want) >= 4  # conv, depthwise, dense, softmax at least
    assert [(g["op_name"], g["tensor_name"]) for g in got] == [(w["op_name"], w["tensor_name"]) for w in want]
    for g, w in zip(got, want):
        for key in ("num_elements", "erased", "scale", "zero_point"):  # exact
            # The debugger's CSV writes a float32 as float32 prints it: the same float32 value.
            same = np.float32(g[key]) == np.float32(w[key]) if key == "scale" else g[key] == float(w[key])
            assert same, (g["tensor_name"], key, g[key], w[key])
        # Each sample's max is exact, averaged in float64 (the debugger: in float32); the sums of squares are
        # float32 dot products (the debugger's: float64, and float32 pairwise for its mean squared error).
        for key in ("max_abs_error", "mean_squared_error", "signal_power", "noise_power"):
            assert g[key] == pytest.approx(float(w[key]), rel=1e-5), (g["tensor_name"], key)
    assert any(g["erased"] > 0 for g in got) and all(g["noise_power"] > 0 for g in got)


def test_a_model_without_numericverify_ops_is_refused(debug_model: tuple[bytes, list[list[np.ndarray]]]) -> None:
    plain = (Path(__file__).resolve().parent.parent / "data" / "conv2d-relu.int8.tflite").read_bytes()
    with pytest.raises(ValueError, match=r"^the debug model has no NumericVerify op$"):
        worker.debug_statistics(plain, debug_model[1])


@pytest.mark.parametrize(("least", "values", "used"), [
    (4, 42, 6), (4, 43, 7),  # the smallest ops (dense, softmax) give 7 values a sample: 42 at 6 samples
    (8, 7, 8), (9, 7, 9),  # enough values after one sample: the least count decides
])
def test_the_samples_stop_once_every_op_has_averaged_enough_values(
        debug_model: tuple[bytes, list[list[np.ndarray]]], least: int, values: int, used: int) -> None:
    debug, batches = debug_model
    read: list[int] = []

    def counted() -> Any:
        for k, batch in enumerate(batches):
            read.append(k)
            yield batch

    got = worker.debug_statistics(debug, counted(), least=least, values=values)
    assert got == worker.debug_statistics(debug, batches[:used])
    assert got != worker.debug_statistics(debug, batches[:used - 1])
    assert read == list(range(used + 1))  # the batch after the last used was read, not run


def test_the_build_s_sample_counts_keep_a_small_model_at_every_sample_it_is_given() -> None:
    """The build's numbers: at least 32 samples, and 32,000 values of the smallest op (a 10-class output: 64)."""
    assert (worker.DEBUG_SAMPLES, worker.DEBUG_LEAST, worker.DEBUG_VALUES) == (64, 32, 32_000)
    assert -(-worker.DEBUG_VALUES // 1000) == worker.DEBUG_LEAST  # an ImageNet head: 32 samples
    assert -(-worker.DEBUG_VALUES // 10) > worker.DEBUG_SAMPLES  # ten classes: every sample given
