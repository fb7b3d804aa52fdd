"""The silent killers of INT8 accuracy, as warnings a gate can turn into failures.

Measured (``../shared/reference/corpus.md``): calibration data whose range does not
match what the model sees in use (x255 preprocessing, uint8-range noise, too narrow
noise) takes a 95-98 % digits CNN to 8-34 % in INT8, and the converter says nothing.
These checks compare the calibration statistics with the evaluation data, with the
declared input range, and with the input quantization the converter chose.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from .. import report_model as rm
from ..converters.tflite_reader import TFLiteModel
from .samples import SampleSet

# A calibration range this much wider than the range in use wastes most INT8 levels.
WIDER = 4.0
# ... or that covers less than this share of it clips most inputs.
COVERS = 0.5
# Known to ruin an INT8 model (corpus.md: 8-34 % accuracy): a range 4x wider than the one in use, or
# one that covers less than a quarter of it. These findings fail the build by default.
SEVERE_COVERS = 0.25
# Real images and signals: neighbouring values correlate strongly; noise fills do not.
NOISE_CORRELATION = 0.2


@dataclasses.dataclass(frozen=True)
class DataWarning:
    """A finding about the data that does not stop the build (``gates`` can make it)."""

    check: str
    input: str | None
    message: str
    severe: bool = False  # known to ruin an INT8 model: fails the build by default

    def to_json(self) -> rm.DataFinding:
        return {"check": self.check, "input": self.input, "message": self.message, "severe": self.severe}


def _fmt(lo: float, hi: float) -> str:
    return f"[{lo:.4g}, {hi:.4g}]"


def _compare(name: str, have: tuple[float, float], want: tuple[float, float], what: str, check: str,
             subject: str = "calibration range", detail: str = "") -> list[DataWarning]:
    (a, b), (c, d) = have, want
    span = d - c
    if span <= 0:
        return []
    out = []
    overlap = max(0.0, min(b, d) - max(a, c))
    if overlap / span < COVERS:
        out.append(DataWarning(check, name, f"input {name!r}: {subject} {_fmt(a, b)}{detail} covers only "
                               f"{overlap / span:.0%} of {what} {_fmt(c, d)}; inputs outside it will clip (wrong "
                               "preprocessing, or data that is not representative?)", overlap / span < SEVERE_COVERS))
    if (b - a) / span > WIDER:
        out.append(DataWarning(check, name, f"input {name!r}: {subject} {_fmt(a, b)}{detail} is "
                               f"{(b - a) / span:.3g}x wider than {what} {_fmt(c, d)}; INT8 would spend most of "
                               "its 256 levels on values that never occur (wrong preprocessing, e.g. 0-255 instead "
                               "of 0-1?)", True))
    return out


def data_warnings(calib: SampleSet, *, min_samples: int, evaluation: SampleSet | None,
                  expected: Mapping[str, tuple[float, float]]) -> list[DataWarning]:
    """Warnings about the calibration samples, before calibrating."""
    out: list[DataWarning] = []
    if calib.count < min_samples:
        out.append(DataWarning("min_samples", None, f"calibration uses {calib.count} samples, fewer than "
                               f"calibration.min_samples ({min_samples}); quantization ranges may miss real inputs"))
    for spec in calib.inputs:
        s = calib.stats[spec.name]
        if s["constant"]:
            out.append(DataWarning("constant", spec.name, f"input {spec.name!r} is the same in all {calib.count} "
                                   f"calibration samples (min = max = {s['min']:.4g}); calibration learns nothing "
                                   "about its range", True))
            continue
        corr = s.get("neighbour_correlation")
        if corr is not None and corr < NOISE_CORRELATION:
            out.append(DataWarning("noise", spec.name, f"input {spec.name!r} looks like synthetic noise, not real "
                                   f"samples: neighbouring values are uncorrelated (mean lag-1 correlation "
                                   f"{corr:.2f}; real images and signals are far above {NOISE_CORRELATION})", True))
        have = (s["min"], s["max"])
        if evaluation is not None and spec.name in evaluation.stats:
            e = evaluation.stats[spec.name]
            out += _compare(spec.name, have, (e["min"], e["max"]), "the evaluation range", "range_mismatch")
        if spec.name in expected:
            out += _compare(spec.name, have, expected[spec.name], "the declared input range", "expected_range")
    return out


def quantization_warnings(model: TFLiteModel, *, expected: Mapping[str, tuple[float, float]],
                          evaluation: SampleSet | None, percentile: float | None = None) -> list[DataWarning]:
    """Is the input quantization the converter chose consistent with the input range in use? With
    ``percentile`` (quantization.range_percentile: ranges that clip rare outliers by design) the evaluation
    range it is compared with is the one at the same percentile."""
    out: list[DataWarning] = []
    sg = model.main
    sig = model.signatures[0] if model.signatures else None
    names = {v: k for k, v in sig.inputs.items()} if sig else {}
    for index in sg.inputs:
        name = names.get(index, sg.tensors[index].name)
        tensor = _quantized_view(model, index)
        if tensor is None or tensor.quantization is None or tensor.quantization.per_axis:
            continue
        q = tensor.quantization
        scale, zero = q.scale[0], (q.zero_point[0] if q.zero_point else 0)
        lo, hi = (-128, 127) if tensor.dtype.value == "int8" else (0, 255)
        span = ((lo - zero) * scale, (hi - zero) * scale)
        if name in expected:
            want, what = expected[name], "the declared input range"
        elif evaluation is not None and name in evaluation.stats and percentile is not None:
            want, what = _percentile_range(evaluation, name, percentile), \
                f"the evaluation range at the {percentile:g}th percentile"
        elif evaluation is not None and name in evaluation.stats:
            want, what = (evaluation.stats[name]["min"], evaluation.stats[name]["max"]), "the evaluation range"
        else:
            continue
        out += _compare(name, span, want, what, "input_quantization", subject="the .tflite input quantization range",
                        detail=f" (scale {scale:.4g}, zero point {zero})")
    return out


def _percentile_range(data: SampleSet, name: str, percentile: float) -> tuple[float, float]:
    """The range of input ``name`` between the low and the high ``percentile`` of its values on the first
    ACTIVATION_SAMPLES samples."""
    every = np.asarray(next(data.batches(ACTIVATION_SAMPLES, ACTIVATION_SAMPLES, partial=True))[name], np.float64)
    return float(np.percentile(every, 100.0 - percentile)), float(np.percentile(every, percentile))


CLIPS = 0.001  # more of a tensor's evaluation values than this beyond its quantized range: a finding
ACTIVATION_SAMPLES = 200  # evaluation samples the intermediate ranges are measured on (the first ones)
_LIMITS = {"int8": (-128, 127), "uint8": (0, 255), "int16": (-32768, 32767)}


def clipping(counts: Mapping[str, tuple[float, float]], percentile: float | None) -> list[tuple[float, str]]:
    """The tensors whose share of clipped values (``counts``: clipped, all) is past what the ranges allow
    (CLIPS, plus ``100 - percentile`` % on each side when the ranges are percentiles), largest share first."""
    limit = CLIPS + (2 * (100.0 - percentile) / 100.0 if percentile is not None else 0.0)
    return sorted(((out / n, name) for name, (out, n) in counts.items() if n and out / n > limit), reverse=True)


def activation_warnings(float_tflite: bytes, model: TFLiteModel, evaluation: SampleSet, batch: int,
                        listed: int = 3, percentile: float | None = None) -> list[DataWarning]:
    """Do the built model's intermediate tensors hold what they carry on the evaluation data? Each quantized
    op output of ``model`` is compared with the same tensor of the float .tflite run on the evaluation
    samples: values beyond the range the calibration gave it clip, in int8 and int16 alike. The model's
    inputs are checked by :func:`quantization_warnings`; here the tensors inside (a layer whose range the
    calibration data does not reach, while its inputs' ranges look fine). With ``percentile`` the ranges clip
    up to ``100 - percentile`` % of the values on each side by design: only more than that is a finding."""
    from ..verify.runner import TFLiteRunner

    # The inputs' quantized views are quantization_warnings' to check; the outputs are what parity measures.
    elsewhere = {v.index for i in model.main.inputs if (v := _quantized_view(model, i)) is not None}
    elsewhere |= set(model.main.outputs)
    spans: dict[str, tuple[float, float, str]] = {}
    for op in model.main.ops:
        for t in op.outputs:
            if t is None or t.index in elsewhere or t.dtype.value not in _LIMITS:
                continue
            q = t.quantization
            if q is None or q.per_axis or not q.scale:
                continue
            (qmin, qmax), zero = _LIMITS[t.dtype.value], (q.zero_point[0] if q.zero_point else 0)
            spans[t.name] = ((qmin - zero - 0.5) * q.scale[0], (qmax - zero + 0.5) * q.scale[0], t.dtype.value)
    runner = TFLiteRunner(float_tflite, keep_tensors=True)
    where = {t.name: t.index for t in runner.model.main.tensors if t.name in spans}
    if not where:
        return []
    seen: dict[str, list[float]] = {name: [np.inf, -np.inf, 0.0, 0.0] for name in where}  # min, max, out, all
    done = 0
    for feeds in evaluation.batches(batch):
        if done >= ACTIVATION_SAMPLES:
            break
        runner.run(feeds)
        done += batch
        for name, index in where.items():
            v = runner.interpreter.get_tensor(index)
            lo, hi, _ = spans[name]
            s = seen[name]
            s[0], s[1] = min(s[0], float(v.min())), max(s[1], float(v.max()))
            s[2] += float(np.count_nonzero((v < lo) | (v > hi)))
            s[3] += v.size
    clipped = clipping({name: (s[2], s[3]) for name, s in seen.items()}, percentile)
    out = []
    for share, name in clipped[:listed]:
        lo, hi, dtype = spans[name]
        s = seen[name]
        out.append(DataWarning(
            "activation_range", name,
            f"tensor {name!r} reaches {_fmt(s[0], s[1])} on {min(done, evaluation.count)} evaluation samples, but "
            f"the calibration gave its {dtype} range {_fmt(lo, hi)}: {share:.1%} of its values clip (in int8 and "
            "int16 alike); calibrate on data that reaches the evaluation data's range (more samples, or samples "
            "drawn like the evaluation data)"))
    if len(clipped) > listed:
        out.append(DataWarning("activation_range", None, f"{len(clipped) - listed} more intermediate tensor(s) clip "
                               "on the evaluation data (the report's per-op SQNR shows where it costs)"))
    return out


def _quantized_view(model: TFLiteModel, index: int) -> Any:
    """The quantized tensor that carries model input ``index``: the input itself, or the
    output of the QUANTIZE op that reads a float input."""
    tensor = model.main.tensors[index]
    if tensor.dtype.value in ("int8", "uint8"):
        return tensor
    for op in model.ops:
        if op.subgraph == 0 and op.type == "QUANTIZE" and op.inputs and op.inputs[0] is not None \
                and op.inputs[0].index == index:
            return op.outputs[0]
    return None


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def path_sha256(path: Path) -> str:
    """sha256 of a file, or of a folder (every file's relative path and bytes, sorted; Python's
    __pycache__ left out)."""
    if path.is_file():
        return file_sha256(path)
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f.relative_to(path).as_posix().encode() + b"\0")
        digest.update(bytes.fromhex(file_sha256(f)))
    return digest.hexdigest()
