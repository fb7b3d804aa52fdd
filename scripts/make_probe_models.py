"""Write the probe models of the differential tests (tests/data/probes): single-op models for the
patterns the real runtimes decided differently from the first target rules (edgeconv issue 14).

    python scripts/make_probe_models.py [--out DIR]

TFLM dtype claims (int32 arithmetic and reshapes, CAST between types, CONCATENATION's input limit),
XNNPACK's quantization and float/hybrid patterns, and Edge TPU placement patterns. Models the converter
would not emit (differently quantized input and output of a data-movement op, as old converters wrote
them) are hand-edited copies of tests/data/ops models.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")


def _convert(tf: Any, fn: Callable[..., Any], specs: list[tuple[list[int], Any]], mode: str = "float") -> bytes:
    cf = tf.function(fn).get_concrete_function(*[tf.TensorSpec(s, d) for s, d in specs])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([cf])
    converter.exclude_conversion_metadata = True
    if mode in ("int8", "uint8"):
        rng = np.random.default_rng(0)
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.representative_dataset = lambda: ([rng.uniform(-1, 1, s).astype(np.float32) for s, _ in specs]
                                                    for _ in range(8))
        converter.target_spec.supported_ops = [tf.lite.OpsSet.TFLITE_BUILTINS_INT8]
        converter.inference_input_type = converter.inference_output_type = getattr(tf, mode)
    elif mode == "dynamic":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
    elif mode == "float16":
        converter.optimizations = [tf.lite.Optimize.DEFAULT]
        converter.target_spec.supported_types = [tf.float16]
    return bytes(converter.convert())


def _keras(tf: Any, build: Callable[[Any], Any], shape: tuple[int, ...], mode: str) -> bytes:
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input(shape[1:], batch_size=shape[0])
    model = keras.Model(inp, build(inp))
    return _convert(tf, lambda x: model(x, training=False), [(list(shape), tf.float32)], mode)


def tf_cases(tf: Any) -> dict[str, bytes]:
    from keras import layers

    i32 = [([1, 6], tf.int32), ([1, 6], tf.int32)]
    out = {
        "tflm-add_i32": _convert(tf, lambda a, b: a + b, i32),
        "tflm-sub_i32": _convert(tf, lambda a, b: a - b, i32),
        "tflm-mul_i32": _convert(tf, lambda a, b: a * b, i32),
        "tflm-reshape_i32": _convert(tf, lambda a: tf.reshape(a, [2, 3]), i32[:1]),
        "tflm-strided_slice_i32": _convert(tf, lambda a: a[:, 1:4], i32[:1]),
        "tflm-cast_u8_f32": _convert(tf, lambda a: tf.cast(a, tf.float32), [([1, 6], tf.uint8)]),
        "tflm-cast_i8_f32": _convert(tf, lambda a: tf.cast(a, tf.float32), [([1, 6], tf.int8)]),
        "tflm-cast_f32_i32": _convert(tf, lambda a: tf.cast(a, tf.int32), [([1, 6], tf.float32)]),
        "tflm-cast_bool_i8": _convert(tf, lambda a: tf.cast(a, tf.int8), [([1, 6], tf.bool)]),
    }
    for n in (10, 11):
        out[f"tflm-concat{n}.int8"] = _convert(tf, lambda *xs: tf.concat(list(xs), 1), [([1, 2, 3], tf.float32)] * n,
                                               "int8")
    out["xnn-expand_dims.float32"] = _convert(tf, lambda a: tf.expand_dims(a, 1) * 2.0, [([1, 5, 7], tf.float32)])
    out["xnn-depthwise_hybrid"] = _keras(tf, lambda x: layers.DepthwiseConv2D(3, depth_multiplier=4)(x),
                                         (1, 9, 8, 96), "dynamic")
    out["xnn-conv_hybrid"] = _keras(tf, lambda x: layers.Conv2D(48, 3)(x), (1, 9, 8, 40), "dynamic")
    # A float16 constant's DEQUANTIZE: XNNPACK delegates it only when every op that reads it is delegated.
    table = tf.constant(np.random.default_rng(0).normal(size=(50, 16)).astype(np.float32))
    out["xnn-dequantize_fp16_gather"] = _convert(tf, lambda i: tf.gather(table, i), [([1, 4], tf.int32)], "float16")
    out["xnn-dequantize_fp16_gather_and_fc"] = _convert(
        tf, lambda i, x: (tf.gather(table, i), tf.matmul(x, tf.transpose(table))),
        [([1, 4], tf.int32), ([3, 16], tf.float32)], "float16")
    out["xnn-dequantize_fp16_fc"] = _convert(tf, lambda x: tf.matmul(x, table[:, :8] * 1.0), [([3, 50], tf.float32)],
                                             "float16")
    out["xnn-dequantize_fp16_fc_output"] = _with_dequantize_output(out["xnn-dequantize_fp16_fc"])
    # MEAN below and above rank 4 (XNNPACK takes ranks 1-6; a wake-word model's float [1, 128] keep_dims mean).
    out["xnn-mean_rank2_keep.float32"] = _convert(tf, lambda a: tf.reduce_mean(a * 2.0, axis=[1], keepdims=True),
                                                  [([1, 128], tf.float32)])
    out["xnn-mean_rank1.float32"] = _convert(tf, lambda a: tf.reduce_mean(a * 2.0, axis=[0]), [([96], tf.float32)])
    out["xnn-mean_rank3.int8"] = _convert(tf, lambda a: tf.reduce_mean(a * 2.0, axis=[2]), [([1, 5, 7], tf.float32)],
                                          "int8")
    out["xnn-mean_rank5.int8"] = _convert(tf, lambda a: tf.reduce_mean(a * 2.0, axis=[1, 2], keepdims=True),
                                          [([2, 3, 4, 5, 6], tf.float32)], "int8")
    out["xnn-mean_rank6.float32"] = _convert(tf, lambda a: tf.reduce_mean(a * 2.0, axis=[5]),
                                             [([2, 2, 3, 4, 5, 6], tf.float32)])
    # Edge TPU placement patterns (asserted against the compiler's observed behaviour, edgetpu.yaml PUBLIC).
    out["etpu-conv_dilation_h2_kernel_w1.int8"] = _keras(
        tf, lambda x: layers.Conv2D(8, (3, 1), dilation_rate=(2, 1))(x), (1, 11, 7, 8), "int8")
    out["etpu-tile.int8"] = _convert(tf, lambda a: tf.tile(a, [1, 2, 3, 1]) + 0.5, [([1, 4, 5, 3], tf.float32)], "int8")
    out["etpu-resize_align_same.int8"] = _convert(
        tf, lambda a: tf.compat.v1.image.resize_bilinear(a * 2.0, [6, 7], align_corners=True),
        [([1, 6, 7, 3], tf.float32)],
        "int8")
    out["etpu-resize_align_up.int8"] = _convert(
        tf, lambda a: tf.compat.v1.image.resize_bilinear(a * 2.0, [12, 14], align_corners=True),
        [([1, 6, 7, 3], tf.float32)], "int8")
    out["etpu-argmax_branch.int8"] = _convert(tf, _argmax_branch(tf), [([1, 12, 10, 3], tf.float32)], "int8")
    out["etpu-transpose_large.int8"] = _convert(tf, lambda a: tf.transpose(a * 2.0, [0, 3, 1, 2]),
                                                [([1, 40, 40, 144], tf.float32)], "int8")
    out["etpu-transpose_small.int8"] = _convert(tf, lambda a: tf.transpose(a * 2.0, [0, 3, 1, 2]),
                                                [([1, 20, 20, 144], tf.float32)], "int8")
    return out


def _with_dequantize_output(data: bytes) -> bytes:
    """The model with its DEQUANTIZE's float32 tensor a model output as well (no converter writes it: an edit)."""
    from ai_edge_litert import schema_py_generated as schema

    from tests.tflite_edit import edit

    def expose(model: Any) -> None:
        sg = model.subgraphs[0]
        codes = [c.builtinCode for c in model.operatorCodes]
        (deq,) = [op for op in sg.operators if codes[op.opcodeIndex] == schema.BuiltinOperator.DEQUANTIZE]
        sg.outputs = [*sg.outputs, deq.outputs[0]]

    return edit(data, expose)


def _argmax_branch(tf: Any) -> Any:
    """A backbone with an ARG_MAX head, and a later head that reads the backbone, not the ARG_MAX."""
    rng = np.random.default_rng(1)

    def w(*shape: int) -> Any:
        return tf.constant(rng.normal(0, 0.3, shape).astype(np.float32))

    w1, w2, w3, w4 = w(3, 3, 3, 6), w(1, 1, 6, 4), w(3, 3, 6, 1), w(1, 1, 6, 5)

    def fn(x: Any) -> Any:
        backbone = tf.nn.relu(tf.nn.conv2d(x, w1, 1, "SAME"))
        heat = tf.nn.conv2d(backbone, w2, 1, "VALID")
        index = tf.cast(tf.argmax(heat, -1, output_type=tf.int32), tf.float32)[..., None]
        offsets = tf.sigmoid(tf.nn.conv2d(tf.nn.depthwise_conv2d(backbone, w3, [1, 1, 1, 1], "SAME"), w4, 1, "VALID"))
        return index, offsets

    return fn


def edited_cases() -> dict[str, bytes]:
    """Data-movement ops whose input and output quantization differ, as older converters wrote them."""
    from ai_edge_litert import schema_py_generated as schema

    from tests.tflite_edit import edit

    ops = REPO / "tests" / "data" / "ops"

    def scale_output(model: Any) -> None:
        sg = model.subgraphs[0]
        q = sg.tensors[sg.operators[-1].outputs[0]].quantization
        q.scale = [float(q.scale[0]) * 1.5]

    def to_uint8(model: Any) -> None:
        for t in model.subgraphs[0].tensors:
            if t.type == schema.TensorType.INT8:
                t.type = schema.TensorType.UINT8
                t.quantization.zeroPoint = [int(z) + 128 for z in t.quantization.zeroPoint]

    out = {}
    for name in ("resize_bilinear", "concat2", "reshape", "transpose", "max_pool", "pad"):
        data = (ops / f"{name}.int8.tflite").read_bytes()
        out[f"xnn-{name}_requant.int8"] = edit(data, scale_output)
    for name in ("concat2", "resize_bilinear"):
        data = (ops / f"{name}.int8.tflite").read_bytes()
        out[f"xnn-{name}_requant.uint8"] = edit(edit(data, to_uint8), scale_output)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=REPO / "tests" / "data" / "probes")
    parser.add_argument("--only", default="", help="write only the models whose name starts with this")
    args = parser.parse_args()
    import tensorflow as tf

    args.out.mkdir(parents=True, exist_ok=True)
    for name, data in {**tf_cases(tf), **edited_cases()}.items():
        if not name.startswith(args.only):
            continue
        (args.out / f"{name}.tflite").write_bytes(data)
        print(f"{name}.tflite: {len(data):,} bytes")


if __name__ == "__main__":
    main()
