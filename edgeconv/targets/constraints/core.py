"""Core constraints: builtin ops, the op table, tensor dtypes, static shapes, quantization
granularity and fixed output quantization, and the single-segment placement rule."""

from __future__ import annotations

from collections.abc import Sequence

from ...converters.tflite_reader import OpInfo, TensorInfo, TensorType, TFLiteModel
from .registry import OK, Check, DtypeSpecs, constraint


def _tensors(op: OpInfo) -> list[TensorInfo]:
    return [t for t in (*op.inputs, *op.outputs) if t is not None]


@constraint
def op_builtin(op: OpInfo, model: TFLiteModel) -> Check:
    """The op is a TFLite builtin, not a custom op or a Flex (TensorFlow) op."""
    if op.custom_code is None:
        return OK
    if op.custom_code.startswith("Flex"):
        return False, (f"Flex op '{op.custom_code}': runs the TensorFlow op {op.custom_code[4:]} through "
                       "the Select-TF-ops runtime, which edge runtimes do not ship")
    floats = [t.name for t in op.outputs if t.is_float]
    island = (f"; it writes float output(s) ({', '.join(repr(n) for n in floats[:3])}): a float island in "
              "an integer model") if floats else ""
    return False, f"custom op '{op.custom_code}'{island}"


@constraint
def custom_op_known(op: OpInfo, model: TFLiteModel, *, known: list[str]) -> Check:
    """The op is a TFLite builtin or a custom op the runtime ships a kernel for ({known}); other custom
    ops and Flex (TensorFlow) ops need kernels the device does not have."""
    if op.custom_code is None or op.custom_code in known:
        return OK
    return op_builtin(op, model)


@constraint
def op_listed(op: OpInfo, model: TFLiteModel) -> Check:
    """The op type is in the target's table of supported ops."""
    # The checker decides membership (it owns the table); this only gives the text.
    return False, f"{op.label} is not in the table"


def _spec_alternatives(spec: str) -> list[str]:
    return spec.removesuffix("...").split("|")


def dtype_matches(tensor: TensorInfo, spec: str, io_tensors: set[int]) -> bool:
    for alt in _spec_alternatives(spec):
        if alt == "any":
            return True
        if alt == "float32-io":
            if tensor.dtype is TensorType.FLOAT32 and tensor.index in io_tensors:
                return True
        elif tensor.dtype.value == alt:
            return True
    return False


def expand_spec(specs: Sequence[str], count: int) -> list[str]:
    """Per-position specs for ``count`` tensors; a final ``x...`` repeats."""
    out = list(specs)
    if out and out[-1].endswith("..."):
        last = out.pop()
        while len(out) < count:
            out.append(last)
    return out


@constraint
def tensor_dtype(op: OpInfo, model: TFLiteModel, *, inputs: DtypeSpecs, outputs: DtypeSpecs) -> Check:
    """Input tensors have dtypes [{inputs}] and output tensors [{outputs}], position by position."""
    io = model.io_tensors(op.subgraph)
    problems = []
    for kind, tensors, specs in (("input", op.inputs, inputs), ("output", op.outputs, outputs)):
        expected = expand_spec(specs, len(tensors))
        if len(tensors) > len(expected):
            problems.append(f"{len(tensors)} {kind}s, expected at most {len(expected)}")
        for i, (tensor, spec) in enumerate(zip(tensors, expected)):
            if tensor is None or dtype_matches(tensor, spec, io):
                continue
            island = tensor.is_float and not tensor.constant and tensor.index not in io
            problems.append(f"{kind} {i} {'constant ' if tensor.constant else ''}'{tensor.name}' is "
                            f"{tensor.dtype.value}" + (" inside the model (a float island)" if island else "")
                            + f", expected {spec.removesuffix('...').replace('float32-io', 'float32 (model I/O)')}")
    return (not problems), "; ".join(problems)


@constraint
def shape_static(op: OpInfo, model: TFLiteModel) -> Check:
    """Every input and output tensor has a static shape (no -1 in its shape signature)."""
    dynamic = [f"'{t.name}' {list(t.shape_signature)}" for t in _tensors(op) if t.dynamic]
    return (not dynamic), ("dynamic shape: " + ", ".join(dynamic)) if dynamic else ""


@constraint
def shape_static_except_batch(op: OpInfo, model: TFLiteModel) -> Check:
    """Every input and output tensor has a static shape; a -1 in the batch dimension only (the first of the
    shape signature) is compiled at the stored batch size."""
    dynamic = [f"'{t.name}' {list(t.shape_signature)}" for t in _tensors(op)
               if any(d < 0 for d in t.shape_signature[1:])]
    return (not dynamic), ("dynamic dimension other than the batch: " + ", ".join(dynamic)) if dynamic else ""


@constraint
def activation_per_tensor(op: OpInfo, model: TFLiteModel) -> Check:
    """Activation tensors (8-bit, not constant) are quantized per tensor: one scale and one zero point."""
    bad = [f"'{t.name}' has {len(t.quantization.scale)} scales" for t in _tensors(op)
           if not t.constant and t.quantization is not None and t.quantization.per_axis
           and t.dtype in (TensorType.INT8, TensorType.UINT8)]
    return (not bad), "; ".join(bad)


@constraint
def output_quantization(op: OpInfo, model: TFLiteModel, *, scale: float, zero_point: int) -> Check:
    """The int8 output has the fixed quantization scale {scale} and zero point {zero_point}."""
    out = op.outputs[0] if op.outputs else None
    if out is None or out.dtype is not TensorType.INT8:
        return OK  # only the int8 form is fixed; a dtype problem is tensor_dtype's to report
    q = out.quantization
    if q is None:
        return False, f"output '{out.name}' has no quantization parameters"
    if abs(q.scale[0] - scale) > 1e-6 * scale or q.zero_point[0] != zero_point:
        return False, f"output '{out.name}' has scale {q.scale[0]:.8g} and zero point {q.zero_point[0]}"
    return OK


@constraint
def single_segment(op: OpInfo, model: TFLiteModel) -> Check:
    """The op does not depend on a blocking op: the compiler maps one segment, so an op it cannot map that
    reads the segment's output blocks, and every op that depends on it runs on the CPU, even ops it
    supports (ops that read only mapped tensors stay mapped)."""
    # The checker applies this rule along the data dependencies (see checker._place_segment).
    return OK


@constraint
def compiler_placement(op: OpInfo, model: TFLiteModel) -> Check:
    """The target's compiler places the op on the accelerator (checked by running the compiler on the
    model: its own decision and reason)."""
    # The compiler-backed checker applies this rule from the compiler's output; on its own it holds.
    return OK
