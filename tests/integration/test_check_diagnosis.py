"""`edgeconv check` names a dynamic-range or float16 model in one line: models converted for real."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.targets.diagnosis import FIX, diagnose

from ..conftest import run_edgeconv

pytestmark = pytest.mark.tf


def convert(tmp_path: Path, mode: str) -> Path:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    inp = keras.Input((12, 10, 3), name="image")
    x = keras.layers.Conv2D(7, 3, activation="relu", name="conv")(inp)
    out = keras.layers.Dense(5, name="head")(keras.layers.Flatten()(x))
    model = keras.Model(inp, out)
    converter = tf.lite.TFLiteConverter.from_keras_model(model)
    converter.optimizations = [tf.lite.Optimize.DEFAULT]  # no representative data: weights only
    if mode == "float16":
        converter.target_spec.supported_types = [tf.float16]
    path = tmp_path / f"{mode}.tflite"
    path.write_bytes(converter.convert())
    return path


@pytest.mark.parametrize(("mode", "sentence"), [
    ("dynamic", "the model is dynamic-range quantized: int8 weights, float32 activations (all 6 ops compute in "
                f"float); for integer targets {FIX}"),
    ("float16", "the model is float16-quantized: float16 weights expanded to float32, all 6 ops compute in float; "
                f"for integer targets {FIX}"),
])
def test_weight_only_quantized_models_are_named(tmp_path: Path, mode: str, sentence: str) -> None:
    path = convert(tmp_path, mode)
    found = diagnose(read_tflite(path))
    assert found is not None and found.sentence == sentence
    done = run_edgeconv("check", path, "--target", "tflm-cmsis-nn")
    assert done.returncode == 1
    assert done.stdout.splitlines()[0] == f"model: {sentence}"
