"""Per-op cost: multiply-accumulates, the equivalent GEMM shape, and weight bytes.

GEMM shapes follow an im2col lowering: a convolution becomes an (M x K) patch matrix
times a (K x N) weight matrix, M = output positions (batch included), N = output
channels, K = values per patch. A depthwise convolution is a grouped GEMM: one
(M x K) by (K x 1) product per channel, so it is reported with N = channels and
K = kernel window. Ops that do no multiply-accumulate report 0 MACs and no GEMM.
"""

from __future__ import annotations

import math

from .._record import record
from ..converters.tflite_reader import OpInfo, TensorInfo


@record
class OpCost:
    macs: int
    gemm: tuple[int, int, int] | None  # (M, N, K)
    weight_bytes: int


def _prod(values: tuple[int, ...]) -> int:
    return math.prod(values) if values else 1


def _shape(t: TensorInfo | None) -> tuple[int, ...]:
    return t.shape if t is not None else ()


def op_cost(op: OpInfo) -> OpCost:
    weights = sum(t.nbytes for t in op.inputs if t is not None and t.constant)
    gemm = _gemm(op)
    if gemm is not None:
        m, n, k = gemm
        macs = m * n * k
    elif op.type == "UNIDIRECTIONAL_SEQUENCE_LSTM":
        macs = _lstm_macs(op)
    else:
        macs = 0
    return OpCost(macs, gemm, weights)


def _gemm(op: OpInfo) -> tuple[int, int, int] | None:
    ins = op.inputs
    out = _shape(op.outputs[0]) if op.outputs else ()
    if op.type == "CONV_2D" and len(ins) > 1 and len(out) == 4 and len(_shape(ins[1])) == 4:
        w = _shape(ins[1])  # (O, KH, KW, I)
        return out[0] * out[1] * out[2], w[0], w[1] * w[2] * w[3]
    if op.type == "DEPTHWISE_CONV_2D" and len(ins) > 1 and len(out) == 4 and len(_shape(ins[1])) == 4:
        w = _shape(ins[1])  # (1, KH, KW, O)
        return out[0] * out[1] * out[2], w[3], w[1] * w[2]
    if op.type == "TRANSPOSE_CONV" and len(ins) > 2:
        w, x = _shape(ins[1]), _shape(ins[2])  # weights (O, KH, KW, I), input (N, H, W, I)
        if len(w) == 4 and len(x) == 4:
            return x[0] * x[1] * x[2], w[0] * w[1] * w[2], w[3]
    if op.type == "FULLY_CONNECTED" and len(ins) > 1 and ins[1] is not None:
        w = _shape(ins[1])  # (N, K)
        if len(w) == 2 and w[1]:
            return _prod(_shape(ins[0])) // w[1], w[0], w[1]
    if op.type == "BATCH_MATMUL" and len(ins) > 1:
        a, b = _shape(ins[0]), _shape(ins[1])
        if len(a) >= 2 and len(b) >= 2:
            adj_x, adj_y = op.options.get("adj_x", False), op.options.get("adj_y", False)
            m = a[-1] if adj_x else a[-2]
            k = a[-2] if adj_x else a[-1]
            n = b[-2] if adj_y else b[-1]
            batch = _prod(out[:-2]) if len(out) > 2 else 1
            return batch * m, n, k
    return None


def _lstm_macs(op: OpInfo) -> int:
    if not op.inputs or not op.outputs:
        return 0
    x, out = _shape(op.inputs[0]), _shape(op.outputs[0])
    if len(x) != 3 or len(out) != 3:
        return 0
    steps = x[0] * x[1]  # batch x time (either layout multiplies the same)
    units, features = out[2], x[2]
    return steps * 4 * units * (features + units)
