"""When the INT8 model fails the agreement or accuracy gates: search for the cheapest change to the
quantization that passes them, within what every listed target runs (``repair:`` / ``--repair``).

Candidates, in the order they are tried (each only where it applies):

1. per-channel weights, when the pipeline quantizes weights per tensor;
2. more calibration samples (twice as many, up to what the data holds), when the data holds more;
3. activation ranges that clip rare outliers: the 99.99th, then the 99.9th percentile of the calibration
   values instead of their min and max (AI Edge Quantizer; the TFLite converter's quantizer has no such
   calibration);
4. int16 activations for the ops that add the most quantization error, one more at a time up to
   MAX_INT16_OPS (the per-op error ranking picks them; AI Edge Quantizer: the converter gives a whole
   model one mode), when every target runs int16x8;
5. the ops that add the most quantization error kept in float, one more at a time, when every target
   runs float ops left in a quantized model;
6. int16 activations with int8 weights for the whole model (int16x8), when every target runs that mode.

The AI Edge Quantizer candidates need it installed (edgeconv[tf]) and a pipeline that does not keep ops
float with the converter's keep_float.

Each trial converts the model with the change (the build's converter worker, TensorFlow already
loaded), measures it against the float model on the same samples as the build, and checks it against
every target. A trial never loosens a gate: it passes when every gate that failed passes and no target
fails. Of the passing trials the one that keeps the most of the model's MACs on each target's supported
kernels is chosen (then the smaller model, then the earlier trial); the build is then rebuilt with that
change, so the model in the output folder is exactly what the pasted snippet builds.

This module is the search and its bookkeeping; the trials are run by the caller (``trial`` below).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from .. import report_model as rm
from .._record import record
from ..config import PipelineConfig, QuantEngine, QuantMode
from ..errors import rel


@record
class Candidate:
    """One change to the pipeline: what it is, the ``pipeline.yaml`` keys it sets, and how it changes the
    model's interface (None: it keeps it)."""

    what: str
    change: Mapping[str, Mapping[str, Any]]  # section -> key -> value, as it is written in pipeline.yaml
    interface_change: str | None = None


def interface_change(config: PipelineConfig, change: Mapping[str, Mapping[str, Any]]) -> str | None:
    """How ``change`` changes the built model's input and output types (None: it keeps them)."""
    before, after = config.quantization, apply(config, change).quantization
    said = [f"{which} {before.io(which).value} -> {after.io(which).value}" for which in ("input", "output")
            if before.io(which) is not after.io(which)]
    return ", ".join(said) or None


def _canonical(change: Mapping[str, Mapping[str, Any]]) -> str:
    """The change with its lists as sets: two trials that keep the same ops in float are one."""
    import json

    return json.dumps({k: {key: sorted(v) if isinstance(v, (list, tuple)) else v for key, v in keys.items()}
                       for k, keys in change.items()}, sort_keys=True)


def keep_interface(config: PipelineConfig, cands: Sequence[Candidate],
                   allow: bool) -> tuple[list[Candidate], list[str]]:
    """The candidates that keep the model's interface (all of them, marked, when ``allow``), the ones that do
    not each named as not tried; and no candidate twice (the same change, or the same layers described)."""
    out: list[Candidate] = []
    skipped: list[str] = []
    seen: set[str] = set()
    for cand in cands:
        said = _canonical(cand.change)
        if said in seen:
            skipped.append(f"{cand.what}: the same change as an earlier trial")
            continue
        seen.add(said)
        changes = interface_change(config, cand.change)
        if changes is not None and not allow:
            skipped.append(f"{cand.what}: changes the model's interface ({changes}); repair.allow_interface_change: "
                           "true tries it")
            continue
        out.append(dataclasses.replace(cand, interface_change=changes))
    return out, skipped


@record
class TrialResult:
    """What a trial measured: the gates it still fails, and its costs."""

    failed: list[str]
    bytes: int
    accuracy: float | None
    sqnr_db: dict[str, float | None]
    top1_agreement: dict[str, float | None]
    mac_share: dict[str, float]  # per target: share of the MACs on supported kernels
    held_back: dict[str, Any] | None = None  # the same figures and failed gates on the held-back samples


def figures(measured: Mapping[str, Any]) -> tuple[float | None, dict[str, float | None], dict[str, float | None]]:
    """A trial's accuracy, SQNR and top-1 agreement per output, from its parity measurement."""
    accuracy = measured["accuracy"]
    return (accuracy.get("built") if accuracy is not None else None,
            {o: m["built"]["sqnr_db"] for o, m in measured["outputs"].items()},
            {o: m["built"]["top1_agreement"] for o, m in measured["outputs"].items()})


PERCENTILES = (99.99, 99.9)  # range_percentile candidates, the least clipping first
MAX_INT16_OPS = 3  # most of the worst ops given int16 activations, one more at a time


def candidates(config: PipelineConfig, *, no_float: Sequence[str], no_int16: Sequence[str], available: int | None,
               used: int, ranked: Sequence[Mapping[str, Any]] | None, max_keep_float: int,
               quantizer: str | None = None) -> tuple[list[Candidate], list[str]]:
    """The changes worth a trial for this pipeline, cheapest first (see the module docstring), and why each
    kind of change that is not among them does not apply. ``no_float`` / ``no_int16``: the targets that run
    no float op in a quantized model / no int16x8 model. ``quantizer``: why AI Edge Quantizer cannot be used
    here (None: it can)."""
    from .culprits import keep_float_pattern

    q = config.quantization
    aeq = {"engine": QuantEngine.AI_EDGE_QUANTIZER.value}
    out: list[Candidate] = []
    skipped: list[str] = []
    if not q.per_channel:
        out.append(Candidate("per-channel weights", {"quantization": {"per_channel": True}}))
    else:
        skipped.append("per-channel weights: already on")
    if config.calibration is not None and available is not None and available > used:
        more = min(available, used * 2)
        out.append(Candidate(f"{more} calibration samples instead of {used}", {"calibration": {"samples": more}}))
    else:
        skipped.append(f"more calibration samples: the data holds no more than the {used} used")
    if quantizer is None and q.keep_float:
        quantizer = "the pipeline keeps ops float with the converter's selective quantization (keep_float)"
    if quantizer is not None:
        skipped.append(f"outlier-robust ranges and int16 for some ops (AI Edge Quantizer): {quantizer}")
    elif q.range_percentile is not None:
        skipped.append(f"outlier-robust ranges: already at the {q.range_percentile:g}th percentile")
    else:
        for p in PERCENTILES:
            out.append(Candidate(f"activation ranges at the {p:g}th percentile of the calibration values "
                                 "(AI Edge Quantizer)", {"quantization": {**aeq, "range_percentile": p}}))
    worst = [c for c in ranked or () if not c.get("model_output")]
    if quantizer is not None:
        pass
    elif q.mode is not QuantMode.INT8:
        skipped.append(f"int16 for the worst ops: the mode is already {q.mode.value}")
    elif no_int16:
        skipped.append(f"int16 for the worst ops: {', '.join(no_int16)} do(es) not run int16x8")
    elif not worst:
        skipped.append("int16 for the worst ops: no per-op error ranking to pick them (verify.culprits is 0)")
    else:
        for k in _distinct_prefixes(worst, MAX_INT16_OPS):
            kept = worst[:k]
            out.append(Candidate(f"int16 activations for the {k} op(s) adding the most error ({_layers(kept)}; AI "
                                 "Edge Quantizer)",
                                 {"quantization": {**aeq, "int16_ops": [*q.int16_ops,
                                                                        *(keep_float_pattern(c["tensor"])
                                                                          for c in kept)]}}))
    if no_float:
        skipped.append(f"ops kept in float: {', '.join(no_float)} run(s) no float op in a quantized model")
    elif q.engine is QuantEngine.AI_EDGE_QUANTIZER:
        skipped.append("ops kept in float: keep_float is the converter's; the pipeline uses AI Edge Quantizer")
    elif not ranked:
        skipped.append("ops kept in float: no per-op error ranking to pick them (verify.culprits is 0)")
    else:
        worst = worst or list(ranked)
        for k in _distinct_prefixes(worst, max_keep_float):
            kept = worst[:k]
            out.append(Candidate(f"keep the {k} op(s) adding the most error in float ({_layers(kept)})",
                                 {"quantization": {"keep_float": [*q.keep_float,
                                                                  *(keep_float_pattern(c["tensor"]) for c in kept)]}}))
    if q.mode is not QuantMode.INT8:
        skipped.append(f"int16x8: the mode is already {q.mode.value}")
    elif no_int16:
        skipped.append(f"int16x8: {', '.join(no_int16)} do(es) not run it")
    else:
        out.append(Candidate("int16 activations, int8 weights (int16x8)",
                             {"quantization": {"mode": "int16x8", "input_type": "auto", "output_type": "auto",
                                               **({"int16_ops": []} if q.int16_ops else {})}}))
    return out, skipped


# Element-wise ops a normalization inside the model is made of (x - mean) / std, x * scale + offset, ...
_NORMALIZE = frozenset({"SUB", "ADD", "MUL", "DIV", "SQUARED_DIFFERENCE", "RSQRT", "SQRT", "MAXIMUM", "MINIMUM",
                        "DEQUANTIZE", "CAST"})


def diagnosis_candidates(config: PipelineConfig, model: Any, found: Mapping[str, Any] | None) -> list[Candidate]:
    """Changes where the diagnosis points (edgeconv/verify/diagnosis.py), for the confirmed causes: the ops that
    read an input whose quantization is the cause (its normalization, up to the first op that is not
    element-wise) kept in float; an imposed range's tensor, the ops that share it and the ops that read them
    kept in float; the op producing an output whose levels are the cause kept in float. All keep float ops, so
    all make the input and output float32 (an interface change). An id input has none: no quantization setting
    keeps its ids (the model must take them as integers)."""
    from ..calibration.checks import SHARED_RANGE_OPS, shared_range_groups
    from .culprits import keep_float_pattern

    if not found or config.quantization.engine is QuantEngine.AI_EDGE_QUANTIZER:
        return []
    out = []
    q = config.quantization
    for cause in found["causes"]:
        if not cause["confirmed"] or cause["subject"] is None:
            continue
        if cause["id"] == "input_resolution":
            names = _first_ops(model, cause["subject"])
            what = f"keep the ops that read input {cause['subject']!r} in float ({', '.join(names[1])})"
        elif cause["id"] == "imposed_range":
            members, joined = shared_range_groups(model).get(cause["subject"], (frozenset(), frozenset()))
            # The tensor, the ops that share its range, and the ops that read what they join: a quantized reader
            # would take the shared range again.
            joins = sorted(op.outputs[0].name for op in model.main.ops if op.type in SHARED_RANGE_OPS & joined
                           and op.outputs and op.outputs[0] is not None and op.outputs[0].name in members)
            readers = sorted({t.name for op in model.main.ops if any(i is not None and i.name in joins
                                                                     for i in op.inputs)
                              for t in op.outputs if t is not None and t.name not in members})
            names = ([cause["subject"], *joins, *readers], sorted({*joined, "the op producing it", "their readers"}))
            what = f"keep the tensor with an imposed range and the ops sharing it in float ({', '.join(names[1])})"
        elif cause["id"] == "output_resolution":
            producer = next((op.type for op in model.main.ops for t in op.outputs
                             if t is not None and t.name == cause["subject"]), "op")
            names = ([cause["subject"]], [producer])
            what = f"keep the {producer} producing output {cause['evidence']['output']!r} in float"
        else:
            continue
        if names[0]:
            out.append(Candidate(what, {"quantization": {"keep_float": [*q.keep_float, *(
                keep_float_pattern(t) for t in names[0])]}}))
    return out


def _first_ops(model: Any, name: str) -> tuple[list[str], list[str]]:
    """The output tensors and types of the element-wise ops that read model input ``name`` (through its
    QUANTIZE when the input is float), in order, up to the first op that is not element-wise."""
    from ..calibration.checks import quantized_view

    sig = model.signatures[0] if model.signatures else None
    index = sig.inputs.get(name) if sig else next((i for i in model.main.inputs if model.main.tensors[i].name == name),
                                                  None)
    view = quantized_view(model, index) if index is not None else None
    if view is None:
        return [], []
    reach, tensors, kinds = {view.index}, [], []
    for op in model.main.ops:
        if op.type in _NORMALIZE and any(t is not None and t.index in reach for t in op.inputs):
            for t in op.outputs:
                if t is not None:
                    reach.add(t.index)
                    tensors.append(t.name)
            kinds.append(op.type)
    return tensors, kinds


def _distinct_prefixes(worst: Sequence[Mapping[str, Any]], most: int) -> list[int]:
    """How many of the worst ops each trial takes, one more at a time up to ``most``; a count whose ops name the
    same layers as the next one's is skipped (a trial that looks the same as the next to the user: the larger
    one is tried)."""
    ks = list(range(1, min(most, len(worst)) + 1))
    return [k for k in ks if k == ks[-1] or _layers(worst[:k]) != _layers(worst[:k + 1])]


def quantizer_problem(config: PipelineConfig) -> str | None:
    """Why the AI Edge Quantizer candidates cannot apply to this pipeline (None: they can)."""
    import importlib.util

    from ..config import ENGINE_HINT, IOType

    q = config.quantization
    if importlib.util.find_spec("ai_edge_quantizer") is None:
        return f"ai-edge-quantizer is not installed ({ENGINE_HINT})"
    native = IOType.INT16 if q.mode is QuantMode.INT16X8 else IOType.INT8
    set_ = [f"{which}_type {value.value}" for which in ("input", "output")
            if (value := getattr(q, f"{which}_type")) not in (IOType.AUTO, native)]
    if set_:
        return f"it gives {native.value} inputs and outputs, and the pipeline sets {' and '.join(set_)}"
    return None


def _layers(culprits: Sequence[Mapping[str, Any]]) -> str:
    return ", ".join(sorted({layer for c in culprits for layer in c["source_layers"]}) or
                     [c["tensor"] for c in culprits])


def apply(config: PipelineConfig, change: Mapping[str, Mapping[str, Any]]) -> PipelineConfig:
    """The pipeline with ``change`` applied, as loading a pipeline.yaml holding it would give."""
    from ..config import IOType

    q, cal = config.quantization, config.calibration
    for section, keys in change.items():
        for key, value in keys.items():
            if section == "quantization":
                if key == "mode":
                    value = QuantMode(value)
                elif key == "engine":
                    value = QuantEngine(value)
                elif key in ("input_type", "output_type"):
                    value = IOType(value)
                elif key in ("keep_float", "int16_ops"):
                    value = tuple(value)
                q = dataclasses.replace(q, **{key: value})
            elif section == "calibration" and cal is not None:
                cal = dataclasses.replace(cal, **{key: value})
            else:
                raise AssertionError(f"no repair changes {section}.{key}")
    return config.replace(quantization=q, calibration=cal)


def snippet(change: Mapping[str, Mapping[str, Any]], interface: str | None = None) -> str:
    """The change as pipeline.yaml text the user pastes (merging its keys into the sections they name), with a
    comment first when it changes the model's interface."""
    import yaml

    head = f"# changes the model's interface: {interface}\n" if interface else ""
    return head + yaml.safe_dump({k: dict(v) for k, v in change.items()}, sort_keys=False, default_flow_style=False)


def search(cands: Sequence[Candidate], trial: Callable[[Candidate], TrialResult], *, max_trials: int,
           max_seconds: float, pipeline: Path, skipped: Sequence[str] = (),
           log: Callable[[str], None] = lambda _: None, samples: tuple[int, int] | None = None) -> rm.Repair:
    """Run trials within the budget; choose the passing trial that keeps the most MACs supported. With
    ``samples`` (chosen on, held back) the trials also measured the held-back samples: the winner's figures
    there are its validation."""
    trials: list[rm.RepairTrial] = []
    start = time.monotonic()
    stopped = "tried every candidate"
    planned = min(len(cands), max_trials)
    for i, cand in enumerate(cands):
        if i >= max_trials:
            stopped = f"stopped at repair.max_trials ({max_trials}) with {len(cands) - i} candidate(s) left"
            break
        if time.monotonic() - start > max_seconds:
            stopped = f"stopped at repair.max_minutes ({max_seconds / 60:g}) with {len(cands) - i} candidate(s) left"
            break
        log(f"repair: trial {i + 1} of {planned}: {cand.what}")
        began = time.monotonic()
        r = trial(cand)
        record: rm.RepairTrial = {
            "trial": i + 1, "change": cand.what, "snippet": snippet(cand.change, cand.interface_change),
            "interface_change": cand.interface_change, "passes_gates": not r.failed, "failed": r.failed,
            "bytes": r.bytes, "accuracy": r.accuracy, "sqnr_db": r.sqnr_db, "top1_agreement": r.top1_agreement,
            "mac_share": r.mac_share, "seconds": round(time.monotonic() - began, 2)}
        if r.held_back is not None:
            record["held_back"] = r.held_back
        trials.append(record)
    passing = [t for t in trials if t["passes_gates"]]
    chosen = min(passing, key=lambda t: (-min(t["mac_share"].values(), default=1.0), t["bytes"], t["trial"]),
                 default=None)
    closest = None if chosen is not None or not trials else min(
        trials, key=lambda t: (len(t["failed"]), -min(t["mac_share"].values(), default=1.0), t["trial"]))
    found: rm.Repair = {"trials": trials, "chosen": chosen["trial"] if chosen is not None else None,
                        "snippet": chosen["snippet"] if chosen is not None else None, "stopped": stopped,
                        "closest": closest["trial"] if closest is not None else None, "skipped": list(skipped),
                        "summary": ""}
    if samples is not None:
        found["samples"] = {"chosen_on": samples[0], "held_back": samples[1]}
    found["summary"] = sentence(found, pipeline)
    return found


def sentence(found: Mapping[str, Any], pipeline: Path) -> str:
    """One line for the console and the verdict."""
    trials = found["trials"]
    if not trials:
        return ("repair: no change applies to this pipeline and its targets (report.md says why for each)"
                + _interface_note(found))
    if found["chosen"] is None:
        closest = f"; closest: trial {found['closest']}" if found.get("closest") else ""
        return (f"repair: no change among {len(trials)} trial(s) passes every gate ({found['stopped']}){closest}; "
                f"report.md lists each{_interface_note(found)}")
    t = trials[found["chosen"] - 1]
    interface = (f"; it CHANGES THE MODEL'S INTERFACE ({t['interface_change']}): firmware must feed and read "
                 "those types" if t.get("interface_change") else "")
    return (f"repair: trial {t['trial']} of {len(trials)} passes every gate: {t['change']}{interface}"
            f"{_validation(found, t)}; the output is built with it (add it to {rel(pipeline)}: report.md shows the "
            "snippet)")


def _validation(found: Mapping[str, Any], t: Mapping[str, Any]) -> str:
    """The winner on the samples it was not chosen on."""
    held, samples = t.get("held_back"), found.get("samples")
    if held is None or samples is None:
        return ""
    sqnr = ", ".join(f"{v:.1f} dB" for v in held["sqnr_db"].values() if v is not None)
    numbers = f"SQNR {sqnr} against {', '.join(f'{v:.1f} dB' for v in t['sqnr_db'].values() if v is not None)}"
    if held.get("accuracy_drop") is not None:
        numbers += f", accuracy drop {held['accuracy_drop'] * 100:.2f} points there"
    if held["failed"]:
        return (f"; on the {samples['held_back']} held-back samples it does NOT pass ({numbers}: "
                f"{'; '.join(held['failed'])})")
    return (f"; chosen on {samples['chosen_on']} samples, it passes on the {samples['held_back']} held back too "
            f"({numbers})")


def _interface_note(found: Mapping[str, Any]) -> str:
    """Without a passing trial: the changes not tried because they change the interface, said."""
    held = [s.split(": changes the model's interface")[0] for s in found.get("skipped", ())
            if ": changes the model's interface" in s]
    if not held:
        return ""
    return (f"; {len(held)} change(s) that would change the model's interface were not tried ({'; '.join(held)}): "
            "repair.allow_interface_change: true tries them")
