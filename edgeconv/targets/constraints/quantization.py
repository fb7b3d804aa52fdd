"""Constraints on quantization parameters: scale ratios, signedness, kernel dtypes."""

from __future__ import annotations

from ...converters.tflite_reader import OpInfo, TensorInfo, TensorType, TFLiteModel
from .registry import OK, Check, DtypeSpecs, constraint

_SIGNED = {TensorType.INT8: True, TensorType.INT16: True, TensorType.UINT8: False}


def _dims(t: TensorInfo) -> str:
    return "x".join(str(d) for d in t.shape) or "a scalar"


def _scale(t: TensorInfo | None) -> float | None:
    if t is None or t.quantization is None or not t.quantization.scale:
        return None
    return t.quantization.scale[0]


@constraint
def input_output_scale_ratio(op: OpInfo, model: TFLiteModel, *, minimum: float, maximum: float) -> Check:
    """Each quantized input's scale divided by the output's scale is between {minimum} and {maximum}."""
    out = _scale(op.outputs[0]) if op.outputs else None
    if not out:
        return OK
    bad = []
    for i, t in enumerate(op.inputs):
        s = _scale(t)
        if s is not None and t is not None and not t.dtype.is_float and not minimum <= s / out <= maximum:
            bad.append(f"input {i} / output scale = {s / out:.6g}")
    return (not bad), "; ".join(bad)


@constraint
def product_scale_ratio(op: OpInfo, model: TFLiteModel, *, minimum: float, maximum: float) -> Check:
    """The product of the two input scales divided by the output scale is between {minimum} and {maximum}."""
    scales = [_scale(t) for t in op.inputs[:2]]
    out = _scale(op.outputs[0]) if op.outputs else None
    if not out or None in scales or len(scales) < 2:
        return OK
    ratio = scales[0] * scales[1] / out  # type: ignore[operator]
    return (minimum <= ratio <= maximum), f"input scales product / output scale = {ratio:.6g}"


@constraint
def requantize_same_sign(op: OpInfo, model: TFLiteModel) -> Check:
    """A requantization (8-bit input) keeps the signedness: int8 to int8 or uint8 to uint8."""
    x = op.inputs[0] if op.inputs else None
    y = op.outputs[0] if op.outputs else None
    if x is None or y is None or x.dtype not in _SIGNED or y.dtype not in _SIGNED:
        return OK
    return (_SIGNED[x.dtype] == _SIGNED[y.dtype]), f"{x.dtype.value} to {y.dtype.value}"


@constraint
def kernel_dtype(op: OpInfo, model: TFLiteModel, *, dtypes: DtypeSpecs) -> Check:
    """An optimized kernel exists for the op's input dtype ({dtypes})."""
    x = next((t for t in op.inputs if t is not None and not t.constant), None)
    if x is None:
        return OK
    return (x.dtype.value in dtypes), f"no optimized kernel for {x.dtype.value} input"


@constraint
def optimized_kernel(op: OpInfo, model: TFLiteModel) -> Check:
    """An optimized kernel exists for the op."""
    return False, "only the portable reference kernel exists"


@constraint
def inputs_same_shape(op: OpInfo, model: TFLiteModel) -> Check:
    """Both inputs have the same shape (no broadcasting)."""
    a = op.inputs[0] if op.inputs else None
    b = op.inputs[1] if len(op.inputs) > 1 else None
    if a is None or b is None or a.shape == b.shape:
        return OK
    return False, f"broadcasts {_dims(a)} with {_dims(b)}"


@constraint
def no_hybrid(op: OpInfo, model: TFLiteModel) -> Check:
    """Weights are quantized only when the activations are too (no hybrid float-activation,
    8-bit-weight kernels)."""
    x = op.inputs[0] if op.inputs else None
    weights = [t for t in op.inputs[1:] if t is not None and t.constant and t.dtype in _SIGNED]
    if x is None or not x.dtype.is_float or not weights:
        return OK
    return False, f"float32 input '{x.name}' with {weights[0].dtype.value} weights '{weights[0].name}'"


@constraint
def softmax_input_scale(op: OpInfo, model: TFLiteModel, *, integer_bits: int) -> Check:
    """For an int8 input, beta x input scale x 2^(31 - {integer_bits}) is greater than 1 (the fixed-point
    input multiplier must be at least 1; below it the kernel aborts)."""
    x = op.inputs[0] if op.inputs else None
    scale = _scale(x)
    if x is None or x.dtype is not TensorType.INT8 or scale is None:
        return OK
    multiplier = float(op.options.get("beta", 1.0)) * scale * 2.0 ** (31 - integer_bits)
    return multiplier > 1.0, f"input scale {scale:.4g} gives a multiplier of {multiplier:.4g}"


@constraint
def same_quantization(op: OpInfo, model: TFLiteModel, *, dtypes: DtypeSpecs) -> Check:
    """For {dtypes} data, every quantized input and output has the same scale and zero point."""
    data = [t for t in (*op.inputs, *op.outputs) if t is not None and t.dtype.value in dtypes
            and t.quantization is not None and t.quantization.scale and not t.quantization.per_axis]
    if len(data) < 2:
        return OK
    first = data[0].quantization
    assert first is not None
    differ = [t for t in data[1:] if t.quantization is not None and (
        abs(t.quantization.scale[0] - first.scale[0]) > 1e-6 * first.scale[0]
        or (t.quantization.zero_point or (0,))[0] != (first.zero_point or (0,))[0])]
    if not differ:
        return OK
    t = differ[0]
    assert t.quantization is not None
    return False, (f"'{data[0].name}' has scale {first.scale[0]:.6g} and zero point {(first.zero_point or (0,))[0]}, "
                   f"'{t.name}' scale {t.quantization.scale[0]:.6g} and zero point "
                   f"{(t.quantization.zero_point or (0,))[0]}")
