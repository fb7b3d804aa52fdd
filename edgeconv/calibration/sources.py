"""Representative-data sources: files that hold calibration samples.

A source reads arrays keyed by model input name, sample axis first. Sources are
registered by name in :data:`edgeconv.calibration.SOURCES`.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import ClassVar, Protocol

import numpy as np

from ..errors import DataError, rel

# The single array of an .npy file has no name; it belongs to the model's only input.
UNNAMED = ""


class CalibrationSource(Protocol):
    name: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]]
    summary: ClassVar[str]

    def read(self, path: Path) -> dict[str, np.ndarray]: ...


class NpzSource:
    name: ClassVar[str] = "npz"
    suffixes: ClassVar[tuple[str, ...]] = (".npz",)
    summary: ClassVar[str] = "NumPy .npz archive: one array per model input, keyed by input name"

    def read(self, path: Path) -> dict[str, np.ndarray]:
        if not zipfile.is_zipfile(path):
            raise DataError(f"{rel(path)}: not a readable .npz archive (not a zip file)")
        try:
            with np.load(path, allow_pickle=False) as archive:
                return {key: archive[key] for key in archive.files}
        except (zipfile.BadZipFile, EOFError, OSError) as exc:
            raise DataError(f"{rel(path)}: not a readable .npz archive ({exc})") from None
        except ValueError as exc:
            raise DataError(f"{rel(path)}: cannot read arrays ({exc}); save plain numeric arrays "
                            "(no Python objects)") from None


class NpySource:
    name: ClassVar[str] = "npy"
    suffixes: ClassVar[tuple[str, ...]] = (".npy",)
    summary: ClassVar[str] = "NumPy .npy array, for a model with a single input"

    def read(self, path: Path) -> dict[str, np.ndarray]:
        try:
            return {UNNAMED: np.load(path, mmap_mode="r", allow_pickle=False)}
        except (ValueError, OSError, EOFError) as exc:
            raise DataError(f"{rel(path)}: not a readable .npy array ({exc})") from None
