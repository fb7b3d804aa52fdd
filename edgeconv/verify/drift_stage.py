"""Each target's runtime against edgeconv's reference, on the build's evaluation samples
(``verify.runtime_drift``; ``gates.max_runtime_drift_lsb`` gates it)."""

from __future__ import annotations

from collections.abc import Sequence

from .. import report_model as rm
from .._log import get_logger
from ..calibration.samples import SampleSet
from ..converters.tflite_reader import TFLiteModel
from ..targets.target import Target

log = get_logger(__name__)

GATED_SAMPLES = 8  # samples the gate is measured on when verify.runtime_drift does not say


def drift_stage(samples_asked: int, gated: bool, targets: Sequence[Target], model: TFLiteModel, data: bytes,
                samples: SampleSet | None, batch: int) -> rm.RuntimeDrift | None:
    """The drift of the runtimes of the build's targets (those that have one here), or None when not asked."""
    from ..reference.drift import TARGET_RUNTIMES, measure_targets
    from .runner import TFLiteRunner

    count = samples_asked or (GATED_SAMPLES if gated else 0)
    if not count or samples is None:
        return None
    runner = TFLiteRunner(data)
    raw = [{runner.inputs[n]: v for n, v in runner.raw_inputs(feeds).items()}
           for feeds in samples.batches(batch, limit=count * batch)]
    log.info("drift: %s against the reference on %d %s samples",
             ", ".join(TARGET_RUNTIMES[t.name] for t in targets if t.name in TARGET_RUNTIMES) or "no runtime",
             len(raw), samples.role)
    return {"samples": len(raw), "data": samples.role, "runtimes": measure_targets(data, model, raw, targets)}
