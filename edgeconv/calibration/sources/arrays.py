"""NumPy sources: ``.npz`` (one array per input), ``.npy`` (one input), a folder of
``<input>.npy`` files. Rows are read one at a time from the file (also from inside
an ``.npz``, stored or compressed), never the whole array."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, ClassVar

from ..._lazy import lazy_import
from ...errors import DataError, rel
from ...ir import TensorSpec
from ..config import DataConfig
from .base import UNNAMED, Field, Reader, Sample, Source

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


class NpyRows:
    """Sample rows of one ``.npy`` stream, read by seeking (forward) and reading one row."""

    def __init__(self, stream: IO[bytes], shown: str) -> None:
        self.stream, self.shown = stream, shown
        try:
            version = np.lib.format.read_magic(stream)
            read_header = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                           else np.lib.format.read_array_header_2_0)
            shape, fortran, dtype = read_header(stream)
        except (ValueError, OSError, EOFError, SyntaxError) as exc:
            raise DataError(f"{shown}: not a readable .npy array ({exc})") from None
        if dtype.hasobject:
            raise DataError(f"{shown}: holds Python objects ({dtype}); save plain numeric arrays")
        if dtype.kind not in "biuf":
            raise DataError(f"{shown}: has dtype {dtype}, expected numbers")
        if len(shape) < 1 or shape[0] == 0:
            raise DataError(f"{shown}: holds no samples (shape {tuple(shape)}); the first axis counts samples")
        if fortran and len(shape) > 1:
            raise DataError(f"{shown}: is stored in Fortran order; save it C-ordered (np.ascontiguousarray)")
        self.shape, self.dtype = tuple(int(d) for d in shape), dtype
        self.row_bytes = int(np.prod(self.shape[1:], dtype=np.int64)) * dtype.itemsize
        self.offset = stream.tell()
        self.position = 0

    def row(self, index: int) -> np.ndarray:
        target = self.offset + index * self.row_bytes
        if target != self.offset + self.position:
            self.stream.seek(target)
        data = self.stream.read(self.row_bytes)
        if len(data) != self.row_bytes:
            raise DataError(f"{self.shown}: truncated at sample {index} (the header says {self.shape[0]} samples)")
        self.position = (index + 1) * self.row_bytes
        return np.frombuffer(data, dtype=self.dtype).reshape(self.shape[1:])


class _ArraysReader(Reader):
    def __init__(self, location: str, rows: dict[str, NpyRows], paths: list[Path], closers: list[Any]) -> None:
        self.location, self.rows, self.paths, self.closers = location, rows, paths, closers
        counts = {name: r.shape[0] for name, r in rows.items()}
        if len(set(counts.values())) > 1:
            self.close()
            raise DataError(f"{location}: inputs have different sample counts: "
                            + ", ".join(f"{k!r}: {v}" for k, v in sorted(counts.items())))

    def fields(self) -> list[Field]:
        return [Field(name, r.shape[1:], r.dtype) for name, r in self.rows.items()]

    def count(self) -> int:
        return next(iter(self.rows.values())).shape[0]

    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, Sample]]:
        for i in indices:
            yield i, {name: r.row(i) for name, r in self.rows.items()}

    def files(self) -> list[Path]:
        return self.paths

    def close(self) -> None:
        for c in self.closers:
            c.close()


class NpzSource(Source):
    name: ClassVar[str] = "npz"
    suffixes: ClassVar[tuple[str, ...]] = (".npz",)
    summary: ClassVar[str] = "NumPy .npz archive: one array per model input, keyed by input name"

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.path is not None
        import zipfile

        shown = rel(cfg.path)
        try:
            archive = zipfile.ZipFile(cfg.path)
        except (zipfile.BadZipFile, OSError) as exc:
            raise DataError(f"{shown}: not a readable .npz archive ({exc})") from None
        members = [m for m in archive.namelist() if m.endswith(".npy")]
        if not members:
            archive.close()
            raise DataError(f"{shown}: holds no arrays")
        rows, streams = {}, []
        try:
            for member in members:
                stream = archive.open(member)
                streams.append(stream)
                rows[member[:-4]] = NpyRows(stream, f"{shown}: array {member[:-4]!r}")
        except DataError:
            for s in streams:
                s.close()
            archive.close()
            raise
        return _ArraysReader(shown, rows, [cfg.path], [*streams, archive])


class NpySource(Source):
    name: ClassVar[str] = "npy"
    suffixes: ClassVar[tuple[str, ...]] = (".npy",)
    summary: ClassVar[str] = "NumPy .npy array for one model input (calibration.input, default the only one)"

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.path is not None
        f = cfg.path.open("rb")
        try:
            rows = NpyRows(f, rel(cfg.path))
        except DataError:
            f.close()
            raise
        return _ArraysReader(rel(cfg.path), {cfg.input or UNNAMED: rows}, [cfg.path], [f])


class NpyDirSource(Source):
    name: ClassVar[str] = "npy-dir"
    summary: ClassVar[str] = "A folder of <input name>.npy files, one per model input"

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.path is not None
        shown = rel(cfg.path) + "/"
        paths = sorted(p for p in cfg.path.glob("*.npy") if p.is_file())  # a FIFO or device: skipped
        if not paths:
            raise DataError(f"{shown}: holds no .npy files")
        rows, files = {}, []
        try:
            for p in paths:
                f = p.open("rb")
                files.append(f)
                rows[p.stem] = NpyRows(f, rel(p))
        except DataError:
            for f in files:
                f.close()
            raise
        return _ArraysReader(shown, rows, paths, files)
