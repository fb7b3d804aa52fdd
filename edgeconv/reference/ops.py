"""One function per op: what TFLite's reference kernels compute for int8 (and int16) tensors, written to be
followed line by line. Names follow the kernels' parameters (``input_offset`` is minus the input's zero
point, ``output_multiplier``/``output_shift`` the fixed-point form of a real scale). Convolutions and
fully-connected layers are an explicit im2col patch matrix and one GEMM.

Each function takes the op (its options and quantization), the model (constant operands) and its input
arrays, and returns its output arrays and what the trace records (GEMM shape, im2col geometry,
multipliers, the accumulator range reached, saturation)."""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ..converters.tflite_reader import OpInfo, TensorInfo, TFLiteModel
from .fixedpoint import (
    INT32_MAX,
    INT32_MIN,
    activation_range,
    multiply_by_quantized_multiplier,
    multiply_by_quantized_multiplier_int64,
    multiply_by_quantized_multiplier_single_rounding,
    quantize_multiplier,
    round_half_away,
    round_half_away_array,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
    trunc_div,
)

Arrays = list[np.ndarray | None]
Result = tuple[list[np.ndarray], dict[str, Any]]
LIMITS = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767), "int32": (-(2**31), 2**31 - 1)}


class Unsupported(Exception):
    """The op, or this use of it, is not one the reference computes."""


def scale_of(t: TensorInfo | None) -> float:
    if t is None:
        raise Unsupported("an optional input it needs is missing")
    if t.quantization is None or not t.quantization.scale:
        raise Unsupported(f"tensor '{t.name}' is not quantized")
    return t.quantization.scale[0]


def zero_point_of(t: TensorInfo | None) -> int:
    if t is None:
        raise Unsupported("an optional input it needs is missing")
    q = t.quantization
    return int(q.zero_point[0]) if q is not None and q.zero_point else 0


def _f32_quotient(numerator: float | np.floating[Any], denominator: float | np.floating[Any]) -> float:
    """``a / b`` of two float scales as C computes it in a kernel's Prepare: in float32, then widened."""
    return float(np.float32(np.float32(numerator) / np.float32(denominator)))


def _clamp(values: np.ndarray, low: int, high: int, dtype: str) -> tuple[np.ndarray, int]:
    """The values clamped to [low, high] as ``dtype``, and how many were clamped (saturation)."""
    clipped = int(np.count_nonzero((values < low) | (values > high)))
    return np.clip(values, low, high).astype(dtype), clipped


def _output_range(op: OpInfo) -> tuple[int, int]:
    out = op.outputs[0]
    qmin, qmax = LIMITS[out.dtype.value]
    return activation_range(op.options.get("fused_activation_function", "NONE"), scale_of(out), zero_point_of(out),
                            qmin, qmax)


# -- convolution geometry and im2col ---------------------------------------------------------------

def out_size_and_padding(padding: str, size: int, kernel: int, stride: int, dilation: int) -> tuple[int, int]:
    """``ComputeOutSize`` and ``ComputePaddingWithOffset``: the output size and the padding before the first
    element (SAME pads ``total // 2`` before, the rest after; VALID pads nothing)."""
    effective = (kernel - 1) * dilation + 1
    out = (size + stride - 1) // stride if padding == "SAME" else (size + stride - effective) // stride
    total = max((out - 1) * stride + effective - size, 0)
    return out, total // 2


def im2col(x: np.ndarray, kh: int, kw: int, stride: tuple[int, int], dilation: tuple[int, int],
           pad: tuple[int, int], out: tuple[int, int]) -> np.ndarray:
    """The patch matrix of an NHWC input (already offset by ``input_offset``, so padding is 0): one row per
    output position, columns in the filter's (kh, kw, channel) order: shape [N, OH, OW, KH, KW, C]."""
    n, h, w, c = x.shape
    (sh, sw), (dh, dw), (ph, pw), (oh, ow) = stride, dilation, pad, out
    need_h, need_w = (oh - 1) * sh + (kh - 1) * dh + 1, (ow - 1) * sw + (kw - 1) * dw + 1
    padded = np.zeros((n, max(h + ph, need_h), max(w + pw, need_w), c), dtype=x.dtype)
    padded[:, ph:ph + h, pw:pw + w] = x
    patches = np.empty((n, oh, ow, kh, kw, c), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            rows = slice(i * dh, i * dh + (oh - 1) * sh + 1, sh)
            cols = slice(j * dw, j * dw + (ow - 1) * sw + 1, sw)
            patches[:, :, :, i, j] = padded[:, rows, cols]
    return patches


def gemm(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """An exact int32 GEMM through BLAS's dgemm: the int8 x int8 products (at most 255 x 128 in magnitude)
    summed in float64 are exact integers while K x 32,640 < 2^53, true of any layer."""
    if a.shape[-1] * 255 * 128 >= 2**53:
        exact: np.ndarray = np.matmul(a.astype(np.int64), b.astype(np.int64))
        return exact
    product: np.ndarray = np.matmul(a.astype(np.float64), b.astype(np.float64))
    return product.astype(np.int64)


def _per_channel(op: OpInfo, weights: TensorInfo | None, channels: int,
                 src: TensorInfo | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Per output channel, ``input_scale * filter_scale / output_scale`` as a multiplier and a shift. Per-channel
    int8 weights (``PopulateConvolutionQuantizationParams``) multiply the scales in double; one scale for
    the whole filter (uint8 models, and FULLY_CONNECTED: ``GetQuantizedConvolutionMultipler``) multiplies them
    in float32 first, then divides in double. ``src``: the activation input, when it is not the op's first."""
    src, out = src or op.inputs[0], op.outputs[0]
    assert src is not None and weights is not None
    input_scale, output_scale = scale_of(src), scale_of(out)
    q = weights.quantization
    per_channel = q is not None and len(q.scale) > 1
    legacy = op.type == "FULLY_CONNECTED" or (not per_channel and src.dtype.value == "uint8")
    scales = q.scale if q is not None and len(q.scale) == channels else (scale_of(weights),) * channels
    pairs = [quantize_multiplier(float(np.float32(input_scale) * np.float32(s)) / output_scale if legacy
                                 else input_scale * s / output_scale) for s in scales]
    return np.array([m for m, _ in pairs], np.int64), np.array([s for _, s in pairs], np.int64)


def _requantize(acc: np.ndarray, op: OpInfo, multiplier: np.ndarray, shift: np.ndarray,
                trace: dict[str, Any], *, rounding: str | None = None) -> np.ndarray:
    """Accumulator -> output: ``output_offset + MultiplyByQuantizedMultiplier(acc, M, s)``, clamped to the
    fused activation's range. ``rounding``: ``double`` (int32, as gemmlowp: the doubling high multiply then a
    rounding shift), ``single`` (once, in 64 bits) or ``int64`` (the 16-bit multiplier of the int64
    overload); by default ``int64`` for an int16 output (the int16x8 kernels' int64 accumulators), else
    ``double``."""
    out = op.outputs[0]
    rounding = rounding or ("int64" if out.dtype.value == "int16" else "double")
    multiply = {"double": multiply_by_quantized_multiplier, "single": multiply_by_quantized_multiplier_single_rounding,
                "int64": multiply_by_quantized_multiplier_int64}[rounding]
    trace["rounding"] = rounding
    scaled = multiply(acc, multiplier, shift) + zero_point_of(out)
    low, high = _output_range(op)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    trace.update(accumulator=[int(acc.min()), int(acc.max())] if acc.size else [0, 0],
                 accumulator_saturated=bool(acc.size and (acc.min() < -(2**31) or acc.max() > 2**31 - 1)),
                 clamped=clipped, output_multiplier=multiplier.tolist(), output_shift=shift.tolist(),
                 activation_range=[low, high])
    return result


# -- the ops ----------------------------------------------------------------------------------------

def conv_2d(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out[n, y, x, co] = clamp(output_offset + MBQM(sum_{ky, kx, ci} (in[n, y*sh + ky*dh - pad_h,
    x*sw + kx*dw - pad_w, ci] + input_offset) * (filter[co, ky, kx, ci] + filter_offset) + bias[co], M[co],
    s[co]))``: the
    patch matrix [N*OH*OW, KH*KW*CI] times the filter matrix [KH*KW*CI, CO]."""
    x, w, b = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    assert x is not None and w is not None
    co, kh, kw, ci = w.shape
    o = op.options
    stride, dilation = (o["stride_h"], o["stride_w"]), (o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1))
    oh, pad_h = out_size_and_padding(o["padding"], x.shape[1], kh, stride[0], dilation[0])
    ow, pad_w = out_size_and_padding(o["padding"], x.shape[2], kw, stride[1], dilation[1])
    offset = x.astype(np.int64) - zero_point_of(op.inputs[0])
    patches = im2col(offset, kh, kw, stride, dilation, (pad_h, pad_w), (oh, ow))
    rows = patches.reshape(-1, kh * kw * ci)
    filter_offset = -zero_point_of(op.inputs[1])  # 0 for int8 weights; uint8 has one
    acc = gemm(rows, w.reshape(co, -1).T.astype(np.int64) + filter_offset)
    if b is not None:
        acc = acc + b.astype(np.int64)
    multiplier, shift = _per_channel(op, op.inputs[1], co)
    trace: dict[str, Any] = {"gemm": [rows.shape[0], co, rows.shape[1]], "kernel": [kh, kw], "stride": list(stride),
                             "dilation": list(dilation), "padding": [pad_h, pad_w]}
    out = _requantize(acc, op, multiplier, shift, trace)
    return [out.reshape(x.shape[0], oh, ow, co)], trace


def transpose_conv(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """TRANSPOSE_CONV (``reference_integer_ops::TransposeConv``): every input position scatters
    ``(in[n, y, x, ci] + input_offset) * filter[co, ky, kx, ci]`` to output ``(y*sh - pad_h + ky, x*sw - pad_w +
    kx)``, summed in int32 (one GEMM [N*H*W, CI] x [CI, CO] per kernel tap), plus the bias, then per-channel
    requantization as CONV_2D. The padding is the convolution's for the output size (``ComputePaddingHeightWidth``
    given the output as its input)."""
    shape, w, x = inputs[0], inputs[1], inputs[2]
    b = inputs[3] if len(inputs) > 3 else None
    assert shape is not None and w is not None and x is not None
    co, kh, kw, ci = w.shape
    n, ih, iw, _ = x.shape
    oh, ow = int(shape.reshape(-1)[1]), int(shape.reshape(-1)[2])
    o = op.options
    sh, sw = o["stride_h"], o["stride_w"]
    pad_h = out_size_and_padding(o["padding"], oh, kh, sh, 1)[1]
    pad_w = out_size_and_padding(o["padding"], ow, kw, sw, 1)[1]
    offset = (x.astype(np.int64) - zero_point_of(op.inputs[2])).reshape(-1, ci)
    canvas = np.zeros((n, max((ih - 1) * sh + kh, pad_h + oh), max((iw - 1) * sw + kw, pad_w + ow), co), np.int64)
    filter_offset = -zero_point_of(op.inputs[1])
    for ky in range(kh):
        for kx in range(kw):
            tap = gemm(offset, w[:, ky, kx, :].T.astype(np.int64) + filter_offset).reshape(n, ih, iw, co)
            canvas[:, ky:ky + (ih - 1) * sh + 1:sh, kx:kx + (iw - 1) * sw + 1:sw, :] += tap
    acc = canvas[:, pad_h:pad_h + oh, pad_w:pad_w + ow, :]
    if b is not None:
        acc = acc + b.astype(np.int64)
    multiplier, shift = _per_channel(op, op.inputs[1], co, op.inputs[2])
    trace: dict[str, Any] = {"gemm": [n * ih * iw, co, ci], "taps": kh * kw, "kernel": [kh, kw], "stride": [sh, sw],
                             "padding": [pad_h, pad_w]}
    out = _requantize(acc, op, multiplier, shift, trace)
    return [out.reshape(n, oh, ow, co)], trace


def batch_matmul(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """BATCH_MATMUL of int8 (``reference_ops::BatchMatMul``): ``out = clamp(output_offset + MBQM(sum_k
    (lhs[..., i, k] + lhs_offset) * (rhs[..., k, j] + rhs_offset), M, s))`` per batch (batch dimensions
    broadcast; ``adj_x``/``adj_y`` transpose the last two axes first); ``M, s`` from ``lhs_scale * rhs_scale``
    (float32) over ``output_scale`` (``GetQuantizedConvolutionMultipler``)."""
    lhs, rhs = _given(inputs, 0), _given(inputs, 1)
    a, bt, out = op.inputs[0], op.inputs[1], op.outputs[0]
    assert a is not None and bt is not None
    if a.dtype.value not in ("int8", "int16") or out.dtype.value != a.dtype.value:
        raise Unsupported(f"BATCH_MATMUL of {a.dtype.value} to {out.dtype.value}")
    left = lhs.astype(np.int64) - zero_point_of(a)
    right = rhs.astype(np.int64) - zero_point_of(bt)
    if op.options.get("adj_x"):
        left = np.swapaxes(left, -1, -2)
    if op.options.get("adj_y"):
        right = np.swapaxes(right, -1, -2)
    acc = np.matmul(left, right)
    multiplier, shift = quantize_multiplier(float(np.float32(scale_of(a)) * np.float32(scale_of(bt))) / scale_of(out))
    trace: dict[str, Any] = {"gemm": [int(left.shape[-2]), int(right.shape[-1]), int(left.shape[-1])],
                             "batches": int(np.prod(acc.shape[:-2])) if acc.ndim > 2 else 1}
    result = _requantize(acc, op, np.array(multiplier, np.int64), np.array(shift, np.int64), trace)
    return [result.reshape(out.shape)], trace


def depthwise_conv_2d(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """Grouped GEMM: output channel ``co = ci * depth_multiplier + m`` sums only its input channel ``ci``:
    ``acc[p, co] = sum_{ky, kx} patch[p, ky, kx, co // M] * filter[0, ky, kx, co] + bias[co]``, then per-channel
    requantization as CONV_2D."""
    x, w, b = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    assert x is not None and w is not None
    _, kh, kw, co = w.shape
    ci = x.shape[3]
    mult = co // ci
    o = op.options
    stride, dilation = (o["stride_h"], o["stride_w"]), (o.get("dilation_h_factor", 1), o.get("dilation_w_factor", 1))
    oh, pad_h = out_size_and_padding(o["padding"], x.shape[1], kh, stride[0], dilation[0])
    ow, pad_w = out_size_and_padding(o["padding"], x.shape[2], kw, stride[1], dilation[1])
    offset = x.astype(np.int64) - zero_point_of(op.inputs[0])
    patches = im2col(offset, kh, kw, stride, dilation, (pad_h, pad_w), (oh, ow)).reshape(-1, kh * kw, ci)
    grouped = np.repeat(patches, mult, axis=2)  # [P, KH*KW, CO]: each output channel's input channel
    filters = w.reshape(kh * kw, co).astype(np.int64) - zero_point_of(op.inputs[1])
    acc = np.einsum("pkc,kc->pc", grouped.astype(np.float64), filters.astype(np.float64)).astype(np.int64)
    if b is not None:
        acc = acc + b.astype(np.int64)
    multiplier, shift = _per_channel(op, op.inputs[1], co)
    trace: dict[str, Any] = {"gemm": [patches.shape[0], co, kh * kw], "groups": co, "kernel": [kh, kw],
                             "stride": list(stride), "dilation": list(dilation), "padding": [pad_h, pad_w],
                             "depth_multiplier": mult}
    out = _requantize(acc, op, multiplier, shift, trace)
    return [out.reshape(x.shape[0], oh, ow, co)], trace


def fully_connected(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out[b, co] = clamp(output_offset + MBQM(sum_k (in[b, k] + input_offset) * (filter[co, k] +
    filter_offset) + bias[co], M, s))``: one GEMM [B, K] x [K, CO]. With per-channel weights and an int8
    output the requantization rounds once (LiteRT's reference kernel, measured), else twice as the
    convolutions."""
    x, w, b = inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None
    assert x is not None and w is not None
    co, k = w.shape
    rows = x.reshape(-1, k).astype(np.int64) - zero_point_of(op.inputs[0])
    acc = gemm(rows, (w.astype(np.int64) - zero_point_of(op.inputs[1])).T)
    if b is not None:
        acc = acc + b.astype(np.int64)
    multiplier, shift = _per_channel(op, op.inputs[1], co)
    weights = op.inputs[1]
    per_channel = weights is not None and weights.quantization is not None and len(weights.quantization.scale) > 1
    # int16x8 rounds twice in int32, per channel or not (measured: 0 of 1,000 values differ; 1 rounded once,
    # 50 with the int64 overload the convolutions use).
    rounding = "double" if op.outputs[0].dtype.value == "int16" else "single" if per_channel else "double"
    trace: dict[str, Any] = {"gemm": [rows.shape[0], co, k]}
    out = _requantize(acc, op, multiplier, shift, trace, rounding=rounding)
    shape = (*x.shape[:-1], co) if op.options.get("keep_num_dims") else (rows.shape[0], co)
    return [out.reshape(shape)], trace


def _plain_int32(op: OpInfo, value: np.ndarray) -> Result:
    """An int32 op without quantization: the integer result (int32 wrap-around), clamped to the fused
    activation's integer range."""
    low, high = {"RELU": (0, 2**31 - 1), "RELU6": (0, 6), "RELU_N1_TO_1": (-1, 1)}.get(
        op.options.get("fused_activation_function", "NONE"), (-(2**31), 2**31 - 1))
    wrapped = value.astype(np.int64).astype(np.int32).astype(np.int64)
    return [np.clip(wrapped, low, high).astype(np.int32)], {"activation_range": [low, high]}


def _is_plain_int32(op: OpInfo) -> bool:
    return all(t is not None and t.dtype.value == "int32" and not (t.quantization and t.quantization.scale)
               for t in (*op.inputs, *op.outputs))


def _add_sub(op: OpInfo, inputs: Arrays, sign: int) -> Result:
    """ADD (``sign`` 1) and SUB (-1), ``reference_integer_ops::Add``: both inputs rescaled to twice the larger
    input scale with 20 bits of headroom (``left_shift``), summed, then rescaled to the output."""
    a, b = inputs
    assert a is not None and b is not None
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    assert in1 is not None and in2 is not None
    if _is_plain_int32(op):
        return _plain_int32(op, a.astype(np.int64) + sign * b.astype(np.int64))
    left_shift = 15 if out.dtype.value == "int16" else 20
    twice_max = 2.0 * float(max(np.float32(scale_of(in1)), np.float32(scale_of(in2))))
    m1, s1 = quantize_multiplier(scale_of(in1) / twice_max)
    m2, s2 = quantize_multiplier(scale_of(in2) / twice_max)
    mo, so = quantize_multiplier(twice_max / ((1 << left_shift) * scale_of(out)))
    x1 = (a.astype(np.int64) - zero_point_of(in1)) * (1 << left_shift)
    x2 = (b.astype(np.int64) - zero_point_of(in2)) * (1 << left_shift)
    raw = (multiply_by_quantized_multiplier(x1, m1, s1) + sign * multiply_by_quantized_multiplier(x2, m2, s2))
    scaled = multiply_by_quantized_multiplier(raw, mo, so) + zero_point_of(out)
    low, high = _output_range(op)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"left_shift": left_shift, "input1_multiplier": [m1, s1], "input2_multiplier": [m2, s2],
                      "output_multiplier": [mo, so], "clamped": clipped, "activation_range": [low, high]}


def add(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out = clamp(output_offset + MBQM(MBQM((in1 + in1_offset) << 20, M1, s1) + MBQM((in2 + in2_offset) << 20,
    M2, s2), Mo, so))``, broadcasting as NumPy does."""
    return _add_sub(op, inputs, 1)


def sub(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """As ADD with the second input's rescaled value subtracted."""
    return _add_sub(op, inputs, -1)


def squared_difference(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """SQUARED_DIFFERENCE of int8: both inputs shifted left 7 bits and rescaled to twice the larger input scale
    (``M1, M2``), their difference squared in int32, then rescaled to the output by ``(2 * max_scale)^2 /
    (2^14 * output_scale)`` (all multipliers in double), plus the output zero point, clamped; broadcasting as
    NumPy does. (The left shift, 7, was measured against LiteRT's reference kernel: 0 of 14,400 values differ
    at four sets of scales, 8 and more with 8 or 0.)"""
    a, b = inputs
    assert a is not None and b is not None
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    assert in1 is not None and in2 is not None
    if out.dtype.value != "int8":
        raise Unsupported(f"SQUARED_DIFFERENCE to {out.dtype.value}")
    left_shift = 7
    twice_max = 2.0 * max(scale_of(in1), scale_of(in2))
    m1, s1 = quantize_multiplier(scale_of(in1) / twice_max)
    m2, s2 = quantize_multiplier(scale_of(in2) / twice_max)
    mo, so = quantize_multiplier(twice_max * twice_max / ((1 << (2 * left_shift)) * scale_of(out)))
    x1 = multiply_by_quantized_multiplier((a.astype(np.int64) - zero_point_of(in1)) * (1 << left_shift), m1, s1)
    x2 = multiply_by_quantized_multiplier((b.astype(np.int64) - zero_point_of(in2)) * (1 << left_shift), m2, s2)
    diff = x1 - x2
    scaled = multiply_by_quantized_multiplier(diff * diff, mo, so) + zero_point_of(out)
    low, high = _output_range(op)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"left_shift": left_shift, "input1_multiplier": [m1, s1], "input2_multiplier": [m2, s2],
                      "output_multiplier": [mo, so], "clamped": clipped}


def mul(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out = clamp(output_offset + MBQM((in1 + in1_offset) * (in2 + in2_offset), M, s))`` with ``M, s`` for
    ``in1_scale * in2_scale / out_scale``."""
    a, b = inputs
    assert a is not None and b is not None
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    assert in1 is not None and in2 is not None
    if _is_plain_int32(op):
        return _plain_int32(op, a.astype(np.int64) * b.astype(np.int64))
    m, s = quantize_multiplier(_f32_quotient(np.float32(scale_of(in1)) * np.float32(scale_of(in2)), scale_of(out)))
    product = (a.astype(np.int64) - zero_point_of(in1)) * (b.astype(np.int64) - zero_point_of(in2))
    scaled = multiply_by_quantized_multiplier(product, m, s) + zero_point_of(out)
    low, high = _output_range(op)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"output_multiplier": [m, s], "clamped": clipped, "activation_range": [low, high]}


def _count_leading_sign_bits(x: np.ndarray) -> np.ndarray:
    """``CountLeadingSignBits`` of int32 values: the redundant sign bits (``__builtin_clrsb``: 31 for 0 and
    -1, 26 for -32, 0 for INT32_MIN)."""
    from . import gemmlowp as g

    x64 = np.asarray(x, np.int64)
    return np.where(x64 >= 0, g.count_leading_zeros(x64) - 1,
                    np.where(x64 == -(2**31), 0, g.count_leading_zeros(2 * np.abs(x64) - 1)))


def div(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """DIV of int8 (``reference_ops::DivElementwise``): ``x1 = in1 - zp1``, ``x2 = in2 - zp2`` (both negated
    when ``x2 < 0``); ``1 / x2`` as a Q0.31 reciprocal and its shift (``GetReciprocal(x2, 31)``); ``x1`` shifted
    left by its ``headroom`` (redundant sign bits) and multiplied by the reciprocal
    (``MultiplyByQuantizedMultiplierGreaterThanOne``); then ``out = output_zp + RoundingDivideByPOT(SRDHM(q, M),
    -(s - recip_shift - headroom))`` for ``in1_scale / (in2_scale * out_scale)`` (in float32, as the kernel's
    Prepare computes it), clamped to the activation's range; broadcasting as NumPy does."""
    from . import gemmlowp as g

    a, b = _given(inputs, 0), _given(inputs, 1)
    in1, in2, out = op.inputs[0], op.inputs[1], op.outputs[0]
    assert in1 is not None and in2 is not None
    if out.dtype.value not in ("int8", "uint8") or in1.dtype.value != out.dtype.value:
        raise Unsupported(f"DIV of {in1.dtype.value} to {out.dtype.value}")
    x1, x2 = np.broadcast_arrays(a.astype(np.int64) - zero_point_of(in1), b.astype(np.int64) - zero_point_of(in2))
    if (x2 == 0).any():
        raise Unsupported("a divisor equal to its zero point (a division by zero; the kernel's result is undefined)")
    x1, x2 = np.where(x2 < 0, -x1, x1), np.abs(x2)
    m, s = quantize_multiplier(_f32_quotient(scale_of(in1), np.float32(scale_of(in2)) * np.float32(scale_of(out))))
    reciprocal, recip_shift = g.get_reciprocal(x2, 31)
    headroom = _count_leading_sign_bits(x1)
    shifted = (x1 << headroom).astype(np.int32).astype(np.int64)  # C: int32 x * (1 << headroom)
    quotient = saturating_rounding_doubling_high_mul(shifted, reciprocal)
    exponent = -(s - recip_shift - headroom)
    product = saturating_rounding_doubling_high_mul(quotient, m)
    # A quotient far under the output's step needs a right shift past 31 bits, undefined in C. The kernel
    # computes it as x86 does (measured against LiteRT's reference kernel): the rounding mask is every bit and
    # the shift count is taken modulo 32, so such a quotient comes out near its unshifted value, usually the
    # highest output. The trace counts those values.
    past = exponent > 31
    wide = (product >> (exponent & 31)) + (product > (np.int64(-1) + (product < 0)))
    scaled = np.where(past, wide, rounding_divide_by_pot(product, np.minimum(exponent, 31)))
    low, high = _output_range(op)
    result, clipped = _clamp(scaled + zero_point_of(out), low, high, out.dtype.value)
    return [result], {"output_multiplier": [m, s], "clamped": clipped, "activation_range": [low, high],
                      "shift_past_31": int(np.count_nonzero(past))}


def prelu(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """PRELU of 8-bit tensors (``reference_ops::BroadcastPrelu4DSlow``): ``x = in - input_zp``; ``out =
    output_zp + MBQM(x, M1, s1)`` for ``x >= 0`` with ``input_scale / output_scale``, else ``MBQM(x * (alpha -
    alpha_zp), M2, s2)`` with ``input_scale * alpha_scale / output_scale`` (both in double), clamped; alpha
    broadcast as NumPy does."""
    x, alpha = _given(inputs, 0), _given(inputs, 1)
    src, slope, out = op.inputs[0], op.inputs[1], op.outputs[0]
    assert src is not None and slope is not None
    if src.dtype.value not in ("int8", "uint8") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"PRELU of {src.dtype.value} to {out.dtype.value}")
    m1, s1 = quantize_multiplier(scale_of(src) / scale_of(out))
    m2, s2 = quantize_multiplier(scale_of(src) * scale_of(slope) / scale_of(out))
    value, a = np.broadcast_arrays(x.astype(np.int64) - zero_point_of(src),
                                   alpha.astype(np.int64) - zero_point_of(slope))
    scaled = np.where(value >= 0, multiply_by_quantized_multiplier(value, m1, s1),
                      multiply_by_quantized_multiplier(value * a, m2, s2)) + zero_point_of(out)
    low, high = LIMITS[out.dtype.value]
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"identity_multiplier": [m1, s1], "alpha_multiplier": [m2, s2], "clamped": clipped}


def _pool(op: OpInfo, x: np.ndarray, reduce: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Result:
    o = op.options
    kh, kw, sh, sw = o["filter_height"], o["filter_width"], o["stride_h"], o["stride_w"]
    oh, pad_h = out_size_and_padding(o["padding"], x.shape[1], kh, sh, 1)
    ow, pad_w = out_size_and_padding(o["padding"], x.shape[2], kw, sw, 1)
    values = im2col(x.astype(np.int64), kh, kw, (sh, sw), (1, 1), (pad_h, pad_w), (oh, ow))
    inside = im2col(np.ones((1, *x.shape[1:3], 1), np.int64), kh, kw, (sh, sw), (1, 1), (pad_h, pad_w), (oh, ow))
    result = reduce(values, np.broadcast_to(inside, values.shape).astype(bool))
    low, high = _output_range(op)
    out, clipped = _clamp(result, low, high, op.outputs[0].dtype.value)
    return [out], {"kernel": [kh, kw], "stride": [sh, sw], "padding": [pad_h, pad_w], "clamped": clipped}


def average_pool_2d(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The sum of the window's elements inside the image over their count, rounded half away from zero in C
    integer division: ``(sum + count / 2) / count`` (``(sum - count / 2) / count`` when negative)."""
    x = inputs[0]
    assert x is not None

    def average(values: np.ndarray, inside: np.ndarray) -> np.ndarray:
        total = np.where(inside, values, 0).sum(axis=(3, 4))
        count = inside.sum(axis=(3, 4))
        half = count // 2
        return trunc_div(np.where(total > 0, total + half, total - half), count)

    return _pool(op, x, average)


def max_pool_2d(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The largest element of the window inside the image."""
    x = inputs[0]
    assert x is not None
    return _pool(op, x, lambda values, inside: np.where(inside, values, np.iinfo(np.int64).min).max(axis=(3, 4)))


def reshape(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The same values in the output's shape (RESHAPE, SQUEEZE, EXPAND_DIMS)."""
    x = inputs[0]
    assert x is not None
    return [x.reshape(op.outputs[0].shape)], {}


def concatenation(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The inputs joined along ``axis``; an input quantized differently from the output is rescaled first in
    float32, as ``ConcatenationWithScaling`` does: ``round(in * s + (-zp_in * s)) + zp_out`` with
    ``s = in_scale * (1 / out_scale)``."""
    out = op.outputs[0]
    parts = []
    for t, x in zip(op.inputs, inputs, strict=True):
        assert t is not None and x is not None
        if scale_of(t) == scale_of(out) and zero_point_of(t) == zero_point_of(out):
            parts.append(x.astype(np.int64))
            continue
        s = np.float32(scale_of(t)) * (np.float32(1.0) / np.float32(scale_of(out)))
        shift = np.float32(-zero_point_of(t)) * s
        real = x.astype(np.float32) * s + shift
        parts.append(round_half_away_array(real) + zero_point_of(out))
    axis = op.options.get("axis", 0)
    low, high = LIMITS[out.dtype.value]
    result, clipped = _clamp(np.concatenate(parts, axis=axis), low, high, out.dtype.value)
    return [result], {"axis": axis, "clamped": clipped}


def pad(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The input surrounded by the output's zero point (PAD) or the given constant (PADV2)."""
    x, paddings = inputs[0], inputs[1]
    assert x is not None and paddings is not None
    fill = int(inputs[2].reshape(-1)[0]) if len(inputs) > 2 and inputs[2] is not None else zero_point_of(op.outputs[0])
    return [np.pad(x, [(int(a), int(b)) for a, b in paddings.reshape(-1, 2)], constant_values=fill)], {"value": fill}


def quantize(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """float32 -> int: ``clamp(round(in / scale) + zero_point)`` in float32 (``AffineQuantize``); int -> int:
    ``clamp(output_offset + MBQM(in + input_offset, M, s))`` for ``in_scale / out_scale`` (``Requantize``)."""
    x, src, out = inputs[0], op.inputs[0], op.outputs[0]
    assert x is not None and src is not None
    low, high = LIMITS[out.dtype.value]
    if x.dtype == np.float32:
        rounded = round_half_away_array(x / np.float32(scale_of(out)))
        result, clipped = _clamp(rounded + zero_point_of(out), low, high, out.dtype.value)
        return [result], {"scale": scale_of(out), "zero_point": zero_point_of(out), "clamped": clipped}
    m, s = quantize_multiplier(scale_of(src) / scale_of(out))
    scaled = multiply_by_quantized_multiplier(x.astype(np.int64) - zero_point_of(src), m, s) + zero_point_of(out)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"output_multiplier": [m, s], "clamped": clipped}


def dequantize(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``float(scale * (in - zero_point))``, the product in double as the reference kernel computes it."""
    x, src = inputs[0], op.inputs[0]
    assert x is not None and src is not None
    if x.dtype == np.float16:
        return [x.astype(np.float32)], {}
    return [(scale_of(src) * (x.astype(np.float64) - zero_point_of(src))).astype(np.float32)], {}


def relu(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """RELU, RELU6, RELU_N1_TO_1 as ops: ``clamp(output_offset + MBQM(in + input_offset, M, s))`` for
    ``in_scale / out_scale``, clamped to the activation's quantized bounds."""
    x, src, out = inputs[0], op.inputs[0], op.outputs[0]
    assert x is not None and src is not None
    m, s = quantize_multiplier(_f32_quotient(scale_of(src), scale_of(out)))
    scaled = multiply_by_quantized_multiplier(x.astype(np.int64) - zero_point_of(src), m, s) + zero_point_of(out)
    qmin, qmax = LIMITS[out.dtype.value]
    low, high = activation_range(op.type, scale_of(out), zero_point_of(out), qmin, qmax)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"output_multiplier": [m, s], "activation_range": [low, high], "clamped": clipped}


# -- the fixed-point activations (gemmlowp) ------------------------------------------------------------------

@functools.cache
def _gen_lut16(func: Callable[[float], float], input_min: float, input_max: float, output_min: float,
               output_max: float) -> np.ndarray:
    """``gen_lut<double, int16_t, int16_t>``: 513 int16 values of ``func`` over [input_min, input_max] scaled to
    the int16 range over [output_min, output_max], each of the 512 steps' sample corrected by half the error
    of interpolating its midpoint (so the linear interpolation between entries is closer), plus the last
    value for the slope. In double, rounding half away from zero. Made once per table (``func`` is a
    module-level function, so the cache holds each table)."""
    steps = 512
    step = (input_max - input_min) / steps
    scaling = 65536.0 / (output_max - output_min)
    lut = np.zeros(steps + 1, np.int64)
    for i in range(steps):
        sample = round_half_away(func(input_min + i * step) * scaling)
        interpolated = round_half_away((func(input_min + (i + 1) * step) * scaling + sample) / 2)
        exact = round_half_away(func(input_min + i * step + step / 2) * scaling)
        lut[i] = min(max(sample - round_half_away((interpolated - exact) / 2), -32768), 32767)
    lut[steps] = min(max(round_half_away(func(input_max) * scaling), -32768), 32767)
    lut.setflags(write=False)
    return lut


def _one_over_one_plus(v: float) -> float:
    return 1.0 / (1.0 + v)


def _lut16_lookup(value: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """``lut_lookup_with_interpolation`` (int16): entry ``256 + (value >> 7)``, plus the slope to the next
    entry times the low 7 bits, rounded: ``base + ((slope * (value & 127) + 64) >> 7)``."""
    index = 256 + (value >> 7)
    base: np.ndarray = lut[index]
    looked_up: np.ndarray = base + (((lut[index + 1] - base) * (value & 0x7F) + 64) >> 7)
    return looked_up


def _softmax_int16(op: OpInfo, x: np.ndarray) -> Result:
    """``reference_ops::SoftmaxInt16`` (int16 in and out, output scale 1/32768 and zero point 0): per row,
    ``diff = in - max(in)`` scaled so that [-65535, 0] is [-10, 0] (``beta * input_scale / (10 / 65535)``),
    recentred to int16 and looked up in an exp table (:func:`_gen_lut16`, exp over [-10, 0]); the sum of
    exps (Q16.15) normalised by its leading zeros and looked up in a 1 / (1 + x) table; each exp times that
    reciprocal, shifted back and clamped to [0, 32767]."""
    src = op.inputs[0]
    assert src is not None
    beta = float(op.options.get("beta", 1.0))
    # input->params.scale * params->beta: a float product, then divided in double.
    product = float(np.float32(np.float32(scale_of(src)) * np.float32(beta)))
    multiplier, left_shift = quantize_multiplier(product / (10.0 / 65535.0))
    exp_lut = _gen_lut16(math.exp, -10.0, 0.0, -1.0, 1.0)
    reciprocal_lut = _gen_lut16(_one_over_one_plus, 0.0, 1.0, -1.0, 1.0)
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    diff = rows - rows.max(axis=1, keepdims=True)
    scaled = multiply_by_quantized_multiplier(diff, multiplier, left_shift) + 32767
    exps = _lut16_lookup(np.clip(scaled, -32768, 32767), exp_lut)
    sums = exps.sum(axis=1, keepdims=True)
    from . import gemmlowp as g

    headroom_plus_one = g.count_leading_zeros(sums)
    shifted = ((sums << (headroom_plus_one - 1)) + (1 << 13)) >> 14
    reciprocal = _lut16_lookup(np.clip(shifted - ((1 << 15) + (1 << 16)), -32768, 32767), reciprocal_lut)
    right_shift = 31 - headroom_plus_one
    result = (exps * reciprocal + (np.int64(1) << (right_shift - 1))) >> right_shift
    clamped, clipped = _clamp(result, 0, 32767, "int16")
    return [clamped.reshape(x.shape)], {"input_multiplier": multiplier, "input_left_shift": left_shift,
                                        "clamped": clipped}


def softmax(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``reference_ops::Softmax`` for 8-bit tensors: per row, ``diff = in - max(in)`` scaled by
    ``beta * input_scale`` into Q5.26 (``input_multiplier``, ``input_left_shift``), ``exp`` of it in Q0.31 summed
    in Q12.19, the reciprocal of the sum, and ``out = exp(diff) / sum`` as a multiple of 1/256 (output zero
    point -128 for int8); a diff below ``diff_min`` gives the smallest output."""
    from . import gemmlowp as g

    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value == "int16" and out.dtype.value == "int16":
        return _softmax_int16(op, x)
    if out.dtype.value not in ("int8", "uint8"):
        raise Unsupported(f"SOFTMAX to {out.dtype.value}")
    beta, input_scale = float(op.options.get("beta", 1.0)), scale_of(src)
    real = min(beta * input_scale * (1 << (31 - 5)), (1 << 31) - 1.0)
    multiplier, left_shift = quantize_multiplier(real)
    radius = math.floor(1.0 * ((1 << 5) - 1) * (1 << (31 - 5)) / (1 << left_shift))
    diff_min = int(-1.0 * radius)
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    diff = rows - rows.max(axis=1, keepdims=True)
    used = diff >= diff_min
    scaled = saturating_rounding_doubling_high_mul(diff * (1 << left_shift), multiplier)  # Q5.26
    exps = g.exp_on_negative_values(scaled, 5)  # Q0.31
    sum_of_exps = np.where(used, g.rescale(exps, 0, 12), 0).sum(axis=1, keepdims=True)  # Q12.19
    sum_of_exps = sum_of_exps.astype(np.int32).astype(np.int64)
    shifted_scale, bits_over_unit = g.get_reciprocal(sum_of_exps, 12)
    unsat = rounding_divide_by_pot(g.srdhm(shifted_scale, exps), bits_over_unit + 31 - 8)
    low, high = LIMITS[out.dtype.value]
    result, clipped = _clamp(np.where(used, unsat + low, low), low, high, out.dtype.value)
    return [result.reshape(x.shape)], {"input_multiplier": multiplier, "input_left_shift": left_shift,
                                       "diff_min": diff_min, "clamped": clipped}


def log_softmax(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``reference_integer_ops::LogSoftmax`` for int8: per row, ``diff = in - max(in)`` into Q5.26
    (``input_multiplier``, ``input_left_shift`` from ``input_scale``), ``exp`` summed in Q12.19 over the diffs
    at least ``diff_min``, ``log`` of the sum in Q5.26 (gemmlowp's rational approximation); a diff above
    ``adjusted_diff_min`` (the log of the sum brought back to the input's scale with ``reverse_scaling_divisor``)
    gives ``(diff_q5 - log_sum) / 2^22 + 127`` (the output is fixed: scale 16/256, zero point 127), clamped;
    any other the smallest output."""
    from . import gemmlowp as g

    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value != "int8" or out.dtype.value != "int8":
        raise Unsupported(f"LOG_SOFTMAX of {src.dtype.value} to {out.dtype.value}")
    real = min(1.0 * scale_of(src) * (1 << (31 - 5)), (1 << 31) - 1.0)
    multiplier, left_shift = quantize_multiplier(real)
    reverse_multiplier, reverse_shift = quantize_multiplier((1 << (31 - left_shift)) / float(multiplier))
    reverse_right_shift = -reverse_shift
    diff_min = int(-1.0 * math.floor(1.0 * ((1 << 5) - 1) * (1 << (31 - 5)) / (1 << left_shift)))
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64)
    diff = rows - rows.max(axis=1, keepdims=True)
    diff_q5 = multiply_by_quantized_multiplier(diff, multiplier, left_shift)
    exps = g.rescale(g.exp_on_negative_values(diff_q5, 5), 0, 12)
    sum_q12 = g._wrap(np.where(diff >= diff_min, exps, 0).sum(axis=1, keepdims=True))
    log_sum_q5 = g.log_x_for_x_greater_than_or_equal_to_1(sum_q12, 12, 5)
    shifted_log_sum = g._wrap(log_sum_q5 + INT32_MIN)
    adjusted_diff_min = np.maximum(diff_min - 1, multiply_by_quantized_multiplier(shifted_log_sum, reverse_multiplier,
                                                                                   -reverse_right_shift))
    scaled = rounding_divide_by_pot(g._wrap(diff_q5 - log_sum_q5), 31 - 5 - 4) + 127
    result, clipped = _clamp(np.where(diff > adjusted_diff_min, scaled, -128), -128, 127, "int8")
    return [result.reshape(x.shape)], {"input_multiplier": multiplier, "input_left_shift": left_shift,
                                       "reverse_scaling": [reverse_multiplier, reverse_right_shift],
                                       "diff_min": diff_min, "clamped": clipped}


def _sigmoid_like(op: OpInfo, inputs: Arrays, fn: str, output_bits: int, low_value: int) -> Result:
    """LOGISTIC and TANH for int8 (``reference_integer_ops``): the input offset and scaled into Q4.27
    (``input_multiplier``, ``input_left_shift``), past ``input_range_radius`` the extreme output, else
    gemmlowp's function in Q0.31 rounded to ``output_bits`` fractional bits (LOGISTIC: 1/256 with zero point
    -128; TANH: 1/128 with zero point 0)."""
    from . import gemmlowp as g

    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value == "int16" and out.dtype.value == "int16":
        return _sigmoid_like_int16(op, x, fn)
    if src.dtype.value != "int8" or out.dtype.value != "int8":
        raise Unsupported(f"{op.type} of {src.dtype.value} to {out.dtype.value}")
    multiplier, left_shift = quantize_multiplier(scale_of(src) * float(1 << (31 - 4)))
    radius = math.floor(1.0 * ((1 << 4) - 1) * (1 << (31 - 4)) / (1 << left_shift))
    value = x.astype(np.int64) - zero_point_of(src)
    in_q4 = multiply_by_quantized_multiplier(value, multiplier, left_shift)
    in_q0 = g.logistic(in_q4, 4) if fn == "logistic" else g.tanh(in_q4, 4)
    scaled = rounding_divide_by_pot(in_q0, 31 - output_bits) + (-128 if fn == "logistic" else 0)
    scaled = np.where(value <= -radius, low_value, np.where(value >= radius, 127, scaled))
    result, clipped = _clamp(scaled, -128, 127, "int8")
    return [result], {"input_multiplier": multiplier, "input_left_shift": left_shift, "input_range_radius": radius,
                      "clamped": clipped}


# sigmoid(i / 24) in unsigned Q0.16 for i = 0..255, TFLite's ``sigmoid_table_uint16`` (tensorflow/lite/kernels/
# internal/common.h; the same in CMSIS-NN's arm_nntables.c, both Apache-2.0). Its values are not a rounding
# formula (entry 4 is 35493 where 65536 * sigmoid(4/24) = 35492.36, the last is 65535), so they are data here.
SIGMOID_TABLE_UINT16 = np.array([
    32768, 33451, 34133, 34813, 35493, 36169, 36843, 37513, 38180, 38841, 39498, 40149, 40794, 41432, 42064, 42688,
    43304, 43912, 44511, 45102, 45683, 46255, 46817, 47369, 47911, 48443, 48964, 49475, 49975, 50464, 50942, 51409,
    51865, 52311, 52745, 53169, 53581, 53983, 54374, 54755, 55125, 55485, 55834, 56174, 56503, 56823, 57133, 57433,
    57724, 58007, 58280, 58544, 58800, 59048, 59288, 59519, 59743, 59959, 60168, 60370, 60565, 60753, 60935, 61110,
    61279, 61441, 61599, 61750, 61896, 62036, 62172, 62302, 62428, 62549, 62666, 62778, 62886, 62990, 63090, 63186,
    63279, 63368, 63454, 63536, 63615, 63691, 63765, 63835, 63903, 63968, 64030, 64090, 64148, 64204, 64257, 64308,
    64357, 64405, 64450, 64494, 64536, 64576, 64614, 64652, 64687, 64721, 64754, 64786, 64816, 64845, 64873, 64900,
    64926, 64950, 64974, 64997, 65019, 65039, 65060, 65079, 65097, 65115, 65132, 65149, 65164, 65179, 65194, 65208,
    65221, 65234, 65246, 65258, 65269, 65280, 65291, 65301, 65310, 65319, 65328, 65337, 65345, 65352, 65360, 65367,
    65374, 65381, 65387, 65393, 65399, 65404, 65410, 65415, 65420, 65425, 65429, 65433, 65438, 65442, 65445, 65449,
    65453, 65456, 65459, 65462, 65465, 65468, 65471, 65474, 65476, 65479, 65481, 65483, 65485, 65488, 65489, 65491,
    65493, 65495, 65497, 65498, 65500, 65501, 65503, 65504, 65505, 65507, 65508, 65509, 65510, 65511, 65512, 65513,
    65514, 65515, 65516, 65517, 65517, 65518, 65519, 65520, 65520, 65521, 65522, 65522, 65523, 65523, 65524, 65524,
    65525, 65525, 65526, 65526, 65526, 65527, 65527, 65528, 65528, 65528, 65529, 65529, 65529, 65529, 65530, 65530,
    65530, 65530, 65531, 65531, 65531, 65531, 65531, 65532, 65532, 65532, 65532, 65532, 65532, 65533, 65533, 65533,
    65533, 65533, 65533, 65533, 65533, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65534, 65535],
    np.int64)


def _check_log2(scale: float) -> tuple[bool, int]:
    """``CheckedLog2``: log2 of the scale in float32, rounded; whether it is a power of two (within 1e-3)."""
    x_log2 = np.float32(math.log(np.float32(scale))) * (np.float32(1.0) / np.float32(math.log(2.0)))
    rounded = round_half_away(float(x_log2))
    return bool(abs(np.float32(x_log2 - np.float32(rounded))) < np.float32(1e-3)), rounded


def _sigmoid_like_int16(op: OpInfo, x: np.ndarray, fn: str) -> Result:
    """LOGISTIC and TANH of int16 (``reference_integer_ops::Logistic/Tanh``, zero points 0, output scale
    2^-15): the input brought to the table's scale, 1/(3 * 4096) (``input_multiplier``, ``input_left_shift``
    from the kernel's Prepare: a power-of-two input scale needs no multiplier, ``3 << shift``); its absolute
    value indexes :data:`SIGMOID_TABLE_UINT16` (steps of 2^9 for LOGISTIC, 2^8 for TANH, as tanh(x) =
    2 sigmoid(2x) - 1) with linear interpolation on the fraction, saturating past the table; mirrored for a
    negative input and rounded back to 16 bits."""
    src, out = op.inputs[0], op.outputs[0]
    assert src is not None
    if zero_point_of(src) != 0 or zero_point_of(out) != 0:
        raise Unsupported(f"{op.type} of int16 with a zero point (the kernel requires 0)")
    if _check_log2(scale_of(out)) != (True, -15):
        raise Unsupported(f"{op.type} of int16 whose output scale is not 2^-15 (the kernel refuses it)")
    pot, log2 = _check_log2(scale_of(src))
    left_shift = 12 + log2
    if pot and left_shift in ((0,) if fn == "logistic" else (0, 1)):
        multiplier, left_shift = 3 << left_shift, 0
    else:
        real, left_shift = float(np.float32(scale_of(src))) * 4096.0 * 3.0, 0
        while real <= 32767.0 / 2.0 and left_shift <= 30:
            left_shift, real = left_shift + 1, real * 2.0
        multiplier = int(real)
    round_ = (1 << (left_shift - 1)) if left_shift > 0 else 0
    value = (x.astype(np.int64) * multiplier + round_) >> left_shift
    magnitude = np.abs(value)
    step = 9 if fn == "logistic" else 8
    index = magnitude >> step
    inside = index < 255
    at = np.minimum(index, 254)  # past the table: saturated below, the entry unused
    low, high = SIGMOID_TABLE_UINT16[at], SIGMOID_TABLE_UINT16[at + 1]
    fraction = magnitude & ((1 << step) - 1)
    interpolated = np.where(inside, (low << step) + fraction * (high - low), (0x7FFF << 10) if fn == "logistic"
                            else (0xFFFF << 8))
    if fn == "logistic":
        result = np.where(value >= 0, interpolated + (1 << 9), (1 << 25) - interpolated + (1 << 9) - 1) >> 10
    else:
        result = np.where(value >= 0, interpolated - (1 << 23) + (1 << 7),
                          -interpolated + (1 << 23) + (1 << 7) - 1) >> 8
    clamped, clipped = _clamp(result, -32768, 32767, "int16")
    return [clamped], {"input_multiplier": multiplier, "input_left_shift": left_shift,
                       "saturated": int(np.count_nonzero(~inside)), "clamped": clipped}


def logistic(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out = -128 + round(256 / (1 + exp(-(in - zp) * scale)))``, in fixed point (see ``_sigmoid_like``)."""
    return _sigmoid_like(op, inputs, "logistic", 8, -128)


def tanh(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out = round(128 * tanh((in - zp) * scale))``, in fixed point (see ``_sigmoid_like``)."""
    return _sigmoid_like(op, inputs, "tanh", 7, -128)


def leaky_relu(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``reference_ops::QuantizeLeakyRelu``: ``x = in - input_zp``; ``out = output_zp + MBQM(x, M, s)`` with
    ``M, s`` for ``input_scale / output_scale`` when ``x >= 0``, for ``input_scale * alpha / output_scale``
    below (both computed in float32, as the kernel's Prepare does), clamped to the type's range."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value not in ("int8", "uint8", "int16") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"LEAKY_RELU of {src.dtype.value} to {out.dtype.value}")
    in_scale, out_scale = np.float32(scale_of(src)), np.float32(scale_of(out))
    alpha = np.float32(op.options.get("alpha", 0.2))
    identity_m, identity_s = quantize_multiplier(float(np.float32(in_scale / out_scale)))
    alpha_m, alpha_s = quantize_multiplier(float(np.float32(np.float32(in_scale * alpha) / out_scale)))
    value = x.astype(np.int64) - zero_point_of(src)
    scaled = np.where(value >= 0, multiply_by_quantized_multiplier(value, identity_m, identity_s),
                      multiply_by_quantized_multiplier(value, alpha_m, alpha_s)) + zero_point_of(out)
    low, high = LIMITS[out.dtype.value]
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"identity_multiplier": [identity_m, identity_s], "alpha_multiplier": [alpha_m, alpha_s],
                      "clamped": clipped}


def l2_normalization(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``reference_integer_ops::L2Normalization`` (int8, output scale 1/128, zero point 0): per row of the last
    axis, ``acc = sum((in - zp)^2)``; ``1 / sqrt(acc)`` as a fixed-point multiplier and shift
    (``GetInvSqrtQuantizedMultiplierExp``); ``out = MBQM(in - zp, M, shift + 7)`` clamped to int8."""
    from . import gemmlowp as g

    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value != "int8" or out.dtype.value != "int8":
        raise Unsupported(f"L2_NORMALIZATION of {src.dtype.value} to {out.dtype.value}")
    rows = x.reshape(-1, x.shape[-1]).astype(np.int64) - zero_point_of(src)
    acc = (rows * rows).sum(axis=1, keepdims=True)
    multiplier, shift = g.inv_sqrt_quantized_multiplier(acc, -1)
    scaled = multiply_by_quantized_multiplier(rows, multiplier, shift + 7)
    result, clipped = _clamp(scaled, -128, 127, "int8")
    return [result.reshape(x.shape)], {"sum_of_squares": [int(acc.min()), int(acc.max())], "clamped": clipped}


def _srdhm16(a: np.ndarray, b: int) -> np.ndarray:
    """gemmlowp ``SaturatingRoundingDoublingHighMul`` on int16: the high 16 bits of ``2 * a * b``, rounded to
    nearest (a nudge of 2^14, or 1 - 2^14 for a negative product, then C division by 2^15)."""
    ab = a.astype(np.int64) * b
    high = trunc_div(ab + np.where(ab >= 0, 1 << 14, 1 - (1 << 14)), 1 << 15)
    return np.where((a == -32768) & (b == -32768), 32767, high)


def _sdhm16(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``SaturatingDoublingHighMul`` (int16): as :func:`_srdhm16` but truncating towards zero (the reference
    kernel uses it to cancel the bias of the rounding multiplies before it)."""
    high = trunc_div(a.astype(np.int64) * b.astype(np.int64), 1 << 15)
    return np.where((a == -32768) & (b == -32768), 32767, high)


def _left_shift16(x: np.ndarray, amount: int) -> np.ndarray:
    """``SaturatingLeftShift`` (int16): ``x * 2^amount`` clamped to the int16 range."""
    return np.clip(x.astype(np.int64) * (1 << amount), -32768, 32767)


def _int16_multiplier(real: float) -> tuple[int, int]:
    """``QuantizeMultiplier`` then ``DownScaleInt32ToInt16Multiplier``: a Q0.15 multiplier and its exponent."""
    m32, exponent = quantize_multiplier(real)
    m16 = 32767 if m32 >= INT32_MAX - (1 << 15) else (m32 + (1 << 15)) >> 16
    return m16, exponent


def _libm(name: str) -> Callable[[float], float]:
    """The C library's float function ``name`` (``erfcf``, ``tanhf``): what TFLite's kernels call through
    ``std::erfc(float)``, so a table made from it is bit for bit theirs. Python's double-precision ``math``
    rounded to float32 where there is no such library (it can differ in the last bit, and then by 1 LSB)."""
    import ctypes
    import ctypes.util

    found = ctypes.util.find_library("m") or ctypes.util.find_library("c")
    fn = getattr(ctypes.CDLL(found), name, None) if found else None
    if fn is None:
        import math

        wide = getattr(math, name.removesuffix("f"))
        return lambda x: float(np.float32(wide(x)))
    fn.restype, fn.argtypes = ctypes.c_float, [ctypes.c_float]
    return lambda x: float(fn(x))


_SQRT1_2 = np.float32(-0.70710678118654752440)  # static_cast<float>(-M_SQRT1_2)
_SQRT_2_PI = np.float32(1.12837916709551257390 * 0.70710678118654752440)  # kSqrt2dPi: M_2_SQRTPI * M_SQRT1_2


def gelu(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """GELU of 8-bit tensors: a 256-entry table made when the op is prepared (``LUTPopulate``), all in float32:
    for each stored value ``v``, ``x = input_scale * (v - input_zero_point)``, ``y = 0.5 * x * erfc(x * -1/sqrt(2))``
    (``approximate``: ``0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x * x * x)))``), then
    ``round(y / output_scale) + output_zero_point`` (half away from zero), clamped; the output is the table
    looked up at each input."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value not in ("int8", "uint8") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"GELU of {src.dtype.value} to {out.dtype.value}")
    approximate = bool(op.options.get("approximate"))

    def transform(real: np.ndarray) -> np.ndarray:
        half_x = np.float32(0.5) * real
        if approximate:
            tanh = _libm("tanhf")
            inner = _SQRT_2_PI * (real + np.float32(0.044715) * real * real * real)
            return half_x * (np.float32(1.0) + np.array([tanh(float(v)) for v in inner], np.float32))
        erfc = _libm("erfcf")
        return half_x * np.array([erfc(float(v)) for v in real * _SQRT1_2], np.float32)

    result, trace = _lookup(op, x, transform)
    return result, {"approximate": approximate, **trace}


def _lookup(op: OpInfo, x: np.ndarray, transform: Callable[[np.ndarray], np.ndarray]) -> Result:
    """``LUTPopulate``, then the lookup: for each of the 256 stored values ``v``, ``x = input_scale * (v -
    input_zero_point)`` in float32, ``y = transform(x)`` in float32, ``round(y / output_scale) +
    output_zero_point`` (half away from zero), clamped; the output is the table at each input."""
    src, out = op.inputs[0], op.outputs[0]
    assert src is not None
    low, high = LIMITS[out.dtype.value]
    stored = np.arange(low, high + 1, dtype=np.int64)
    real = np.float32(scale_of(src)) * (stored - zero_point_of(src)).astype(np.float32)
    with np.errstate(over="ignore", invalid="ignore"):
        wide = (transform(real) / np.float32(scale_of(out))).astype(np.float64)
    # A value past the int32 range (exp(60) is inf in float32) saturates: the highest output for +inf, as
    # LiteRT's table has it (measured on the EXP op model at input scale 0.5).
    wide = np.clip(np.nan_to_num(wide, nan=0.0, posinf=2.0**31 - 1, neginf=-(2.0**31)), -(2.0**31), 2.0**31 - 1)
    table, clipped = _clamp(round_half_away_array(wide) + zero_point_of(out), low, high, out.dtype.value)
    return [table[x.astype(np.int64) - low]], {"table_clamped": clipped}


def exp(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """EXP of 8-bit tensors: the table of ``expf`` (the C library's, as the kernel's ``std::exp``) at each
    stored value (see :func:`_lookup`)."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value not in ("int8", "uint8") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"EXP of {src.dtype.value} to {out.dtype.value}")
    expf = _libm("expf")
    return _lookup(op, x, lambda real: np.array([expf(float(v)) for v in real], np.float32))


def log(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """LOG of 8-bit tensors: the table of ``logf`` (the C library's, as the kernel's ``std::log``) at each
    stored value (see :func:`_lookup`); a stored value at or below zero has no logarithm and takes the
    lowest output."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value not in ("int8", "uint8") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"LOG of {src.dtype.value} to {out.dtype.value}")
    logf = _libm("logf")
    return _lookup(op, x, lambda real: np.array([logf(float(v)) if v > 0 else -np.inf for v in real], np.float32))


def abs_(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """ABS (``elementwise::AbsEvalQuantized``): ``value = |in - input_zp|``; when the scales differ
    ``out = output_zp + MBQM(value, M, s)`` for ``input_scale / output_scale`` (the quotient in float32),
    else ``out = output_zp + value``; clamped to the type's range."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value not in ("int8", "int16") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"ABS of {src.dtype.value} to {out.dtype.value}")
    value = np.abs(x.astype(np.int64) - zero_point_of(src))
    trace: dict[str, Any] = {}
    if np.float32(scale_of(src)) != np.float32(scale_of(out)):
        m, s = quantize_multiplier(_f32_quotient(scale_of(src), scale_of(out)))
        value = multiply_by_quantized_multiplier(value, m, s)
        trace["output_multiplier"] = [m, s]
    low, high = LIMITS[out.dtype.value]
    result, clipped = _clamp(value + zero_point_of(out), low, high, out.dtype.value)
    return [result], {**trace, "clamped": clipped}


def rsqrt(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """RSQRT of int8 (``elementwise::RsqrtEvalQuantized``): ``value = in - input_zp`` (the kernel refuses a
    negative one); 0 gives the highest output; else ``1 / sqrt(value)`` as a fixed-point multiplier and
    shift (``GetInvSqrtQuantizedMultiplierExp``), taken as ``data = MBQM(1, M, shift + 20)``, then ``out =
    output_zp + MBQM(data, M_out, s_out - 20)`` for ``1 / (sqrt(input_scale) * output_scale)`` (in double),
    clamped."""
    from . import gemmlowp as g

    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value != "int8" or out.dtype.value != "int8":
        raise Unsupported(f"RSQRT of {src.dtype.value} to {out.dtype.value}")
    value = x.astype(np.int64) - zero_point_of(src)
    if (value < 0).any():
        first = int(x.reshape(-1)[np.argmax(value.reshape(-1) < 0)])
        raise Unsupported(f"a negative input ({first}, under the zero point {zero_point_of(src)}): "
                          "the kernel refuses it")
    m_out, s_out = quantize_multiplier(1.0 / (math.sqrt(float(np.float32(scale_of(src)))) * scale_of(out)))
    inv_m, inv_s = g.inv_sqrt_quantized_multiplier(np.maximum(value, 1), -1)
    data = multiply_by_quantized_multiplier(np.ones_like(value), inv_m, inv_s + 20)
    scaled = multiply_by_quantized_multiplier(data, m_out, s_out - 20) + zero_point_of(out)
    scaled = np.where(value == 0, 127, scaled)
    result, clipped = _clamp(scaled, -128, 127, "int8")
    return [result], {"output_multiplier": [m_out, s_out], "clamped": clipped}


def mirror_pad(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """MIRROR_PAD: the borders copied from inside, REFLECT (mode 0: the edge itself not repeated) or SYMMETRIC
    (mode 1: repeated); no arithmetic."""
    x, pads = _given(inputs, 0), _given(inputs, 1).reshape(-1, 2)
    mode = op.options.get("mode", 0)
    symmetric = mode in (1, "SYMMETRIC")
    return [np.pad(x, [(int(b), int(a)) for b, a in pads], mode="symmetric" if symmetric else "reflect")], {
        "mode": "SYMMETRIC" if symmetric else "REFLECT", "paddings": pads.tolist()}


def hard_swish(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``reference_ops::HardSwish`` for 8-bit tensors, ``out = x * relu6(x + 3) / 6`` in 16-bit fixed point:
    the input offset and shifted left 7 bits (``hires_input_scale = input_scale / 128``); on the output scale
    by ``output_multiplier = hires_input_scale / output_scale`` (Q0.15, exponent <= 0); the "reluish" factor
    ``relu6(x + 3) / 6`` as ``x`` on the scale where 3.0 is 32768 (``reluish_multiplier = hires_input_scale /
    (3 / 32768)``, saturating shifts), mapped from [-1, 1] to [0, 1]; their truncating doubling high product,
    the output exponent's rounding shift, plus the output zero point, clamped. The multipliers are computed
    in float32, as the kernel's Prepare does."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if src.dtype.value not in ("int8", "uint8") or out.dtype.value != src.dtype.value:
        raise Unsupported(f"HARD_SWISH of {src.dtype.value} to {out.dtype.value}")
    hires = np.float32(1.0 / 128.0) * np.float32(scale_of(src))
    out_m, out_e = _int16_multiplier(float(np.float32(hires / np.float32(scale_of(out)))))
    if out_e > 0:
        raise Unsupported("HARD_SWISH whose output scale is under input_scale / 128 (the kernel refuses it)")
    relu_m, relu_e = _int16_multiplier(float(np.float32(hires / (np.float32(3.0) / np.float32(32768.0)))))
    value = (x.astype(np.int64) - zero_point_of(src)) * (1 << 7)  # int16: at most 255 * 128
    on_output_scale = _srdhm16(value, out_m)
    reluish = _left_shift16(value, relu_e - 1) if relu_e > 0 else value
    reluish = _srdhm16(reluish, relu_m)
    if relu_e > 0:
        reluish = _left_shift16(reluish, 1)
    if relu_e < 0:
        reluish = rounding_divide_by_pot(reluish, -relu_e)
    reluish = (reluish + (1 << 15)) >> 1  # [-1, 1] -> [0, 1]
    scaled = rounding_divide_by_pot(_sdhm16(reluish, on_output_scale), -out_e) + zero_point_of(out)
    low, high = LIMITS[out.dtype.value]
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result], {"output_multiplier_int16": [out_m, out_e], "reluish_multiplier_int16": [relu_m, relu_e],
                      "clamped": clipped}


# -- data movement: the values move, their quantization stays (the kernels require it) -------------------

def _given(inputs: Arrays, k: int) -> np.ndarray:
    x = inputs[k]
    if x is None:
        raise Unsupported(f"input {k} is missing")
    return x


def transpose(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out = in.transpose(perm)``."""
    perm = [int(p) for p in _given(inputs, 1).reshape(-1)]
    return [np.transpose(_given(inputs, 0), perm)], {"perm": perm}


def strided_slice(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``in[begin:end:stride]`` per axis; a bit set in ``begin_mask``/``end_mask`` takes the whole axis from its
    start/to its end, one in ``shrink_axis_mask`` keeps only ``begin`` and drops the axis."""
    o = op.options
    if o.get("ellipsis_mask") or o.get("new_axis_mask") or o.get("offset"):
        raise Unsupported("STRIDED_SLICE with ellipsis_mask, new_axis_mask or offset")
    x = _given(inputs, 0)
    begin, end, strides = (_given(inputs, k).reshape(-1).tolist() for k in (1, 2, 3))
    index: list[Any] = []
    for axis in range(x.ndim):
        if axis >= len(begin):
            index.append(slice(None))
            continue
        if o.get("shrink_axis_mask", 0) >> axis & 1:
            index.append(int(begin[axis]))
            continue
        start = None if o.get("begin_mask", 0) >> axis & 1 else int(begin[axis])
        stop = None if o.get("end_mask", 0) >> axis & 1 else int(end[axis])
        index.append(slice(start, stop, int(strides[axis])))
    return [x[tuple(index)].reshape(op.outputs[0].shape)], {"begin": begin, "end": end, "strides": strides}


def slice_(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``in[begin : begin + size]`` per axis (a size of -1: to the end)."""
    x = _given(inputs, 0)
    begin, size = _given(inputs, 1).reshape(-1).tolist(), _given(inputs, 2).reshape(-1).tolist()
    index = tuple(slice(int(b), None if int(n) < 0 else int(b) + int(n)) for b, n in zip(begin, size, strict=True))
    return [x[index]], {"begin": begin, "size": size}


def split(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """SPLIT (axis first) and SPLIT_V (sizes, then axis): the input cut along ``axis`` into the outputs."""
    if op.type == "SPLIT":
        axis, x = int(_given(inputs, 0).reshape(-1)[0]), _given(inputs, 1)
    else:
        x, axis = _given(inputs, 0), int(_given(inputs, 2).reshape(-1)[0])
    sizes = [t.shape[axis] for t in op.outputs]
    cuts = np.cumsum(sizes)[:-1].tolist()
    return list(np.split(x, cuts, axis=axis)), {"axis": axis, "sizes": sizes}


def pack(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The inputs stacked along a new ``axis``."""
    arrays = [x for x in inputs if x is not None]
    return [np.stack(arrays, axis=op.options.get("axis", 0))], {"axis": op.options.get("axis", 0)}


def unpack(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The input cut into its slices along ``axis`` (that axis dropped)."""
    axis = op.options.get("axis", 0)
    x = _given(inputs, 0)
    return [np.take(x, k, axis=axis) for k in range(x.shape[axis])], {"axis": axis}


def tile(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The input repeated ``multiples[d]`` times along each axis."""
    multiples = [int(m) for m in _given(inputs, 1).reshape(-1)]
    return [np.tile(_given(inputs, 0), multiples)], {"multiples": multiples}


def gather(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``in.take(indices, axis)`` (``batch_dims`` 0)."""
    if op.options.get("batch_dims", 0):
        raise Unsupported("GATHER with batch_dims")
    axis = op.options.get("axis", 0)
    return [np.take(_given(inputs, 0), _given(inputs, 1).astype(np.int64), axis=axis)], {"axis": axis}


def reverse_v2(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The input reversed along the given axes."""
    axes = [int(a) for a in _given(inputs, 1).reshape(-1)]
    return [np.flip(_given(inputs, 0), axis=tuple(axes))], {"axes": axes}


def space_to_depth(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """Each ``block x block`` patch of the image becomes ``block * block`` channels (row, column, channel)."""
    x, b = _given(inputs, 0), op.options["block_size"]
    n, h, w, c = x.shape
    out = x.reshape(n, h // b, b, w // b, b, c).transpose(0, 1, 3, 2, 4, 5).reshape(n, h // b, w // b, b * b * c)
    return [out], {"block_size": b}


def depth_to_space(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The inverse of SPACE_TO_DEPTH: ``block * block`` channel groups become a ``block x block`` patch."""
    x, b = _given(inputs, 0), op.options["block_size"]
    n, h, w, c = x.shape
    out = x.reshape(n, h, w, b, b, c // (b * b)).transpose(0, 1, 3, 2, 4, 5).reshape(n, h * b, w * b, c // (b * b))
    return [out], {"block_size": b}


def resize_nearest_neighbor(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``out[y, x] = in[nearest(y), nearest(x)]`` with the kernel's float32 source coordinate:
    ``min(floor((y + offset) * scale), size - 1)`` (``round`` with align_corners; ``offset`` 0.5 with
    half_pixel_centers, then at least 0), ``scale = in / out`` (``(in - 1) / (out - 1)`` with align_corners)."""
    x = _given(inputs, 0)
    out_h, out_w = (int(v) for v in _given(inputs, 1).reshape(-1))
    align, half = bool(op.options.get("align_corners")), bool(op.options.get("half_pixel_centers"))

    def nearest(out_size: int, in_size: int) -> np.ndarray:
        scale = (np.float32(in_size - 1) / np.float32(out_size - 1) if align and out_size > 1
                 else np.float32(in_size) / np.float32(out_size))
        where = (np.arange(out_size, dtype=np.float32) + np.float32(0.5 if half else 0.0)) * scale
        picked = round_half_away_array(where) if align else np.floor(where).astype(np.int64)
        picked = np.minimum(picked, in_size - 1)
        at_least_zero: np.ndarray = np.maximum(picked, 0) if half else picked
        return at_least_zero

    rows, cols = nearest(out_h, x.shape[1]), nearest(out_w, x.shape[2])
    return [x[:, rows][:, :, cols]], {"rows": rows.tolist(), "cols": cols.tolist()}


def resize_bilinear(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """``ResizeBilinearInteger``: source coordinates in 1/1024 steps (``scale_10 = round(1024 * in / out)``,
    ``(in - 1) / (out - 1)`` with align_corners; half_pixel_centers shifts by half a step), the four neighbours
    weighted in 1/2^20 and the sum rounded half away from zero. The raw 8-bit values are interpolated (the
    weights sum to one, so the zero point is kept)."""
    x = _given(inputs, 0).astype(np.int64)
    out_h, out_w = (int(v) for v in _given(inputs, 1).reshape(-1))
    align, half = bool(op.options.get("align_corners")), bool(op.options.get("half_pixel_centers"))
    in_h, in_w = x.shape[1], x.shape[2]

    def axis(out_size: int, in_size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        scale_10 = ((1 << 10) * in_size + out_size // 2) // out_size
        if align and out_size > 1:
            scale_10 = ((1 << 10) * (in_size - 1) + (out_size - 1) // 2) // (out_size - 1)
        v = np.arange(out_size, dtype=np.int64)
        scaled = v * scale_10 + scale_10 // 2 - (1 << 9) if half else v * scale_10
        lower = np.maximum(trunc_div(scaled, 1 << 10), 0)
        upper = np.minimum(trunc_div(scaled + (1 << 10) - 1, 1 << 10), in_size - 1)
        return scaled, lower, upper

    ys, y0, y1 = axis(out_h, in_h)
    xs, x0, x1 = axis(out_w, in_w)
    dy = (ys - (1 << 10) * y0)[None, :, None, None]
    dx = (xs - (1 << 10) * x0)[None, None, :, None]
    ll, lu = x[:, y0][:, :, x0], x[:, y1][:, :, x0]
    rl, ru = x[:, y0][:, :, x1], x[:, y1][:, :, x1]
    out_20 = (ll * ((1 << 10) - dy) * ((1 << 10) - dx) + lu * dy * ((1 << 10) - dx)
              + rl * ((1 << 10) - dy) * dx + ru * dy * dx)
    rounded = trunc_div(out_20 + np.where(out_20 > 0, 1 << 19, -(1 << 19)), 1 << 20)
    return [rounded.astype(op.outputs[0].dtype.value)], {"align_corners": align, "half_pixel_centers": half}


def mean(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """MEAN of 8-bit tensors (``QuantizedMeanOrSum``): ``sum(in) - input_zero_point * count`` over the axes,
    times ``in_scale / out_scale`` with the division by the count folded into the multiplier
    (``M' = (M << shift) / count``, ``shift = min(floor(log2(count)), 32, 31 + s)``, ``s' = s - shift``), plus
    the output zero point, clamped."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    axes = sorted({int(a) % x.ndim for a in _given(inputs, 1).reshape(-1)})
    keep = bool(op.options.get("keep_dims"))
    low, high = LIMITS[out.dtype.value]
    count = int(np.prod([x.shape[a] for a in axes]))
    multiplier, shift = quantize_multiplier(scale_of(src) / scale_of(out))
    fold = min(count.bit_length() - 1, 32, 31 + shift)
    multiplier, shift = (multiplier << fold) // count, shift - fold
    total = x.astype(np.int64).sum(axis=tuple(axes), keepdims=keep) - zero_point_of(src) * count
    scaled = multiply_by_quantized_multiplier(total, multiplier, shift) + zero_point_of(out)
    result, clipped = _clamp(scaled, low, high, out.dtype.value)
    return [result.reshape(out.shape)], {"axes": axes, "count": count, "output_multiplier": [multiplier, shift],
                                         "clamped": clipped}


def reduce_max_min(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """REDUCE_MAX / REDUCE_MIN: the largest (smallest) stored value over the axes; the input and output share
    their quantization, so no arithmetic is done."""
    x, src, out = _given(inputs, 0), op.inputs[0], op.outputs[0]
    assert src is not None
    if (scale_of(src), zero_point_of(src)) != (scale_of(out), zero_point_of(out)):
        raise Unsupported("the input and output are quantized differently; TFLite's kernel requires them to be "
                          "the same")
    axes = tuple(sorted({int(a) % x.ndim for a in _given(inputs, 1).reshape(-1)}))
    fn = np.max if op.type == "REDUCE_MAX" else np.min
    return [fn(x, axis=axes, keepdims=bool(op.options.get("keep_dims"))).reshape(out.shape)], {"axes": list(axes)}


def arg_max(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """The index of the largest (ARG_MAX) or smallest (ARG_MIN) value along the axis (the first on a tie)."""
    axis = int(_given(inputs, 1).reshape(-1)[0])
    pick = np.argmax if op.type == "ARG_MAX" else np.argmin
    return [pick(_given(inputs, 0), axis=axis).astype(op.outputs[0].dtype.value)], {"axis": axis}


_COMPARE: dict[str, Callable[[np.ndarray, np.ndarray], np.ndarray]] = {
    "EQUAL": np.equal, "NOT_EQUAL": np.not_equal, "GREATER": np.greater, "GREATER_EQUAL": np.greater_equal,
    "LESS": np.less, "LESS_EQUAL": np.less_equal}


def comparison(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """EQUAL, NOT_EQUAL, GREATER(_EQUAL), LESS(_EQUAL) of 8-bit tensors
    (``reference_ops::BroadcastComparison4DSlowWithScaling``): each input ``(in - zp) << 8`` times its own
    scale as a multiplier (``QuantizeMultiplierSmallerThanOneExp(scale)``, rounded as MBQM), then compared;
    a bool output. Integer tensors without quantization compare as they are."""
    a, b = _given(inputs, 0), _given(inputs, 1)
    in1, in2 = op.inputs[0], op.inputs[1]
    assert in1 is not None and in2 is not None
    trace: dict[str, Any] = {}
    if in1.dtype.value in ("int8", "uint8") and in1.quantization and in1.quantization.scale:
        m1, s1 = quantize_multiplier(scale_of(in1))
        m2, s2 = quantize_multiplier(scale_of(in2))
        if s1 > 0 or s2 > 0:
            raise Unsupported(f"{op.type} of a tensor whose scale is 1 or more (the kernel needs a scale under 1)")
        a = multiply_by_quantized_multiplier((a.astype(np.int64) - zero_point_of(in1)) * (1 << 8), m1, s1)
        b = multiply_by_quantized_multiplier((b.astype(np.int64) - zero_point_of(in2)) * (1 << 8), m2, s2)
        trace = {"left_shift": 8, "input1_multiplier": [m1, s1], "input2_multiplier": [m2, s2]}
    return [_COMPARE[op.type](a, b)], trace


def select(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """SELECT and SELECT_V2: ``where(condition, x, y)``, the stored values as they are (the kernel does not
    rescale; x, y and the output share their quantization), broadcasting; SELECT's one-dimensional condition
    picks along the first axis."""
    condition, x, y = _given(inputs, 0).astype(bool), _given(inputs, 1), _given(inputs, 2)
    if op.type == "SELECT" and condition.ndim == 1 and x.ndim > 1:
        condition = condition.reshape(-1, *([1] * (x.ndim - 1)))
    scales = {(scale_of(t), zero_point_of(t)) for t in (op.inputs[1], op.inputs[2], op.outputs[0])
              if t is not None and t.quantization and t.quantization.scale}
    if len(scales) > 1:
        raise Unsupported(f"{op.type} whose inputs and output are quantized differently")
    return [np.where(condition, x, y).astype(x.dtype)], {}


def space_to_batch_nd(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """SPACE_TO_BATCH_ND: the spatial axes padded (with the output's zero point), cut into ``block`` tiles,
    each tile position becoming a batch: ``[B, H, W, C] -> [bh * bw * B, H' / bh, W' / bw, C]``."""
    x, block, pads = _given(inputs, 0), _given(inputs, 1).reshape(-1), _given(inputs, 2).reshape(-1, 2)
    m = len(block)
    padded = np.pad(x, [(0, 0), *[(int(p), int(q)) for p, q in pads], *[(0, 0)] * (x.ndim - 1 - m)],
                    constant_values=zero_point_of(op.outputs[0]))
    shape = [padded.shape[0]]
    for k in range(m):
        shape += [padded.shape[1 + k] // int(block[k]), int(block[k])]
    tiles = padded.reshape(*shape, *padded.shape[1 + m:])
    order = [2 + 2 * k for k in range(m)] + [0] + [1 + 2 * k for k in range(m)] + list(range(1 + 2 * m, tiles.ndim))
    moved = tiles.transpose(order)
    return [moved.reshape(-1, *moved.shape[1 + m:])], {"block": block.tolist(), "paddings": pads.tolist()}


def batch_to_space_nd(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """BATCH_TO_SPACE_ND, SPACE_TO_BATCH_ND undone: ``[bh * bw * B, h, w, C] -> [B, h * bh, w * bw, C]``, then
    the crops removed."""
    x, block, crops = _given(inputs, 0), _given(inputs, 1).reshape(-1), _given(inputs, 2).reshape(-1, 2)
    m = len(block)
    blocks = [int(b) for b in block]
    batch = x.shape[0] // int(np.prod(blocks))
    tiles = x.reshape(*blocks, batch, *x.shape[1:])
    order = [m] + [v for k in range(m) for v in (m + 1 + k, k)] + list(range(2 * m + 1, tiles.ndim))
    moved = tiles.transpose(order)
    joined = moved.reshape(batch, *[x.shape[1 + k] * blocks[k] for k in range(m)], *x.shape[1 + m:])
    cut = tuple([slice(None)] + [slice(int(a), joined.shape[1 + k] - int(b)) for k, (a, b) in enumerate(crops)])
    return [joined[cut]], {"block": blocks, "crops": crops.tolist()}


def gather_nd(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """GATHER_ND: each index vector (the last axis of ``indices``) picks a slice of ``in``."""
    x, indices = _given(inputs, 0), _given(inputs, 1).astype(np.int64)
    depth = indices.shape[-1]
    return [x[tuple(indices[..., k] for k in range(depth))]], {}


def broadcast_to(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """BROADCAST_TO: ``in`` repeated to the given shape, as NumPy broadcasts."""
    shape = tuple(int(v) for v in _given(inputs, 1).reshape(-1))
    return [np.broadcast_to(_given(inputs, 0), shape).copy()], {}


def maximum_minimum(op: OpInfo, model: TFLiteModel, inputs: Arrays) -> Result:
    """Element-wise largest (MAXIMUM) or smallest (MINIMUM), broadcasting; inputs and output share their
    quantization."""
    fn = np.maximum if op.type == "MAXIMUM" else np.minimum
    return [fn(_given(inputs, 0), _given(inputs, 1))], {}


OPS: dict[str, Callable[[OpInfo, TFLiteModel, Arrays], Result]] = {
    "CONV_2D": conv_2d,
    "DEPTHWISE_CONV_2D": depthwise_conv_2d,
    "TRANSPOSE_CONV": transpose_conv,
    "BATCH_MATMUL": batch_matmul,
    "FULLY_CONNECTED": fully_connected,
    "ADD": add,
    "SUB": sub,
    "MUL": mul,
    "DIV": div,
    "PRELU": prelu,
    "SQUARED_DIFFERENCE": squared_difference,
    "AVERAGE_POOL_2D": average_pool_2d,
    "MAX_POOL_2D": max_pool_2d,
    "RESHAPE": reshape,
    "SQUEEZE": reshape,
    "EXPAND_DIMS": reshape,
    "CONCATENATION": concatenation,
    "PAD": pad,
    "PADV2": pad,
    "QUANTIZE": quantize,
    "DEQUANTIZE": dequantize,
    "RELU": relu,
    "RELU6": relu,
    "RELU_N1_TO_1": relu,
    "SOFTMAX": softmax,
    "LOG_SOFTMAX": log_softmax,
    "LOGISTIC": logistic,
    "TANH": tanh,
    "HARD_SWISH": hard_swish,
    "GELU": gelu,
    "EXP": exp,
    "MIRROR_PAD": mirror_pad,
    "LOG": log,
    "ABS": abs_,
    "RSQRT": rsqrt,
    "LEAKY_RELU": leaky_relu,
    "L2_NORMALIZATION": l2_normalization,
    "TRANSPOSE": transpose,
    "STRIDED_SLICE": strided_slice,
    "SLICE": slice_,
    "SPLIT": split,
    "SPLIT_V": split,
    "PACK": pack,
    "UNPACK": unpack,
    "TILE": tile,
    "GATHER": gather,
    "REVERSE_V2": reverse_v2,
    "SPACE_TO_DEPTH": space_to_depth,
    "DEPTH_TO_SPACE": depth_to_space,
    "RESIZE_NEAREST_NEIGHBOR": resize_nearest_neighbor,
    "RESIZE_BILINEAR": resize_bilinear,
    "ARG_MAX": arg_max,
    "ARG_MIN": arg_max,
    "EQUAL": comparison,
    "NOT_EQUAL": comparison,
    "GREATER": comparison,
    "GREATER_EQUAL": comparison,
    "LESS": comparison,
    "LESS_EQUAL": comparison,
    "SELECT": select,
    "SELECT_V2": select,
    "SPACE_TO_BATCH_ND": space_to_batch_nd,
    "BATCH_TO_SPACE_ND": batch_to_space_nd,
    "GATHER_ND": gather_nd,
    "BROADCAST_TO": broadcast_to,
    "MEAN": mean,
    "REDUCE_MAX": reduce_max_min,
    "REDUCE_MIN": reduce_max_min,
    "MAXIMUM": maximum_minimum,
    "MINIMUM": maximum_minimum,
}


def supported() -> Sequence[str]:
    return sorted(OPS)
