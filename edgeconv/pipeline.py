"""``build()`` and ``check()``: the library behind ``edgeconv build`` and ``edgeconv check``."""

from __future__ import annotations

import contextlib
import errno
import os
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

from . import explorer, output, report, report_targets, verdict
from . import report_model as rm
from ._log import get_logger
from ._record import record
from .calibration.checks import (
    DataWarning,
)
from .calibration.samples import Progress
from .calibration.stage import DataStage, data_stage, quantization_findings
from .checking import check as check
from .clock import Clock
from .config import (
    PipelineConfig,
    resolved_yaml,
)
from .converters.loaders import forget_user_code, load_stage
from .converters.model import LoadedModel
from .converters.stage import Converted, convert_stage, converts_again
from .converters.tflite_reader import parse_tflite
from .diff import against_baseline
from .errors import OutputError, rel
from .gates import gate_limits
from .passes.graph import canonical
from .report_sections import assemble, data_json, model_json, quantization_json
from .results import BuildResult
from .targets.checker import TargetResult, check_model, check_targets
from .targets.target import Target
from .verify.drift_stage import drift_stage
from .verify.equivalence import Cleaned, clean_and_prove
from .verify.firmware import firmware_stage
from .verify.invoke import invoke_stage
from .verify.onnx_stage import onnx_stage
from .verify.recorded import recordings
from .verify.stage import Verification, repaired_pipeline, verification_stage

if TYPE_CHECKING:
    from .converters.tflite_export import Worker

log = get_logger(__name__)


def run(config: PipelineConfig, out_dir: Path, targets: list[Target], progress: Progress | None,
         suggest_keep_float: bool, base: rm.Report | None) -> BuildResult:
    """The build in a work folder of its own with a converter worker (the one the builds share, if any); a
    second build when the repair search chose a change; the pipeline's own code forgotten after."""
    from .converters.tflite_export import Worker, shared_worker

    shared = shared_worker()
    modules_before = set(sys.modules)
    try:
        output.remove_stale_work_folders(Path(tempfile.gettempdir()))
        work_dir = tempfile.TemporaryDirectory(prefix=f"{output.WORK_PREFIX}{os.getpid()}-")
    except OSError as exc:
        raise OutputError(f"cannot create a work folder in {tempfile.gettempdir()}: {exc.strerror or exc}; set "
                          "TMPDIR to a writable folder with free space") from None
    try:
        with work_dir as work, (contextlib.nullcontext(shared) if shared is not None else Worker()) as worker:
            result = _build(config, out_dir, targets, Path(work), progress, suggest_keep_float, base, worker)
            if not isinstance(result, BuildResult):  # the repair search chose a change: build with it
                (Path(work) / "repaired").mkdir()
                result = _build(result[0], out_dir, targets, Path(work) / "repaired", progress, suggest_keep_float,
                                base, worker, result[1])
                assert isinstance(result, BuildResult)  # a repaired build does not search again
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise OutputError(f"no space left on the device while building ({exc.filename or tempfile.gettempdir()}): "
                          f"{exc.strerror}; free some space or set TMPDIR to a folder with more (the previous "
                          "output is unchanged)") from None
    finally:
        forget_user_code(modules_before, config.source.parent)
    return result


@record
class _Stages:
    """What the stages of one build produced, for its report and its commit."""

    loaded: LoadedModel
    data: DataStage
    cleaned: Cleaned
    converted: Converted
    results: tuple[TargetResult, ...]
    warnings: list[DataWarning]
    limits: verdict.Limits
    checks: list[verdict.Check]
    runs: rm.Invoke
    verification: Verification


def _build(config: PipelineConfig, out_dir: Path, targets: list[Target], work: Path, progress: Progress | None,
           suggest_keep_float: bool, baseline: rm.Report | None, worker: Worker,
           repaired: rm.Repair | None = None) -> BuildResult | tuple[PipelineConfig, rm.Repair]:
    """One build: the stages in order (docs/ARCHITECTURE.md "What a build does"), then the verdict and the commit. When
    the repair search chose a change: the pipeline with it and the search, for build() to build again."""
    clock = Clock(progress)
    if repaired is not None and "seconds" in repaired:
        clock.carry("repair", repaired["seconds"])
    v, q, batch = config.verify, config.quantization, config.model.batch_size
    clock.begin("loading the model")
    loaded = load_stage(config.model, config.named_outputs, config.source, worker, progress,
                        boxes=[o for o, kind in v.outputs.items() if kind == "boxes"])
    clock.lap("load")
    data = data_stage(config.calibration, config.evaluation, loaded.graph.inputs, work, progress,
                      base=config.source.parent, batch=batch, pass_samples=v.pass_samples)
    clock.lap("data")
    cleaned, graph_fn = clean_and_prove(config.passes, v, batch, loaded, data.calib, clock)
    clock.lap_then("passes", "converting")
    converted = convert_stage(q, v, cleaned.graph, graph_fn, data.calib, data.evaluation, work, worker, progress,
                              batch=batch, name=config.build_name,
                              keep_worker=converts_again(v, config.repair, suggest_keep_float, repaired is not None))
    del graph_fn  # it holds the weights once more: not kept through the build
    clock.lap("convert")
    results = check_targets(converted.model, targets)
    recorded = recordings(data, batch, converted.exported.float_tflite is not None and v.parity)
    warnings = data.warnings + quantization_findings(converted.model, converted.exported.float_tflite, data, q, batch,
                                                     recorded.float_tflite)
    limits = gate_limits(config)
    early = verdict.conversion_checks(limits, cleaned.equivalence, warnings, config.calibration is not None)
    clock.lap_then("check", "running the built model on every sample")
    runs, ran = invoke_stage(converted.exported.tflite, data.calib, data.evaluation, batch, loaded.graph.layer_names(),
                             recorded.built)
    clock.lap_then("invoke", "measuring parity")
    verification = Verification() if runs["failed"] else verification_stage(
        config, loaded, cleaned.reference, converted, data, suggest_keep_float=suggest_keep_float, progress=progress,
        limits=limits, targets=targets, clock=clock, work=work, repaired=repaired is not None, findings=warnings,
        recorded=recorded)
    clock.lap("verify")
    rebuild = repaired_pipeline(config, verification, warnings, time.perf_counter() - clock.start)
    if rebuild is not None:
        return rebuild
    stages = _Stages(loaded, data, cleaned, converted, results, warnings, limits, [*early, ran], runs, verification)
    return _finish(config, out_dir, targets, work, baseline, stages, repaired, clock)


def _finish(config: PipelineConfig, out_dir: Path, targets: list[Target], work: Path,
            baseline: rm.Report | None, s: _Stages, repaired: rm.Repair | None, clock: Clock) -> BuildResult:
    """The outputs the pipeline asks for beside the model (ONNX, firmware), the verdict, the report, the
    commit."""
    model, tflite, data = s.converted.model, s.converted.exported.tflite, s.data
    found = repaired if repaired is not None else s.verification.repair
    repair_checks = (verdict.repair_check(found, config.repair.max_trials),) if found else ()
    if config.output.onnx is not None:
        clock.begin("exporting and running ONNX")
    onnx = (onnx_stage(config.output.onnx, config.quantization, s.cleaned.graph, s.cleaned.reference, tflite, model,
                       data.evaluation or data.calib, work, stem=config.build_name, batch=config.model.batch_size,
                       float_tolerance=config.verify.float_tolerance) if config.output.onnx is not None else None)
    fw = firmware_stage(config.output, config.build_name, model, tflite, data.evaluation, config.model.batch_size)
    drift = drift_stage(config.verify.runtime_drift, s.limits.max_runtime_drift_lsb is not None, targets, model,
                        tflite, data.evaluation or data.calib, config.model.batch_size)
    layer_names = s.loaded.graph.layer_names()
    targets_json = report_targets.targets_json(s.results, layer_names)
    overlays = explorer.node_data(model, targets_json, s.verification.op_errors)
    checks = (*verdict.target_checks(s.results, s.limits, layer_names), *s.checks, *s.verification.checks,
              *repair_checks, *(onnx.checks if onnx is not None else ()), *verdict.memory_checks(fw.memory, s.limits),
              *verdict.drift_checks(drift, s.limits))
    clock.lap("onnx" if config.output.onnx is not None else "report")
    graph = s.loaded.graph
    body = assemble(
        config, out_dir, tflite=model, targets=targets_json, gate=verdict.Verdict(checks).to_json(), memory=fw.memory,
        firmware=fw.firmware, overlays=overlays,
        model=model_json(config, out_dir, s.loaded.format, s.loaded.framework, graph.inputs, graph.outputs,
                         len(graph.layers), s.loaded.notes),
        passes=[report.pass_json(p) for p in s.cleaned.passes], equivalence=s.cleaned.equivalence,
        quantization=quantization_json(config, out_dir, data.calib if config.calibration is not None else None,
                                       s.warnings, targets),
        evaluation=data_json(data.evaluation, out_dir) if data.evaluation is not None else None,
        parity=s.verification.parity, culprits=s.verification.culprits, diagnosis=s.verification.diagnosis,
        runtime_drift=drift,
        keep_float_suggestion=s.verification.keep_float_suggestion, repair=found, invoke=s.runs,
        onnx=onnx.section if onnx is not None else None, timings=clock.to_json())
    if baseline is not None:
        body = against_baseline(body, baseline, checks, config.gates.regression)
    graph_io = ([i.node for i in graph.inputs], [canonical(o.tensor) for o in graph.outputs])
    files = {**fw.files, **(onnx.files if onnx is not None else {}), **overlays}
    return _commit(config, out_dir, f"{config.build_name}.tflite", tflite, body, s.results, graph_io, files)


def check_existing(config: PipelineConfig, out_dir: Path, targets: list[Target],
                    baseline: rm.Report | None) -> BuildResult:
    """A .tflite model: nothing to load, clean or convert; check it and write the same outputs."""
    path = config.model.path
    log.info("reading %s (an existing .tflite: no passes, no conversion)", rel(path))
    data = path.read_bytes()
    tflite_name = f"{config.build_name}.tflite"
    model = parse_tflite(data, rel(path))
    log.info("checking %d ops against %s", len(model.ops), ", ".join(t.name for t in targets))
    results = tuple(check_model(model, t) for t in targets)
    io = report.model_json(model)
    source = model_json(config, out_dir, "tflite", "tflite", (), (), 0,
                         ("an existing .tflite: loading, passes and conversion were skipped; only the checks ran",))
    source["inputs"] = [{"name": t.get("signature_name", t["name"]), "shape": t["shape"], "dtype": t["dtype"]}
                        for t in io["inputs"]]
    source["outputs"] = [{"name": t.get("signature_name", t["name"]), "shape": t["shape"], "dtype": t["dtype"]}
                         for t in io["outputs"]]
    fw = firmware_stage(config.output, config.build_name, model, data, None, 1)
    targets_json = report_targets.targets_json(results)
    overlays = explorer.node_data(model, targets_json)
    limits = gate_limits(config)
    checks = (*verdict.target_checks(results, limits),
              *(verdict.off(f"{i}", note.sentence) for i, note in enumerate(limits.notes)),
              *verdict.memory_checks(fw.memory, limits))
    body = assemble(config, out_dir, model=source, tflite=model, targets=targets_json,
                    gate=verdict.Verdict(checks).to_json(), memory=fw.memory, firmware=fw.firmware, overlays=overlays)
    if baseline is not None:
        body = against_baseline(body, baseline, checks, config.gates.regression)
    return _commit(config, out_dir, tflite_name, data, body, results, None, {**fw.files, **overlays})


def _commit(config: PipelineConfig, out_dir: Path, tflite_name: str, tflite: bytes, body: rm.Report,
            results: tuple[TargetResult, ...], graph_io: tuple[list[str], list[str]] | None,
            extra_files: Mapping[str, bytes]) -> BuildResult:
    """The output folder: the model, the report (JSON and Markdown) and the resolved pipeline, whole."""
    files = {
        **extra_files,
        tflite_name: tflite,
        "report.json": report.dumps(body).encode(),
        "report.md": report.to_markdown(body).encode(),
        "pipeline.resolved.yaml": resolved_yaml(config, out_dir, graph_io).encode(),
    }
    output.commit(out_dir, files)
    log.info("wrote %s", rel(out_dir))
    return BuildResult(config, out_dir, out_dir / tflite_name, body, results)


