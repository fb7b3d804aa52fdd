"""Constraints on an op's builtin options (activations, dilation, strides, block sizes)."""

from __future__ import annotations

from typing import Any

from ...converters.tflite_reader import OpInfo, TFLiteModel
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
    """The dilation is the same in x and y."""
    w, h = op.options.get("dilation_w_factor", 1), op.options.get("dilation_h_factor", 1)
    return (w == h), f"dilation {h}x{w} (h x w)"


@constraint
def unit_window_stride(op: OpInfo, model: TFLiteModel) -> Check:
    """A 1x1 pooling window has stride 1."""
    window = (op.options.get("filter_height"), op.options.get("filter_width"))
    strides = (op.options.get("stride_h", 1), op.options.get("stride_w", 1))
    if window != (1, 1):
        return OK
    return (strides == (1, 1)), f"1x1 window with stride {strides[0]}x{strides[1]}"
