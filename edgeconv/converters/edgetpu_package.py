"""What the Edge TPU compiler put in a compiled ``*_edgetpu.tflite``: the parameters of each executable
inside its ``edgetpu-custom-op``, without TensorFlow or libedgetpu.

The op's custom options are a FlexBuffer map whose key "4" holds a DarwiNN ``Package`` flatbuffer
(google-coral/libedgetpu executable/executable.fbs, tflite/custom_op_data.cc); the package's
``MultiExecutable`` holds the serialized ``Executable`` tables. A ``PARAMETER_CACHING`` executable carries
the parameters cached in the on-chip SRAM (the compiler's "On-chip memory used for caching model
parameters"); the parameters of a ``STAND_ALONE`` or ``EXECUTION_ONLY`` one stream from host memory.
Every offset is checked: a corrupt package is a :class:`ModelFileError`, never a crash.
"""

from __future__ import annotations

import struct
from pathlib import Path

from .._record import record
from ..errors import ModelFileError, rel

CUSTOM_CODE = "edgetpu-custom-op"
PARAMETER_CACHING = 1  # executable.fbs ExecutableType


@record
class CompiledParameters:
    """The parameter bytes of one compiled model's Edge TPU executables."""

    cached_bytes: int  # in PARAMETER_CACHING executables: cached on-chip
    streamed_bytes: int  # in the other executables: streamed from host memory on every inference
    executables: int


class _Buffer:
    """A flatbuffer read with every offset checked against its end."""

    def __init__(self, data: bytes, shown: str) -> None:
        self.data, self.shown = data, shown

    def u32(self, at: int) -> int:
        return int(self._unpack("<I", at))

    def i32(self, at: int) -> int:
        return int(self._unpack("<i", at))

    def u16(self, at: int) -> int:
        return int(self._unpack("<H", at))

    def i16(self, at: int) -> int:
        return int(self._unpack("<h", at))

    def _unpack(self, fmt: str, at: int) -> int:
        if at < 0 or at + struct.calcsize(fmt) > len(self.data):
            raise ModelFileError(f"{self.shown}: corrupt Edge TPU package (offset {at} past its end)")
        value: int = struct.unpack_from(fmt, self.data, at)[0]
        return value

    def root(self) -> int:
        return self.u32(0)

    def field(self, table: int, slot: int) -> int | None:
        """The absolute position of field ``slot`` of the table at ``table``, or None when absent."""
        vtable = table - self.i32(table)
        size = self.u16(vtable)
        entry = 4 + 2 * slot
        if entry + 2 > size:
            return None
        offset = self.u16(vtable + entry)
        return table + offset if offset else None

    def indirect(self, at: int) -> int:
        return at + self.u32(at)

    def vector(self, table: int, slot: int) -> tuple[int, int] | None:
        """(start, length) of a vector field."""
        at = self.field(table, slot)
        if at is None:
            return None
        vec = self.indirect(at)
        length = self.u32(vec)
        if vec + 4 + length > len(self.data):
            raise ModelFileError(f"{self.shown}: corrupt Edge TPU package (a vector runs past its end)")
        return vec + 4, length

    def bytes_of(self, table: int, slot: int) -> bytes:
        span = self.vector(table, slot)
        return b"" if span is None else self.data[span[0]:span[0] + span[1]]


def _flex_blob(options: bytes, key: str, shown: str) -> bytes:
    """The string or blob under ``key`` of the FlexBuffer map ``options``."""
    from flatbuffers import flexbuffers

    try:
        ref = flexbuffers.GetRoot(options).AsMap[key]
        value = flexbuffers.String(ref._Indirect(), ref._byte_width).Bytes  # a string or a blob: the same bytes
    except (KeyError, IndexError, ValueError, TypeError, struct.error) as exc:
        raise ModelFileError(f"{shown}: the {CUSTOM_CODE} options hold no compiled package ({exc})") from None
    return bytes(value)


def _executables(package: bytes, shown: str) -> list[tuple[int, int]]:
    """(type, parameter bytes) of each executable of a DarwiNN package."""
    pkg = _Buffer(package, shown)
    multi = _Buffer(pkg.bytes_of(pkg.root(), 1), shown)  # Package.serialized_multi_executable
    if not multi.data:
        raise ModelFileError(f"{shown}: corrupt Edge TPU package (no executables)")
    span = multi.vector(multi.root(), 0)  # MultiExecutable.serialized_executables: [string]
    if span is None or span[1] == 0:
        raise ModelFileError(f"{shown}: corrupt Edge TPU package (no executables)")
    found = []
    for i in range(span[1]):
        at = span[0] + 4 * i
        text = multi.indirect(at)
        length = multi.u32(text)
        exe = _Buffer(multi.data[text + 4:text + 4 + length], shown)
        table = exe.root()
        kind_at = exe.field(table, 13)  # Executable.type
        kind = exe.i16(kind_at) if kind_at is not None else 0
        params = exe.vector(table, 6)  # Executable.parameters
        found.append((kind, params[1] if params else 0))
    return found


def compiled_parameters(path: str | Path) -> CompiledParameters | None:
    """The parameters the compiler laid out in ``path`` (None: no Edge TPU op in it)."""
    from ai_edge_litert import schema_py_generated as schema

    shown = rel(Path(path))
    data = Path(path).read_bytes()
    try:
        model = schema.Model.GetRootAsModel(data, 0)
        codes = [model.OperatorCodes(i).CustomCode() for i in range(model.OperatorCodesLength())]
        options = [bytes(op.CustomOptionsAsNumpy().tobytes())
                   for s in range(model.SubgraphsLength()) for op in
                   (model.Subgraphs(s).Operators(j) for j in range(model.Subgraphs(s).OperatorsLength()))
                   if op.OpcodeIndex() < len(codes) and codes[op.OpcodeIndex()] == CUSTOM_CODE.encode()]
    except (IndexError, ValueError, TypeError, struct.error, AttributeError) as exc:
        raise ModelFileError(f"{shown}: corrupt TFLite flatbuffer ({exc})") from None
    if not options:
        return None
    cached = streamed = count = 0
    for blob in options:
        for kind, size in _executables(_flex_blob(blob, "4", shown), shown):
            count += 1
            if kind == PARAMETER_CACHING:
                cached += size
            else:
                streamed += size
    return CompiledParameters(cached, streamed, count)
