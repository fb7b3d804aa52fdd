"""Read a .tflite file without TensorFlow: flatbuffers and the TFLite schema only.

The result is plain data: subgraphs, ops in execution order (type, version,
custom code, decoded builtin options), tensors (dtype, shape, shape signature,
quantization, whether they hold constant data). Every index in the file is
checked, so a truncated or corrupt file is a clear :class:`ModelFileError`,
never a crash in a later stage.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import re
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_import
from ..errors import ModelFileError, rel

if TYPE_CHECKING:
    import numpy as np
    from ai_edge_litert import schema_py_generated as schema
else:  # imported when a file is read: validating a target needs only the op names
    np = lazy_import("numpy")
    schema = lazy_import("ai_edge_litert.schema_py_generated")


class TensorType(enum.Enum):
    """TFLite tensor element types (schema ``TensorType``)."""

    FLOAT32 = "float32"
    FLOAT16 = "float16"
    INT32 = "int32"
    UINT8 = "uint8"
    INT64 = "int64"
    STRING = "string"
    BOOL = "bool"
    INT16 = "int16"
    COMPLEX64 = "complex64"
    INT8 = "int8"
    FLOAT64 = "float64"
    COMPLEX128 = "complex128"
    UINT64 = "uint64"
    RESOURCE = "resource"
    VARIANT = "variant"
    UINT32 = "uint32"
    UINT16 = "uint16"
    INT4 = "int4"
    BFLOAT16 = "bfloat16"
    INT2 = "int2"
    UINT4 = "uint4"
    FLOAT8_E4M3FN = "float8_e4m3fn"
    FLOAT8_E5M2 = "float8_e5m2"

    @property
    def is_float(self) -> bool:
        return self in (TensorType.FLOAT32, TensorType.FLOAT16, TensorType.FLOAT64, TensorType.BFLOAT16,
                        TensorType.FLOAT8_E4M3FN, TensorType.FLOAT8_E5M2)


_NUMPY_TYPES = {TensorType.FLOAT32: "float32", TensorType.FLOAT16: "float16", TensorType.INT32: "int32",
                TensorType.UINT8: "uint8", TensorType.INT64: "int64", TensorType.BOOL: "bool",
                TensorType.INT16: "int16", TensorType.INT8: "int8", TensorType.FLOAT64: "float64",
                TensorType.UINT64: "uint64", TensorType.UINT32: "uint32", TensorType.UINT16: "uint16"}


@dataclasses.dataclass(frozen=True)
class _Codes:
    """The schema's enum codes by value, read from the schema on the first file parsed."""

    types: dict[int, TensorType]
    ops: dict[int, str]
    options: dict[int, str]
    activations: dict[int, str]
    paddings: dict[int, str]
    weights_formats: dict[int, str]


@functools.cache
def _codes() -> _Codes:
    def names(enum_class: Any) -> dict[int, str]:
        return {code: name for name, code in vars(enum_class).items() if not name.startswith("_")}

    return _Codes(
        types={code: TensorType[name] for code, name in names(schema.TensorType).items()
               if name in TensorType.__members__},
        ops=names(schema.BuiltinOperator), options=names(schema.BuiltinOptions),
        activations=names(schema.ActivationFunctionType), paddings=names(schema.Padding),
        weights_formats=names(schema.FullyConnectedOptionsWeightsFormat))


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


@dataclasses.dataclass(frozen=True)
class Quantization:
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    quantized_dimension: int = 0

    @property
    def per_axis(self) -> bool:
        return len(self.scale) > 1


@dataclasses.dataclass(frozen=True)
class TensorInfo:
    index: int
    name: str
    dtype: TensorType
    shape: tuple[int, ...]
    shape_signature: tuple[int, ...]  # -1 marks a dynamic dimension
    quantization: Quantization | None
    buffer: int
    nbytes: int  # bytes of constant data (0 for activations)
    is_variable: bool = False

    @property
    def constant(self) -> bool:
        return self.nbytes > 0

    @property
    def is_float(self) -> bool:
        return self.dtype.is_float

    @property
    def dynamic(self) -> bool:
        return any(d < 0 for d in self.shape_signature)

    @property
    def elements(self) -> int:
        return int(np.prod(self.shape)) if self.shape else 1


@dataclasses.dataclass(frozen=True)
class OpInfo:
    index: int  # position in the subgraph's execution order
    subgraph: int
    type: str  # BuiltinOperator name, e.g. "CONV_2D"; "CUSTOM" for custom and Flex ops
    version: int
    custom_code: str | None
    inputs: tuple[TensorInfo | None, ...]  # None where an optional input is left out
    outputs: tuple[TensorInfo, ...]
    options: Mapping[str, Any]

    @property
    def name(self) -> str:
        """The op's name: its first output tensor's name (where TF puts the node names)."""
        return self.outputs[0].name if self.outputs else f"op{self.index}"

    @property
    def label(self) -> str:
        return f"{self.type}:{self.custom_code}" if self.custom_code is not None else self.type


@dataclasses.dataclass(frozen=True)
class SubgraphInfo:
    index: int
    name: str
    tensors: tuple[TensorInfo, ...]
    ops: tuple[OpInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@dataclasses.dataclass(frozen=True)
class Signature:
    key: str
    subgraph: int
    inputs: Mapping[str, int]  # name -> tensor index
    outputs: Mapping[str, int]


@dataclasses.dataclass(frozen=True)
class TFLiteModel:
    path: str
    sha256: str
    size: int
    version: int
    description: str
    subgraphs: tuple[SubgraphInfo, ...]
    signatures: tuple[Signature, ...]
    metadata: tuple[str, ...]
    # (offset, size) of each buffer's bytes in ``data``, for constant tensor values.
    buffers: tuple[tuple[int, int], ...] = dataclasses.field(default=(), repr=False, compare=False)
    data: bytes = dataclasses.field(default=b"", repr=False, compare=False)

    @property
    def main(self) -> SubgraphInfo:
        return self.subgraphs[0]

    @property
    def ops(self) -> tuple[OpInfo, ...]:
        """Every op of every subgraph, main subgraph first."""
        return tuple(op for sg in self.subgraphs for op in sg.ops)

    @functools.cached_property
    def _producers(self) -> dict[tuple[int, int], OpInfo]:
        return {(op.subgraph, t.index): op for op in self.ops for t in op.outputs}

    def producer(self, tensor: TensorInfo, subgraph: int = 0) -> OpInfo | None:
        """The op that writes ``tensor`` (None for inputs, constants and variables)."""
        return self._producers.get((subgraph, tensor.index))

    def static(self, tensor: TensorInfo | None, subgraph: int = 0, depth: int = 0) -> bool:
        """Constant data, or what ops that only unpack constant data make of it (DEQUANTIZE of float16
        weights, DENSIFY of sparse weights, in any order): runtimes fold both into static weights."""
        if tensor is None:
            return False
        if tensor.constant:
            return True
        op = self.producer(tensor, subgraph)
        return (depth < 4 and op is not None and op.type in ("DEQUANTIZE", "DENSIFY") and bool(op.inputs)
                and self.static(op.inputs[0], subgraph, depth + 1))

    def io_tensors(self, subgraph: int = 0) -> set[int]:
        sg = self.subgraphs[subgraph]
        return set(sg.inputs) | set(sg.outputs)

    @property
    def weight_bytes(self) -> int:
        """Bytes of constant data (weights, biases, constant operands): the flash a model needs."""
        return sum(size for _, size in self.buffers)

    def constant(self, tensor: TensorInfo | None) -> np.ndarray | None:
        """The value of a constant tensor, or None when it is not constant (or not readable here)."""
        if tensor is None or not tensor.constant or tensor.buffer >= len(self.buffers):
            return None
        dtype = _NUMPY_TYPES.get(tensor.dtype)
        offset, size = self.buffers[tensor.buffer]
        if dtype is None or size != tensor.elements * np.dtype(dtype).itemsize:
            return None
        return np.frombuffer(self.data, dtype=dtype, count=tensor.elements, offset=offset).reshape(tensor.shape)


def read_tflite(path: str | Path) -> TFLiteModel:
    """Read a .tflite file; raise ModelFileError when it is not a usable TFLite model."""
    from ..inputs import MAX_MODEL_BYTES, read_bytes

    path = Path(path)
    data = read_bytes(path, MAX_MODEL_BYTES, ModelFileError, ".tflite file")
    return parse_tflite(data, rel(path))


def parse_tflite(data: bytes, shown: str = "<bytes>") -> TFLiteModel:
    if not data:
        raise ModelFileError(f"{shown}: the file is empty, not a TFLite model")
    if len(data) < 8 or data[4:8] != b"TFL3":
        raise ModelFileError(f"{shown}: not a TFLite flatbuffer (no 'TFL3' file identifier)")
    try:
        return _parse(data, shown)
    except ModelFileError:
        raise
    except (IndexError, struct.error, ValueError, TypeError, AttributeError, UnicodeDecodeError,
            OverflowError, KeyError) as exc:
        raise ModelFileError(f"{shown}: corrupt or truncated TFLite flatbuffer "
                             f"({type(exc).__name__}: {exc})") from None


def _text(raw: bytes | None) -> str:
    return raw.decode("utf-8", "replace") if raw else ""


def _ints(length: int, as_numpy: Any) -> tuple[int, ...]:
    return tuple(int(v) for v in as_numpy()) if length else ()


def _parse(data: bytes, shown: str) -> TFLiteModel:
    model = schema.Model.GetRootAsModel(data, 0)
    bad = _Checker(shown)
    n_buffers = model.BuffersLength()
    buffers: list[tuple[int, int]] = []
    for b in range(n_buffers):
        buf = model.Buffers(b)
        if buf.Offset() > 1:  # large models keep data after the flatbuffer
            bad.require(buf.Offset() + buf.Size() <= len(data), f"buffer {b} points past the end of the file")
            buffers.append((int(buf.Offset()), int(buf.Size())))
        else:
            field = buf._tab.Offset(4)  # the `data` vector of the Buffer table
            start = buf._tab.Vector(field) if field else 0
            bad.require(start + buf.DataLength() <= len(data), f"buffer {b} points past the end of the file")
            buffers.append((int(start), int(buf.DataLength())))
    buffer_sizes = [size for _, size in buffers]
    codes = _codes()
    opcodes = []
    for i in range(model.OperatorCodesLength()):
        oc = model.OperatorCodes(i)
        code = max(oc.BuiltinCode(), oc.DeprecatedBuiltinCode())
        bad.require(code in codes.ops, f"operator code {i} has unknown builtin code {code}")
        custom = _text(oc.CustomCode()) if codes.ops[code] == "CUSTOM" else None
        opcodes.append((codes.ops[code], int(oc.Version()), custom))
    bad.require(model.SubgraphsLength() > 0, "the model has no subgraphs")
    subgraphs = tuple(_subgraph(model, s, opcodes, buffer_sizes, bad) for s in range(model.SubgraphsLength()))
    signatures = []
    for i in range(model.SignatureDefsLength()):
        sig = model.SignatureDefs(i)
        sg_index = int(sig.SubgraphIndex())
        bad.require(sg_index < len(subgraphs), f"signature {i} names missing subgraph {sg_index}")
        n_tensors = len(subgraphs[sg_index].tensors)

        maps = []
        for length, get in ((sig.InputsLength(), sig.Inputs), (sig.OutputsLength(), sig.Outputs)):
            names = {}
            for j in range(length):
                tm = get(j)
                bad.require(0 <= tm.TensorIndex() < n_tensors, f"signature {i} names missing tensor")
                names[_text(tm.Name())] = int(tm.TensorIndex())
            maps.append(names)
        signatures.append(Signature(_text(sig.SignatureKey()), sg_index, maps[0], maps[1]))
    metadata = tuple(_text(model.Metadata(i).Name()) for i in range(model.MetadataLength()))
    return TFLiteModel(shown, hashlib.sha256(data).hexdigest(), len(data), int(model.Version()),
                       _text(model.Description()), subgraphs, tuple(signatures), metadata, tuple(buffers), data)


class _Checker:
    def __init__(self, shown: str) -> None:
        self.shown = shown

    def require(self, ok: bool, problem: str) -> None:
        if not ok:
            raise ModelFileError(f"{self.shown}: invalid TFLite model: {problem}")


def _subgraph(model: Any, s: int, opcodes: list[tuple[str, int, str | None]], buffer_sizes: list[int],
              bad: _Checker) -> SubgraphInfo:
    sg = model.Subgraphs(s)
    codes = _codes()
    tensors = []
    for t in range(sg.TensorsLength()):
        tensor = sg.Tensors(t)
        buf = int(tensor.Buffer())
        bad.require(0 <= buf < len(buffer_sizes),
                    f"tensor {t} of subgraph {s} uses buffer {buf}, but the model has {len(buffer_sizes)} buffers")
        code = int(tensor.Type())
        bad.require(code in codes.types, f"tensor {t} of subgraph {s} has unknown type {code}")
        shape = _ints(tensor.ShapeLength(), tensor.ShapeAsNumpy)
        signature = _ints(tensor.ShapeSignatureLength(), tensor.ShapeSignatureAsNumpy) or shape
        q = tensor.Quantization()
        quant = None
        if q is not None and q.ScaleLength():
            zps = _ints(q.ZeroPointLength(), q.ZeroPointAsNumpy)
            scales = tuple(float(v) for v in q.ScaleAsNumpy())
            axis = int(q.QuantizedDimension())
            # TFLite's InterpreterBuilder refuses it (ParseQuantization); every rule may read zero_point[i].
            bad.require(len(zps) == len(scales), f"tensor {t} of subgraph {s} ({_text(tensor.Name())!r}) has "
                        f"{len(scales)} scale(s) and {len(zps)} zero point(s); TFLite loads only a model whose "
                        "quantized tensors have as many of each")
            quant = Quantization(scales, zps, axis)
        tensors.append(TensorInfo(t, _text(tensor.Name()), codes.types[code], shape, signature, quant,
                                  buf, buffer_sizes[buf], bool(tensor.IsVariable())))
    n = len(tensors)

    def tensor_list(indices: tuple[int, ...], what: str, optional: bool) -> tuple[TensorInfo | None, ...]:
        out: list[TensorInfo | None] = []
        for i in indices:
            if i == -1 and optional:
                out.append(None)
                continue
            bad.require(0 <= i < n, f"{what} refers to tensor {i}; subgraph {s} has {n} tensors")
            out.append(tensors[i])
        return tuple(out)

    ops = []
    for o in range(sg.OperatorsLength()):
        op = sg.Operators(o)
        idx = int(op.OpcodeIndex())
        bad.require(idx < len(opcodes), f"op {o} of subgraph {s} uses missing operator code {idx}")
        op_type, version, custom = opcodes[idx]
        ins = tensor_list(_ints(op.InputsLength(), op.InputsAsNumpy), f"op {o} ({op_type}) input", True)
        outs = tensor_list(_ints(op.OutputsLength(), op.OutputsAsNumpy), f"op {o} ({op_type}) output", False)
        ops.append(OpInfo(o, s, op_type, version, custom, ins, tuple(t for t in outs if t is not None),
                          _options(op)))
    inputs = _ints(sg.InputsLength(), sg.InputsAsNumpy)
    outputs = _ints(sg.OutputsLength(), sg.OutputsAsNumpy)
    for i in inputs + outputs:
        bad.require(0 <= i < n, f"subgraph {s} input/output refers to tensor {i}; it has {n} tensors")
    return SubgraphInfo(s, _text(sg.Name()), tuple(tensors), tuple(ops), inputs, outputs)


def _options(op: Any) -> dict[str, Any]:
    """Builtin options as a plain dict with snake_case keys and enum names."""
    codes = _codes()
    kind = codes.options.get(int(op.BuiltinOptionsType()), "NONE")
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
            value = codes.activations.get(value, value)
        elif name == "padding":
            value = codes.paddings.get(value, value)
        elif name == "weights_format":
            value = codes.weights_formats.get(value, value)
        elif isinstance(value, bytes):
            value = _text(value)
        if value is None or isinstance(value, (bool, int, float, str, list)):
            out[name] = value  # nested option tables are left out
    return out
