"""The data stage: a data section's samples drawn, checked and spooled, and the input ranges declared."""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from .._log import get_logger
from .._record import record
from ..config import QuantizationConfig
from ..converters.tflite_reader import TFLiteModel
from ..errors import rel
from ..ir import TensorSpec
from . import SOURCES, resolve_source
from .checks import DataWarning, activation_warnings, data_warnings, quantization_warnings
from .config import HARD_FLOOR, CalibrationConfig, EvaluationConfig
from .samples import Progress, RandomReader, SampleSet, collect

if TYPE_CHECKING:
    from ..verify.recorded import Recording

log = get_logger(__name__)


def collect_section(cfg: CalibrationConfig | EvaluationConfig, role: str, inputs: Sequence[TensorSpec],
                    base: Path, work: Path, progress: Progress | None) -> SampleSet:
    """Open a data section's source (its paths relative to ``base``, the pipeline's folder), then draw,
    check and spool its samples."""
    source = resolve_source(cfg)
    assert source is not None  # checked with the pipeline file
    where = rel(cfg.path) if cfg.path is not None else str(cfg.function)
    log.info("reading %s data %s (%s)", role, where, source)
    reader = SOURCES[source]().open(cfg, inputs, base)
    labels = cfg.labels if isinstance(cfg, EvaluationConfig) else None
    floor = HARD_FLOOR if isinstance(cfg, CalibrationConfig) else 1  # fewer cannot calibrate a model
    return collect(reader, inputs, role=role, source=source, samples=cfg.samples, seed=cfg.seed, folder=work,
                   labels=labels, progress=progress, at_least=floor)


def expected_ranges(cal: CalibrationConfig | None, inputs: Sequence[TensorSpec]) -> dict[str, tuple[float, float]]:
    """The declared input range per model input: calibration.expected_range, else what an image
    source's preprocessing maps pixels 0-255 to."""
    if cal is None:
        return {}
    out = {name: (float(lo), float(hi)) for name, (lo, hi) in cal.expected_range.items()}
    if cal.preprocess is not None and resolve_source(cal) == "images":
        from .sources.images import pick_input

        spec = pick_input(cal, inputs, "calibration")
        channels = 1 if cal.preprocess.color.value == "grayscale" else 3
        out.setdefault(spec.name, cal.preprocess.value_range(channels))
    return out


@record
class DataStage:
    """The build's samples: calibration (or, for a mode without it, seeded random inputs), evaluation, the
    declared input ranges, and the findings about the data so far."""

    calib: SampleSet
    evaluation: SampleSet | None
    expected: dict[str, tuple[float, float]]
    warnings: list[DataWarning]


def data_stage(cal_cfg: CalibrationConfig | None, eval_cfg: EvaluationConfig | None, inputs: Sequence[TensorSpec],
               work: Path, progress: Progress | None, *, base: Path, batch: int, pass_samples: int) -> DataStage:
    """Draw, check and spool the evaluation and calibration samples (paths relative to ``base``); a finding
    about them is a warning (the verdict decides which fail the build). Without calibration data, seeded
    random inputs for the passes' proof: ``pass_samples`` of them, whole batches of ``batch``."""
    evaluation = (collect_section(eval_cfg, "evaluation", inputs, base, work, progress)
                  if eval_cfg is not None else None)
    expected = expected_ranges(cal_cfg, inputs)
    warnings: list[DataWarning] = []
    if cal_cfg is not None:
        calib = collect_section(cal_cfg, "calibration", inputs, base, work, progress)
        warnings = data_warnings(calib, min_samples=cal_cfg.min_samples, evaluation=evaluation, expected=expected)
        for w in warnings:
            log.warning("calibration: %s", w.message)
    else:  # a mode that needs no calibration data: the equivalence check runs on seeded random inputs
        count = math.ceil(pass_samples / batch) * batch
        calib = collect(RandomReader(inputs, count, 0), inputs, role="random", source="random", samples=count,
                        seed=0, folder=work)
    return DataStage(calib, evaluation, expected, warnings)


def quantization_findings(model: TFLiteModel, float_tflite: bytes | None, data: DataStage, q: QuantizationConfig,
                          batch: int, record: Recording | None = None) -> list[DataWarning]:
    """What the built model's quantization does to the declared input ranges and, with evaluation data,
    to its activations (ranges clipped, resolution lost; the float model run ``batch`` samples a call, its
    outputs on every evaluation sample recorded in ``record`` for parity)."""
    found = quantization_warnings(model, expected=data.expected, evaluation=data.evaluation,
                                  percentile=q.range_percentile)
    if float_tflite is not None and data.evaluation is not None and q.mode.calibrated:
        found += activation_warnings(float_tflite, model, data.evaluation, batch,
                                     percentile=q.range_percentile, calibration=data.calib, record=record)
    for w in found:
        log.warning("calibration: %s", w.message)
    return found
