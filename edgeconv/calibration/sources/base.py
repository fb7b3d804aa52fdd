"""What a calibration data source is: a reader of samples keyed by model input name.

Readers stream: ``read`` yields one sample at a time, in ascending index order, so
memory stays bounded whatever the size of the data. ``count`` may take a pass over
the data (records, CSV rows, a Python generator), never more than that.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from ..._lazy import lazy_import
from ..._record import record
from ...ir import TensorSpec
from ..config import DataConfig

if TYPE_CHECKING:
    import numpy as np
else:
    np = lazy_import("numpy")

# The single array of an .npy file (or an image folder) has no name: it feeds ``input``,
# by default the model's only input.
UNNAMED = ""
Sample = dict[str, "np.ndarray"]  # a string: NumPy is imported on first use


@record
class Field:
    """One array a source gives per sample: the model input it feeds, its shape and dtype."""

    name: str
    shape: tuple[int, ...]
    dtype: np.dtype[Any]


class Reader(abc.ABC):
    """An opened data source."""

    location: str  # how messages name the data, e.g. "cal.npz" or "photos/"

    @abc.abstractmethod
    def fields(self) -> list[Field]:
        """The arrays of one sample (read from headers or the first sample)."""

    @abc.abstractmethod
    def count(self) -> int:
        """How many samples the data holds."""

    @abc.abstractmethod
    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, Sample]]:
        """The samples at ``indices`` (ascending), one at a time."""

    def where(self, index: int) -> str:
        """Where sample ``index`` comes from, for messages."""
        return f"{self.location} sample {index}"

    def files(self) -> list[Path]:
        """The files read, for the report's provenance."""
        return []

    def close(self) -> None:  # noqa: B027 - most readers hold nothing open
        """Release open files."""


class Source(abc.ABC):
    """A registered kind of data: opens a reader for a data section of the pipeline."""

    name: ClassVar[str]
    summary: ClassVar[str]
    suffixes: ClassVar[tuple[str, ...]] = ()

    @abc.abstractmethod
    def open(self, cfg: DataConfig, inputs: Sequence[TensorSpec], base_dir: Path) -> Reader:
        """Open the data; ``inputs`` are the model inputs (static shapes), ``base_dir`` the
        pipeline's folder."""
