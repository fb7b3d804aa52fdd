"""The reader edgeconv had before it walked the flatbuffer itself: the same TFLiteModel, read through flatc's
generated Python (``ai_edge_litert.schema_py_generated``, flatbuffers and NumPy). The oracle of the
differential tests in tests/unit/test_reader.py: both must read every model alike."""

from __future__ import annotations

import hashlib
import re
from typing import Any

import numpy as np
from ai_edge_litert import schema_py_generated as schema

from edgeconv.converters.tflite_reader import (
    OpInfo,
    Quantization,
    Signature,
    SubgraphInfo,
    TensorInfo,
    TensorType,
    TFLiteModel,
)

_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


def _names(enum_class: Any) -> dict[int, str]:
    return {code: name for name, code in vars(enum_class).items() if not name.startswith("_")}


TYPES = {code: TensorType[name] for code, name in _names(schema.TensorType).items() if name in TensorType.__members__}
OPS = _names(schema.BuiltinOperator)
OPTIONS = _names(schema.BuiltinOptions)
ACTIVATIONS = _names(schema.ActivationFunctionType)
PADDINGS = _names(schema.Padding)
WEIGHTS_FORMATS = _names(schema.FullyConnectedOptionsWeightsFormat)


def _text(raw: bytes | None, kept: str = "") -> str:
    """A string as edgeconv reads one: UTF-8, and a character that is not printable (``kept`` aside: a
    description's newline and tab) written as U+FFFD."""
    text = raw.decode("utf-8", "replace") if raw else ""
    return "".join(c if c.isprintable() or c in kept else "\ufffd" for c in text)


def _ints(length: int, as_numpy: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in as_numpy()) if length else ()


def parse(data: bytes, shown: str = "<bytes>") -> TFLiteModel:
    """``data`` as flatc's object API reads it (no checks: the oracle reads valid models only)."""
    model = schema.Model.GetRootAsModel(data, 0)
    buffers: list[tuple[int, int]] = []
    for b in range(model.BuffersLength()):
        buf = model.Buffers(b)
        if buf.Offset() > 1:
            buffers.append((int(buf.Offset()), int(buf.Size())))
        else:
            field = buf._tab.Offset(4)
            start = buf._tab.Vector(field) if field else 0
            buffers.append((int(start), int(buf.DataLength())))
    opcodes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        custom = _text(oc.CustomCode()) if OPS[code] == "CUSTOM" else None
        opcodes.append((OPS[code], int(oc.Version()), custom))
    sizes = [size for _, size in buffers]
    subgraphs = tuple(_subgraph(model, s, opcodes, sizes) for s in range(model.SubgraphsLength()))
    signatures = []
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        maps = []
        for length, get in ((sig.InputsLength(), sig.Inputs), (sig.OutputsLength(), sig.Outputs)):
            maps.append({_text(get(j).Name()): int(get(j).TensorIndex()) for j in range(length)})
        signatures.append(Signature(_text(sig.SignatureKey()), int(sig.SubgraphIndex()), maps[0], maps[1]))
    metadata = tuple(_text(model.Metadata(i).Name()) for i in range(model.MetadataLength()))
    return TFLiteModel(shown, hashlib.sha256(data).hexdigest(), len(data), int(model.Version()),
                       _text(model.Description(), "\n\t"), subgraphs, tuple(signatures), metadata, tuple(buffers), data)


def _subgraph(model: Any, s: int, opcodes: list[tuple[str, int, str | None]], sizes: list[int]) -> SubgraphInfo:
    sg = model.Subgraphs(s)
    tensors = []
    for t in range(sg.TensorsLength()):
        tensor = sg.Tensors(t)
        shape = _ints(tensor.ShapeLength(), tensor.ShapeAsNumpy)
        signature = _ints(tensor.ShapeSignatureLength(), tensor.ShapeSignatureAsNumpy) or shape
        q = tensor.Quantization()
        quant = None
        if q is not None and q.ScaleLength():
            quant = Quantization(tuple(float(v) for v in q.ScaleAsNumpy()),
                                 _ints(q.ZeroPointLength(), q.ZeroPointAsNumpy), int(q.QuantizedDimension()))
        buf = int(tensor.Buffer())
        tensors.append(TensorInfo(t, _text(tensor.Name()), TYPES[int(tensor.Type())], shape, signature, quant,
                                  buf, sizes[buf], bool(tensor.IsVariable())))
    ops = []
    for o in range(sg.OperatorsLength()):
        op = sg.Operators(o)
        op_type, version, custom = opcodes[int(op.OpcodeIndex())]
        ins = tuple(None if i == -1 else tensors[i] for i in _ints(op.InputsLength(), op.InputsAsNumpy))
        outs = tuple(tensors[i] for i in _ints(op.OutputsLength(), op.OutputsAsNumpy))
        ops.append(OpInfo(o, s, op_type, version, custom, ins, outs, options(op)))
    return SubgraphInfo(s, _text(sg.Name()), tuple(tensors), tuple(ops), _ints(sg.InputsLength(), sg.InputsAsNumpy),
                        _ints(sg.OutputsLength(), sg.OutputsAsNumpy))


def options(op: Any) -> dict[str, Any]:
    """Builtin options as flatc's object API (``<Kind>T.InitFromObj``) reads them."""
    kind = OPTIONS.get(int(op.BuiltinOptionsType()), "NONE")
    table = op.BuiltinOptions()
    if kind == "NONE" or table is None or not hasattr(schema, kind + "T"):
        return {}
    raw = getattr(schema, kind)()
    raw.Init(table.Bytes, table.Pos)
    obj = getattr(schema, kind + "T").InitFromObj(raw)
    out: dict[str, Any] = {}
    for key, value in vars(obj).items():
        name = _CAMEL.sub("_", key).lower()
        if isinstance(value, np.ndarray):
            value = value.tolist()
        if name.endswith("fused_activation_function"):
            value = ACTIVATIONS.get(value, value)
        elif name == "padding":
            value = PADDINGS.get(value, value)
        elif name == "weights_format":
            value = WEIGHTS_FORMATS.get(value, value)
        elif isinstance(value, bytes):
            value = _text(value)
        if value is None or isinstance(value, (bool, int, float, str, list)):
            out[name] = value
    return out
