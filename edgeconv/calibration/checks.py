"""The silent killers of INT8 accuracy, as warnings a gate can turn into failures.

Measured (``../shared/reference/corpus.md``): calibration data whose range does not
match what the model sees in use (x255 preprocessing, uint8-range noise, too narrow
noise) takes a 95-98 % digits CNN to 8-34 % in INT8, and the converter says nothing.
These checks compare the calibration statistics with the evaluation data, with the
declared input range, and with the input quantization the converter chose.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np

from .. import report_model as rm
from .._record import record
from ..converters.tflite_reader import TFLiteModel
from .samples import SampleSet

if TYPE_CHECKING:
    from ..verify.recorded import Recording

# A calibration range this much wider than the range in use wastes most INT8 levels.
WIDER = 4.0
# ... or that covers less than this share of it clips most inputs.
COVERS = 0.5
# Known to ruin an INT8 model (corpus.md: 8-34 % accuracy): a range 4x wider than the one in use, or
# one that covers less than a quarter of it. These findings fail the build by default.
SEVERE_COVERS = 0.25
# Real images and signals: neighbouring values correlate strongly; noise fills do not.
NOISE_CORRELATION = 0.2


@record
class DataWarning:
    """A finding about the data that does not stop the build (``gates`` can make it)."""

    check: str
    input: str | None
    message: str
    severe: bool = False  # known to ruin an INT8 model: fails the build by default
    advice: str = ""  # the end of the message that says what to do

    @property
    def statement(self) -> str:
        """The message without its advice: what was found."""
        return self.message[:-len(self.advice) - 2] if self.advice and self.message.endswith(self.advice) \
            else self.message

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
        tensor = quantized_view(model, index)
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
# Ops whose quantized inputs and output share one scale and zero point: the converter gives each of these
# tensors one range for all (the widest, or the output's), whatever each one's own values need.
SHARED_RANGE_OPS = frozenset({
    "CONCATENATION", "MAXIMUM", "MINIMUM", "PACK", "UNPACK", "SPLIT", "SPLIT_V", "RESHAPE", "SQUEEZE",
    "EXPAND_DIMS", "TRANSPOSE", "PAD", "PADV2", "MAX_POOL_2D", "SLICE", "STRIDED_SLICE", "GATHER", "TILE",
    "BATCH_TO_SPACE_ND", "SPACE_TO_BATCH_ND", "DEPTH_TO_SPACE", "SPACE_TO_DEPTH", "REDUCE_MAX", "REDUCE_MIN",
    "RESIZE_NEAREST_NEIGHBOR", "BROADCAST_TO", "REVERSE_V2", "SELECT", "SELECT_V2"})
# A tensor that uses fewer levels than this of a range it shares, where another tensor of the group uses
# IMPOSER_LEVELS or more, has lost its resolution to the shared range.
IMPOSED_LEVELS = 16
IMPOSER_LEVELS = 128


def clipping(counts: Mapping[str, tuple[float, float]], percentile: float | None) -> list[tuple[float, str]]:
    """The tensors whose share of clipped values (``counts``: clipped, all) is past what the ranges allow
    (CLIPS, plus ``100 - percentile`` % on each side when the ranges are percentiles), largest share first."""
    limit = _clip_limit(percentile)
    return sorted(((out / n, name) for name, (out, n) in counts.items() if n and out / n > limit), reverse=True)


def _clip_limit(percentile: float | None) -> float:
    return CLIPS + (2 * (100.0 - percentile) / 100.0 if percentile is not None else 0.0)


@record
class _Span:
    """A quantized op output: the float range its levels cover (one level past each end), its scale."""

    lo: float
    hi: float
    dtype: str
    scale: float
    zero_point: int

    @property
    def ends(self) -> tuple[float, float]:
        """The lowest and highest value it represents."""
        return self.lo + self.scale, self.hi - self.scale


class _Ranges:
    """Per tensor, over the samples run so far: min, max, values beyond its span, values seen."""

    def __init__(self, spans: Mapping[str, _Span]) -> None:
        self.spans = spans
        self.seen: dict[str, list[float]] = {name: [np.inf, -np.inf, 0.0, 0.0] for name in spans}
        self.samples = 0

    def add(self, name: str, v: np.ndarray) -> None:
        span, s = self.spans[name], self.seen[name]
        lo, hi = float(v.min()), float(v.max())
        s[0], s[1] = min(s[0], lo), max(s[1], hi)
        if lo < span.lo or hi > span.hi:  # the values are passed over a third time only when some clip
            s[2] += float(np.count_nonzero((v < span.lo) | (v > span.hi)))
        s[3] += v.size

    def share(self, name: str) -> float:
        s = self.seen[name]
        return s[2] / s[3] if s[3] else 0.0

    def levels(self, name: str) -> float:
        """How many quantization levels the values seen span."""
        s = self.seen[name]
        return (s[1] - s[0]) / self.spans[name].scale if s[3] else 0.0


def _run_float(float_tflite: bytes, names: Mapping[str, _Span], data: SampleSet, batch: int,
               record: Recording | None = None) -> _Ranges:
    """The float .tflite on the first ACTIVATION_SAMPLES samples of ``data``, every tensor named kept. With
    ``record``, on every sample, the outputs of each batch recorded (parity reads them back)."""
    from ..verify.runner import TFLiteRunner

    runner = TFLiteRunner(float_tflite, keep_tensors=True)
    where = {t.name: t.index for t in runner.model.main.tensors if t.name in names}
    ranges = _Ranges({name: names[name] for name in where})
    ran = 0
    for feeds in data.batches(batch):
        if ranges.samples >= ACTIVATION_SAMPLES and record is None:
            break
        outputs = runner.run(feeds)
        ran += 1
        if record is not None:
            record.add(outputs)
        if ranges.samples < ACTIVATION_SAMPLES:
            ranges.samples += batch
            for name, index in where.items():
                ranges.add(name, runner.interpreter.get_tensor(index))
    if record is not None:
        record.finish(ran)
    ranges.samples = min(ranges.samples, data.count)
    return ranges


def shared_range_groups(model: TFLiteModel) -> dict[str, tuple[frozenset[str], frozenset[str]]]:
    """Per tensor that shares its quantization with others through SHARED_RANGE_OPS: the tensors of its group
    and the op types that join them."""
    parent: dict[str, str] = {}

    def find(a: str) -> str:
        while parent.setdefault(a, a) != a:
            parent[a] = parent[parent[a]]
            a = parent[a]
        return a

    joined: list[tuple[str, str, str]] = []
    for op in model.main.ops:
        if op.type not in SHARED_RANGE_OPS:
            continue
        ends = [t for t in (*op.inputs, *op.outputs) if t is not None and not t.constant and t.quantization is not None
                and t.quantization.scale and not t.quantization.per_axis and t.dtype.value in _LIMITS]
        out = [t for t in op.outputs if t in ends]
        for o in out:
            for t in ends:
                if t is not o and t.quantization == o.quantization:
                    joined.append((t.name, o.name, op.type))
                    parent[find(t.name)] = find(o.name)
    members: dict[str, set[str]] = {}
    for name in parent:
        members.setdefault(find(name), set()).add(name)
    ops: dict[str, set[str]] = {}
    for a, _, kind in joined:
        ops.setdefault(find(a), set()).add(kind)
    return {name: (frozenset(members[find(name)]), frozenset(ops[find(name)])) for name in parent}


def activation_warnings(float_tflite: bytes, model: TFLiteModel, evaluation: SampleSet, batch: int,
                        listed: int = 3, percentile: float | None = None,
                        calibration: SampleSet | None = None, record: Recording | None = None) -> list[DataWarning]:
    """Do the built model's intermediate tensors hold what they carry on the evaluation data? Each quantized
    op output of ``model`` is compared with the same tensor of the float .tflite run on the evaluation
    samples. Values beyond the range the built model gives it clip, in int8 and int16 alike: a tensor whose
    own calibration values fit that range but whose evaluation values do not is a coverage finding
    (``activation_range``: calibrate on data like the evaluation data); one whose calibration values clip too
    was given its range from another tensor (ops that share quantization parameters: ``imposed_range``, the
    tensor that imposes it named), as is one that uses fewer than IMPOSED_LEVELS levels of a range another
    tensor of its group fills. The model's inputs are checked by :func:`quantization_warnings`, the outputs
    by parity. With ``percentile`` the ranges clip up to ``100 - percentile`` % of the values on each side by
    design: only more than that is a finding. With ``record``, the float run goes on over every evaluation
    sample and records the outputs, for parity to read back instead of running the model again."""
    # The inputs' quantized views are quantization_warnings' to check; the outputs are what parity measures.
    elsewhere = {v.index for i in model.main.inputs if (v := quantized_view(model, i)) is not None}
    elsewhere |= set(model.main.outputs)
    spans: dict[str, _Span] = {}
    for op in model.main.ops:
        for t in op.outputs:
            if t is None or t.index in elsewhere or t.dtype.value not in _LIMITS:
                continue
            q = t.quantization
            if q is None or q.per_axis or not q.scale:
                continue
            (qmin, qmax), zero = _LIMITS[t.dtype.value], (q.zero_point[0] if q.zero_point else 0)
            # A value within one level past an end is off by less than two roundings (a saturated TANH's 1.0
            # against its fixed range's 127/128): only values beyond that clip.
            spans[t.name] = _Span((qmin - zero - 1) * q.scale[0], (qmax - zero + 1) * q.scale[0],
                                  t.dtype.value, q.scale[0], zero)
    if not spans and record is None:
        return []
    seen = _run_float(float_tflite, spans, evaluation, batch, record)
    if not seen.spans:
        return []
    groups = {name: g for name, g in shared_range_groups(model).items() if name in seen.spans}
    clipped = clipping({name: (s[2], s[3]) for name, s in seen.seen.items()}, percentile)
    own = None
    if clipped and calibration is not None:  # were these ranges set by the tensors' own calibration values?
        asked = {name for _, name in clipped} | {m for _, name in clipped for m in groups.get(name, ((), ()))[0]}
        own = _run_float(float_tflite, {n: spans[n] for n in asked if n in spans}, calibration, batch)
    limit = _clip_limit(percentile)
    coverage, imposed = [], []
    for share, name in clipped:
        if own is not None and name in own.seen and own.share(name) > limit:
            imposed.append(_imposed_clip(name, share, seen, own, groups.get(name), limit))
        else:
            coverage.append(_coverage(name, share, seen, evaluation.count))
    imposed += _imposed_resolution(seen, groups, {name for _, name in clipped})
    out = coverage[:listed]
    if len(coverage) > listed:
        out.append(DataWarning("activation_range", None, f"{len(coverage) - listed} more intermediate tensor(s) clip "
                               "on the evaluation data (the report's per-op SQNR shows where it costs)"))
    out += imposed[:listed]
    if len(imposed) > listed:
        out.append(DataWarning("imposed_range", None, f"{len(imposed) - listed} more intermediate tensor(s) have a "
                               "range the converter took from another tensor"))
    return out


_COVERAGE_ADVICE = ("calibrate on data that reaches the evaluation data's range (more samples, or samples drawn like "
                    "the evaluation data)")
_IMPOSED_ADVICE = ("keep the op that joins them in float (quantization.keep_float) or bring the tensors it joins to "
                   "similar ranges before it")


def _coverage(name: str, share: float, seen: _Ranges, count: int) -> DataWarning:
    span, s = seen.spans[name], seen.seen[name]
    return DataWarning(
        "activation_range", name,
        f"tensor {name!r} reaches {_fmt(s[0], s[1])} on {min(seen.samples, count)} evaluation samples, but "
        f"the calibration gave its {span.dtype} range {_fmt(*span.ends)}: {share:.1%} of its values clip (in "
        f"int8 and int16 alike); {_COVERAGE_ADVICE}", advice=_COVERAGE_ADVICE)


def _imposer(name: str, ranges: _Ranges, group: tuple[frozenset[str], frozenset[str]] | None,
             limit: float) -> str | None:
    """The tensor of ``name``'s group whose own values the shared range fits: none clip and they span the most
    levels."""
    if group is None:
        return None
    fits = [m for m in group[0] if m != name and m in ranges.seen and ranges.share(m) <= limit]
    return max(fits, key=lambda m: (ranges.levels(m), m), default=None)


def _shared_by(group: tuple[frozenset[str], frozenset[str]] | None) -> str:
    return f" through {', '.join(sorted(group[1]))}" if group is not None else ""


def _imposed_clip(name: str, share: float, seen: _Ranges, own: _Ranges,
                  group: tuple[frozenset[str], frozenset[str]] | None, limit: float) -> DataWarning:
    span, s = seen.spans[name], seen.seen[name]
    by = _imposer(name, own, group, limit)
    source = (f"the converter gave it the range of {by!r}, which shares its quantization{_shared_by(group)}" if by
              else "the converter did not take its range from its own calibration values")
    return DataWarning(
        "imposed_range", name,
        f"tensor {name!r} reaches {_fmt(s[0], s[1])} but its {span.dtype} range is {_fmt(*span.ends)}: "
        f"{share:.1%} of its evaluation values and {own.share(name):.1%} of its calibration values clip, so more "
        f"calibration data cannot fix it; {source}; {_IMPOSED_ADVICE}", advice=_IMPOSED_ADVICE)


def _imposed_resolution(seen: _Ranges, groups: Mapping[str, tuple[frozenset[str], frozenset[str]]],
                        clipped: set[str]) -> list[DataWarning]:
    """Tensors that use fewer than IMPOSED_LEVELS levels of a range another tensor of their group fills."""
    out = []
    for name in sorted(seen.spans):
        if name in clipped or name not in groups or not seen.seen[name][3]:
            continue
        used = seen.levels(name)
        members = [m for m in groups[name][0] if m in seen.spans and seen.seen[m][3]]
        by = max(members, key=lambda m: (seen.levels(m), m))
        if used >= IMPOSED_LEVELS or seen.levels(by) < IMPOSER_LEVELS:
            continue
        span, s, b = seen.spans[name], seen.seen[name], seen.seen[by]
        out.append(DataWarning(
            "imposed_range", name,
            f"tensor {name!r} spans {_fmt(s[0], s[1])}, {used:.3g} of its {span.dtype} levels (scale "
            f"{span.scale:.4g}): the converter gave it the range of {by!r} ({_fmt(b[0], b[1])}), which shares its "
            f"quantization{_shared_by(groups[name])}; {_IMPOSED_ADVICE}", advice=_IMPOSED_ADVICE))
    return sorted(out, key=lambda w: seen.levels(w.input or ""))


def quantized_view(model: TFLiteModel, index: int) -> Any:
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


