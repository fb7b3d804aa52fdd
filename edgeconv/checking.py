"""``edgeconv check`` and :func:`edgeconv.check`: a .tflite against targets, without TensorFlow.

Its own module, importing only what checking needs (the reader, the targets, the verdict): ``check`` is a
CI step of its own, paid for on every run, and a build's stages are not part of it.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import verdict
from ._log import get_logger
from .converters.tflite_reader import read_tflite
from .errors import rel
from .gates import check_limits
from .results import CheckResult
from .targets import load_target
from .targets.checker import check_model

if TYPE_CHECKING:
    from .config import GatesConfig

log = get_logger(__name__)


def check(model_path: str | Path, targets: Sequence[str] = ("generic-int8",),
          gates: GatesConfig | None = None, *, reference_inputs: str | Path | None = None,
          max_drift_lsb: int | None = None) -> CheckResult:
    """Check a .tflite file against targets (and gates). No TensorFlow involved. Accelerator targets
    must run the default share of the MACs (verdict.DEFAULTS) unless ``gates`` says otherwise. With
    ``reference_inputs`` (an .npz as `edgeconv reference` reads it) each target's runtime here is compared
    with edgeconv's reference on its first samples, gated by ``max_drift_lsb``."""
    loaded = [load_target(name) for name in targets]
    start = time.perf_counter()
    model = read_tflite(model_path)
    log.debug("read %s: %d ops in %d subgraph(s), %d tensors, in %.0f ms", rel(Path(model_path)), len(model.ops),
              len(model.subgraphs), sum(len(s.tensors) for s in model.subgraphs), (time.perf_counter() - start) * 1e3)
    results = tuple(check_model(model, t) for t in loaded)
    log.debug("checked against %s in %.0f ms", ", ".join(t.name for t in loaded), (time.perf_counter() - start) * 1e3)
    limits = dataclasses.replace(check_limits(gates), max_runtime_drift_lsb=max_drift_lsb)
    drift = None
    if reference_inputs is not None:
        from .reference.drift import measure_inputs

        drift = measure_inputs(Path(model_path).read_bytes(), model, Path(reference_inputs), loaded)
    checks = (*verdict.target_checks(results, limits), *verdict.drift_checks(drift, limits))
    return CheckResult(model, results, verdict.Verdict(checks).to_json(), drift)
