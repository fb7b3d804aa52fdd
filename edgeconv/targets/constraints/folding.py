"""Constraints on ops a runtime folds into the ops that read them (judged after those ops)."""

from __future__ import annotations

from collections.abc import Mapping

from ...converters.tflite_reader import OpInfo, TensorType, TFLiteModel
from .registry import OK, Check, placement_constraint


@placement_constraint
def consumers_delegated(op: OpInfo, model: TFLiteModel, placed: Mapping[tuple[int, int], str]) -> Check:
    """A dequantized float16 constant is unpacked into the ops that read it: the op runs in the delegate
    only when every op that reads its output does."""
    source = op.inputs[0] if op.inputs else None
    if source is None or not source.constant or source.dtype is not TensorType.FLOAT16 or not op.outputs:
        return OK
    readers = model.readers(op.outputs[0].index, op.subgraph)
    outside = [o for o in readers if placed.get((o.subgraph, o.index)) != "supported"]
    if not outside:
        return OK
    said = ", ".join(f"#{o.index} {o.label} ({placed.get((o.subgraph, o.index), 'unknown')})" for o in outside)
    return False, f"read by {said}, which the delegate does not run: the float32 copy stays with the interpreter"
