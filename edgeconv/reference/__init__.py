"""A plain NumPy interpreter for full-integer .tflite models: every op as TFLite's reference kernels compute
it (``edgeconv.reference.ops``, one function per op; ``fixedpoint`` for the requantization arithmetic), so a
porting engineer can reproduce a model's outputs, and every tensor between, by hand.

No TensorFlow and no LiteRT in its code path. ``run(model, inputs)`` returns every tensor by name and a trace
per op (GEMM shape, im2col geometry, multipliers and shifts, the accumulator range reached, saturation).
Work in progress (issue 34): the ops of :data:`SUPPORTED`; any other op is refused by name.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .._record import record
from ..converters.tflite_reader import OpInfo, SubgraphInfo, TFLiteModel, read_tflite
from ..errors import EdgeconvError
from ..verify.memory import tensor_bytes
from .ops import OPS, Unsupported

SUPPORTED = tuple(sorted(OPS))
# The largest tensor the reference computes: a model file's own bound. A .tflite is a pull request's to
# write, and a tiny one can declare (or make, with TILE's multiples or PAD's paddings) a tensor of hundreds
# of GiB: it is refused by name before anything is allocated, and an allocation that fails all the same (an
# op's working arrays, a shape the file did not declare) is this model's error, not edgeconv's.
MAX_TENSOR_BYTES = 2 * 1024**3


class ReferenceError(EdgeconvError):
    """The reference cannot compute this model: an op it does not have, a float op, a missing input."""


@record
class Step:
    """One op as the reference computed it."""

    index: int
    op: str
    outputs: tuple[str, ...]
    trace: Mapping[str, Any]


@record
class Computed:
    tensors: dict[str, np.ndarray]  # every tensor of the main subgraph by name: inputs, constants, each op's outputs
    steps: tuple[Step, ...]

    def outputs(self, model: TFLiteModel) -> dict[str, np.ndarray]:
        return {model.main.tensors[i].name: self.tensors[model.main.tensors[i].name] for i in model.main.outputs}


def input_keys(model: TFLiteModel) -> dict[str, int]:
    """The names an input may be given by: its tensor name, or its key in the first signature."""
    graph = model.main
    return {**{k: i for sig in model.signatures[:1] for k, i in sig.inputs.items()},
            **{graph.tensors[i].name: i for i in graph.inputs}}


def run(model: TFLiteModel | str | Path, inputs: Mapping[str, np.ndarray]) -> Computed:
    """Run the main subgraph on ``inputs`` (by input tensor name or signature key, each with the model's
    shape and dtype) and return every tensor and the trace."""
    if not isinstance(model, TFLiteModel):
        model = read_tflite(model)
    graph = model.main
    keys = input_keys(model)
    values: dict[int, np.ndarray] = {}
    for name, array in inputs.items():
        if name not in keys:
            names = ", ".join(graph.tensors[i].name for i in graph.inputs)
            raise ReferenceError(f"no model input {name!r} (inputs: {names})")
        spec = graph.tensors[keys[name]]
        array = np.asarray(array)
        if tuple(array.shape) != tuple(spec.shape) or array.dtype != np.dtype(spec.dtype.value):
            raise ReferenceError(f"input {name!r} is {array.dtype} {list(array.shape)}, the model takes "
                                 f"{spec.dtype.value} {list(spec.shape)}")
        values[keys[name]] = array
    missing = [graph.tensors[i].name for i in graph.inputs if i not in values]
    if missing:
        raise ReferenceError(f"inputs not given: {', '.join(missing)}")
    steps = []
    for op in graph.ops:
        if any(t is not None and t.is_float for t in (*op.inputs, *op.outputs)) and op.type not in (
                "QUANTIZE", "DEQUANTIZE"):
            raise ReferenceError(_float_op(op, graph))
        fn = OPS.get(op.type)
        if fn is None:
            raise ReferenceError(f"op #{op.index} {op.label} is not computed by the reference (it computes "
                                 f"{', '.join(SUPPORTED)})")
        args: list[np.ndarray | None] = []
        for t in op.inputs:
            if t is None:
                args.append(None)
            elif t.index in values:
                args.append(values[t.index])
            else:
                const = model.constant(t)
                if const is None:
                    raise ReferenceError(f"op #{op.index} {op.type}: input '{t.name}' has no value")
                args.append(const)
        too_large = _too_large(op)
        if too_large:
            raise ReferenceError(too_large)
        try:
            outs, trace = fn(op, model, args)
        except Unsupported as exc:
            raise ReferenceError(f"op #{op.index} {op.type}: {exc}") from None
        except (MemoryError, ValueError) as exc:  # numpy's: its message gives the size it asked for
            if isinstance(exc, ValueError) and not _TOO_BIG.search(str(exc)):
                raise
            raise ReferenceError(f"op #{op.index} {op.type}: computing it needs more memory than this machine has "
                                 f"({exc})") from None
        for t, v in zip(op.outputs, outs, strict=True):
            values[t.index] = v
        steps.append(Step(op.index, op.type, tuple(t.name for t in op.outputs), trace))
    tensors = {graph.tensors[i].name: v for i, v in values.items()}
    return Computed(tensors, tuple(steps))


# numpy's ValueError for an array whose size does not fit an address (it raises MemoryError below that)
_TOO_BIG = re.compile(r"array is too big|[Mm]aximum allowed size|maximum possible size")


def _too_large(op: OpInfo) -> str | None:
    """Why ``op``'s declared outputs are beyond the reference (:data:`MAX_TENSOR_BYTES`), or None."""
    for t in (t for t in op.outputs if t is not None):
        size = tensor_bytes(t)  # as the arena estimate counts it
        if size > MAX_TENSOR_BYTES:
            return (f"op #{op.index} {op.type}: its output '{t.name}' {list(t.shape)} holds {t.elements:,} values "
                    f"({size / 1024**3:,.1f} GiB); the reference computes tensors of at most "
                    f"{MAX_TENSOR_BYTES // 1024**3} GiB")
    return None


def _float_op(op: OpInfo, graph: SubgraphInfo) -> str:
    """Why a float op stops the reference, in the model's terms: a float model is to be quantized; a quantized
    one that keeps an op in float (the converter has no integer form of it, and puts it between a DEQUANTIZE
    and a QUANTIZE) cannot be made full-integer by quantizing again."""
    head = f"op #{op.index} {op.label} computes in float: the reference runs full-integer models"
    if any(t.dtype.value in _INTEGER_ACTIVATIONS for other in graph.ops for t in other.outputs):
        return (f"{head}, and the converter kept this one in float between the model's integer ops (it has no "
                "integer form of it; `edgeconv check` lists such ops under generic-int8)")
    return f"{head} (quantize it with edgeconv, quantization.mode: int8)"


_INTEGER_ACTIVATIONS = ("int8", "uint8", "int16")


__all__ = ["SUPPORTED", "Computed", "ReferenceError", "Step", "input_keys", "run"]
