"""Each target's runtime against edgeconv's reference, on the build's evaluation samples
(``verify.runtime_drift``; ``gates.max_runtime_drift_lsb`` gates it)."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from .. import report_model as rm
from ..calibration.samples import SampleSet
from ..converters.tflite_reader import TFLiteModel
from ..targets.target import Target

log = logging.getLogger(__name__)

GATED_SAMPLES = 8  # samples the gate is measured on when verify.runtime_drift does not say


def drift_stage(samples_asked: int, gated: bool, targets: Sequence[Target], model: TFLiteModel, data: bytes,
                samples: SampleSet | None, batch: int) -> rm.RuntimeDrift | None:
    """The drift of the runtimes of the build's targets (those that have one here), or None when not asked."""
    from ..reference.drift import TARGET_RUNTIMES, measure
    from .runner import TFLiteRunner

    count = samples_asked or (GATED_SAMPLES if gated else 0)
    if not count or samples is None:
        return None
    kinds = {TARGET_RUNTIMES[t.name]: t.name for t in targets if t.name in TARGET_RUNTIMES}
    runner = TFLiteRunner(data)
    raw = [{runner.inputs[n]: v for n, v in runner.raw_inputs(feeds).items()}
           for feeds in samples.batches(batch, limit=count * batch)]
    log.info("drift: %s against the reference on %d %s samples", ", ".join(kinds) or "no runtime", len(raw),
             samples.role)
    measured: dict[str, dict[str, Any]] = measure(data, model, raw, list(kinds)) if kinds else {}
    for kind, found in measured.items():
        found["target"] = kinds[kind]
    return {"samples": len(raw), "data": samples.role, "runtimes": measured}


def drift_lines(drift: rm.RuntimeDrift | None) -> list[str]:
    """One line per runtime, for the console and `edgeconv check`."""
    if not drift:
        return []
    if not drift["runtimes"]:
        return ["drift: no target of this build has a runtime here (XNNPACK for arm-neon, LiteRT's optimized kernels "
                "for generic-int8, TFLite Micro for tflm-cmsis-nn)"]
    out = []
    for kind, r in drift["runtimes"].items():
        if r.get("error"):
            out.append(f"drift: {kind} ({r.get('target')}): not compared: {r['error']}")
            continue
        differ = f"{len(r['ops'])} of {r['tensors_compared']} op output(s) differ" if r["ops"] else \
            f"bit-exact on {r['tensors_compared']} op output(s)"
        first = r["ops"][0] if r["ops"] else None
        at = f"; first at op #{first['op']} {first['type']}" if first else ""
        out.append(f"drift: {kind} ({r.get('target')}): at most {r['max_lsb']} LSB from the reference, {differ}{at} "
                   f"({drift['samples']} {drift['data']} samples)")
    return out
