"""CSV files (one file or a folder of them): named columns feed model inputs, one row or one
window of rows (sensor data) per sample. Windows never cross files."""

from __future__ import annotations

import collections
import csv
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from ..._lazy import lazy_import
from ...errors import DataError, did_you_mean, rel
from ...ir import TensorSpec
from ..config import DataConfig
from .base import Field, Reader, Sample, Source

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")


class _CsvReader(Reader):
    def __init__(self, location: str, paths: list[Path], columns: dict[str, tuple[str, ...]], window: int | None,
                 stride: int) -> None:
        self.location, self.paths, self.columns = location, paths, columns
        self.window, self.stride = window, stride
        self.header: dict[Path, list[int]] = {}
        for path in paths:
            with path.open(newline="") as f:
                head = next(csv.reader(f), None)
            if not head:
                raise DataError(f"{rel(path)}: empty file (a header row naming the columns is needed)")
            names = [h.strip() for h in head]
            wanted = [c for cols in columns.values() for c in cols]
            missing = [c for c in wanted if c not in names]
            if missing:
                raise DataError(f"{rel(path)}: no column {missing[0]!r} (columns: {', '.join(names)})"
                                f"{did_you_mean(missing[0], names)}")
            self.header[path] = [names.index(c) for c in wanted]
        self._starts: list[tuple[Path, int]] | None = None

    def fields(self) -> list[Field]:
        return [Field(name, (len(cols),) if self.window is None else (self.window, len(cols)),
                      np.dtype(np.float32)) for name, cols in self.columns.items()]

    def _rows(self, path: Path) -> int:
        with path.open(newline="") as f:
            return sum(1 for _ in csv.reader(f)) - 1

    def starts(self) -> list[tuple[Path, int]]:
        """(file, first data row) of every sample."""
        if self._starts is None:
            self._starts = []
            length = self.window or 1
            for path in self.paths:
                rows = self._rows(path)
                self._starts += [(path, s) for s in range(0, rows - length + 1, self.stride)]
        return self._starts

    def count(self) -> int:
        return len(self.starts())

    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, Sample]]:
        starts = self.starts()
        by_file: dict[Path, list[tuple[int, int]]] = collections.defaultdict(list)
        for i in indices:
            path, start = starts[i]
            by_file[path].append((start, i))
        length = self.window or 1
        for path in self.paths:
            wanted = by_file.get(path)
            if not wanted:
                continue
            columns = self.header[path]
            buffer: collections.deque[np.ndarray] = collections.deque(maxlen=length)
            todo = iter(wanted)
            pending = next(todo, None)
            with path.open(newline="") as f:
                reader = csv.reader(f)
                next(reader)
                for row_number, row in enumerate(reader):
                    buffer.append(self._parse(row, columns, path, row_number + 2))
                    while pending is not None and row_number == pending[0] + length - 1:
                        yield pending[1], self._split(np.stack(list(buffer)))
                        pending = next(todo, None)
                    if pending is None:
                        break

    def _parse(self, row: list[str], columns: list[int], path: Path, line: int) -> np.ndarray:
        values = np.empty(len(columns), np.float32)
        for k, c in enumerate(columns):
            cell = row[c].strip() if c < len(row) else ""
            try:
                values[k] = float(cell)
            except ValueError:
                name = [n for cols in self.columns.values() for n in cols][k]
                raise DataError(f"{rel(path)}:{line}: column {name!r}: {cell!r} is not a number") from None
        return values

    def _split(self, window: np.ndarray) -> Sample:
        out: Sample = {}
        k = 0
        for name, cols in self.columns.items():
            part = window[:, k:k + len(cols)]
            out[name] = np.ascontiguousarray(part[0] if self.window is None else part)
            k += len(cols)
        return out

    def where(self, index: int) -> str:
        path, start = self.starts()[index]
        first = start + 2  # 1-based, after the header
        return f"{rel(path)}:{first}" + (f"-{first + self.window - 1}" if self.window else "")

    def files(self) -> list[Path]:
        return self.paths


class CsvSource(Source):
    name: ClassVar[str] = "csv"
    suffixes: ClassVar[tuple[str, ...]] = (".csv",)
    summary: ClassVar[str] = ("CSV with a header row (a file or a folder of files): columns per model input, one row "
                              "or one window of rows per sample")

    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        assert cfg.path is not None
        paths = sorted(p for p in cfg.path.glob("*.csv") if p.is_file()) if cfg.path.is_dir() else [cfg.path]
        location = rel(cfg.path) + ("/" if cfg.path.is_dir() else "")
        if not paths:
            raise DataError(f"{location}: holds no .csv files")
        columns = {name: tuple(cols) for name, cols in cfg.columns.items()}
        return _CsvReader(location, paths, columns, cfg.window, cfg.stride or cfg.window or 1)
