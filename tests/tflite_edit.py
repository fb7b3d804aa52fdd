"""Hand-edit a .tflite (TF-free) to make models the converter would never emit:
the broken or tampered files the target rules exist to catch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import flatbuffers
from ai_edge_litert import schema_py_generated as schema


def edit(data: bytes, change: Callable[[Any], None]) -> bytes:
    model = schema.ModelT.InitFromPackedBuf(bytearray(data), 0)
    change(model)
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def tensor(model: Any, name: str) -> Any:
    for t in model.subgraphs[0].tensors:
        if t.name.decode() == name:
            return t
    raise KeyError(name)
