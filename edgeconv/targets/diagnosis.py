"""What a .tflite is, as a whole, in one sentence: float, dynamic-range, float16, uint8 or partly float.

``edgeconv check`` on a model that was never fully quantized fails every integer op for the same
reason; one line says so (and how to get a full-integer model) instead of a dtype violation per op.
"""

from __future__ import annotations

from .._record import record
from ..converters.tflite_reader import OpInfo, TensorType, TFLiteModel

_FLOATS = {TensorType.FLOAT32, TensorType.FLOAT16}
_INTEGERS = {TensorType.INT8, TensorType.UINT8, TensorType.INT16}
# Ops that carry the model's weights: their constant inputs tell how the weights are stored.
_WEIGHTED = {"CONV_2D", "DEPTHWISE_CONV_2D", "FULLY_CONNECTED", "TRANSPOSE_CONV", "CONV_3D", "BATCH_MATMUL",
             "UNIDIRECTIONAL_SEQUENCE_LSTM", "EMBEDDING_LOOKUP"}
FIX = ("build it with edgeconv (quantization.mode: int8, calibrated on real data) or convert it with full-integer "
       "post-training quantization")


@record
class Diagnosis:
    kind: str  # float, dynamic, float16, uint8, partly_float
    sentence: str
    explains_every_op: bool  # each op fails an integer target for this one reason: per-op lines add nothing


def _computes(op: OpInfo) -> set[TensorType]:
    """Element types of the op's activations (its non-constant inputs and its outputs)."""
    return {t.dtype for t in (*op.inputs, *op.outputs) if t is not None and not t.constant}


def _all(ops: list[OpInfo]) -> str:
    return "its only op computes" if len(ops) == 1 else f"all {len(ops)} ops compute"


def diagnose(model: TFLiteModel) -> Diagnosis | None:
    ops = [op for op in model.ops if op.type not in ("QUANTIZE", "DEQUANTIZE")]
    if not ops:
        return None
    computes = {id(op): _computes(op) for op in ops}
    float_ops = [op for op in ops if computes[id(op)] & _FLOATS]
    integer_ops = [op for op in ops if computes[id(op)] & _INTEGERS and not computes[id(op)] & _FLOATS]
    weights = {t.dtype for op in ops if op.type in _WEIGHTED for t in op.inputs if t is not None and t.constant}
    dequantized = {t.dtype for op in model.ops if op.type == "DEQUANTIZE" for t in op.inputs
                   if t is not None and t.constant}
    if float_ops and not integer_ops:
        if TensorType.FLOAT16 in dequantized:
            return Diagnosis("float16", "the model is float16-quantized: float16 weights expanded to float32, "
                             f"{_all(ops)} in float; for integer targets {FIX}", True)
        if weights & {TensorType.INT8, TensorType.UINT8}:
            return Diagnosis("dynamic", "the model is dynamic-range quantized: int8 weights, float32 activations "
                             f"({_all(ops)} in float); for integer targets {FIX}", True)
        return Diagnosis("float", f"the model is not quantized: {_all(ops)} in float; {FIX}", True)
    if float_ops:
        names = sorted({op.type for op in float_ops})
        return Diagnosis("partly_float", f"{len(float_ops)} of {len(ops)} ops compute in float ("
                         f"{', '.join(names[:5])}{', ...' if len(names) > 5 else ''}); they run only where a target "
                         "runs float ops", False)
    computed = set().union(*(computes[id(op)] for op in integer_ops))
    if TensorType.UINT8 in computed and TensorType.INT8 not in computed:
        return Diagnosis("uint8", "the model is uint8-quantized (the TF1 quantization-aware scheme); targets whose "
                         "kernels are int8-only (each target's tensor_dtype rules say which) need the TF2 converter's "
                         "int8 scheme", False)
    return None
