"""Memory a microcontroller needs for the model: flash (the .tflite) and an estimate of the
TFLite Micro tensor arena.

The arena holds the activations, planned like TFLM's GreedyMemoryPlanner does: every
non-constant tensor lives from the op that writes it to the last op that reads it;
buffers are placed largest first at the lowest 16-byte-aligned offset that overlaps no
buffer alive at the same time. On top of that TFLM keeps per-tensor and per-op
bookkeeping (eval tensors, node structs, op data such as per-channel multipliers),
estimated from the model; and the stated margin covers what differs between builds of
TFLM and kernels (e.g. CMSIS-NN scratch buffers).
"""

from __future__ import annotations

from typing import Any

from .. import report_model as rm
from ..converters.tflite_reader import TFLiteModel

ALIGN = 16
MARGIN = 0.25  # stated headroom over the estimate
# TFLM bookkeeping, bytes (RecordingMicroAllocator categories, 32/64-bit builds differ slightly).
EVAL_TENSOR = 24  # TfLiteEvalTensor, every tensor
NODE = 64  # NodeAndRegistration, every op
IO_TENSOR = 64 + 32  # persistent TfLiteTensor + its quantization data, every model input and output
OP_DATA = 96  # OpData of a kernel (multipliers, shifts, offsets), every op
PER_CHANNEL = 8  # per-channel output multiplier and shift, conv/depthwise/fully-connected
FIXED = 768  # subgraph and allocator structures
_PER_CHANNEL_OPS = ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV")


def _aligned(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def plan_activations(model: TFLiteModel) -> int:
    """Peak bytes of the activation buffers, greedy first fit by size over their lifetimes."""
    sg = model.main
    first: dict[int, int] = {i: 0 for i in sg.inputs}
    last: dict[int, int] = {}
    end = len(sg.ops)
    for k, op in enumerate(sg.ops):
        for t in op.inputs:
            if t is not None and t.nbytes == 0:
                first.setdefault(t.index, k)
                last[t.index] = k
        for t in op.outputs:
            first.setdefault(t.index, k)
            last[t.index] = max(last.get(t.index, k), k)
    for i in sg.outputs:
        last[i] = end
    buffers = []
    for index, start in first.items():
        t = sg.tensors[index]
        if t.nbytes or t.is_variable:
            continue
        size = _aligned(tensor_bytes(t))
        buffers.append((size, start, last.get(index, start), index))
    placed: list[tuple[int, int, int, int]] = []  # (offset, size, first, last)
    peak = 0
    for size, start, stop, _ in sorted(buffers, key=lambda b: (-b[0], b[3])):
        offset = 0
        moved = True  # move up past every overlapping buffer alive at the same time, until the spot is free
        while moved:
            moved = False
            for o, s, a, b in placed:
                if a <= stop and start <= b and offset < o + s and o < offset + size:
                    offset, moved = _aligned(o + s), True
        placed.append((offset, size, start, stop))
        peak = max(peak, offset + size)
    return peak


def tensor_bytes(t: Any) -> int:
    """The bytes a tensor of the model takes as it declares it (a dynamic dimension counted as 1)."""
    count = 1
    for d in t.shape:
        count *= max(int(d), 1)
    width = {"int8": 1, "uint8": 1, "bool": 1, "int16": 2, "float16": 2, "float32": 4, "int32": 4,
             "int64": 8, "float64": 8}.get(t.dtype.value, 4)
    return count * width


def estimate(model: TFLiteModel) -> rm.Memory:
    """Flash and arena bytes, with how the arena estimate is made up."""
    sg = model.main
    activations = plan_activations(model)
    channels = sum(op.outputs[0].shape[-1] for op in sg.ops if op.type in _PER_CHANNEL_OPS and op.outputs
                   and op.outputs[0].shape)
    bookkeeping = (EVAL_TENSOR * len(sg.tensors) + NODE * len(sg.ops) + OP_DATA * len(sg.ops)
                   + IO_TENSOR * (len(sg.inputs) + len(sg.outputs)) + PER_CHANNEL * channels + FIXED)
    arena = int((activations + bookkeeping) * (1 + MARGIN))
    return {"flash_bytes": model.size, "arena_bytes": arena, "activations_bytes": activations,
            "bookkeeping_bytes": bookkeeping, "margin": MARGIN,
            "method": "greedy activation plan (TFLM GreedyMemoryPlanner rules) + estimated TFLM bookkeeping, "
                      f"+{MARGIN:.0%} margin"}
