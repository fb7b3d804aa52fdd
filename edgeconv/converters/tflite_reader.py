"""Read a .tflite file without TensorFlow, flatbuffers or NumPy: ``struct`` over the file's bytes, and the
TFLite schema as data (:mod:`.tflite_schema`, generated from flatc's Python output).

The result is plain data: subgraphs, ops in execution order (type, version,
custom code, decoded builtin options), tensors (dtype, shape, shape signature,
quantization, whether they hold constant data). Every index in the file is
checked, so a truncated or corrupt file is a clear :class:`ModelFileError`,
never a crash in a later stage. tests/unit/test_reader.py reads models both ways
(this walk and flatc's generated reader) and requires the same result.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import math
import struct
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._lazy import lazy_import
from .._record import record
from ..errors import ModelFileError, rel
from . import tflite_schema as fbs

if TYPE_CHECKING:
    import numpy as np
else:  # imported only for a constant tensor's values as an array (the checks read them without it)
    np = lazy_import("numpy")


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


_TYPES = {code: TensorType[name] for code, name in fbs.TENSOR_TYPE.items() if name in TensorType.__members__}
_OPTION_ENUMS = {"padding": fbs.PADDING, "weights_format": fbs.FULLY_CONNECTED_OPTIONS_WEIGHTS_FORMAT}
# struct formats of the constant tensors a check reads without NumPy
_STRUCT_TYPES = {TensorType.FLOAT32: "f", TensorType.FLOAT16: "e", TensorType.INT32: "i", TensorType.UINT8: "B",
                 TensorType.INT64: "q", TensorType.BOOL: "?", TensorType.INT16: "h", TensorType.INT8: "b",
                 TensorType.FLOAT64: "d", TensorType.UINT64: "Q", TensorType.UINT32: "I", TensorType.UINT16: "H"}


@record
class Quantization:
    scale: tuple[float, ...]
    zero_point: tuple[int, ...]
    quantized_dimension: int = 0

    @property
    def per_axis(self) -> bool:
        return len(self.scale) > 1


@record
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
        return math.prod(self.shape)


@record
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


@record
class SubgraphInfo:
    index: int
    name: str
    tensors: tuple[TensorInfo, ...]
    ops: tuple[OpInfo, ...]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]


@record
class Signature:
    key: str
    subgraph: int
    inputs: Mapping[str, int]  # name -> tensor index
    outputs: Mapping[str, int]


@record
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

    @functools.cached_property
    def _readers(self) -> dict[tuple[int, int], tuple[OpInfo, ...]]:
        found: dict[tuple[int, int], list[OpInfo]] = {}
        for op in self.ops:
            for index in dict.fromkeys(t.index for t in op.inputs if t is not None):  # an op reads a tensor once
                found.setdefault((op.subgraph, index), []).append(op)
        return {key: tuple(ops) for key, ops in found.items()}

    def readers(self, tensor: int, subgraph: int = 0) -> tuple[OpInfo, ...]:
        """The ops that read tensor number ``tensor`` of ``subgraph``, in op order (found once for the whole
        model: asking each op in turn made a check quadratic in the op count)."""
        return self._readers.get((subgraph, tensor), ())

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
        if self._located(tensor) is None:
            return None
        assert tensor is not None
        offset = self.buffers[tensor.buffer][0]
        return np.frombuffer(self.data, dtype=_NUMPY_TYPES[tensor.dtype], count=tensor.elements,
                             offset=offset).reshape(tensor.shape)

    def constant_values(self, tensor: TensorInfo | None) -> tuple[Any, ...] | None:
        """A constant tensor's values, flattened, as Python numbers (no NumPy: what a check reads of a small
        constant such as axes, paddings or strides); None as for :meth:`constant`."""
        fmt = self._located(tensor)
        if fmt is None:
            return None
        assert tensor is not None
        return struct.unpack_from(f"<{tensor.elements}{fmt}", self.data, self.buffers[tensor.buffer][0])

    def _located(self, tensor: TensorInfo | None) -> str | None:
        """The struct format of a constant tensor whose buffer holds exactly its elements, else None."""
        if tensor is None or not tensor.constant or tensor.buffer >= len(self.buffers):
            return None
        fmt = _STRUCT_TYPES.get(tensor.dtype)
        if fmt is None:
            return None
        offset, size = self.buffers[tensor.buffer]
        if size != tensor.elements * struct.calcsize(fmt) or offset + size > len(self.data):
            return None
        return fmt


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


def _text(raw: bytes | None, *, lines: bool = False) -> str:
    """A string of the file: a name (of a tensor, an op's custom code, a signature), or with ``lines`` the
    model's description. A .tflite is a pull request's to write: a character that is not printable (a newline, a
    terminal escape; in a description, any but a newline or tab) becomes U+FFFD here, once for every output that
    shows the names (the console, report.md's tables, JUnit, the annotations)."""
    text = raw.decode("utf-8", "replace") if raw else ""
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or (lines and c in "\n\t") else "\ufffd" for c in text)


_U32 = struct.Struct("<I")
_I32 = struct.Struct("<i")
_U16 = struct.Struct("<H")
_FIELDS = {table: {f[0]: f for f in fields} for table, fields in fbs.TABLES.items()}


def _u32(data: bytes, pos: int) -> int:
    if pos < 0:
        raise ValueError(f"offset {pos} before the start of the file")
    return int(_U32.unpack_from(data, pos)[0])


class _Table:
    """One flatbuffer table: ``data[pos:]`` read as the schema's table ``kind`` (field by name)."""

    __slots__ = ("data", "fields", "pos", "vtable", "vtable_size")

    def __init__(self, data: bytes, pos: int, kind: str) -> None:
        if pos < 0:
            raise ValueError(f"table at offset {pos}")
        self.data, self.pos, self.fields = data, pos, _FIELDS[kind]
        self.vtable = pos - int(_I32.unpack_from(data, pos)[0])
        if self.vtable < 0:
            raise ValueError(f"vtable at offset {self.vtable}")
        self.vtable_size = int(_U16.unpack_from(data, self.vtable)[0])

    def _at(self, name: str) -> int:
        """Where field ``name`` is, or 0 when the table leaves it out (its default)."""
        voffset = self.fields[name][1]
        if voffset >= self.vtable_size:
            return 0
        offset = int(_U16.unpack_from(self.data, self.vtable + voffset)[0])
        return self.pos + offset if offset else 0

    def scalar(self, name: str) -> Any:
        field = self.fields[name]
        at = self._at(name)
        return struct.unpack_from("<" + field[3], self.data, at)[0] if at else field[4]

    def string(self, name: str) -> bytes | None:
        at = self._at(name)
        if not at:
            return None
        start = at + _u32(self.data, at)
        length = _u32(self.data, start)
        if start + 4 + length > len(self.data):
            raise ValueError(f"string {name!r} runs past the end of the file")
        return self.data[start + 4:start + 4 + length]

    def vector(self, name: str) -> tuple[int, int] | None:
        """(start, length) of vector field ``name``, or None when it is left out."""
        at = self._at(name)
        if not at:
            return None
        start = at + _u32(self.data, at)
        return start + 4, _u32(self.data, start)

    def numbers(self, name: str) -> tuple[Any, ...] | None:
        where = self.vector(name)
        if where is None:
            return None
        return struct.unpack_from(f"<{where[1]}{self.fields[name][3]}", self.data, where[0])

    def table(self, name: str, kind: str) -> _Table | None:
        at = self._at(name)
        return _Table(self.data, at + _u32(self.data, at), kind) if at else None

    def tables(self, name: str, kind: str) -> list[_Table]:
        where = self.vector(name)
        if where is None:
            return []
        start, length = where
        if start + 4 * length > len(self.data):
            raise ValueError(f"vector {name!r} of {length} tables runs past the end of the file")
        return [_Table(self.data, start + 4 * i + _u32(self.data, start + 4 * i), kind) for i in range(length)]


def _ints(table: _Table, name: str) -> tuple[int, ...]:
    return table.numbers(name) or ()


def _parse(data: bytes, shown: str) -> TFLiteModel:
    model = _Table(data, _u32(data, 0), "Model")
    bad = _Checker(shown)
    buffers: list[tuple[int, int]] = []
    for b, buf in enumerate(model.tables("buffers", "Buffer")):
        offset = buf.scalar("offset")
        if offset > 1:  # large models keep data after the flatbuffer
            size = buf.scalar("size")
            bad.require(offset + size <= len(data), f"buffer {b} points past the end of the file")
            buffers.append((int(offset), int(size)))
        else:
            start, length = buf.vector("data") or (0, 0)
            bad.require(start + length <= len(data), f"buffer {b} points past the end of the file")
            buffers.append((start, length))
    buffer_sizes = [size for _, size in buffers]
    opcodes = []
    for i, oc in enumerate(model.tables("operator_codes", "OperatorCode")):
        code = max(oc.scalar("builtin_code"), oc.scalar("deprecated_builtin_code"))
        bad.require(code in fbs.BUILTIN_OPERATOR, f"operator code {i} has unknown builtin code {code}")
        custom = _text(oc.string("custom_code")) if fbs.BUILTIN_OPERATOR[code] == "CUSTOM" else None
        opcodes.append((fbs.BUILTIN_OPERATOR[code], int(oc.scalar("version")), custom))
    tables = model.tables("subgraphs", "SubGraph")
    bad.require(len(tables) > 0, "the model has no subgraphs")
    subgraphs = tuple(_subgraph(sg, s, opcodes, buffer_sizes, bad) for s, sg in enumerate(tables))
    signatures = []
    for i, sig in enumerate(model.tables("signature_defs", "SignatureDef")):
        sg_index = int(sig.scalar("subgraph_index"))
        bad.require(sg_index < len(subgraphs), f"signature {i} names missing subgraph {sg_index}")
        n_tensors = len(subgraphs[sg_index].tensors)
        maps = []
        for side in ("inputs", "outputs"):
            names = {}
            for tm in sig.tables(side, "TensorMap"):
                index = int(tm.scalar("tensor_index"))
                bad.require(0 <= index < n_tensors, f"signature {i} names missing tensor")
                names[_text(tm.string("name"))] = index
            maps.append(names)
        signatures.append(Signature(_text(sig.string("signature_key")), sg_index, maps[0], maps[1]))
    metadata = tuple(_text(m.string("name")) for m in model.tables("metadata", "Metadata"))
    return TFLiteModel(shown, hashlib.sha256(data).hexdigest(), len(data), int(model.scalar("version")),
                       _text(model.string("description"), lines=True), subgraphs, tuple(signatures), metadata,
                       tuple(buffers), data)


class _Checker:
    def __init__(self, shown: str) -> None:
        self.shown = shown

    def require(self, ok: bool, problem: str) -> None:
        if not ok:
            raise ModelFileError(f"{self.shown}: invalid TFLite model: {problem}")


def _subgraph(sg: _Table, s: int, opcodes: list[tuple[str, int, str | None]], buffer_sizes: list[int],
              bad: _Checker) -> SubgraphInfo:
    tensors = []
    for t, tensor in enumerate(sg.tables("tensors", "Tensor")):
        buf = int(tensor.scalar("buffer"))
        bad.require(0 <= buf < len(buffer_sizes),
                    f"tensor {t} of subgraph {s} uses buffer {buf}, but the model has {len(buffer_sizes)} buffers")
        code = int(tensor.scalar("type"))
        bad.require(code in _TYPES, f"tensor {t} of subgraph {s} has unknown type {code}")
        shape = _ints(tensor, "shape")
        signature = _ints(tensor, "shape_signature") or shape
        q = tensor.table("quantization", "QuantizationParameters")
        quant = None
        name = _text(tensor.string("name"))
        if q is not None and (scales := q.numbers("scale")):
            zps = _ints(q, "zero_point")
            # TFLite's InterpreterBuilder refuses it (ParseQuantization); every rule may read zero_point[i].
            bad.require(len(zps) == len(scales), f"tensor {t} of subgraph {s} ({name!r}) has "
                        f"{len(scales)} scale(s) and {len(zps)} zero point(s); TFLite loads only a model whose "
                        "quantized tensors have as many of each")
            quant = Quantization(scales, zps, int(q.scalar("quantized_dimension")))
        tensors.append(TensorInfo(t, name, _TYPES[code], shape, signature, quant, buf, buffer_sizes[buf],
                                  bool(tensor.scalar("is_variable"))))
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
    for o, op in enumerate(sg.tables("operators", "Operator")):
        idx = int(op.scalar("opcode_index"))
        bad.require(idx < len(opcodes), f"op {o} of subgraph {s} uses missing operator code {idx}")
        op_type, version, custom = opcodes[idx]
        ins = tensor_list(_ints(op, "inputs"), f"op {o} ({op_type}) input", True)
        outs = tensor_list(_ints(op, "outputs"), f"op {o} ({op_type}) output", False)
        ops.append(OpInfo(o, s, op_type, version, custom, ins, tuple(t for t in outs if t is not None),
                          _options(op)))
    inputs = _ints(sg, "inputs")
    outputs = _ints(sg, "outputs")
    for i in inputs + outputs:
        bad.require(0 <= i < n, f"subgraph {s} input/output refers to tensor {i}; it has {n} tensors")
    return SubgraphInfo(s, _text(sg.string("name")), tuple(tensors), tuple(ops), inputs, outputs)


def _options(op: _Table) -> dict[str, Any]:
    """Builtin options as a plain dict with snake_case keys and enum names, as flatc's object API reads them:
    a number or a list of numbers, a string, None for a list, string or nested table the file leaves out
    (a nested table the file has is left out)."""
    kind = fbs.BUILTIN_OPTIONS.get(int(op.scalar("builtin_options_type")), "NONE")
    at = op._at("builtin_options")
    if kind == "NONE" or not at or kind not in fbs.TABLES:
        return {}
    table = _Table(op.data, at + _u32(op.data, at), kind)
    out: dict[str, Any] = {}
    for name, _, field_kind, _, _ in fbs.TABLES[kind]:
        value: Any
        if field_kind == "scalar":
            value = table.scalar(name)
            if name.endswith("fused_activation_function"):
                value = fbs.ACTIVATION_FUNCTION_TYPE.get(value, value)
            elif name in _OPTION_ENUMS:
                value = _OPTION_ENUMS[name].get(value, value)
        elif field_kind == "vector":
            numbers = table.numbers(name)
            value = None if numbers is None else list(numbers)
        elif field_kind == "string":
            raw = table.string(name)
            value = None if raw is None else _text(raw)
        elif table._at(name):
            continue  # a nested table, list or union: left out
        else:
            value = None
        out[name] = value
    return out
