"""How much parameter memory an accelerator's compiler lays out for the ops it maps, and how much of it
it can cache on-chip: the estimate the Edge TPU compiler's summary leads with ("On-chip memory used for
caching model parameters", "Off-chip memory used for streaming uncached model parameters").

The layout is a target file's ``parameter_memory`` section (facts with their source); this module applies
it. Each convolution-like op is a weight matrix whose rows are output channels: the rows are padded to a
multiple of ``row_multiple`` (of ``wide_row_multiple`` past ``array_rows``, one pass of the array), each row
holds ``bytes_per_row`` bytes of bias and requantization next to its weights, and each kernel tap's input
channels are padded to a multiple of ``input_multiple``. A fully-connected layer's rows are padded to
``fc_row_multiple``. Ops with constant data the layout does not describe (LSTM cells, TRANSPOSE_CONV, ...)
count their raw bytes and are reported as not modelled.
"""

from __future__ import annotations

from collections.abc import Iterable

from .._record import record
from ..converters.tflite_reader import OpInfo, TensorInfo


@record
class ParameterMemory:
    """A target file's ``parameter_memory`` section: the compiler's parameter layout and on-chip cache."""

    array_rows: int  # rows the array computes in one pass
    row_multiple: int  # output channels are padded to a multiple of this, up to array_rows
    wide_row_multiple: int  # ... and to a multiple of this past array_rows
    fc_row_multiple: int  # a fully-connected layer's outputs are padded to a multiple of this
    input_multiple: int  # each kernel tap's input channels are padded to a multiple of this
    bytes_per_row: int  # bias and requantization stored with each output channel
    cache_min_bytes: int  # the least on-chip parameter cache the compiler reported on real models
    cache_max_bytes: int  # the most
    source: str  # source key

    def rows(self, channels: int) -> int:
        multiple = self.row_multiple if channels <= self.array_rows else self.wide_row_multiple
        return _round_up(channels, multiple)


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def _weights(op: OpInfo) -> TensorInfo | None:
    """The op's constant weight tensor (its second input), or None when the weights are computed."""
    if len(op.inputs) < 2 or op.inputs[1] is None or not op.inputs[1].constant:
        return None
    return op.inputs[1]


def op_parameter_bytes(op: OpInfo, layout: ParameterMemory) -> tuple[int, bool]:
    """Parameter bytes the compiler lays out for one mapped op, and whether the layout describes the op
    (False: its raw constant bytes are counted instead)."""
    weights = _weights(op)
    shape = tuple(max(0, d) for d in weights.shape) if weights is not None else ()  # a corrupt file's -1: none
    if op.type == "CONV_2D" and len(shape) == 4:
        out, kh, kw, inputs = shape
        return layout.rows(out) * (layout.bytes_per_row + kh * kw * _round_up(inputs, layout.input_multiple)), True
    if op.type == "DEPTHWISE_CONV_2D" and len(shape) == 4:
        _, kh, kw, channels = shape  # one input channel per output channel (times the depth multiplier)
        return layout.rows(channels) * (layout.bytes_per_row + kh * kw * _round_up(1, layout.input_multiple)), True
    if op.type == "FULLY_CONNECTED" and len(shape) == 2:
        out, depth = shape
        rows = _round_up(out, layout.fc_row_multiple)
        return rows * (layout.bytes_per_row + _round_up(depth, layout.input_multiple)), True
    raw = sum(t.nbytes for t in op.inputs if t is not None and t.constant)
    if op.type in ("CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED"):
        return raw, raw == 0  # computed weights: nothing to cache
    # An op without weights (pooling, element-wise, reshapes) keeps at most a few scalars: not counted.
    return (raw, False) if raw > 64 else (0, True)


def estimate(ops: Iterable[OpInfo], layout: ParameterMemory) -> dict[str, float]:
    """The parameter memory of the mapped ``ops``: what is cached on-chip and what streams from host
    memory on every inference, as a range where the cache's size is (it depends on the activations)."""
    total = unmodelled = 0
    for op in ops:
        size, modelled = op_parameter_bytes(op, layout)
        total += size
        unmodelled += 0 if modelled else 1
    return {
        "parameter_bytes": float(total),
        "parameters_off_chip_min_bytes": float(max(0, total - layout.cache_max_bytes)),
        "parameters_off_chip_max_bytes": float(max(0, total - layout.cache_min_bytes)),
        "parameter_cache_min_bytes": float(layout.cache_min_bytes),
        "parameter_cache_max_bytes": float(layout.cache_max_bytes),
        "ops_not_modelled": float(unmodelled),
    }


def _size(value: float) -> str:
    for unit, scale in (("MiB", 1 << 20), ("KiB", 1 << 10)):
        if value >= scale:
            return f"{value / scale:,.2f} {unit}"
    return f"{value:,.0f} B"


def memory_line(name: str, e: dict[str, float]) -> str:
    """One line: the parameters, and what of them is cached on-chip or streams on every inference."""
    total, low, high = e["parameter_bytes"], e["parameters_off_chip_min_bytes"], e["parameters_off_chip_max_bytes"]
    cache = f"the compiler caches {_size(e['parameter_cache_min_bytes'])} to {_size(e['parameter_cache_max_bytes'])}"
    if high == 0:
        where = f"all cached on-chip ({cache})"
    elif low == 0:
        where = f"up to {_size(high)} may stream from host memory on every inference ({cache}, less with large " \
                "activations)"
    else:
        where = f"{_size(low)} to {_size(high)} stream from host memory on every inference ({cache})"
    rough = int(e.get("ops_not_modelled", 0))
    note = f"; {rough} op(s) with weights counted at their raw size" if rough else ""
    return f"{name} (parameter memory, estimated): {_size(total)} of parameters, {where}{note}"
