"""The ONNX stage: the float ONNX model of the cleaned graph and the INT8 QDQ one of the built .tflite,
run with ONNX Runtime against the source model and the .tflite."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .. import report_model as rm
from .. import verdict
from .._log import get_logger
from .._record import record
from ..calibration.samples import SampleSet
from ..config import OnnxConfig, QuantizationConfig
from ..converters.tflite_reader import TFLiteModel
from ..ir import FrozenGraph

log = get_logger(__name__)


@record
class OnnxResult:
    files: dict[str, bytes]
    section: rm.Onnx
    checks: tuple[verdict.Check, ...]


def onnx_stage(o: OnnxConfig, quantization: QuantizationConfig, graph: FrozenGraph, reference: Any, tflite: bytes,
               model: TFLiteModel, data: SampleSet, work: Path, *, stem: str, batch: int,
               float_tolerance: float) -> OnnxResult:
    """The float ONNX model of the cleaned graph (and the INT8 QDQ one of the built .tflite), run with
    ONNX Runtime on the evaluation data: the float one against the source model (within
    verify.float_tolerance, else the build fails), the INT8 one against the .tflite."""
    from ..converters import onnx_export
    from . import parity
    from .onnx_run import OnnxRunner
    from .runner import TFLiteRunner

    quantized = o.quantized if o.quantized is not None else quantization.mode.value == "int8"
    log.info("exporting ONNX (opset %d)%s", o.opset, " and the INT8 QDQ model" if quantized else "")
    shapes = {t.name: tuple(t.shape) for t in graph.outputs}
    float_proto = onnx_export.export_float(graph, o.opset)
    files = {f"{stem}.onnx": float_proto.SerializeToString()}
    labels = data.label_values() if data.labels else None
    float_runner = OnnxRunner(files[f"{stem}.onnx"])
    runs: rm.OnnxParity = {"float": parity.measure(reference, {"onnx_float": float_runner.run}, data.batches(batch),
                                                   shapes, labels)}
    worst = max(per["onnx_float"]["max_abs_error"] for per in runs["float"]["outputs"].values())
    check = verdict.onnx_float_check(worst, float_tolerance)
    float_model: rm.FloatOnnxModel = {"file": f"{stem}.onnx", **onnx_export.summary(float_proto),
                                      "from_tf": onnx_export.from_tf(float_proto, graph)}
    models: dict[str, rm.OnnxModel] = {"float": float_model}
    if quantized:
        sig = model.signatures[0] if model.signatures else None
        names = {}
        if sig is not None:
            for key, index in (*sig.inputs.items(), *sig.outputs.items()):
                names[model.main.tensors[index].name] = key
        int8_proto = onnx_export.export_quantized(tflite, names, o.opset, work / "onnx", stem)
        files[f"{stem}.int8.onnx"] = int8_proto.SerializeToString()
        tfl = TFLiteRunner(tflite)
        runner = OnnxRunner(files[f"{stem}.int8.onnx"], quantization=tfl)
        runs["int8"] = rm.OnnxInt8Parity(**parity.measure(tfl.run, {"onnx_int8": runner.run}, data.batches(batch),
                                                          shapes, None), bit_exact=runner.exact_share())
        models["int8"] = {**onnx_export.summary(int8_proto), "file": f"{stem}.int8.onnx"}
    return OnnxResult(files, {"opset": o.opset, "models": models, "data": data.role, "parity": runs}, (check,))
