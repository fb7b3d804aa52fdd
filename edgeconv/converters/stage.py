"""The conversion stage: the cleaned graph converted (and quantized, calibrated on the build's samples) by
the converter worker, read back, and its input and output types checked against the pipeline's."""

from __future__ import annotations

from typing import Any

from .._log import get_logger
from .._record import record
from ..calibration.samples import Progress, SampleSet
from ..config import QuantEngine, QuantizationConfig, RepairConfig, VerifyConfig
from .io_check import INTEGER_DTYPES, check_io_types
from .tflite_export import Converter, Worker, export_options, shared_worker
from .tflite_reader import TFLiteModel, parse_tflite

log = get_logger(__name__)


@record
class Converted:
    converter: Converter  # asked again by the verification (keep_float trials, the repair search)
    exported: Any  # the .tflite, its float twin and the per-layer errors (tflite_export.Exported)
    model: TFLiteModel


def convert_stage(q: QuantizationConfig, verify: VerifyConfig, graph: Any, graph_fn: Any, calib: SampleSet,
                  evaluation: SampleSet | None, work: Any, worker: Worker, progress: Progress | None, *, batch: int,
                  name: str, keep_worker: bool) -> Converted:
    """Convert (``q``; ``batch`` samples per converter call); the per-op error ranking (``verify.culprits``,
    on the evaluation data or else the calibration samples); with evaluation data, also the float .tflite
    (``verify.parity``); read back as ``name``. Unless
    the build will ask it again (``keep_worker``, see :func:`converts_again`), a worker of its own is
    closed right after: its memory back before the checks and the verification run the models."""
    if q.mode.calibrated:
        log.info("converting to %s with %d calibration samples%s", q.mode.value, calib.count,
                 " (quantized by AI Edge Quantizer)" if q.engine is QuantEngine.AI_EDGE_QUANTIZER else "")
    else:
        log.info("converting to %s (no calibration)", q.mode.value)
    converter = Converter(graph, work / "export", worker, graph_fn)
    # The per-op ranking measures the converter's quantization (TF's QuantizationDebugger on its calibration),
    # on the evaluation data, or without any on the calibration samples (as parity does: no build goes
    # without it, and the view's per-op SQNR overlay comes from it).
    analyse = verify.culprits > 0 and q.mode.calibrated and q.engine is QuantEngine.CONVERTER
    if analyse:
        log.info("measuring the error each quantized op adds on the %s",
                 "evaluation data" if evaluation is not None else "calibration samples (no evaluation data)")
    exported = converter.convert(calib, export_options(q, batch), "model", progress,
                                 debug=(evaluation if evaluation is not None else calib) if analyse else None,
                                 float_reference=verify.parity and evaluation is not None)
    if worker is not shared_worker() and not keep_worker:
        worker.close()
    model = parse_tflite(exported.tflite, f"{name}.tflite")
    check_io_types(model, q.io("input").value, q.io("output").value, bool(q.int16_ops),
                   {which: {s.name: s.dtype for s in specs if s.dtype in INTEGER_DTYPES}
                    for which, specs in (("input", graph.inputs), ("output", graph.outputs))})
    return Converted(converter, exported, model)


def converts_again(verify: VerifyConfig, repair: RepairConfig, suggest_keep_float: bool, repaired: bool) -> bool:
    """Whether the build may ask the converter worker for more after its conversion: the keep_float
    suggestion's trials and the repair search (both part of the verification) and a repaired rebuild."""
    return verify.parity and (suggest_keep_float or verify.suggest_keep_float or (not repaired and repair.enabled))
