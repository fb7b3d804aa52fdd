"""Generate single-op int8 models for the target proof tests: tests/data/ops/<case>.int8.tflite, and int16x8
ones for the NumPy reference: tests/data/ops16/<case>.int16x8.tflite.

    python scripts/make_op_models.py [--out tests/data/ops] [CASE ...]
    python scripts/make_op_models.py --mode int16x8 [--out tests/data/ops16] [CASE ...]

Each case is one TF op (or a small idiom) traced with a static batch and converted to
full integer int8 (int8 I/O, TFLITE_BUILTINS_INT8) with seeded calibration data. The
converter leaves float islands (DEQUANTIZE -> op -> QUANTIZE) around ops without int8
kernels; those cases test the float paths of the targets. tests/integration re-runs
this generator and compares the result with the committed files.
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

OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "ops"
OUT16 = OUT.parent / "ops16"
S4 = (1, 6, 5, 4)  # N, H, W, C: every dimension distinct
# The cases also made int16x8 (<case>.int16x8.tflite, --mode int16x8), for the NumPy reference's int16 paths.
INT16X8 = ("abs", "add", "add_broadcast", "avg_pool", "batch_matmul", "concat2", "conv2d", "conv2d_relu6", "depthwise",
           "depthwise_mult2", "depthwise_dilated",
           "fully_connected", "gather", "leaky_relu", "logistic", "max_pool", "maximum", "mean_hw", "mul",
           "pad", "relu", "relu6", "reshape", "resize_bilinear", "resize_nearest", "softmax", "strided_slice",
           "sub", "tanh", "transpose", "transpose_conv")


def cases() -> dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]]:
    import tensorflow as tf

    rng = np.random.default_rng(11)
    w_conv = tf.constant(rng.normal(0, 0.3, (3, 3, 4, 7)).astype(np.float32))
    w_dw = tf.constant(rng.normal(0, 0.3, (3, 3, 4, 1)).astype(np.float32))
    w_tconv = tf.constant(rng.normal(0, 0.3, (3, 3, 4, 7)).astype(np.float32))  # (h, w, out, in)
    w_tconv2 = tf.constant(rng.normal(0, 0.3, (2, 3, 3, 5)).astype(np.float32))
    b_tconv2 = tf.constant(rng.normal(0, 0.5, (3,)).astype(np.float32))
    w_fc = tf.constant(rng.normal(0, 0.3, (9, 5)).astype(np.float32))
    const4 = tf.constant(rng.normal(0, 0.5, (1, 1, 1, 4)).astype(np.float32))
    # A generator of its own: a draw from ``rng`` here would change ``alpha`` and the committed prelu model.
    w_dw2 = tf.constant(np.random.default_rng(12).normal(0, 0.3, (3, 2, 3, 2)).astype(np.float32))
    alpha = tf.constant(rng.uniform(0.05, 0.6, (1, 1, 4)).astype(np.float32))  # one slope per channel
    table: dict[str, tuple[Callable[..., Any], list[tuple[int, ...]]]] = {
        "abs": (lambda x: tf.abs(x), [S4]),
        "add": (lambda a, b: a + b, [S4, S4]),
        "add_broadcast": (lambda x: x + const4, [S4]),
        "add_relu": (lambda a, b: tf.nn.relu(a + b), [S4, S4]),
        "argmin_int32": (lambda x: tf.argmin(x, axis=3, output_type=tf.int32), [S4]),
        # Comparisons and SELECT(_V2) stay int8 when what they pick is returned. (TF 2.21's converter keeps
        # NOT_EQUAL float: tests/unit/test_reference.py makes one by editing the EQUAL model.)
        "greater_select": (lambda a, b: tf.where(a > b, a, b * 0.5), [S4, S4]),
        "less_equal_select": (lambda a, b: tf.where(a <= b + 0.25, a, b), [S4, S4]),
        "equal_select": (lambda a, b: tf.where(tf.equal(a, b), a, b * 0.5), [S4, S4]),
        "greater_equal_select": (lambda a, b: tf.where(a >= b, a, b), [S4, S4]),
        # Broadcasting makes SELECT_V2.
        "less_select_v2": (lambda a, b: tf.where(a < b, a, b), [S4, (1, 1, 5, 4)]),
        "space_to_batch": (lambda x: tf.space_to_batch_nd(x, [2, 2], [[0, 0], [1, 0]]), [(1, 6, 5, 4)]),
        "batch_to_space": (lambda x: tf.batch_to_space(x, [2, 2], [[0, 1], [1, 0]]), [(4, 3, 3, 4)]),
        "gather_nd": (lambda x: tf.gather_nd(x, [[0, 1], [0, 3], [0, 5]]), [S4]),
        "broadcast_to": (lambda x: tf.broadcast_to(x, (1, 6, 5, 4)), [(1, 1, 5, 4)]),
        "argmax_int32": (lambda x: tf.argmax(x, axis=3, output_type=tf.int32), [S4]),
        "avg_pool": (lambda x: tf.nn.avg_pool2d(x, 2, 2, "VALID"), [S4]),
        "batch_matmul": (lambda a, b: tf.matmul(a, b), [(1, 3, 6), (1, 6, 5)]),
        # Two batches, the second operand transposed (adj_y).
        "batch_matmul_adj": (lambda a, b: tf.matmul(a, b, transpose_b=True), [(2, 3, 6), (2, 5, 6)]),
        "batch2_conv": (lambda x: tf.nn.conv2d(x, w_conv, 1, "SAME"), [(2, 6, 5, 4)]),
        "ceil": (lambda x: tf.math.ceil(x), [S4]),
        "concat2": (lambda a, b: tf.concat([a, b], axis=3), [S4, S4]),
        "concat5": (lambda *xs: tf.concat(list(xs), axis=3), [S4] * 5),
        "concat6": (lambda *xs: tf.concat(list(xs), axis=3), [S4] * 6),
        "conv2d": (lambda x: tf.nn.conv2d(x, w_conv, 1, "SAME"), [S4]),
        "conv2d_dilated": (lambda x: tf.nn.conv2d(x, w_conv, 1, "SAME", dilations=2), [(1, 9, 8, 4)]),
        "conv2d_relu6": (lambda x: tf.nn.relu6(tf.nn.conv2d(x, w_conv, 2, "VALID")), [(1, 9, 8, 4)]),
        "cumsum": (lambda x: tf.cumsum(x, axis=3), [S4]),
        "depth_to_space": (lambda x: tf.nn.depth_to_space(x, 2), [S4]),
        # Two output channels per input channel, stride 2, VALID; and a dilated one.
        "depthwise_mult2": (lambda x: tf.nn.depthwise_conv2d(x, w_dw2, [1, 2, 2, 1], "VALID"), [(1, 9, 8, 3)]),
        "depthwise_dilated": (lambda x: tf.nn.depthwise_conv2d(x, w_dw, [1, 1, 1, 1], "SAME", dilations=[2, 3]),
                              [(1, 9, 8, 4)]),
        "depthwise": (lambda x: tf.nn.depthwise_conv2d(x, w_dw, [1, 1, 1, 1], "SAME"), [S4]),
        "div": (lambda a, b: a / (tf.abs(b) + 1.0), [S4, S4]),
        "exp": (lambda x: tf.exp(x), [S4]),
        "fully_connected": (lambda x: tf.matmul(x, w_fc), [(1, 9)]),
        "gather": (lambda x: tf.gather(x, [0, 2, 3], axis=3), [S4]),
        "hard_swish": (lambda x: x * tf.nn.relu6(x + 3.0) / 6.0, [S4]),
        # GELU as one int8 op (a table): the exact form and the tanh approximation. (tf.nn.elu stays float
        # between DEQUANTIZE/QUANTIZE with TF 2.21's converter: no int8 ELU to model.)
        "gelu": (lambda x: tf.nn.gelu(x, approximate=False), [S4]),
        "gelu_tanh": (lambda x: tf.nn.gelu(x, approximate=True), [S4]),
        "l2_normalize": (lambda x: tf.math.l2_normalize(x, axis=3), [S4]),
        "leaky_relu": (lambda x: tf.nn.leaky_relu(x, 0.2), [S4]),
        "log": (lambda x: tf.math.log(tf.abs(x) + 1.0), [S4]),
        "log_softmax": (lambda x: tf.nn.log_softmax(x), [(1, 7)]),
        "logistic": (lambda x: tf.sigmoid(x), [S4]),
        "max_pool": (lambda x: tf.nn.max_pool2d(x, 2, 2, "VALID"), [S4]),
        "maximum": (lambda a, b: tf.maximum(a, b), [S4, S4]),
        "mean_hw": (lambda x: tf.reduce_mean(x, axis=[1, 2], keepdims=True), [S4]),
        "mean_c": (lambda x: tf.reduce_mean(x, axis=[3], keepdims=True), [S4]),
        "minimum": (lambda a, b: tf.minimum(a, b), [S4, S4]),
        "mirror_pad": (lambda x: tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], mode="REFLECT"), [S4]),
        "mul": (lambda a, b: a * b, [S4, S4]),
        "neg": (lambda x: -x, [S4]),
        "pack": (lambda a, b: tf.stack([a, b], axis=1), [(1, 8), (1, 8)]),
        "pad": (lambda x: tf.pad(x, [[0, 0], [1, 1], [2, 2], [0, 0]]), [S4]),
        "padv2": (lambda x: tf.pad(x, [[0, 0], [1, 1], [1, 1], [0, 0]], constant_values=0.5), [S4]),
        "prelu_like": (lambda x: tf.maximum(x, 0.0) + 0.25 * tf.minimum(x, 0.0), [S4]),
        "reduce_max": (lambda x: tf.reduce_max(x, axis=[3], keepdims=True), [S4]),
        "reduce_min": (lambda x: tf.reduce_min(x, axis=[3], keepdims=True), [S4]),
        "reduce_sum": (lambda x: tf.reduce_sum(x, axis=[1, 2], keepdims=True), [S4]),
        "relu": (lambda x: tf.nn.relu(x), [S4]),
        "relu6": (lambda x: tf.nn.relu6(x), [S4]),
        "reshape": (lambda x: tf.reshape(x, (1, 30, 4)), [S4]),
        "resize_bilinear": (lambda x: tf.image.resize(x, (12, 10), "bilinear"), [S4]),
        "resize_nearest": (lambda x: tf.image.resize(x, (12, 10), "nearest"), [S4]),
        "reverse": (lambda x: tf.reverse(x, [2]), [S4]),
        "round": (lambda x: tf.round(x), [S4]),
        "rsqrt": (lambda x: tf.math.rsqrt(tf.abs(x) + 1.0), [S4]),
        "sin": (lambda x: tf.sin(x), [S4]),
        "slice": (lambda x: tf.slice(x, [0, 1, 1, 0], [1, 4, 3, 4]), [S4]),
        # Keras PReLU's arithmetic (relu(x) - alpha * relu(-x)): the converter fuses it into PRELU.
        "prelu": (lambda x: tf.nn.relu(x) + (-alpha) * tf.nn.relu(-x), [S4]),
        "softmax": (lambda x: tf.nn.softmax(x), [(1, 7)]),
        "space_to_depth": (lambda x: tf.nn.space_to_depth(x, 2), [(1, 6, 4, 3)]),
        "split2": (lambda x: tf.concat(tf.split(x, 2, axis=3)[::-1], axis=3), [S4]),
        "split5": (lambda x: tf.concat(tf.split(x, 5, axis=3)[::-1], axis=3), [(1, 6, 5, 10)]),
        "split_v": (lambda x: tf.concat(tf.split(x, [1, 3], axis=3)[::-1], axis=3), [S4]),
        "square": (lambda x: tf.square(x), [S4]),
        "squared_difference": (lambda a, b: tf.math.squared_difference(a, b), [S4, S4]),
        "strided_slice": (lambda x: x[:, 1:5, 1:4, :], [S4]),
        "strided_slice_s2": (lambda x: x[:, ::2, ::2, :], [S4]),
        "sub": (lambda a, b: a - b, [S4, S4]),
        "tanh": (lambda x: tf.tanh(x), [S4]),
        "tile": (lambda x: tf.tile(x, [1, 2, 1, 1]), [S4]),
        "transpose": (lambda x: tf.transpose(x, [0, 3, 1, 2]), [S4]),
        "transpose_conv": (lambda x: tf.nn.conv2d_transpose(x, w_tconv, (1, 12, 10, 4), 2, "SAME"),
                           [(1, 6, 5, 7)]),
        # VALID, unequal strides, a 2x3 kernel, a bias and a ReLU after it.
        "transpose_conv_valid": (lambda x: tf.nn.relu(
            tf.nn.conv2d_transpose(x, w_tconv2, (1, 10, 14, 3), [2, 3], "VALID") + b_tconv2), [(1, 5, 4, 5)]),
        # Every output used: with two of three outputs unused, TF 2.21's converter quantizes UNPACK on
        # some runs and leaves it float between DEQUANTIZE/QUANTIZE on others (4 runs: 3 and 1).
        "unpack": (lambda x: tf.concat(tf.unstack(x, axis=1)[::-1], axis=-1), [(1, 3, 8)]),
    }
    return table


def convert(fn: Callable[..., Any], shapes: list[tuple[int, ...]], *, samples: int = 16, seed: int = 0,
            mode: str = "int8") -> bytes:
    import tensorflow as tf

    specs = [tf.TensorSpec(s, tf.float32, name=f"in{i}") for i, s in enumerate(shapes)]
    traced = tf.function(fn, input_signature=specs)
    converter = tf.lite.TFLiteConverter.from_concrete_functions([traced.get_concrete_function()], traced)
    rng = np.random.default_rng(seed)

    def representative() -> Any:
        for _ in range(samples):
            yield [rng.uniform(-1, 1, size=s).astype(np.float32) for s in shapes]

    converter.optimizations = [tf.lite.Optimize.DEFAULT]
    converter.representative_dataset = representative
    if mode == "int16x8":  # int16 activations, int8 weights, int64 biases
        int16x8 = tf.lite.OpsSet.EXPERIMENTAL_TFLITE_BUILTINS_ACTIVATIONS_INT16_WEIGHTS_INT8
        converter.target_spec.supported_ops = [int16x8]
        converter.inference_input_type = converter.inference_output_type = tf.int16
    else:
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = tf.int8
    converter.exclude_conversion_metadata = True
    return bytes(converter.convert())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, help="default: tests/data/ops, or tests/data/ops16 for int16x8")
    parser.add_argument("--mode", choices=("int8", "int16x8"), default="int8",
                        help="int16x8: int16 activations and I/O, int8 weights (the cases in INT16X8)")
    parser.add_argument("cases", nargs="*")
    args = parser.parse_args()
    args.out = args.out or (OUT if args.mode == "int8" else OUT16)
    args.out.mkdir(parents=True, exist_ok=True)
    table = cases()
    for name in args.cases or sorted(table if args.mode == "int8" else INT16X8):
        fn, shapes = table[name]
        path = args.out / f"{name}.{args.mode}.tflite"
        path.write_bytes(convert(fn, shapes, mode=args.mode))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
