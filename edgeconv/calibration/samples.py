"""The samples a build uses: drawn with a seed, checked against the model signature,
measured, hashed, and spooled to disk one at a time.

Nothing holds all samples in memory: each sample is read, checked, added to the
running statistics and the content hash, and appended to one raw file per model
input. The converter's worker and the equivalence check read those files back a
batch at a time.
"""

from __future__ import annotations

import dataclasses
import hashlib
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path

import numpy as np

from .. import report_model as rm
from .._log import get_logger
from .._record import record
from ..errors import DataError, did_you_mean
from ..ir import TensorSpec
from .sources import UNNAMED, Field, Reader

_MAX_LISTED = 5
# (stage, done, total); total 0: a stage without a count, done 0 when it starts and 1 when it ends
Progress = Callable[[str, int, int], None]

log = get_logger(__name__)


class Stats:
    """Running statistics of one input: range, mean, std (float64 sums), per channel for
    images (last axis of size 1-4), and the mean lag-1 correlation of neighbouring
    values along the first long axis (near 0 for noise, high for real images/signals)."""

    def __init__(self, shape: tuple[int, ...]) -> None:
        self.shape = shape
        self.n = 0
        self.min, self.max = np.inf, -np.inf
        self.sum = self.sumsq = 0.0
        self.channels = shape[-1] if len(shape) == 3 and 1 <= shape[-1] <= 4 else 0
        self.ch_min = np.full(self.channels, np.inf)
        self.ch_max = np.full(self.channels, -np.inf)
        self.ch_sum = np.zeros(self.channels)
        self.ch_sumsq = np.zeros(self.channels)
        self.axis = 0 if len(shape) >= 2 and shape[0] >= 8 else (1 if len(shape) >= 3 and shape[1] >= 8 else None)
        self.corr_sum, self.corr_n = 0.0, 0
        self.first: np.ndarray | None = None
        self.varies = False

    def update(self, x: np.ndarray) -> None:
        v = x.astype(np.float64, copy=False)
        self.n += 1
        self.min, self.max = min(self.min, float(v.min())), max(self.max, float(v.max()))
        self.sum += float(v.sum())
        self.sumsq += float(np.square(v).sum())
        if self.first is None:
            self.first = v.copy()
        elif not self.varies and not np.array_equal(v, self.first):
            self.varies = True
        if self.channels:
            # Each channel as a contiguous row: NumPy reduces an (N, 3) array along its first axis three
            # values at a time (4.1 of 5.4 ms a 224 x 224 x 3 sample; 0.2 ms this way).
            rows = np.ascontiguousarray(v.reshape(-1, self.channels).T)
            self.ch_min = np.minimum(self.ch_min, rows.min(1))
            self.ch_max = np.maximum(self.ch_max, rows.max(1))
            self.ch_sum += rows.sum(1)
            self.ch_sumsq += np.einsum("ij,ij->i", rows, rows)
        if self.axis is not None:
            n = v.shape[self.axis]
            a = v[(slice(None),) * self.axis + (slice(0, n - 1),)].ravel()  # views, not copies (axis 0)
            b = v[(slice(None),) * self.axis + (slice(1, n),)].ravel()
            sa, sb = a.std(), b.std()
            if sa > 0 and sb > 0:
                self.corr_sum += float(((a - a.mean()) * (b - b.mean())).mean() / (sa * sb))
                self.corr_n += 1

    def result(self) -> rm.InputStats:
        size = self.n * int(np.prod(self.shape, dtype=np.int64))
        mean = self.sum / size
        out: rm.InputStats = {"min": self.min, "max": self.max, "mean": mean,
                               "std": float(np.sqrt(max(self.sumsq / size - mean * mean, 0.0))),
                               "constant": not self.varies and float(self.min) == float(self.max)}
        if self.channels:
            per = size // self.channels
            ch_mean = self.ch_sum / per
            out["per_channel"] = {
                "min": self.ch_min.tolist(), "max": self.ch_max.tolist(), "mean": ch_mean.tolist(),
                "std": np.sqrt(np.maximum(self.ch_sumsq / per - ch_mean ** 2, 0.0)).tolist()}
        if self.corr_n:
            out["neighbour_correlation"] = self.corr_sum / self.corr_n
        return out


@record
class SampleSet:
    """Exactly the samples a build uses, spooled in ``folder`` (one raw file per input)."""

    role: str  # "calibration" or "evaluation"
    source: str
    location: str
    files: tuple[Path, ...]
    available: int
    seed: int
    indices: tuple[int, ...]  # positions in the data, ascending: the order the samples are fed
    inputs: tuple[TensorSpec, ...]
    folder: Path
    sha256: str
    stats: Mapping[str, rm.InputStats]
    notes: tuple[str, ...] = ()
    labels: str | None = None  # the name of the labels array, when the data has labels

    @property
    def count(self) -> int:
        return len(self.indices)

    def label_values(self) -> np.ndarray:
        """The labels of the samples, in order (int64)."""
        return np.fromfile(self.folder / f"{self.role}-labels.bin", dtype=np.int64)

    def spool_file(self, k: int) -> Path:
        return self.folder / f"{self.role}-{k}.bin"

    def batches(self, batch_size: int, limit: int | None = None, *, partial: bool = False,
                start: int = 0) -> Iterator[dict[str, np.ndarray]]:
        """Batches of ``batch_size`` consecutive samples from sample ``start`` on, read from the spool (at most
        ``limit`` samples). With ``partial``, the samples left over at the end come as one smaller batch."""
        left = max(self.count - start, 0)
        total = left if limit is None else min(limit, left)
        sizes = [batch_size] * (total // batch_size)
        if partial and total % batch_size:
            sizes.append(total % batch_size)
        files = [self.spool_file(k).open("rb") for k in range(len(self.inputs))]
        try:
            for f, spec in zip(files, self.inputs):
                f.seek(start * int(np.prod(spec.shape[1:])) * np.dtype(spec.dtype).itemsize)
            for size in sizes:
                batch = {}
                for f, spec in zip(files, self.inputs):
                    shape = (size, *spec.shape[1:])
                    dtype = np.dtype(spec.dtype)
                    data = f.read(int(np.prod(shape)) * dtype.itemsize)
                    batch[spec.name] = np.frombuffer(data, dtype).reshape(shape)
                yield batch
        finally:
            for f in files:
                f.close()


def match_fields(fields: Sequence[Field], inputs: Sequence[TensorSpec], location: str,
                 ignore: Sequence[str] = ()) -> tuple[dict[str, TensorSpec], list[str]]:
    """Key the source's arrays by model input and check shapes and dtypes; every problem at once.

    Returns field name -> model input, and notes on dtype casts.
    """
    names = [i.name for i in inputs]
    by_name = {i.name: i for i in inputs}
    fields = [f for f in fields if f.name not in ignore]
    problems: list[str] = []
    if [f.name for f in fields] == [UNNAMED]:
        if len(inputs) != 1:
            raise DataError(f"{location}: holds one unnamed array, but the model has {len(inputs)} inputs "
                            f"({', '.join(names)}); key the data by input name (an .npz) or set input:")
        fields = [dataclasses.replace(fields[0], name=names[0])]
        mapping_from = {names[0]: UNNAMED}
    else:
        mapping_from = {f.name: f.name for f in fields}
    given = [f.name for f in fields]
    for f in fields:
        if f.name not in by_name:
            problems.append(f"{location}: array {f.name!r} is not a model input (inputs: {', '.join(names)})"
                            f"{did_you_mean(f.name, names)}")
    for spec in inputs:
        if spec.name not in given:
            problems.append(f"{location}: no array for model input {spec.name!r} (arrays: "
                            f"{', '.join(sorted(given)) or 'none'}){did_you_mean(spec.name, given)}")
    out: dict[str, TensorSpec] = {}
    notes: list[str] = []
    for f in fields:
        found = by_name.get(f.name)
        if found is None:
            continue
        spec = found
        sample_shape = tuple(spec.shape[1:])
        if tuple(f.shape) != sample_shape:
            problems.append(f"{location}: input {spec.name!r} has samples of shape {tuple(f.shape)}, the model "
                            f"expects {sample_shape} (array shape (N, {', '.join(map(str, sample_shape))}) for "
                            f"model input shape {spec.shape})")
            continue
        want = np.dtype(spec.dtype)
        if f.dtype != want:
            if (want.kind == "f" and f.dtype.kind == "f") or (want.kind in "iu" and f.dtype.kind in "iu"):
                notes.append(f"input {spec.name!r}: {f.dtype} data cast to {want}")
            elif want.kind == "f":
                problems.append(f"{location}: input {spec.name!r} is {f.dtype} but the model input is {want}: apply "
                                "the model's preprocessing (e.g. scale to the range it was trained on) and save float "
                                "data")
                continue
            else:
                problems.append(f"{location}: input {spec.name!r} is {f.dtype} but the model input is {want}")
                continue
        out[mapping_from[f.name]] = spec
    if problems:
        raise DataError("\n".join(problems))
    return out, notes


def collect(reader: Reader, inputs: Sequence[TensorSpec], *, role: str, source: str, samples: int | None,
            seed: int, folder: Path, labels: str | None = None, progress: Progress | None = None,
            at_least: int = 1) -> SampleSet:
    """Draw, check, measure, hash and spool the samples of ``reader`` (and their labels); data holding fewer
    than ``at_least`` samples is refused."""
    fields = reader.fields()
    if labels is not None:
        found = {f.name: f for f in fields}
        if labels not in found:
            raise DataError(f"{reader.location}: no labels {labels!r} (arrays: {', '.join(sorted(found))})"
                            f"{did_you_mean(labels, list(found))}")
        if found[labels].shape not in ((), (1,)) or found[labels].dtype.kind not in "iub":
            raise DataError(f"{reader.location}: labels {labels!r} must be one integer class per sample (got "
                            f"{found[labels].dtype} of shape {found[labels].shape})")
    mapping, notes = match_fields(fields, inputs, reader.location, [labels] if labels else [])
    available = reader.count()
    wanted = available if samples is None else samples
    if available < at_least:
        raise DataError(f"{reader.location}: the {role} data holds {available} sample(s); at least {at_least} are "
                        "needed")
    if wanted > available:  # all of it: fewer than min_samples is the finding (a warning)
        notes.append(f"{role}.samples is {wanted} but the data holds {available} samples: all {available} are used")
        log.warning("%s: %s", reader.location, notes[-1])
        wanted = available
    indices = np.sort(np.random.default_rng(seed).choice(available, size=wanted, replace=False))
    order = [spec for spec in inputs]
    stats = {spec.name: Stats(tuple(spec.shape[1:])) for spec in order}
    digests = {spec.name: hashlib.sha256() for spec in order}
    outs = [(folder / f"{role}-{k}.bin").open("wb") for k in range(len(order))]
    label_out = (folder / f"{role}-labels.bin").open("wb") if labels is not None else None
    bad: list[tuple[int, str]] = []
    done = 0
    last = time.monotonic()
    try:
        for index, sample in reader.read([int(i) for i in indices]):
            keyed = {mapping[k].name: v for k, v in sample.items() if k in mapping}
            for k, spec in enumerate(order):
                x = np.ascontiguousarray(keyed[spec.name], dtype=np.dtype(spec.dtype))
                if x.shape != tuple(spec.shape[1:]):
                    raise DataError(f"{reader.where(index)}: input {spec.name!r} has shape {x.shape}, the model "
                                    f"expects {tuple(spec.shape[1:])}")
                if x.dtype.kind == "f" and not np.isfinite(x).all():
                    bad.append((index, spec.name))
                    continue
                stats[spec.name].update(x)
                digests[spec.name].update(x.tobytes())
                outs[k].write(x.tobytes())
            if label_out is not None and labels is not None:
                label_out.write(np.asarray(sample[labels], np.int64).reshape(1).tobytes())
            done += 1
            if progress is not None and (time.monotonic() - last > 0.5 or done == wanted):
                progress(f"reading {role} data", done, wanted)
                last = time.monotonic()
    finally:
        for f in outs:
            f.close()
        if label_out is not None:
            label_out.close()
        reader.close()
    if bad:
        listed = ", ".join(f"{reader.where(i)} ({name!r})" for i, name in bad[:_MAX_LISTED])
        more = ", ..." if len(bad) > _MAX_LISTED else ""
        raise DataError(f"{reader.location}: NaN or Inf in {len(bad)} sample(s) of the {role} data: {listed}{more}")
    total = hashlib.sha256()
    for spec in order:
        total.update(f"{spec.name}\0{np.dtype(spec.dtype).str}\0{(wanted, *spec.shape[1:])}\0".encode())
        total.update(digests[spec.name].digest())
    return SampleSet(role, source, reader.location, tuple(reader.files()), available, seed,
                     tuple(int(i) for i in indices), tuple(order), folder, total.hexdigest(),
                     {name: s.result() for name, s in stats.items()}, tuple(notes), labels)


class RandomReader(Reader):
    """Seeded standard-normal samples of the model's input shapes: what the equivalence check
    runs on when a mode needs no calibration data and the pipeline gives none."""

    def __init__(self, inputs: Sequence[TensorSpec], count: int, seed: int) -> None:
        self.location, self.inputs, self.n, self.seed = "seeded random inputs", list(inputs), count, seed

    def fields(self) -> list[Field]:
        return [Field(i.name, tuple(i.shape[1:]), np.dtype(i.dtype)) for i in self.inputs]

    def count(self) -> int:
        return self.n

    def read(self, indices: Sequence[int]) -> Iterator[tuple[int, dict[str, np.ndarray]]]:
        for i in indices:
            rng = np.random.default_rng([self.seed, i])
            yield i, {spec.name: rng.standard_normal(spec.shape[1:]).astype(spec.dtype) for spec in self.inputs}
