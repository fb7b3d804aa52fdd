"""Generate the small .tflite fixtures in tests/data with the real TFLite converter.

    python scripts/make_test_models.py [--out tests/data]

Names follow <op>-<variant>.<dtype>.tflite. Every model has distinct dimension
sizes, a fixed seed and real (seeded) calibration data. The integration tests
regenerate them into a temporary folder and compare their op structure with the
committed copies, so a converter upgrade that changes them is noticed.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")

import numpy as np

OUT = Path(__file__).resolve().parent.parent / "tests" / "data"


def _convert(fn: Any, shapes: list[list[int]], *, int8: bool, io: str = "int8", select_tf: bool = False,
             samples: int = 16) -> bytes:
    import tensorflow as tf

    converter = tf.lite.TFLiteConverter.from_concrete_functions([fn.get_concrete_function()], fn)
    converter.exclude_conversion_metadata = True
    ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8 if int8 else tf.lite.OpsSet.TFLITE_BUILTINS]
    if select_tf:
        ops.append(tf.lite.OpsSet.SELECT_TF_OPS)
    converter.target_spec.supported_ops = ops
    if int8:
        rng = np.random.default_rng(0)

        def representative() -> Any:
            for _ in range(samples):
                yield [rng.uniform(-1, 1, size=[d if d > 0 else 1 for d in s]).astype(np.float32) for s in shapes]

        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = representative
        converter.inference_input_type = {"int8": tf.int8, "uint8": tf.uint8}[io]
        converter.inference_output_type = converter.inference_input_type
    return bytes(converter.convert())


def _weights(*shape: int, seed: int) -> Any:
    return np.random.default_rng(seed).normal(0, 0.3, size=shape).astype(np.float32)


def models() -> dict[str, Callable[[], bytes]]:
    import tensorflow as tf

    def spec(*shape: int | None, name: str = "x") -> Any:
        return tf.TensorSpec(list(shape), tf.float32, name=name)

    w_conv = tf.constant(_weights(3, 3, 3, 5, seed=1))
    w_dense = tf.constant(_weights(6, 4, seed=2))
    b_dense = tf.constant(_weights(4, seed=3))

    @tf.function(input_signature=[spec(1, 9, 7, 3)])
    def conv2d_relu(x: Any) -> Any:
        return tf.nn.relu(tf.nn.conv2d(x, w_conv, strides=1, padding="SAME"))

    @tf.function(input_signature=[spec(1, 6)])
    def dense_softmax(x: Any) -> Any:
        return tf.nn.softmax(tf.matmul(x, w_dense) + b_dense)

    @tf.function(input_signature=[spec(1, 6)])
    def dense(x: Any) -> Any:
        return tf.matmul(x, w_dense) + b_dense

    @tf.function(input_signature=[spec(None, 6)])
    def dense_dynamic(x: Any) -> Any:
        return tf.matmul(x, w_dense) + b_dense

    @tf.function(input_signature=[spec(1, 5, 3)])
    def sin_island(x: Any) -> Any:
        return tf.math.sin(x * 2.0) + 1.0

    @tf.function(input_signature=[spec(1, 7)])
    def erf_flex(x: Any) -> Any:
        return tf.math.erf(x)

    @tf.function(input_signature=[spec(1, 4, 2)])
    def random_uniform(x: Any) -> Any:
        return x * tf.random.uniform([1, 4, 2], seed=1)

    @tf.function(input_signature=[spec(1, 8, 3)])
    def add_uint8io(x: Any) -> Any:
        return x + tf.constant(_weights(8, 3, seed=4))

    return {
        "conv2d-relu.int8": lambda: _convert(conv2d_relu, [[1, 9, 7, 3]], int8=True),
        "softmax-dense.int8": lambda: _convert(dense_softmax, [[1, 6]], int8=True),
        "add-uint8io.int8": lambda: _convert(add_uint8io, [[1, 8, 3]], int8=True, io="uint8"),
        "dense-dynamic.int8": lambda: _convert(dense_dynamic, [[-1, 6]], int8=True),
        "sin-island.int8": lambda: _convert(sin_island, [[1, 5, 3]], int8=True),
        "dense.float32": lambda: _convert(dense, [[1, 6]], int8=False),
        "erf-flex.float32": lambda: _convert(erf_flex, [[1, 7]], int8=False, select_tf=True),
        "random-uniform.float32": lambda: _convert(random_uniform, [[1, 4, 2]], int8=False),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for name, make in models().items():
        (args.out / f"{name}.tflite").write_bytes(make())
        print(f"wrote {args.out / name}.tflite")


if __name__ == "__main__":
    main()
