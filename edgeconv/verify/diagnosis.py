"""Why the agreement or accuracy gates fail, in the user's terms.

When an agreement or accuracy gate fails, the build ranks the causes it can show, each with a documented id
(``CAUSES``), its evidence and its fix, in report.json (``diagnosis``), report.md, the console and the
annotations. A cause is *confirmed* when it is measured to explain the failure:

- an input's quantization is replayed alone: the float model is run on the evaluation samples with only that
  input rounded to its int8 levels; when that gives at least ``CONFIRMS`` of the INT8 model's error (noise
  power, disagreement or accuracy drop), the input is a cause (``input_resolution``, or ``index_input`` when
  the input carries ids). An input with nothing else against it (no severe finding about its data, no ids, no
  feature spanning fewer than ``COARSE_LEVELS`` levels) is replayed on the first ``SCREEN`` samples first, and
  on the rest only when it explains at least ``SCREEN_SHARE`` of the error there: such an input is a cause only
  when confirmed, and one that explains less than a quarter of the confirming share on those samples is not
  replayed on the others (on ResNet50 @ 224 that is 5 s of the float model on 100 samples);
- a tensor whose range the converter imposed (``imposed_range``) or whose calibrated range the evaluation data
  exceeds (``calibration_coverage``) is a cause when the op that produces it is among the ``TOP_CULPRITS`` ops
  that add the most error on their own (the per-op ranking);
- calibration data with a severe finding (``calibration_data``: known to ruin an INT8 model) is a cause of its own:
  every range calibrated on it is off, which replaying the input alone does not show.
- an output's resolution is replayed alone too, at no cost of a model run: the float model's outputs (read back
  from its recording) rounded to the output's int8 step (not clipped); when that gives at least ``CONFIRMS`` of the INT8
  model's error, the output's levels are a cause (``output_resolution``: a softmax over many classes whose
  probabilities all sit below half of its fixed 1/256 level, say).

Confirmed causes come first (calibration data, then inputs by the share they explain, then outputs, then imposed
ranges, then coverage), then the op that adds the most error (``op_error``), then what was found but not confirmed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .. import report_model as rm
from .._record import record
from ..calibration.checks import DataWarning, quantized_view
from ..calibration.samples import SampleSet
from ..converters.tflite_reader import TFLiteModel
from ..ir import source_layers
from . import parity

Run = Callable[[Mapping[str, np.ndarray]], dict[str, np.ndarray]]

CAUSES: dict[str, str] = {
    "calibration_data": "The calibration data is unlike the data in use (a severe finding: its range, or noise "
                        "instead of real samples): every range the converter calibrated on it is off.",
    "input_resolution": "An input's one int8 scale is too coarse for some of its features (its last axis): they "
                        "span few int8 levels, so the model sees them rounded away before any layer runs.",
    "index_input": "An input carries ids (it reaches a CAST to an integer, or GATHER/EMBEDDING_LOOKUP indices): "
                   "quantizing it maps distinct ids to the same id.",
    "output_resolution": "An output's int8 levels are too coarse for the float model's values: rounded to them "
                         "alone, the float outputs lose at least half of what the INT8 model loses.",
    "imposed_range": "A tensor's range was set by another tensor that shares its quantization through an op "
                     "such as CONCATENATION or MAXIMUM: it clips, or spans few levels, whatever the calibration "
                     "data.",
    "calibration_coverage": "The evaluation data drives a tensor beyond the range its own calibration values gave "
                            "it.",
    "op_error": "The op that adds the most error on its own (the per-op ranking).",
}
CONFIRMS = 0.5  # an input whose quantization alone gives this share of the INT8 model's error is a cause
SCREEN = 32  # samples an input with nothing else against it is replayed on first
SCREEN_SHARE = CONFIRMS / 4  # ... and on the rest only when it explains this share of the error there
COARSE_LEVELS = 16  # a feature that spans fewer int8 levels than this (4 bits) is rounded coarsely
TOP_CULPRITS = 3  # a tensor produced by one of the first ops of the per-op ranking confirms its finding
LISTED_FEATURES = 3
# Ops an id input goes through unchanged on its way to what uses it as an index.
_CARRY = frozenset({"QUANTIZE", "DEQUANTIZE", "RESHAPE", "SQUEEZE", "EXPAND_DIMS", "TRANSPOSE", "STRIDED_SLICE",
                    "SLICE", "SPLIT", "SPLIT_V", "UNPACK", "PACK", "CONCATENATION", "ADD", "SUB", "SELECT",
                    "SELECT_V2", "MAXIMUM", "MINIMUM", "LESS", "FLOOR_MOD", "CAST"})
_INDICES = {"GATHER": 1, "GATHER_ND": 1, "EMBEDDING_LOOKUP": 0, "ONE_HOT": 0}
_INTEGERS = frozenset({"int32", "int64", "int16"})


@record
class InputView:
    """A model input as the built model quantizes it (its own tensor, or the QUANTIZE after a float input); also
    a model output (its own tensor, or the one a DEQUANTIZE turns into a float output)."""

    name: str  # the samples' (or the outputs') key: the signature name
    dtype: str
    scale: float
    zero_point: int
    index: int  # the model input tensor

    def roundtrip(self, x: np.ndarray) -> np.ndarray:
        """``x`` rounded to the input's levels and back, as the built model sees it: quantized in float32 as
        parity feeds the built model, dequantized in float32 as TFLite's DEQUANTIZE does."""
        from .runner import quantize

        q = quantize(np.asarray(x, np.float32), np.dtype(self.dtype), self.scale, self.zero_point)
        return (q.astype(np.float32) - np.float32(self.zero_point)) * np.float32(self.scale)


def input_views(model: TFLiteModel) -> list[InputView]:
    sig = model.signatures[0] if model.signatures else None
    names = {v: k for k, v in sig.inputs.items()} if sig else {}
    out = []
    for index in model.main.inputs:
        t = quantized_view(model, index)
        if t is None or t.quantization is None or not t.quantization.scale or t.quantization.per_axis:
            continue
        zero = t.quantization.zero_point[0] if t.quantization.zero_point else 0
        out.append(InputView(names.get(index, model.main.tensors[index].name), t.dtype.value,
                             t.quantization.scale[0], zero, index))
    return out


_QUANTIZED = frozenset({"int8", "uint8", "int16"})


def output_views(model: TFLiteModel) -> list[InputView]:
    """The model's outputs as the built model quantizes them (per-tensor scales only)."""
    sig = model.signatures[0] if model.signatures else None
    names = {v: k for k, v in sig.outputs.items()} if sig else {}
    producers = {t.index: op for op in model.main.ops for t in op.outputs if t is not None}
    out = []
    for index in model.main.outputs:
        t = model.main.tensors[index]
        op = producers.get(index)
        if t.dtype.value not in _QUANTIZED and op is not None and op.type == "DEQUANTIZE" and op.inputs \
                and op.inputs[0] is not None:
            t = op.inputs[0]
        q = t.quantization
        if t.dtype.value not in _QUANTIZED or q is None or not q.scale or q.per_axis:
            continue
        out.append(InputView(names.get(index, model.main.tensors[index].name), t.dtype.value, q.scale[0],
                             q.zero_point[0] if q.zero_point else 0, t.index))
    return out


def index_path(model: TFLiteModel, index: int) -> list[str]:
    """The ops from model input ``index`` to the first that uses it as an index (a CAST to an integer on the
    way named too); empty when the input reaches none."""
    consumers: dict[int, list[tuple[Any, int]]] = {}
    for op in model.main.ops:
        for k, t in enumerate(op.inputs):
            if t is not None:
                consumers.setdefault(t.index, []).append((op, k))
    todo: list[tuple[int, list[str]]] = [(index, [])]
    seen = {index}
    while todo:
        tensor, path = todo.pop(0)
        for op, k in consumers.get(tensor, []):
            if _INDICES.get(op.type) == k:
                return [*path, op.type]
            step = [*path, op.type] if op.type == "CAST" and op.outputs[0].dtype.value in _INTEGERS else path
            if op.type not in _CARRY or len(step) > 8:
                continue
            for out in op.outputs:
                if out is not None and out.index not in seen:
                    seen.add(out.index)
                    todo.append((out.index, step))
    return []


def _values(samples: SampleSet, name: str, batch: int) -> Iterator[np.ndarray]:
    for feeds in samples.batches(batch):
        yield np.asarray(feeds[name], np.float64)


def feature_ranges(samples: SampleSet, name: str, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """Per feature (the input's last axis), the lowest and highest value in the samples."""
    lo = hi = None
    for v in _values(samples, name, batch):
        rows = v.reshape(-1, v.shape[-1] if v.ndim > 1 else 1)
        lo = rows.min(0) if lo is None else np.minimum(lo, rows.min(0))
        hi = rows.max(0) if hi is None else np.maximum(hi, rows.max(0))
    if lo is None or hi is None:  # fewer samples than one batch: nothing to measure
        return np.zeros(0), np.zeros(0)
    return lo, hi


def alone(float_run: Run, samples: SampleSet, batch: int, view: InputView, shapes: Mapping[str, tuple[int, ...]],
          labels: np.ndarray | None, kinds: Mapping[str, str], reference: Run | None = None,
          limit: int | None = None) -> rm.Parity:
    """The float model with only ``view``'s input rounded to its levels, against the float model (on the
    samples as they are: ``reference`` when given, the float model's outputs on them read back), on every
    sample or on the first ``limit``."""
    def rounded(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        return float_run({**feeds, view.name: view.roundtrip(feeds[view.name])})

    return parity.measure(reference or float_run, {"input": rounded}, samples.batches(batch, limit), shapes, labels,
                          kinds)


def screen_size(count: int, batch: int) -> int | None:
    """How many samples (whole batches, at least one) an input with nothing else against it is replayed on
    first, or None when that would not leave at least as many to spare (it is replayed on all at once)."""
    first = max(SCREEN // batch, 1) * batch
    return first if count >= 2 * first else None


def explained(by: rm.Parity, built: rm.Parity, key: str = "input") -> tuple[float, str]:
    """The largest share of the built model's error (noise power, top-1 disagreement, accuracy drop) that
    ``by`` (the input alone, or the run ``key`` names) gives too, capped at 1, and the numbers behind it."""
    best, said = 0.0, ""
    for o, per in built["outputs"].items():
        b, a = per["built"], by["outputs"][o][key]
        if b["sqnr_db"] is not None:
            share = 0.0 if a["sqnr_db"] is None else 10 ** ((b["sqnr_db"] - a["sqnr_db"]) / 10)
            if share > best or not said:
                best, said = max(best, share), (f"SQNR {_db(a['sqnr_db'])} on output {o!r} (the INT8 model: "
                                                f"{_db(b['sqnr_db'])})")
        if b["top1_agreement"] is not None and a["top1_agreement"] is not None and b["top1_agreement"] < 1:
            share = (1 - a["top1_agreement"]) / (1 - b["top1_agreement"])
            if share > best:
                best, said = share, (f"top-1 agreement {a['top1_agreement']:.2%} on output {o!r} (the INT8 model: "
                                     f"{b['top1_agreement']:.2%})")
    acc_b, acc_a = built.get("accuracy"), by.get("accuracy")
    if acc_b is not None and acc_a is not None and acc_b["drop"]["built"] > 0:
        share = acc_a["drop"][key] / acc_b["drop"]["built"]
        if share > best:
            best, said = share, (f"accuracy {acc_a[key]:.2%} (the float model {acc_a['source']:.2%}, the INT8 "
                                 f"model {acc_b['built']:.2%})")
    return min(max(best, 0.0), 1.0), said


def _db(value: float | None) -> str:
    return "unbounded (no error)" if value is None else f"{value:.1f} dB"


def _fmt(lo: float, hi: float) -> str:
    return f"[{lo:.4g}, {hi:.4g}]"


@record
class Setting:
    """What the diagnosis reads from the build."""

    model: TFLiteModel
    float_run: Run  # the float model (float .tflite, or the source model)
    samples: SampleSet
    batch: int
    shapes: Mapping[str, tuple[int, ...]]
    labels: np.ndarray | None
    kinds: Mapping[str, str]
    layer_names: Sequence[str]
    # A run of the float model's recorded outputs on the samples, new for each pass (None: the model runs).
    float_outputs: Callable[[], Run] | None = None


def _cause(cause_id: str, confirmed: bool, sentence: str, fix: str, subject: str | None, layers: list[str],
           evidence: dict[str, Any]) -> rm.Cause:
    return {"rank": 0, "id": cause_id, "confirmed": confirmed, "sentence": sentence, "fix": fix,
            "subject": subject, "source_layers": layers, "evidence": evidence}


# Findings about an input's range (calibration data unlike the evaluation data or the declared range): when the
# input's quantization is the cause, they say why its scale is what it is.
_RANGE_FINDINGS = ("range_mismatch", "expected_range", "input_quantization")
# Findings about the calibration data itself: a severe one (known to ruin an INT8 model) miscalibrates every
# range the converter set from that data, not only the input's; it comes first.
_DATA_FINDINGS = ("constant", "noise", "range_mismatch", "expected_range", "input_quantization")


def input_causes(s: Setting, built: rm.Parity,
                 findings: Sequence[DataWarning] = ()) -> list[tuple[tuple[int, float], rm.Cause]]:
    """Each quantized input replayed alone; an input whose calibration data has a severe finding, an id input,
    one with coarse features, or one whose quantization alone explains the failure is a cause (confirmed by
    the finding, or by the share it explains); with the key they are ranked by."""
    out: list[tuple[tuple[int, float], rm.Cause]] = []
    for view in input_views(s.model):
        path = index_path(s.model, view.index)
        severe = [f for f in findings if f.check in _DATA_FINDINGS and f.input == view.name and f.severe]
        lo, hi = feature_ranges(s.samples, view.name, s.batch)
        if not severe and not path and not lo.size:  # fewer samples than one batch: nothing to measure
            continue
        levels = (hi - lo) / view.scale
        coarse = np.flatnonzero(levels < COARSE_LEVELS)
        first = screen_size(s.samples.count, s.batch)
        if not severe and not path and not coarse.size and first is not None:
            screened = alone(s.float_run, s.samples, s.batch, view, s.shapes, s.labels, s.kinds,
                             s.float_outputs() if s.float_outputs is not None else None, limit=first)
            if explained(screened, built)[0] < SCREEN_SHARE:
                continue
        measured = alone(s.float_run, s.samples, s.batch, view, s.shapes, s.labels, s.kinds,
                         s.float_outputs() if s.float_outputs is not None else None)
        share, said = explained(measured, built)
        confirmed = share >= CONFIRMS
        replay = (f"the float model with only this input rounded to its {view.dtype} levels gives {said}, "
                  f"{share:.0%} of the INT8 model's error")
        evidence: dict[str, Any] = {"input": view.name, "scale": view.scale, "zero_point": view.zero_point,
                                    "explained": round(share, 4), "alone": measured["outputs"],
                                    "alone_accuracy": measured.get("accuracy")}
        if severe:
            evidence["findings"] = [f.check for f in severe]
            sentence = (f"{severe[0].message}; every range calibrated on this data is off, not only the input's: "
                        f"{replay}")
            fix = (f"calibrate on real samples ({_CALIBRATE_LIKE})" if severe[0].check in ("noise", "constant")
                   else _CALIBRATE_LIKE)
            out.append(((0, -share), _cause("calibration_data", True, sentence, fix, view.name, [], evidence)))
            continue
        if path:
            ids = np.unique(np.concatenate([np.trunc(v).ravel() for v in _values(s.samples, view.name, s.batch)]))
            ids = ids.astype(np.float32)
            kept = int(np.count_nonzero(np.trunc(view.roundtrip(ids)) == ids))
            evidence |= {"reaches": path, "distinct_ids": int(ids.size), "ids_kept": kept}
            sentence = (f"input {view.name!r} carries ids (it reaches {' -> '.join(path)}), but the build quantizes "
                        f"it to {view.dtype} with scale {view.scale:.4g}: only {kept} of the {ids.size} distinct ids "
                        f"in the {s.samples.role} data survive the round trip, the rest become other ids; {replay}")
            fix = ("make the ids an integer input of the model (e.g. keras.Input(dtype='int32')): the converter "
                   "leaves integer inputs unquantized")
            if kept < ids.size or confirmed:
                out.append(((1, -share), _cause("index_input", confirmed, sentence, fix, view.name, [], evidence)))
            continue
        if not coarse.size and not confirmed:
            continue
        worst = [int(i) for i in np.argsort(levels, kind="stable")[:LISTED_FEATURES]]
        widths = (hi - lo)[(hi - lo) > 0]
        spread = (f" for features whose ranges differ {widths.max() / widths.min():,.0f}x" if widths.size > 1
                  and widths.max() / widths.min() >= 10 else "")
        listed = "; ".join(f"feature {i}: {levels[i]:.3g} levels over {_fmt(lo[i], hi[i])}" for i in worst)
        evidence |= {"features": int(levels.size), "coarse_features": [int(i) for i in coarse],
                     "levels": {str(i): round(float(levels[i]), 4) for i in worst}}
        sentence = (f"input {view.name!r}: one {view.dtype} scale ({view.scale:.4g}){spread}: {coarse.size} of "
                    f"{levels.size} features span fewer than {COARSE_LEVELS} levels ({listed}); {replay}")
        fix = ("scale the features to similar ranges before the model's input (normalize outside the model and "
               "calibrate on the normalized data), or keep the input and its normalization in float "
               "(quantization.input_type: float32 and keep_float on the normalization: a float input the firmware "
               "must feed)")
        why = [f for f in findings if f.check in _RANGE_FINDINGS and f.input == view.name]
        if why:  # the scale comes from calibration data unlike the data in use: that is what to fix
            sentence, fix = f"{why[0].message}; {replay}", _CALIBRATE_LIKE
            evidence["findings"] = [f.check for f in why]
        out.append(((1, -share), _cause("input_resolution", confirmed, sentence, fix, view.name, [], evidence)))
    return out


_CALIBRATE_LIKE = ("calibrate on data preprocessed exactly like the evaluation data (calibration.expected_range "
                   "declares the range the input takes in use)")


def _culprit_rank(ranked: Sequence[rm.Culprit] | None) -> dict[str, int]:
    return {c["tensor"]: c["rank"] for c in ranked or ()}


def finding_causes(s: Setting, findings: Sequence[DataWarning], ranked: Sequence[rm.Culprit] | None) -> list[rm.Cause]:
    """The imposed-range and coverage findings about intermediate tensors, confirmed by the per-op ranking."""
    rank = _culprit_rank(ranked)
    kinds = {"imposed_range": "imposed_range", "activation_range": "calibration_coverage"}
    fixes = {"imposed_range": "keep the op that shares the range in float (quantization.keep_float), or bring the "
                              "tensors it joins to similar ranges before it (a normalization per branch)",
             "calibration_coverage": "calibrate on data drawn like the evaluation data (more samples, or the same "
                                     "preprocessing)"}
    out = []
    for kind in ("imposed_range", "activation_range"):
        for f in findings:
            if f.check != kind or f.input is None:
                continue
            place = rank.get(f.input)
            confirmed = place is not None and place <= TOP_CULPRITS
            ranked_as = f"its op ranks #{place} of the ops that add the most error" if place is not None else ""
            cause = kinds[kind]
            layers = source_layers(f.input, s.layer_names)
            notes = "; ".join(n for n in (f"layer {', '.join(layers)}" if layers else "", ranked_as) if n)
            out.append(_cause(cause, confirmed, f"{f.statement}" + (f" ({notes})" if notes else ""), fixes[cause],
                              f.input, layers, {"culprit_rank": place}))
    return out


def _only(measured: rm.Parity, output: str) -> rm.Parity:
    """``measured`` for one output: its numbers, and the accuracy when that output is the one scored."""
    acc = measured.get("accuracy")
    return {**measured, "outputs": {output: measured["outputs"][output]},
            "accuracy": acc if acc is not None and acc.get("output") == output else None}


# Ops whose int8 and uint8 output scale TFLite fixes (1/256): no calibration widens their levels.
_FIXED_OUTPUT_SCALE = frozenset({"SOFTMAX", "LOGISTIC"})


def output_causes(s: Setting, built: rm.Parity) -> list[rm.Cause]:
    """Each quantized output's levels replayed alone on the float model's outputs (its recording, read back: no
    model runs when there is one), against the float model; the outputs whose rounding gives at least CONFIRMS
    of the INT8 model's error on them. The values are rounded to the levels' step and not clipped to their
    range: an output driven past its calibrated range is the calibration's coverage, not its resolution. A non-finite
    float value (the model's own overflow) is left out on both sides."""
    views = {v.name: v for v in output_views(s.model) if v.name in s.shapes and v.name in built["outputs"]}
    if not views:
        return []
    base = s.float_outputs() if s.float_outputs is not None else s.float_run
    last: dict[str, np.ndarray] = {}
    counts = {name: [0, 0, 0.0] for name in views}  # non-zero float values, those rounded to 0, largest magnitude

    def reference(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        last.clear()
        last.update(base(feeds))
        for name in views:  # a non-finite value (the model's own overflow) says nothing of the levels: left out
            v = np.asarray(last[name], np.float32)
            last[name] = np.where(np.isfinite(v), v, np.float32(0))
        return dict(last)

    def rounded(feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        out = dict(last)
        for name, view in views.items():
            v = last[name]
            step = np.float32(view.scale)  # rounded to the levels, not clipped to their range: the resolution alone
            out[name] = r = np.round(v / step) * step
            live = np.abs(v) > 1e-6
            c = counts[name]
            c[0] += int(np.count_nonzero(live))
            c[1] += int(np.count_nonzero(live & (r == 0)))
            c[2] = max(c[2], float(np.max(np.abs(v))) if v.size else 0.0)
        return out

    measured = parity.measure(reference, {"output": rounded}, s.samples.batches(s.batch), s.shapes, s.labels, s.kinds)
    producers = {t.index: op.type for op in s.model.main.ops for t in op.outputs if t is not None}
    causes = []
    for name, view in views.items():
        share, said = explained(_only(measured, name), _only(built, name), "output")
        if share < CONFIRMS:
            continue
        live, zeroed, largest = counts[name]
        tensor = s.model.main.tensors[view.index].name
        op = producers.get(view.index, "the op")
        sentence = (f"output {name!r}: its {view.dtype} levels (scale {view.scale:.4g}) are too coarse for the float "
                    f"model's values (the largest {largest:.4g}; {zeroed / live if live else 0.0:.1%} of the non-zero "
                    f"ones round to 0): the float model's outputs rounded alone to these levels give {said}, "
                    f"{share:.0%} of the INT8 model's error")
        if op in _FIXED_OUTPUT_SCALE and view.dtype in ("int8", "uint8"):
            fix = (f"TFLite fixes an {view.dtype} {op}'s output scale at 1/256: keep the {op} in float (quantization."
                   "keep_float on its layer, with output_type: float32), or make the model output what feeds it "
                   "(the logits: the same argmax)")
        else:
            fix = (f"keep the {op} producing it in float (quantization.keep_float on its layer, with output_type: "
                   "float32), or calibrate on data that drives this output over its whole range")
        layers = source_layers(tensor, s.layer_names) or source_layers(name, s.layer_names)  # Keras: the layer's name
        causes.append(_cause("output_resolution", True, sentence, fix, tensor, layers,
                             {"output": name, "scale": view.scale, "zero_point": view.zero_point,
                              "explained": round(share, 4), "alone": measured["outputs"][name],
                              "largest": largest, "rounded_to_zero": round(zeroed / live, 4) if live else 0.0}))
    return causes


def op_cause(ranked: Sequence[rm.Culprit] | None, named: set[str | None]) -> list[rm.Cause]:
    """The op that adds the most error on its own, unless a cause above is about its tensor already (then the
    next one)."""
    c = next((c for c in ranked or () if c["tensor"] not in named), None)
    if c is None:
        return []
    where = ", ".join(c["source_layers"]) or c["tensor"]
    place = ("adds the most error of the quantized ops on its own" if c["rank"] == 1
             else f"is #{c['rank']} of the quantized ops that add the most error on their own")
    sentence = (f"{c['op']} ({where}) {place}: SQNR "
                f"{_db(c['sqnr_db'])}, {c['erased']:.1%} of its float values erased to zero")
    return [_cause("op_error", True, sentence, "keep it in float (edgeconv build --suggest-keep-float finds the "
                   "smallest set), or let edgeconv build --repair search", c["tensor"], list(c["source_layers"]),
                   {"culprit_rank": c["rank"]})]


def diagnose(s: Setting, built: rm.Parity, findings: Sequence[DataWarning], ranked: Sequence[rm.Culprit] | None,
             failed: Sequence[str]) -> rm.Diagnosis:
    """The causes of the failed gates ``failed``, ranked (module docstring)."""
    inputs = sorted(input_causes(s, built, findings), key=lambda c: c[0])
    tensors = finding_causes(s, findings, ranked)
    confirmed = ([c for _, c in inputs if c["confirmed"]] + output_causes(s, built)
                 + [c for c in tensors if c["confirmed"]])
    ordered = (confirmed + op_cause(ranked, {c["subject"] for c in confirmed})
               + [c for _, c in inputs if not c["confirmed"]] + [c for c in tensors if not c["confirmed"]])
    for i, c in enumerate(ordered):
        c["rank"] = i + 1
    return {"failed": list(failed), "causes": ordered}
