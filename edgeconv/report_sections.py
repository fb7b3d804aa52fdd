"""The report's sections that describe the build's inputs: the model, the data, the quantization, the
artifacts, and the head every report begins with."""

from __future__ import annotations

import datetime
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Literal, TypedDict

from . import report
from . import report_model as rm
from ._version import __version__
from .calibration.checks import DataWarning
from .calibration.samples import SampleSet
from .config import PipelineConfig, installed_toolchain
from .converters.tflite_reader import TFLiteModel
from .digests import file_sha256, path_sha256
from .ir import TensorSpec
from .targets.describe import quantization_line
from .targets.target import Target


def model_json(config: PipelineConfig, out_dir: Path, fmt: str, framework: str, inputs: Sequence[TensorSpec],
                outputs: Sequence[TensorSpec], layers: int, notes: Sequence[str]) -> rm.ModelSection:
    return {
        "path": os.path.relpath(config.model.path, out_dir),
        "format": fmt,
        "framework": framework,
        "sha256": path_sha256(config.model.path),
        "inputs": [{"name": i.name, "shape": list(i.shape), "dtype": i.dtype} for i in inputs],
        "outputs": [{"name": o.name, "shape": list(o.shape), "dtype": o.dtype} for o in outputs],
        "layers": layers,
        "notes": list(notes),
    }


def data_json(data: SampleSet, out_dir: Path, listed: int = 20) -> rm.Data:
    """Provenance of a sample set: where it came from, exactly which samples, their statistics."""
    files = [os.path.relpath(f, out_dir) for f in data.files]
    return {
        "source": data.source,
        "path": os.path.relpath(data.files[0], out_dir) if len(data.files) == 1 else data.location,
        "file_sha256": file_sha256(data.files[0]) if len(data.files) == 1 else None,
        "files": files[:listed],
        "file_count": len(files),
        "available": data.available,
        "samples": data.count,
        "seed": data.seed,
        "samples_sha256": data.sha256,
        "stats": dict(data.stats),
        "notes": list(data.notes),
    }


def quantization_json(config: PipelineConfig, out_dir: Path, calib: SampleSet | None,
                       warnings: Sequence[DataWarning], targets: Sequence[Target]) -> rm.Quantization:
    q = config.quantization
    cal: rm.CalibrationData | None = None
    if calib is not None:
        cal = rm.CalibrationData(**data_json(calib, out_dir), warnings=[w.to_json() for w in warnings])
    return {
        "mode": q.mode.value,
        "input_type": q.io("input").value,
        "output_type": q.io("output").value,
        "per_channel": q.per_channel,
        "keep_float": list(q.keep_float),
        "engine": q.engine.value,
        "int16_ops": list(q.int16_ops),
        "range_percentile": q.range_percentile,
        # What each target allows, and so which target imposed what (a mode or keep_float it does not
        # allow is a config error before the build).
        "allowed_by_targets": [{"target": t.name, "modes": list(t.quantization.modes),
                                "float_fallback": t.quantization.float_fallback,
                                "why": quantization_line(t)} for t in targets],
        "calibration": cal,
    }


class Head(TypedDict):
    schema_version: Literal[1]
    edgeconv_version: str
    created: str
    name: str
    pipeline: str
    toolchain: dict[str, str]


def head(config: PipelineConfig, out_dir: Path) -> Head:
    """What every report begins with: the schema, edgeconv and the toolchain, when, which pipeline."""
    return {
        "schema_version": rm.REPORT_SCHEMA_VERSION,
        "edgeconv_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "name": config.build_name,
        "pipeline": os.path.relpath(config.source, out_dir),
        "toolchain": installed_toolchain(),
    }


def artifacts(config: PipelineConfig, model: TFLiteModel, overlays: Mapping[str, bytes]) -> rm.Artifacts:
    return {
        "tflite": {"path": f"{config.build_name}.tflite", "sha256": model.sha256, "bytes": model.size},
        "report_md": {"path": "report.md"},
        "resolved_pipeline": {"path": "pipeline.resolved.yaml"},
        "explorer": [{"path": name} for name in overlays],
    }


def assemble(config: PipelineConfig, out_dir: Path, *, model: rm.ModelSection, tflite: TFLiteModel,
             targets: list[rm.TargetVerdict], gate: rm.Gate, memory: rm.Memory, firmware: rm.Firmware,
             overlays: Mapping[str, bytes], passes: list[rm.PassSection] | None = None,
             equivalence: rm.Equivalence | None = None, quantization: rm.Quantization | None = None,
             evaluation: rm.Data | None = None, parity: rm.Parity | None = None,
             culprits: list[rm.Culprit] | None = None, diagnosis: rm.Diagnosis | None = None,
             runtime_drift: rm.RuntimeDrift | None = None,
             keep_float_suggestion: rm.KeepFloatSuggestion | None = None,
             repair: rm.Repair | None = None, invoke: rm.Invoke | None = None, onnx: rm.Onnx | None = None,
             timings: rm.Timings | None = None) -> rm.Report:
    """The report, the one place it is put together (a build, or the checks of an existing .tflite): the
    stages' sections, the head and the artifacts; a section a build has no stage for is null."""
    return {
        **head(config, out_dir),
        "model": model,
        "artifacts": artifacts(config, tflite, overlays),
        "passes": passes if passes is not None else [],
        "equivalence": equivalence,
        "quantization": quantization,
        "evaluation": evaluation,
        "tflite": report.model_json(tflite),
        "targets": targets,
        "gate": gate,
        "memory": memory,
        "firmware": firmware,
        "parity": parity,
        "culprits": culprits,
        "diagnosis": diagnosis,
        "runtime_drift": runtime_drift,
        "keep_float_suggestion": keep_float_suggestion,
        "repair": repair,
        "invoke": invoke,
        "onnx": onnx,
        "baseline": None,
        "timings": timings,
    }
