"""The exported model's input and output types against the pipeline's quantization section."""

from __future__ import annotations

from collections.abc import Mapping

from ..errors import ModelError
from .tflite_reader import TFLiteModel

# What quantization.input_type / output_type can say (config.IOType, less auto): a fix names only these.
IO_TYPES = ("int8", "uint8", "int16", "float32")
# Source model dtypes the converter passes through unquantized (raw uint8 pixels, ids, an argmax's class).
INTEGER_DTYPES = frozenset({"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"})


def check_io_types(model: TFLiteModel, input_type: str, output_type: str, int16_ops: bool = False,
                   integers: Mapping[str, Mapping[str, str]] | None = None) -> None:
    """The .tflite must have the input/output types the report will claim. A model whose output the
    converter keeps float (an op with no quantized kernel feeds it) is a property of the model: a clear
    error naming the output, the op and the fix, not a crash. ``integers``: per ``"input"`` and
    ``"output"``, the source model's tensors that hold integers (raw pixels, ids, an argmax: name -> dtype),
    which no quantization changes: such a tensor keeps its dtype whatever ``input_type`` or ``output_type``
    says."""
    sg = model.main
    sig = model.signatures[0] if model.signatures else None
    names = {v: k for k, v in sig.outputs.items()} if sig else {}
    names.update({v: k for k, v in sig.inputs.items()} if sig else {})
    problems = []
    for which, indices, want in (("input", sg.inputs, input_type), ("output", sg.outputs, output_type)):
        for index in indices:
            tensor = sg.tensors[index]
            if tensor.dtype.value == want:
                continue
            name = names.get(index, tensor.name)
            if (integers or {}).get(which, {}).get(name) == tensor.dtype.value:
                continue
            op = model.producer(tensor)
            if int16_ops and tensor.dtype.value == "int16":
                problems.append(f"model {which} '{name}' is int16, not the configured {want}: quantization.int16_ops "
                                f"gives int16 activations to the op that {'reads' if which == 'input' else 'writes'} "
                                "it. Fix: leave that op out of int16_ops")
                continue
            cause = f" (written by op #{op.index} {op.label} '{op.name}')" if op is not None else ""
            replace = f"replace {op.label} with an op the converter quantizes" if op is not None else ""
            if tensor.dtype.value in IO_TYPES:
                fix = f"set quantization.{which}_type: {tensor.dtype.value}" + (f", or {replace}" if replace else "")
            else:  # no setting gives this dtype (int32, int64, bool): the model must change
                fix = replace or f"give the model's {which} '{name}' a float or int8 dtype"
            problems.append(f"the converter kept model {which} '{name}' {tensor.dtype.value}, not the configured "
                            f"{want}{cause}: the model has an op the converter does not quantize there. Fix: {fix}")
    if problems:
        raise ModelError("; ".join(problems))
