"""Checks on calibration data, and the seeded, hashed sample set fed to the converter.

Checks that need only the file run before TensorFlow is imported; the checks
against the model signature run right after the model is loaded and before any
conversion. Every problem found is reported together.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import DataError, did_you_mean, rel
from ..ir import TensorSpec
from .sources import UNNAMED

_MAX_LISTED = 5


@dataclasses.dataclass(frozen=True)
class CalibrationSet:
    """Exactly the samples fed to the converter, keyed by model input name."""

    source: str
    path: Path
    file_sha256: str
    available: int
    seed: int
    indices: tuple[int, ...]  # rows of the file, in the order they are fed
    arrays: Mapping[str, np.ndarray]  # name -> (samples, *input shape without batch)
    notes: tuple[str, ...] = ()

    @property
    def count(self) -> int:
        return len(self.indices)

    def sha256(self) -> str:
        """Content hash of the samples: names, dtypes, shapes and bytes, in name order."""
        h = hashlib.sha256()
        for name in sorted(self.arrays):
            arr = np.ascontiguousarray(self.arrays[name])
            h.update(f"{name}\0{arr.dtype.str}\0{arr.shape}\0".encode())
            h.update(arr.tobytes())
        return h.hexdigest()

    def stats(self) -> dict[str, dict[str, float]]:
        return {name: {"min": float(a.min()), "max": float(a.max()), "mean": float(a.mean()),
                       "std": float(a.std())} for name, a in sorted(self.arrays.items())}

    def batches(self, batch_size: int) -> list[dict[str, np.ndarray]]:
        """Converter steps: ``batch_size`` consecutive samples per step."""
        return [{name: a[i:i + batch_size] for name, a in self.arrays.items()}
                for i in range(0, self.count, batch_size)]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_file_arrays(arrays: Mapping[str, np.ndarray], path: Path) -> None:
    """What can be checked without the model: numeric, non-empty, same sample count, finite."""
    shown = rel(path)
    problems: list[str] = []
    if not arrays:
        raise DataError(f"{shown}: holds no arrays")
    counts = {}
    for name, arr in arrays.items():
        label = f"{shown}: array {name!r}" if name != UNNAMED else f"{shown}:"
        if arr.dtype.kind not in "biuf":
            problems.append(f"{label} has dtype {arr.dtype}, expected numbers")
            continue
        if arr.ndim < 1 or arr.shape[0] == 0:
            problems.append(f"{label} holds no samples (shape {arr.shape}); the first axis counts samples")
            continue
        counts[name] = arr.shape[0]
        if arr.dtype.kind == "f":
            bad = np.flatnonzero(~np.isfinite(arr.reshape(arr.shape[0], -1)).all(axis=1))
            if bad.size:
                listed = ", ".join(str(i) for i in bad[:_MAX_LISTED]) + (", ..." if bad.size > _MAX_LISTED else "")
                problems.append(f"{label} has NaN or Inf in {bad.size} sample(s): index {listed}")
    if len(set(counts.values())) > 1:
        problems.append(f"{shown}: inputs have different sample counts: "
                        + ", ".join(f"{k!r}: {v}" for k, v in sorted(counts.items())))
    if problems:
        raise DataError("\n".join(problems))


def match_signature(arrays: Mapping[str, np.ndarray], inputs: Sequence[TensorSpec], path: Path) -> tuple[
        dict[str, np.ndarray], list[str]]:
    """Key the arrays by model input name and check shapes and dtypes against the model.

    Returns the arrays (floating data cast to the input's float dtype) and notes on casts.
    """
    shown = rel(path)
    names = [i.name for i in inputs]
    problems: list[str] = []
    if set(arrays) == {UNNAMED}:
        if len(inputs) != 1:
            raise DataError(f"{shown}: an .npy file holds one array, but the model has {len(inputs)} inputs "
                            f"({', '.join(names)}); use an .npz keyed by input name")
        arrays = {names[0]: arrays[UNNAMED]}
    for key in sorted(set(arrays) - set(names)):
        problems.append(f"{shown}: array {key!r} is not a model input (inputs: {', '.join(names)})"
                        f"{did_you_mean(key, names)}")
    out: dict[str, np.ndarray] = {}
    notes: list[str] = []
    for spec in inputs:
        if spec.name not in arrays:
            problems.append(f"{shown}: no array for model input {spec.name!r} (arrays: "
                            f"{', '.join(sorted(arrays)) or 'none'}){did_you_mean(spec.name, arrays)}")
            continue
        arr = arrays[spec.name]
        sample_shape = tuple(spec.shape[1:])
        if tuple(arr.shape[1:]) != sample_shape:
            problems.append(f"{shown}: input {spec.name!r} has samples of shape {tuple(arr.shape[1:])}, the model "
                            f"expects {sample_shape} (array shape (N, {', '.join(map(str, sample_shape))}) for "
                            f"model input shape {spec.shape})")
            continue
        want = np.dtype(spec.dtype)
        if arr.dtype == want:
            out[spec.name] = arr
        elif want.kind == "f" and arr.dtype.kind == "f":
            out[spec.name] = arr.astype(want)
            notes.append(f"input {spec.name!r}: {arr.dtype} data cast to {want}")
        elif want.kind == "f":
            problems.append(f"{shown}: input {spec.name!r} is {arr.dtype} but the model input is {want}: apply the "
                            "model's preprocessing (e.g. scale to the range it was trained on) and save float data")
        else:
            problems.append(f"{shown}: input {spec.name!r} is {arr.dtype} but the model input is {want}")
    if problems:
        raise DataError("\n".join(problems))
    return out, notes


def select(arrays: Mapping[str, np.ndarray], *, samples: int, seed: int, source: str,
           path: Path, notes: Sequence[str] = ()) -> CalibrationSet:
    """Draw ``samples`` rows without replacement with a seeded generator."""
    available = next(iter(arrays.values())).shape[0]
    if samples > available:
        raise DataError(f"{rel(path)}: calibration.samples is {samples} but the file holds {available} samples; "
                        f"set calibration.samples to {available} or fewer")
    indices = np.random.default_rng(seed).choice(available, size=samples, replace=False)
    picked: dict[str, Any] = {name: np.ascontiguousarray(a[indices]) for name, a in arrays.items()}
    return CalibrationSet(source, path, file_sha256(path), available, seed,
                          tuple(int(i) for i in indices), picked, tuple(notes))
