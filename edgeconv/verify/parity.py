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

from .. import report_model as rm
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
    agree: int = 0  # class vectors (along the last axis) whose top-1 class is the reference's
    vectors: int = 0  # class vectors seen: one per sample, or one per pixel of a segmentation map
    reference_max: float = 0.0  # largest |value| of the reference output: the scale rounding errors grow with
    scores: bool = True  # every reference vector so far (the last axis) holds class probabilities
    probabilities: bool = True  # every reference value so far lies in [0, 1] (sigmoid units)
    decided: int = 0  # values whose decision at 0.5 (value >= 0.5) is the reference's
    boxes: bool = False  # the output holds corner boxes: their IoU with the reference's is measured
    iou_sum: float = 0.0
    box_count: int = 0
    integers: bool = True  # every reference output so far has an integer dtype (an argmax's class, ids)
    equal: int = 0  # values equal to the reference's

    def add(self, want: np.ndarray, got: np.ndarray) -> None:
        self.integers = self.integers and np.issubdtype(want.dtype, np.integer)
        # Class vectors along the last axis: one per sample (N, classes), or one per position (a segmentation
        # map's N, H, W, classes; a sequence's N, T, classes).
        classes = want.shape[-1] if want.ndim >= 2 else 1
        want, got = want.astype(np.float64), got.astype(np.float64)
        want_vectors, got_vectors = want.reshape(-1, classes), got.reshape(-1, classes)
        want, got = want.reshape(want.shape[0], -1), got.reshape(got.shape[0], -1)
        diff = np.abs(want - got)
        self.n += diff.size
        self.samples += want.shape[0]
        self.max_abs = max(self.max_abs, float(diff.max()))
        self.reference_max = max(self.reference_max, float(np.abs(want).max()))
        # Class probabilities: non-negative, summing to 1 (within what an int8 softmax's rounding leaves).
        self.scores = self.scores and classes > 1 and bool(
            np.all(want_vectors >= -1e-6) and np.all(np.abs(want_vectors.sum(1) - 1.0) < 0.05))
        self.probabilities = self.probabilities and bool(np.all((want >= 0.0) & (want <= 1.0)))
        self.decided += int(np.sum((want >= 0.5) == (got >= 0.5)))
        self.equal += int(np.count_nonzero(diff == 0))
        self.sum_abs += float(diff.sum())
        self.signal += float(np.sum(want ** 2))
        self.noise += float(np.sum((want - got) ** 2))
        norms = np.linalg.norm(want, axis=1) * np.linalg.norm(got, axis=1)
        dots = np.einsum("ij,ij->i", want, got)
        equal = np.all(want == got, axis=1)  # two zero rows agree perfectly; one zero row not at all
        cosine = np.where(norms > 0, dots / np.where(norms > 0, norms, 1.0), equal.astype(np.float64))
        self.cosine_sum += float(cosine.sum())
        if classes > 1:
            self.agree += int(np.sum(want_vectors.argmax(1) == got_vectors.argmax(1)))
            self.vectors += want_vectors.shape[0]
        if self.boxes and want.shape[1] % 4 == 0:
            ious = box_iou(want.reshape(-1, 4), got.reshape(-1, 4))
            self.iou_sum += float(ious.sum())
            self.box_count += ious.size

    def result(self, kind: str) -> rm.OutputParity:
        """The comparison; ``top1_agreement`` by the output's kind: the top-1 class (classification: of each
        sample, or of each pixel of a segmentation map), the
        decision at 0.5 (binary: the top-1 of [1 - p, p]; multilabel: each tag's, averaged), the values equal
        to the reference's (index: class indices, a segmentation map, ids; its SQNR would weigh a wrong class
        by how far its number is: null), none (regression)."""
        # No noise at all: SQNR is unbounded, written as null (JSON has no infinity).
        sqnr = 10 * math.log10(self.signal / self.noise) if self.noise > 0 and self.signal > 0 else None
        if kind == "index":
            sqnr = None
        top1 = (self.agree / max(self.vectors, 1) if kind == "classification" else
                self.decided / max(self.n, 1) if kind in ("binary", "multilabel") else
                self.equal / max(self.n, 1) if kind == "index" else None)
        out: rm.OutputParity = {"max_abs_error": self.max_abs, "mean_abs_error": self.sum_abs / max(self.n, 1),
                                "reference_max_abs": self.reference_max,
                                "cosine": self.cosine_sum / max(self.samples, 1), "sqnr_db": sqnr,
                                "top1_agreement": top1}
        if self.boxes:
            out["mean_iou"] = self.iou_sum / self.box_count if self.box_count else None
        return out


def box_iou(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Intersection over union of corner boxes row by row (ymin, xmin, ymax, xmax, or x first: the same IoU);
    the corners of each box taken in either order. Two empty boxes at the same place agree: 1."""
    lo_a, hi_a = np.minimum(a[:, :2], a[:, 2:]), np.maximum(a[:, :2], a[:, 2:])
    lo_b, hi_b = np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])
    inter = np.prod(np.clip(np.minimum(hi_a, hi_b) - np.maximum(lo_a, lo_b), 0.0, None), axis=1)
    union = np.prod(hi_a - lo_a, axis=1) + np.prod(hi_b - lo_b, axis=1) - inter
    same = np.all(a == b, axis=1)
    iou: np.ndarray = np.where(union > 0, inter / np.where(union > 0, union, 1.0), same.astype(np.float64))
    return iou


def is_classifier(shape: tuple[int, ...]) -> bool:
    """Class scores: one vector of more than one value per sample."""
    return len(shape) == 2 and shape[1] > 1


def is_unit(shape: tuple[int, ...]) -> bool:
    """One value per sample: a sigmoid unit when its values are probabilities."""
    return math.prod(shape[1:]) == 1


def _predicted(values: np.ndarray, size: int, how: str) -> np.ndarray:
    """The class each sample is given: the top-1 class (``argmax``), for one sigmoid unit the decision at 0.5
    (``binary``), for an index output its value (``value``)."""
    rows = values.reshape(size, -1)
    if how == "binary":
        return (rows[:, 0] >= 0.5).astype(np.int64)
    return rows[:, 0] if how == "value" else rows.argmax(1)


def measure(reference: Run, candidates: Mapping[str, Run], batches: Iterable[dict[str, np.ndarray]],
            output_shapes: Mapping[str, tuple[int, ...]], labels: np.ndarray | None,
            kinds: Mapping[str, str] | None = None) -> rm.Parity:
    """Compare every candidate with the reference, output by output, on the same batches. ``kinds`` says
    each output's kind (classification, binary, multilabel, regression, boxes, index); an output not named
    is classification when it holds class probabilities, binary when it is one value per sample in [0, 1]
    that 0/1 labels score, index when the source model gives integers, regression otherwise. The labels
    score the first classification output, else a binary one (the decision at 0.5), else an index output of
    one value per sample (an argmax's class: its value)."""
    kinds = kinds or {}
    acc = {c: {o: _Accumulator(boxes=kinds.get(o) == "boxes") for o in output_shapes} for c in candidates}
    declared = [o for o in output_shapes if kinds.get(o) == "classification"]
    scored = declared[0] if declared else next(
        (o for o, s in output_shapes.items() if is_classifier(s) and kinds.get(o) not in ("regression", "binary",
                                                                                           "multilabel", "boxes")),
        None)
    binary_labels = labels is not None and bool(np.all((labels == 0) | (labels == 1)))
    unit = None if scored is not None or not binary_labels else next(
        (o for o, s in output_shapes.items() if is_unit(s) and kinds.get(o, "binary") == "binary"), None)
    # One value per sample that may turn out to be a class index (known once the source model has given it)
    index = None if scored is not None or labels is None else next(
        (o for o, s in output_shapes.items() if is_unit(s) and kinds.get(o, "index") == "index" and o != unit), None)
    how = {scored: "argmax", unit: "binary", index: "value"}
    hits = {o: {c: 0 for c in ("source", *candidates)} for o in (scored, unit, index) if o is not None}
    seen = 0
    for feeds in batches:
        want = reference(feeds)
        size = next(iter(want.values())).shape[0]
        truth = labels[seen:seen + size] if labels is not None else None
        for o in hits if truth is not None else ():
            hits[o]["source"] += int(np.sum(_predicted(want[o], size, how[o]) == truth))
        for c, run in candidates.items():
            got = run(feeds)
            for o in output_shapes:
                acc[c][o].add(want[o], got[o])
            for o in hits if truth is not None else ():
                hits[o][c] += int(np.sum(_predicted(got[o], size, how[o]) == truth))
        seen += size
    first = next(iter(candidates), None)
    if unit is not None and kinds.get(unit) != "binary" and (first is None or not acc[first][unit].probabilities):
        unit = None  # one value per sample, but not a probability: a regression the labels cannot score
    if index is not None and kinds.get(index) != "index" and (first is None or not acc[first][index].integers):
        index = None  # one value per sample, but not integers: a regression the labels cannot score
    scored = scored if scored is not None else unit if unit is not None else index

    def kind(o: str, shape: tuple[int, ...]) -> str:
        if o in kinds:
            return kinds[o]
        if first is not None and acc[first][o].integers:
            return "index"
        if o == unit:
            return "binary"
        looks = len(shape) >= 2 and shape[-1] > 1 and first is not None and acc[first][o].scores
        return "classification" if looks or (labels is not None and o == scored) else "regression"

    found = {o: kind(o, s) for o, s in output_shapes.items()}
    out: rm.Parity = {
        "samples": seen,
        "kinds": found,
        "outputs": {o: {c: acc[c][o].result(found[o]) for c in candidates} for o in output_shapes},
        "accuracy": None,
    }
    if labels is not None and scored is not None and seen:
        accuracy = {c: n / seen for c, n in hits[scored].items()}
        out["accuracy"] = {"output": scored, **accuracy,
                           "drop": {c: accuracy["source"] - accuracy[c] for c in candidates}}
    return out


# float32 rounding: the relative error of one op is at most 2^-24; over a graph it can add up along
# the depth, at the scale of the values (measured: a 151-op pose model's float .tflite differs from TF
# by 2.05e-05, XNNPACK's by 3.7e-05, at outputs of a few units). Four times eps x ops x scale bounds it.
FLOAT32_EPS = 2.0 ** -23


def rounding_bound(ops: int, scale: float) -> float:
    """What float32 rounding alone can change in an output of this scale after ``ops`` ops."""
    return 4 * FLOAT32_EPS * max(ops, 1) * max(scale, 1.0)


def float_conversion_checks(parity: Mapping[str, Any], tolerance: float, ops: int = 1) -> list[Check]:
    """The float .tflite must compute what the source model computes, up to verify.float_tolerance or the
    float32 rounding of a graph this deep at this output scale, whichever is larger: rounding is never
    blamed on the conversion."""
    out = []
    for name, per in parity["outputs"].items():
        m = per["tflite_float"]
        worst = m["max_abs_error"]
        bound = rounding_bound(ops, m.get("reference_max_abs", 0.0))
        limit = max(tolerance, bound)
        why = (f"verify.float_tolerance {tolerance:g}" if limit == tolerance else
               f"the float32 rounding bound {bound:.3g} of {ops} ops at output scale "
               f"{m.get('reference_max_abs', 0.0):.3g}")
        out.append(simple(f"conversion.float_tflite.{name}", Kind.CONVERSION, worst <= limit,
                          f"output {name!r}: the float .tflite differs from the source model by {worst:.3g}"
                          + (f" (> {why}): a conversion bug, not quantization" if worst > limit else
                             f" (within {why})"), worst, limit))
    return out
