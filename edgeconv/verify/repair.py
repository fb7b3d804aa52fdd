"""When the INT8 model fails the agreement or accuracy gates: search for the cheapest change to the
quantization that passes them, within what every listed target runs (``repair:`` / ``--repair``).

Candidates, in the order they are tried (each only where it applies):

1. per-channel weights, when the pipeline quantizes weights per tensor;
2. more calibration samples (twice as many, up to what the data holds), when the data holds more;
3. the ops that add the most quantization error kept in float, one more at a time (the per-op error
   ranking picks them), when every target runs float ops left in a quantized model;
4. int16 activations with int8 weights (int16x8), when every target runs that mode.

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
from ..config import PipelineConfig, QuantMode
from ..errors import rel


@dataclasses.dataclass(frozen=True)
class Candidate:
    """One change to the pipeline: what it is, and the ``pipeline.yaml`` keys it sets."""

    what: str
    change: Mapping[str, Mapping[str, Any]]  # section -> key -> value, as it is written in pipeline.yaml


@dataclasses.dataclass(frozen=True)
class TrialResult:
    """What a trial measured: the gates it still fails, and its costs."""

    failed: list[str]
    bytes: int
    accuracy: float | None
    sqnr_db: dict[str, float | None]
    top1_agreement: dict[str, float | None]
    mac_share: dict[str, float]  # per target: share of the MACs on supported kernels


def candidates(config: PipelineConfig, *, no_float: Sequence[str], no_int16: Sequence[str], available: int | None,
               used: int, ranked: Sequence[Mapping[str, Any]] | None,
               max_keep_float: int) -> tuple[list[Candidate], list[str]]:
    """The changes worth a trial for this pipeline, cheapest first (see the module docstring), and why each
    kind of change that is not among them does not apply. ``no_float`` / ``no_int16``: the targets that run
    no float op in a quantized model / no int16x8 model."""
    from .culprits import keep_float_pattern

    q = config.quantization
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
    if no_float:
        skipped.append(f"ops kept in float: {', '.join(no_float)} run(s) no float op in a quantized model")
    elif not ranked:
        skipped.append("ops kept in float: no per-op error ranking to pick them (verify.culprits is 0)")
    else:
        worst = [c for c in ranked if not c.get("model_output")] or list(ranked)
        for k in range(1, min(max_keep_float, len(worst)) + 1):
            kept = worst[:k]
            layers = sorted({layer for c in kept for layer in c["source_layers"]}) or [c["tensor"] for c in kept]
            out.append(Candidate(f"keep the {k} op(s) adding the most error in float ({', '.join(layers)})",
                                 {"quantization": {"keep_float": [*q.keep_float,
                                                                  *(keep_float_pattern(c["tensor"]) for c in kept)]}}))
    if q.mode is not QuantMode.INT8:
        skipped.append(f"int16x8: the mode is already {q.mode.value}")
    elif no_int16:
        skipped.append(f"int16x8: {', '.join(no_int16)} do(es) not run it")
    else:
        out.append(Candidate("int16 activations, int8 weights (int16x8)",
                             {"quantization": {"mode": "int16x8", "input_type": "auto", "output_type": "auto"}}))
    return out, skipped


def apply(config: PipelineConfig, change: Mapping[str, Mapping[str, Any]]) -> PipelineConfig:
    """The pipeline with ``change`` applied, as loading a pipeline.yaml holding it would give."""
    from ..config import IOType

    q, cal = config.quantization, config.calibration
    for section, keys in change.items():
        for key, value in keys.items():
            if section == "quantization":
                if key == "mode":
                    value = QuantMode(value)
                elif key in ("input_type", "output_type"):
                    value = IOType(value)
                elif key == "keep_float":
                    value = tuple(value)
                q = dataclasses.replace(q, **{key: value})
            elif section == "calibration" and cal is not None:
                cal = dataclasses.replace(cal, **{key: value})
            else:
                raise AssertionError(f"no repair changes {section}.{key}")
    replaced = dataclasses.replace(config, quantization=q, calibration=cal)
    object.__setattr__(replaced, "source", config.source)
    return replaced


def snippet(change: Mapping[str, Mapping[str, Any]]) -> str:
    """The change as pipeline.yaml text the user pastes (merging its keys into the sections they name)."""
    import yaml

    return yaml.safe_dump({k: dict(v) for k, v in change.items()}, sort_keys=False, default_flow_style=False)


def search(cands: Sequence[Candidate], trial: Callable[[Candidate], TrialResult], *, max_trials: int,
           max_seconds: float, pipeline: Path, skipped: Sequence[str] = (),
           log: Callable[[str], None] = lambda _: None) -> rm.Repair:
    """Run trials within the budget; choose the passing trial that keeps the most MACs supported."""
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
        trials.append({"trial": i + 1, "change": cand.what, "snippet": snippet(cand.change),
                       "passes_gates": not r.failed, "failed": r.failed, "bytes": r.bytes, "accuracy": r.accuracy,
                       "sqnr_db": r.sqnr_db, "top1_agreement": r.top1_agreement, "mac_share": r.mac_share,
                       "seconds": round(time.monotonic() - began, 2)})
    passing = [t for t in trials if t["passes_gates"]]
    chosen = min(passing, key=lambda t: (-min(t["mac_share"].values(), default=1.0), t["bytes"], t["trial"]),
                 default=None)
    closest = None if chosen is not None or not trials else min(
        trials, key=lambda t: (len(t["failed"]), -min(t["mac_share"].values(), default=1.0), t["trial"]))
    found: rm.Repair = {"trials": trials, "chosen": chosen["trial"] if chosen is not None else None,
                        "snippet": chosen["snippet"] if chosen is not None else None, "stopped": stopped,
                        "closest": closest["trial"] if closest is not None else None, "skipped": list(skipped),
                        "summary": ""}
    found["summary"] = sentence(found, pipeline)
    return found


def sentence(found: Mapping[str, Any], pipeline: Path) -> str:
    """One line for the console and the verdict."""
    trials = found["trials"]
    if not trials:
        return "repair: no change applies to this pipeline and its targets (report.md says why for each)"
    if found["chosen"] is None:
        closest = f"; closest: trial {found['closest']}" if found.get("closest") else ""
        return (f"repair: no change among {len(trials)} trial(s) passes every gate ({found['stopped']}){closest}; "
                "report.md lists each")
    t = trials[found["chosen"] - 1]
    return (f"repair: trial {t['trial']} of {len(trials)} passes every gate: {t['change']}; the output is built with "
            f"it (add it to {rel(pipeline)}: report.md shows the snippet)")

