"""Calibration data sources, registered by name.

The registry is the single list of sources: config validation, the JSON Schema and
the report take their names from it.
"""

from __future__ import annotations

from pathlib import Path

from ..config import DataConfig
from .arrays import NpyDirSource, NpySource, NpzSource
from .base import UNNAMED, Field, Reader, Sample, Source
from .images import ImagesSource, image_files
from .pycode import PythonSource
from .tabular import CsvSource
from .tfrecord import SUFFIXES as TFRECORD_SUFFIXES
from .tfrecord import TFRecordSource

SOURCES: dict[str, type[Source]] = {cls.name: cls for cls in (
    NpzSource, NpySource, NpyDirSource, ImagesSource, TFRecordSource, CsvSource, PythonSource)}


def folder_kinds(path: Path) -> list[str]:
    """The sources a folder's files fit."""
    kinds = []
    if any(path.glob("*.npy")):
        kinds.append("npy-dir")
    if any(path.glob("*.csv")):
        kinds.append("csv")
    if any(p.suffix.lower() in TFRECORD_SUFFIXES for p in path.iterdir()):
        kinds.append("tfrecord")
    if image_files(path):
        kinds.append("images")
    return kinds


def resolve_source(cfg: DataConfig) -> str | None:
    """The source of a data section: as set, else from the path (None when it cannot tell)."""
    if cfg.source is not None:
        return cfg.source
    if cfg.path is None:
        return "python" if cfg.function is not None else None
    if cfg.path.is_dir():
        kinds = folder_kinds(cfg.path)
        return kinds[0] if len(kinds) == 1 else None
    for name, cls in SOURCES.items():
        if cfg.path.suffix.lower() in cls.suffixes:
            return name
    return None


__all__ = ["SOURCES", "UNNAMED", "Field", "Reader", "Sample", "Source", "folder_kinds", "resolve_source"]
