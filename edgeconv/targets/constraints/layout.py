"""Constraints on shapes, ranks, operand counts, constant operands and axes."""

from __future__ import annotations

from ...converters.tflite_reader import OpInfo, TensorInfo, TFLiteModel
from .registry import OK, Check, constraint

REDUCERS = ("MEAN", "SUM", "REDUCE_MAX", "REDUCE_MIN", "REDUCE_PROD", "REDUCE_ANY", "REDUCE_ALL")
PADS = ("PAD", "PADV2", "MIRROR_PAD")


def _dims(t: TensorInfo) -> str:
    return "x".join(str(d) for d in t.shape) or "a scalar"


def _activations(op: OpInfo) -> list[TensorInfo]:
    return [t for t in (*op.inputs, *op.outputs) if t is not None and not t.constant]


@constraint
def tensor_outer_dims_one(op: OpInfo, model: TFLiteModel, *, inner: int) -> Check:
    """Activation tensors have at most {inner} dimensions larger than 1, all among the {inner}
    innermost (so the batch dimension is 1)."""
    bad = [f"'{t.name}' is {_dims(t)}" for t in _activations(op)
           if len(t.shape) > inner and any(d > 1 for d in t.shape[:-inner])]
    return (not bad), "; ".join(bad)


@constraint
def output_elements_known(op: OpInfo, model: TFLiteModel, *, maximum: int) -> Check:
    """The output has at most {maximum} elements, the largest size this op was seen mapped at; past it the
    op may not be mapped (the limit is not documented)."""
    out = op.outputs[0] if op.outputs else None
    if out is None or out.elements <= maximum:
        return OK
    return False, f"output '{out.name}' is {_dims(out)} = {out.elements:,} elements"


@constraint
def output_elements_mapped(op: OpInfo, model: TFLiteModel, *, maximum: int) -> Check:
    """The output has at most {maximum} elements; the compiler leaves this op with a larger output on the
    CPU ("not mapped due to some unspecified limitation")."""
    out = op.outputs[0] if op.outputs else None
    if out is None or out.elements <= maximum:
        return OK
    return False, f"output '{out.name}' is {_dims(out)} = {out.elements:,} elements"


@constraint
def reshape_size_mapped(op: OpInfo, model: TFLiteModel, *, maximum: int, rank4_maximum: int) -> Check:
    """The output has at most {maximum} elements, or at most {rank4_maximum} when the reshape keeps rank 4
    (it splits or merges dimensions of a 4-D tensor); the compiler leaves a larger reshape on the CPU ("not
    mapped due to some unspecified limitation")."""
    src = op.inputs[0] if op.inputs else None
    out = op.outputs[0] if op.outputs else None
    if out is None or out.elements <= maximum:
        return OK
    keeps = src is not None and len(src.shape) == 4 and len(out.shape) == 4
    if keeps and out.elements <= rank4_maximum:
        return OK
    shape = f"{_dims(src)} -> " if src is not None else ""
    limit = (f"over {rank4_maximum:,} for a rank-4 reshape" if keeps
             else f"over {maximum:,} for a reshape that changes the rank")
    return False, f"output '{out.name}' is {shape}{_dims(out)} = {out.elements:,} elements, {limit}"


@constraint
def input_rank(op: OpInfo, model: TFLiteModel, *, ranks: list[int]) -> Check:
    """The first input has rank {ranks}."""
    t = op.inputs[0] if op.inputs else None
    if t is None or len(t.shape) in ranks:
        return OK
    return False, f"input '{t.name}' has rank {len(t.shape)} ({_dims(t)})"


def _axes(op: OpInfo, model: TFLiteModel) -> list[int] | None:
    """Reduction axes of a reducer, normalized to non-negative; None when not constant."""
    if len(op.inputs) < 2 or op.inputs[0] is None:
        return None
    values = model.constant_values(op.inputs[1])
    if values is None:
        return None
    rank = len(op.inputs[0].shape)
    return sorted({int(a) % rank for a in values}) if rank else []


@constraint
def axis_not_batch(op: OpInfo, model: TFLiteModel) -> Check:
    """The op does not reduce, pad or pack along the batch dimension (axis 0)."""
    if op.type in REDUCERS:
        axes = _axes(op, model)
        if axes is None:
            return False, "the reduction axes are not constant"
        return (0 not in axes), f"reduces over axes {axes}, including the batch axis 0"
    if op.type in PADS:
        paddings = model.constant_values(op.inputs[1]) if len(op.inputs) > 1 else None
        if paddings is None:
            return False, "the paddings are not constant"
        first = [int(v) for v in paddings[:2]]
        return (first == [0, 0]), f"pads the batch axis by {first}"
    if op.type == "PACK":
        return (op.options.get("axis", 0) != 0), "packs along axis 0 (the batch axis)"
    return OK


@constraint
def reduce_depth_multiple(op: OpInfo, model: TFLiteModel, *, multiple: int) -> Check:
    """A reduction over the innermost (depth) dimension needs a depth that is a multiple of {multiple}."""
    axes = _axes(op, model)
    x = op.inputs[0] if op.inputs else None
    if axes is None or x is None or not x.shape or len(x.shape) - 1 not in axes:
        return OK
    depth = x.shape[-1]
    return (depth % multiple == 0), f"reduces over a depth of {depth}"


@constraint
def innermost_elements_max(op: OpInfo, model: TFLiteModel, *, maximum: int) -> Check:
    """The input is 1-D (only its innermost dimension is larger than 1) with at most {maximum} elements."""
    x = op.inputs[0] if op.inputs else None
    if x is None:
        return OK
    if any(d > 1 for d in x.shape[:-1]):
        return False, f"input '{x.name}' is {_dims(x)}, not 1-D"
    return (x.elements <= maximum), f"input '{x.name}' has {x.elements} elements"


@constraint
def output_innermost_only(op: OpInfo, model: TFLiteModel) -> Check:
    """The output is one-dimensional: only its innermost dimension is larger than 1."""
    out = op.outputs[0] if op.outputs else None
    if out is None or not any(d > 1 for d in out.shape[:-1]):
        return OK
    return False, f"output '{out.name}' is {_dims(out)}"


@constraint
def squeeze_leading_ones(op: OpInfo, model: TFLiteModel) -> Check:
    """Only leading dimensions of size 1 are squeezed (no data relayout)."""
    x = op.inputs[0] if op.inputs else None
    y = op.outputs[0] if op.outputs else None
    if x is None or y is None:
        return OK
    kept = [d for d in x.shape]
    while kept and kept[0] == 1 and len(kept) > len(y.shape):
        kept.pop(0)
    return (tuple(kept) == tuple(y.shape)), f"squeezes {_dims(x)} to {_dims(y)}"


@constraint
def alpha_innermost(op: OpInfo, model: TFLiteModel) -> Check:
    """The alpha (slope) tensor varies only along its innermost dimension."""
    alpha = op.inputs[1] if len(op.inputs) > 1 else None
    if alpha is None or not any(d > 1 for d in alpha.shape[:-1]):
        return OK
    return False, f"alpha '{alpha.name}' is {_dims(alpha)}"


@constraint
def constant_inputs_zero_pad(op: OpInfo, model: TFLiteModel) -> Check:
    """If an input is a constant, there are exactly 2 inputs and the constant is all zeros (a zero pad)."""
    constants = [t for t in op.inputs if t is not None and t.constant]
    if not constants:
        return OK
    if len(op.inputs) != 2:
        return False, f"{len(op.inputs)} inputs, {len(constants)} of them constant"
    values = model.constant_values(constants[0])
    quantization = constants[0].quantization
    zero = values is not None and quantization is not None and all(
        v == quantization.zero_point[0] for v in values)
    return zero, f"constant input '{constants[0].name}' is not all zeros"


@constraint
def operands_constant(op: OpInfo, model: TFLiteModel, *, inputs: list[int]) -> Check:
    """Inputs {inputs} (weights, biases, shapes, axes, paddings) are constant (or unpacked from constants by
    DEQUANTIZE of float16 data or DENSIFY of sparse data, which the runtime folds)."""
    bad = []
    for i in inputs:
        t = op.inputs[i] if i < len(op.inputs) else None
        if t is not None and not model.static(t, op.subgraph):
            bad.append(f"input {i} '{t.name}'")
    return (not bad), ("not constant: " + ", ".join(bad)) if bad else ""


@constraint
def input_present(op: OpInfo, model: TFLiteModel, *, index: int) -> Check:
    """Optional input {index} (the bias) is present."""
    present = index < len(op.inputs) and op.inputs[index] is not None
    return present, f"input {index} is missing"


@constraint
def input_count(op: OpInfo, model: TFLiteModel, *, minimum: int, maximum: int) -> Check:
    """The op has between {minimum} and {maximum} inputs."""
    n = len([t for t in op.inputs if t is not None])
    return (minimum <= n <= maximum), f"{n} inputs"


@constraint
def output_count(op: OpInfo, model: TFLiteModel, *, minimum: int, maximum: int) -> Check:
    """The op has between {minimum} and {maximum} outputs."""
    n = len(op.outputs)
    return (minimum <= n <= maximum), f"{n} outputs"


@constraint
def paddings_non_negative(op: OpInfo, model: TFLiteModel) -> Check:
    """The paddings are constant and not negative."""
    paddings = model.constant_values(op.inputs[1]) if len(op.inputs) > 1 else None
    if paddings is None:
        return False, "the paddings are not constant"
    pairs = [list(paddings[i:i + 2]) for i in range(0, len(paddings), 2)]  # [rank, 2]: before and after
    return all(v >= 0 for v in paddings), f"paddings {pairs}"


@constraint
def slice_strides_one(op: OpInfo, model: TFLiteModel) -> Check:
    """Every stride is 1 and the ellipsis, new-axis and shrink-axis masks are 0 (a plain slice)."""
    strides = model.constant_values(op.inputs[3]) if len(op.inputs) > 3 else None
    problems = []
    if strides is None:
        problems.append("the strides are not constant")
    elif any(v != 1 for v in strides):
        problems.append(f"strides {list(strides)}")
    problems += [f"{mask} {op.options[mask]}" for mask in ("ellipsis_mask", "new_axis_mask", "shrink_axis_mask")
                 if op.options.get(mask)]
    return (not problems), "; ".join(problems)
