"""Constraints on an op's builtin options (activations, dilation, strides, block sizes)."""

from __future__ import annotations

from typing import Any

from ...converters.tflite_reader import OpInfo, TensorInfo, TFLiteModel
from .registry import OK, Check, constraint


@constraint
def fused_activation(op: OpInfo, model: TFLiteModel, *, allowed: list[str]) -> Check:
    """The fused activation function is one of: {allowed}."""
    act = op.options.get("fused_activation_function", "NONE")
    return (act in allowed), f"fused activation {act}"


@constraint
def option_value(op: OpInfo, model: TFLiteModel, *, option: str, allowed: list[Any]) -> Check:
    """Option {option} is one of: {allowed}."""
    if option not in op.options:
        return OK
    value = op.options[option]
    return (value in allowed), f"{option} is {value}"


@constraint
def option_min(op: OpInfo, model: TFLiteModel, *, option: str, minimum: int) -> Check:
    """Option {option} is at least {minimum}."""
    value = op.options.get(option)
    return (value is None or value >= minimum), f"{option} is {value}"


@constraint
def dilation_equal(op: OpInfo, model: TFLiteModel) -> Check:
    """The dilation is the same in x and y (a dilation along a kernel axis of size 1 has no effect and does
    not count)."""
    w, h = op.options.get("dilation_w_factor", 1), op.options.get("dilation_h_factor", 1)
    weights = op.inputs[1] if len(op.inputs) > 1 else None
    # [out, h, w, in] (depthwise: [1, h, w, channels])
    if weights is not None and len(weights.shape) == 4 and (weights.shape[2] == 1 or weights.shape[1] == 1):
        return OK
    return (w == h), f"dilation {h}x{w} (h x w)"


@constraint
def align_corners_identity(op: OpInfo, model: TFLiteModel) -> Check:
    """align_corners is false, or the output has the input's height and width (a resize to the same size)."""
    if not op.options.get("align_corners"):
        return OK
    x = op.inputs[0] if op.inputs else None
    y = op.outputs[0] if op.outputs else None
    if x is not None and y is not None and len(x.shape) == 4 and len(y.shape) == 4 and x.shape[1:3] == y.shape[1:3]:
        return OK
    return False, f"align_corners=True resizing {_hw(x)} to {_hw(y)}"


def _hw(t: TensorInfo | None) -> str:
    return "x".join(str(d) for d in t.shape[1:3]) if t is not None and len(t.shape) == 4 else "?"


@constraint
def unit_window_stride(op: OpInfo, model: TFLiteModel) -> Check:
    """A 1x1 pooling window has stride 1."""
    window = (op.options.get("filter_height"), op.options.get("filter_width"))
    strides = (op.options.get("stride_h", 1), op.options.get("stride_w", 1))
    if window != (1, 1):
        return OK
    return (strides == (1, 1)), f"1x1 window with stride {strides[0]}x{strides[1]}"
