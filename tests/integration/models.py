"""Tiny Keras models for the integration tests, each with distinct dimension sizes.

Custom layers live in a module the test writes next to its pipeline file, the way
a user's own layers would (the pipeline names it in model.custom_modules).
"""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import numpy as np

CUSTOM_LAYERS = textwrap.dedent('''
    import keras
    from keras import ops

    PACKAGE = "{package}"

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class MCDropout(keras.layers.Dropout):
        """Monte-Carlo dropout: forces training behaviour in every call."""
        def call(self, x, training=None):
            return super().call(x, training=True)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class AlwaysNoise(keras.layers.GaussianNoise):
        def call(self, x, training=None):
            return super().call(x, training=True)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class Jitter(keras.layers.Layer):
        """Adds noise on purpose, in inference too: not a training-only layer."""
        def call(self, x):
            return x + keras.random.normal(ops.shape(x), stddev=0.1)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class Erf(keras.layers.Layer):
        def call(self, x):
            return ops.erf(x)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class Sin(keras.layers.Layer):
        def call(self, x):
            return ops.sin(x)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class ClassOf(keras.layers.Layer):
        """The top class as an int32 index (tf.argmax: keras.ops.argmax lowers to a Flex BitwiseAnd)."""
        def call(self, x):
            import tensorflow as tf

            return tf.argmax(x, axis=-1, output_type=tf.int32)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class NeedsPairs(keras.layers.Layer):
        """Refuses a batch of one, as a layer written for training batches can."""
        def call(self, x):
            if x.shape[0] == 1:
                raise ValueError("\\x1b[1mthis layer needs a batch of 2\\x1b[0m")
            return x

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class ForcedBN(keras.layers.BatchNormalization):
        """Batch norm that normalises with batch statistics in every call."""
        def call(self, x, training=None):
            return super().call(x, training=True)

    @keras.saving.register_keras_serializable(package=PACKAGE)
    class TinyNet(keras.Model):
        """A subclassed model: conv, batch norm, dropout, dense; its input is the call() argument."""
        def __init__(self, **kwargs):
            super().__init__(**kwargs)
            self.conv = keras.layers.Conv2D(4, 3, name="conv")
            self.norm = keras.layers.BatchNormalization(name="norm")
            self.drop = keras.layers.Dropout(0.4, name="drop")
            self.flat = keras.layers.Flatten(name="flat")
            self.head = keras.layers.Dense(3, name="head")

        def call(self, image, training=False):
            x = self.norm(self.conv(image), training=training)
            return self.head(self.drop(self.flat(x), training=training))
''')


def write_custom_layers(folder: Path, module: str) -> Any:
    """Write the custom layer module into ``folder`` and import it."""
    import importlib
    import sys

    (folder / f"{module}.py").write_text(CUSTOM_LAYERS.replace("{package}", module))
    sys.path.insert(0, str(folder))
    try:
        return importlib.import_module(module)
    finally:
        sys.path.remove(str(folder))


def dense_model(path: Path, middle: Any, *, features: int = 6, hidden: int = 5, classes: int = 3) -> Path:
    """Dense -> ``middle`` layer -> Dense, saved as .keras."""
    import keras

    keras.utils.set_random_seed(1)
    inp = keras.Input((features,), name="feat")
    x = keras.layers.Dense(hidden, name="d1")(inp)
    x = middle(x)
    out = keras.layers.Dense(classes, name="d2")(x)
    keras.Model(inp, out, name="tiny").save(path)
    return path


def calibration(path: Path, *, samples: int = 32, features: int = 6, seed: int = 0) -> Path:
    np.savez(path, feat=np.random.default_rng(seed).normal(size=(samples, features)).astype(np.float32))
    return path


def pipeline(folder: Path, model: str, cal: str, *, modules: tuple[str, ...] = (), samples: int = 16,
             extra: str = "") -> Path:
    custom = f", custom_modules: [{', '.join(modules)}], trust_code: true" if modules else ""
    path = folder / "pipeline.yaml"
    path.write_text(f"version: 1\nmodel: {{path: {model}{custom}}}\n"
                    f"calibration: {{path: {cal}, samples: {samples}}}\n{extra}")
    return path


def run_tflite(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Run a .tflite through its signature with float feeds: quantize int inputs, dequantize int outputs."""
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    runner = interpreter.get_signature_runner()
    details = runner.get_input_details()
    args = {}
    for name, x in feeds.items():
        d = details[name]
        scale, zero = d["quantization"]
        if np.issubdtype(d["dtype"], np.integer) and scale:
            info = np.iinfo(d["dtype"])
            x = np.clip(np.round(x / scale + zero), info.min, info.max).astype(d["dtype"])
        args[name] = x
    out = runner(**args)
    result = {}
    for name, d in runner.get_output_details().items():
        scale, zero = d["quantization"]
        y = out[name]
        result[name] = (y.astype(np.float32) - zero) * scale if scale else y
    return result


def photos(count: int, height: int, width: int, *, channels: int = 3, seed: int = 0) -> np.ndarray:
    """Real image data in [0, 1]: seeded crops of scikit-image's bundled photos (calibration that is not
    synthetic noise, so the default calibration gate has nothing to object to)."""
    from skimage import data

    sources = [data.astronaut(), data.chelsea(), data.coffee(), data.rocket()]
    rng = np.random.default_rng(seed)
    out = np.empty((count, height, width, channels), np.float32)
    for i in range(count):
        image = sources[i % len(sources)]
        top = int(rng.integers(0, image.shape[0] - height))
        left = int(rng.integers(0, image.shape[1] - width))
        crop = image[top:top + height, left:left + width].astype(np.float32) / 255.0
        out[i] = crop[..., :channels] if channels <= 3 else np.repeat(crop.mean(-1, keepdims=True), channels, -1)
    return out


def hostile(path: Path, classes: int = 4) -> Any:
    """x (12) -> embed Dense 16 relu -> wide Dense 16 -> mix Dense 8 relu -> head Dense ``classes``. One unit
    of 'wide' is 1000x larger than the rest and 'mix' ignores it: per-tensor INT8 quantization of wide's
    output crushes the 15 channels that matter. Saved to ``path``; returns the model."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((12,), name="x")
    h = keras.layers.Dense(16, activation="relu", name="embed")(inp)
    wide = keras.layers.Dense(16, name="wide")(h)
    out = keras.layers.Dense(classes, name="head")(keras.layers.Dense(8, activation="relu", name="mix")(wide))
    model = keras.Model(inp, out)
    w, b = model.get_layer("wide").get_weights()
    w[:, 0] *= 1000
    b[0] = 500
    model.get_layer("wide").set_weights([w, b])
    w2, b2 = model.get_layer("mix").get_weights()
    w2[0, :] = 0
    model.get_layer("mix").set_weights([w2, b2])
    model.save(path)
    return model
