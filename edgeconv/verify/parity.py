"""Float-vs-quantized parity on the evaluation data.

The source model in inference mode is the reference. The float .tflite must match it
within ``verify.float_tolerance`` (a mismatch is a conversion bug); the built .tflite
is measured against it per output: max and mean absolute error, cosine similarity,
SQNR, top-1 agreement for classifier outputs, and task accuracy and its drop when the
evaluation data has labels.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from ..verdict import Check, Kind, simple

Run = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]


@dataclasses.dataclass
class _Accumulator:
    """Running comparison of one output against the reference."""

    n: int = 0
    samples: int = 0
    max_abs: float = 0.0
    sum_abs: float = 0.0
    signal: float = 0.0
    noise: float = 0.0
    cosine_sum: float = 0.0
    agree: int = 0

    def add(self, want: np.ndarray, got: np.ndarray) -> None:
        want = want.astype(np.float64).reshape(want.shape[0], -1)
        got = got.astype(np.float64).reshape(got.shape[0], -1)
        diff = np.abs(want - got)
        self.n += diff.size
        self.samples += want.shape[0]
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.sum_abs += float(diff.sum())
        self.signal += float(np.sum(want ** 2))
        self.noise += float(np.sum((want - got) ** 2))
        for w, g in zip(want, got):
            norm = float(np.linalg.norm(w) * np.linalg.norm(g))
            self.cosine_sum += float(w @ g) / norm if norm > 0 else float(np.array_equal(w, g))
        if want.shape[1] > 1:
            self.agree += int(np.sum(want.argmax(1) == got.argmax(1)))

    def result(self, classifier: bool) -> dict[str, float | None]:
        # No noise at all: SQNR is unbounded, written as null (JSON has no infinity).
        sqnr = 10 * math.log10(self.signal / self.noise) if self.noise > 0 and self.signal > 0 else None
        return {"max_abs_error": self.max_abs, "mean_abs_error": self.sum_abs / max(self.n, 1),
                "cosine": self.cosine_sum / max(self.samples, 1), "sqnr_db": sqnr,
                "top1_agreement": self.agree / max(self.samples, 1) if classifier else None}


def is_classifier(shape: tuple[int, ...]) -> bool:
    """Class scores: one vector of more than one value per sample."""
    return len(shape) == 2 and shape[1] > 1


def measure(reference: Run, candidates: Mapping[str, Run], batches: Iterable[dict[str, np.ndarray]],
            output_shapes: Mapping[str, tuple[int, ...]], labels: np.ndarray | None) -> dict[str, Any]:
    """Compare every candidate with the reference, output by output, on the same batches."""
    acc = {c: {o: _Accumulator() for o in output_shapes} for c in candidates}
    hits = {c: 0 for c in ("source", *candidates)}
    scored = next((o for o, s in output_shapes.items() if is_classifier(s)), None)
    seen = 0
    for feeds in batches:
        want = reference(feeds)
        size = next(iter(want.values())).shape[0]
        truth = labels[seen:seen + size] if labels is not None else None
        if truth is not None and scored is not None:
            hits["source"] += int(np.sum(want[scored].reshape(size, -1).argmax(1) == truth))
        for c, run in candidates.items():
            got = run(feeds)
            for o in output_shapes:
                acc[c][o].add(want[o], got[o])
            if truth is not None and scored is not None:
                hits[c] += int(np.sum(got[scored].reshape(size, -1).argmax(1) == truth))
        seen += size
    out: dict[str, Any] = {
        "samples": seen,
        "outputs": {o: {c: acc[c][o].result(is_classifier(s)) for c in candidates} for o, s in output_shapes.items()},
        "accuracy": None,
    }
    if labels is not None and scored is not None and seen:
        accuracy = {c: hits[c] / seen for c in hits}
        out["accuracy"] = {"output": scored, **accuracy,
                           "drop": {c: accuracy["source"] - accuracy[c] for c in candidates}}
    return out


def float_conversion_checks(parity: Mapping[str, Any], tolerance: float) -> list[Check]:
    """The float .tflite must compute what the source model computes."""
    worst = max(per["tflite_float"]["max_abs_error"] for per in parity["outputs"].values())
    return [simple("conversion.float_tflite", Kind.CONVERSION, worst <= tolerance,
                   f"the float .tflite differs from the source model by {worst:.3g}"
                   + (f" (> verify.float_tolerance {tolerance:g}): a conversion bug, not quantization"
                      if worst > tolerance else ""), worst, tolerance)]
