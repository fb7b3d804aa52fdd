"""``build()`` and ``check()``: the library behind ``edgeconv build`` and ``edgeconv check``."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import errno
import itertools
import json
import logging
import math
import os
import re
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypedDict

import numpy as np

from . import cancel, explorer, output, report, verdict
from . import report_model as rm
from ._version import __version__
from .cache import BuildCache
from .calibration import SOURCES, resolve_source
from .calibration.checks import (
    DataWarning,
    activation_warnings,
    data_warnings,
    file_sha256,
    path_sha256,
    quantization_warnings,
)
from .calibration.config import CalibrationConfig, EvaluationConfig
from .calibration.samples import Progress, RandomReader, SampleSet, collect
from .config import (
    GatesConfig,
    ModelFormat,
    PipelineConfig,
    QuantEngine,
    QuantizationConfig,
    gate_limits,
    installed_toolchain,
    load_pipeline,
    resolved_yaml,
)
from .converters.model import LoadedModel
from .converters.tflite_reader import TFLiteModel, parse_tflite, read_tflite
from .diff import diff, load_report, regressions
from .errors import ConfigError, ModelError, OutputError, did_you_mean, rel
from .exit_codes import Exit, of_gate
from .ir import FrozenGraph, TensorSpec
from .passes import PassResult
from .passes.graph import canonical
from .targets import is_target_file, load_target
from .targets.checker import TargetResult, check_model
from .targets.describe import quantization_line
from .targets.target import Target

if TYPE_CHECKING:
    from .converters.tflite_export import Worker

log = logging.getLogger("edgeconv")


@dataclasses.dataclass(frozen=True)
class BuildResult:
    config: PipelineConfig
    output_dir: Path
    tflite_path: Path
    report: rm.Report
    targets: tuple[TargetResult, ...]
    cached: bool = False  # written from the build cache (the report is the cached build's)

    @property
    def passed(self) -> bool:
        return bool(self.report["gate"]["verdict"] == "pass")

    @property
    def exit_code(self) -> Exit:
        """What ``edgeconv build`` exits with for this build: the verdict's code (edgeconv.exit_codes)."""
        return of_gate(self.report["gate"])


@dataclasses.dataclass(frozen=True)
class CheckResult:
    model: TFLiteModel
    targets: tuple[TargetResult, ...]
    gate: rm.Gate

    @property
    def passed(self) -> bool:
        return bool(self.gate["verdict"] == "pass")

    @property
    def exit_code(self) -> Exit:
        """What ``edgeconv check`` exits with for this model: the verdict's code (edgeconv.exit_codes)."""
        return of_gate(self.gate)

    def to_json(self) -> list[rm.TargetVerdict]:
        """The report's ``targets`` section for this model."""
        return report.targets_json(self.targets)


def check(model_path: str | Path, targets: Sequence[str] = ("generic-int8",),
          gates: GatesConfig | None = None) -> CheckResult:
    """Check a .tflite file against targets (and gates). No TensorFlow involved. Accelerator targets
    must run the default share of the MACs (verdict.DEFAULTS) unless ``gates`` says otherwise."""
    loaded = [load_target(name) for name in targets]
    start = time.perf_counter()
    model = read_tflite(model_path)
    log.debug("read %s: %d ops in %d subgraph(s), %d tensors, in %.0f ms", rel(Path(model_path)), len(model.ops),
              len(model.subgraphs), sum(len(s.tensors) for s in model.subgraphs), (time.perf_counter() - start) * 1e3)
    results = tuple(check_model(model, t) for t in loaded)
    log.debug("checked against %s in %.0f ms", ", ".join(t.name for t in loaded), (time.perf_counter() - start) * 1e3)
    g = gates or GatesConfig()
    limits = verdict.Limits(max_cpu_fallback_ops=dict(g.max_cpu_fallback_ops),
                            min_supported_mac_share=dict(g.min_supported_mac_share),
                            fail_on_warnings=g.fail_on_warnings)
    return CheckResult(model, results, verdict.Verdict(tuple(verdict.target_checks(results, limits))).to_json())


def _equivalence(reference: Any, graph: FrozenGraph, fn: Any, calib: SampleSet, batch_size: int, samples: int,
                 tolerance: float) -> rm.Equivalence:
    """Outputs of the model in inference mode vs the cleaned graph (``fn``, its concrete function) on the first
    calibration samples."""
    from .converters.tf_graph import run_graph

    steps = list(calib.batches(batch_size, limit=math.ceil(samples / batch_size) * batch_size))
    worst: dict[str, float] = {o.name: 0.0 for o in graph.outputs}
    for feeds in steps:
        want = reference(feeds)
        got = run_graph(graph, feeds, fn)
        for name in worst:
            diff = float(np.max(np.abs(want[name].astype(np.float64) - got[name].astype(np.float64))))
            worst[name] = max(worst[name], diff if math.isfinite(diff) else math.inf)
    max_diff = max(worst.values(), default=0.0)
    return {"samples": len(steps) * batch_size, "tolerance": tolerance, "max_abs_diff": max_diff,
            "per_output": worst, "passed": max_diff <= tolerance,
            "inputs": "calibration samples" if calib.role == "calibration" else
            "seeded random inputs (the mode needs no calibration data and the pipeline gives none)"}


def _inference_reference(loaded: LoadedModel, passes: Sequence[PassResult], feeds: dict[str, np.ndarray]) -> Any:
    """The model in inference mode, as the reference the cleaned graph must match.

    A layer that forces training behaviour makes ``model(x, training=False)`` random;
    when a pass replaced such dropout/noise layers by their inference identity, the
    reference is the model with exactly those layers at rate 0. A model that is still
    random is refused, naming the layers.
    """
    if _deterministic(loaded.reference, feeds):
        return loaded.reference
    roles = {layer.name: layer for layer in loaded.graph.layers if layer.training_only}
    forced = sorted({name for p in passes for r in p.rewrites for name in r.layers if name in roles})
    if forced:
        reference = loaded.reference_for(forced)
        if _deterministic(reference, feeds):
            return reference
    named = ", ".join(f"{roles[n].class_name} {n!r}" for n in forced) or "its layers"
    raise ModelError(f"the model gives a different output on every call even with training=False ({named}); "
                     "a layer forces training behaviour or calls a random op. Fix: call such layers with "
                     "training=False (do not pass training=True inside call()), or remove the random op")


def _deterministic(run: Any, feeds: dict[str, np.ndarray]) -> bool:
    first, second = run(feeds), run(feeds)
    return all(np.array_equal(first[k], second[k]) for k in first)


def build(pipeline: str | Path | PipelineConfig, *, out: str | Path | None = None,
          progress: Progress | None = None, suggest_keep_float: bool = False,
          cache: BuildCache | None = None, baseline: str | Path | None = None, repair: bool = False) -> BuildResult:
    """Run the pipeline: load, clean, prove, quantize, check, and write the output folder.

    Raises EdgeconvError for user mistakes (nothing is written), InternalError for
    failures of the toolchain. A build whose targets fail still writes its
    artifacts; ``BuildResult.passed`` is False. ``progress(stage, done, total)`` is
    called while data is read and while the converter calibrates; a stage without a count
    (loading, passes, converting, parity, ...) reports ``total`` 0, with ``done`` 0 when it
    starts and 1 when it ends. With ``cache``, an
    unchanged rebuild writes the cached artifacts and report instead (``BuildResult.cached``).
    With ``baseline`` (an earlier report.json or its folder), the report says what changed and the
    regression gates (gates.max_size_growth, ...) can fail the build. ``repair`` turns on the search for a
    quantization that passes the agreement gates (as ``repair.enabled``).
    """
    config = pipeline if isinstance(pipeline, PipelineConfig) else load_pipeline(pipeline)
    if repair and not config.repair.enabled:
        config = _with_repair(config)
    if out is not None or config.output.dir is None:  # output.dir itself was checked with the pipeline
        output.check_not_a_link(Path(out) if out is not None else config.output_dir)
    out_dir = Path(out).resolve() if out is not None else config.output_dir
    output.recover(out_dir)
    _output_holds_no_input(config, out_dir)
    output.check_writable(out_dir)
    targets: list[Target] = [load_target(name) for name in config.targets]
    base = load_report(baseline) if baseline is not None else None
    if base is None and config.gates.regression.any:
        log.warning("gates: %s compare with a baseline; without --baseline they are not checked",
                    ", ".join(config.gates.regression.names))
    if config.model.resolved_format() is ModelFormat.TFLITE:
        return _check_existing(config, out_dir, targets, base)
    if suggest_keep_float:
        _can_suggest(config, targets)
    key = None
    if cache is not None:
        key, why = cache.key(config, out_dir, suggest_keep_float, base)
        if key is None:
            log.info("cache: not cacheable: %s", why)
        elif (files := cache.load(key)) is not None and (
                served := _from_cache(config, out_dir, targets, key, files)) is not None:
            return served

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
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        raise OutputError(f"no space left on the device while building ({exc.filename or tempfile.gettempdir()}): "
                          f"{exc.strerror}; free some space or set TMPDIR to a folder with more (the previous "
                          "output is unchanged)") from None
    finally:
        _forget_user_code(modules_before, config.source.parent)
    if cache is not None and key is not None:
        cache.store(key, out_dir)
    return result


def _forget_user_code(modules_before: set[str], folder: Path) -> None:
    """Forget the modules this build imported from the pipeline's folder (custom layers, a python data
    source) and the Keras classes they registered: the next pipeline built in this process, with a
    module of the same name in its own folder, must get its own (not this one's from sys.modules)."""
    import sysconfig

    root = folder.resolve()
    # Installed code and edgeconv itself are never the pipeline's, even when they live below its folder (a
    # virtual environment or a clone of edgeconv in the project).
    installed = {Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib", "stdlib", "platstdlib")}
    installed |= {p.resolve() for p in installed} | {Path(__file__).resolve().parent}
    # A build imports thousands of modules (TensorFlow's): their files are tested as strings against the
    # installed folders first, and each remaining folder is resolved once.
    prefixes = tuple(os.path.join(str(p), "") for p in installed)
    folders: dict[str, bool] = {}
    gone = []
    for name in set(sys.modules) - modules_before:
        file = getattr(sys.modules[name], "__file__", None)
        if not file or file.startswith(prefixes):
            continue
        where = os.path.dirname(file)
        if where not in folders:
            resolved = Path(where).resolve()
            folders[where] = (root == resolved or root in resolved.parents) and not any(
                p == resolved or p in resolved.parents for p in installed)
        if folders[where]:
            gone.append(sys.modules.pop(name))
    if gone and "keras" in sys.modules:
        import keras

        registry = keras.saving.get_custom_objects()
        for key in [k for k, v in registry.items() if getattr(v, "__module__", None) in {m.__name__ for m in gone}]:
            del registry[key]


def _start_worker(worker: Worker, progress: Progress | None) -> None:
    """TensorFlow imported once per build: here, then the converter worker is this process forked, before
    the model is loaded (before TensorFlow's runtime starts). A live terminal display pauses its drawing
    thread over the fork (``progress.paused()``, when it has one). Where a fork is not safe the worker is a
    new interpreter, and its import overlaps this process's loading. A repaired rebuild finds it running."""
    from ._tf import import_tf

    import_tf()
    with getattr(progress, "paused", contextlib.nullcontext)():
        worker.start()


def _converts_again(config: PipelineConfig, suggest_keep_float: bool, repaired: rm.Repair | None) -> bool:
    """Whether the build may ask the converter worker for more after its conversion: the keep_float
    suggestion's trials and the repair search (both part of the verification) and a repaired rebuild."""
    return config.verify.parity and (suggest_keep_float or config.verify.suggest_keep_float
                                     or (repaired is None and config.repair.enabled))


def _output_holds_no_input(config: PipelineConfig, out_dir: Path) -> None:
    """The pipeline file, the model, the data and the target files must stay outside the output folder."""
    inputs = [("pipeline file", config.source), ("model", config.model.path)]
    for role, section in (("calibration data", config.calibration), ("evaluation data", config.evaluation)):
        if section is not None and section.path is not None:
            inputs.append((role, section.path))
    inputs += [("target file", Path(t)) for t in config.targets if is_target_file(t)]
    output.check_holds_no_input(out_dir, inputs)


def _from_cache(config: PipelineConfig, out_dir: Path, targets: list[Target], key: str,
                files: dict[str, bytes]) -> BuildResult | None:
    """Write a cached build's files; the target results are re-read from its .tflite (no TensorFlow).
    The entry's report must describe the .tflite it comes with before anything touches the output."""
    import hashlib

    name = f"{config.build_name}.tflite"
    try:
        cached_report = json.loads(files["report.json"])
        described = cached_report["artifacts"]["tflite"]["sha256"]
    except (KeyError, ValueError, TypeError):
        described = None
    if name not in files or described != hashlib.sha256(files[name]).hexdigest():
        log.warning("cache: entry %s does not match its own report; building", key[:12])
        return None
    output.commit(out_dir, files)
    log.info("cache: unchanged since build %s; wrote %s from the cache", key[:12], rel(out_dir))
    model = parse_tflite(files[name], name)
    results = tuple(check_model(model, t) for t in targets)
    return BuildResult(config, out_dir, out_dir / name, cached_report, results, cached=True)


def _build(config: PipelineConfig, out_dir: Path, targets: list[Target], work: Path,
           progress: Progress | None, suggest_keep_float: bool, baseline: dict[str, Any] | None,
           worker: Worker, repaired: rm.Repair | None = None) -> BuildResult:
    """One build. ``repaired``: this build applies the change a repair search chose (it does not search
    again; the report carries the search)."""
    cal_cfg = config.calibration
    q = config.quantization
    clock = _Clock(progress)
    if repaired is not None and "seconds" in repaired:
        clock.carry("repair", repaired["seconds"])
    clock.begin("loading the model")
    log.info("loading %s (%s) in inference mode", rel(config.model.path), config.model.resolved_format().value)
    _start_worker(worker, progress)
    from .converters.loaders import load_model

    loaded = load_model(config.model, config.source.parent)
    inputs = loaded.graph.inputs
    outputs = [o.name for o in loaded.graph.outputs]
    unknown = sorted(set(config.verify.outputs) - set(outputs))
    if unknown:  # known only once the model is loaded; still before any data is read or converted
        raise ConfigError([f"{rel(config.source)}: verify.outputs: {name!r} is not a model output (outputs: "
                           f"{', '.join(outputs)}){did_you_mean(name, outputs)}" for name in unknown])
    clock.lap("load")
    evaluation = (_collect(config.evaluation, "evaluation", inputs, config, work, progress)
                  if config.evaluation is not None else None)
    expected = _expected_ranges(config, inputs)
    warnings: list[DataWarning] = []
    if cal_cfg is not None:
        calib = _collect(cal_cfg, "calibration", inputs, config, work, progress)
        warnings = data_warnings(calib, min_samples=cal_cfg.min_samples, evaluation=evaluation, expected=expected)
        for w in warnings:
            log.warning("calibration: %s", w.message)
    else:  # a mode that needs no calibration data: the equivalence check runs on seeded random inputs
        count = math.ceil(config.verify.pass_samples / config.model.batch_size) * config.model.batch_size
        calib = collect(RandomReader(inputs, count, 0), inputs, role="random", source="random", samples=count,
                        seed=0, folder=work)

    clock.lap("data")
    graph = loaded.graph
    pass_results: list[PassResult] = []
    clock.begin("running the passes")
    for p in config.passes:
        log.info("pass %s", p.name)
        graph, result = p.apply(graph)
        pass_results.append(result)
    log.info("comparing the cleaned graph with the model in inference mode")
    batch = config.model.batch_size
    reference = _inference_reference(loaded, pass_results, next(calib.batches(batch)))
    from .converters.tf_graph import concrete_function

    graph_fn = concrete_function(graph)  # run here, and saved for the converter
    equivalence = _equivalence(reference, graph, graph_fn, calib, batch, config.verify.pass_samples,
                               config.verify.pass_tolerance)

    clock.lap("passes")
    if q.mode.calibrated:
        log.info("converting to %s with %d calibration samples%s", q.mode.value, calib.count,
                 " (quantized by AI Edge Quantizer)" if q.engine is QuantEngine.AI_EDGE_QUANTIZER else "")
    else:
        log.info("converting to %s (no calibration)", q.mode.value)
    from .converters.tflite_export import Converter

    clock.begin("converting")

    options = export_options(q, batch)
    converter = Converter(graph, work / "export", worker, graph_fn)
    del graph_fn  # it holds the weights once more: not kept through the build
    # The per-op ranking measures the converter's quantization (TF's QuantizationDebugger on its calibration).
    analyse = (evaluation is not None and config.verify.culprits > 0 and q.mode.calibrated
               and q.engine is QuantEngine.CONVERTER)
    if analyse:
        log.info("measuring the error each quantized op adds on the evaluation data")
    exported = converter.convert(calib, options, "model", progress, debug=evaluation if analyse else None,
                                 float_reference=config.verify.parity and evaluation is not None)
    from .converters.tflite_export import shared_worker

    if worker is not shared_worker() and not _converts_again(config, suggest_keep_float, repaired):
        worker.close()  # its memory back before the checks and the verification run the models
    clock.lap("convert")
    tflite_name = f"{config.build_name}.tflite"
    model = parse_tflite(exported.tflite, tflite_name)
    _check_io_types(model, q.io("input").value, q.io("output").value, bool(q.int16_ops))
    log.info("checking %d ops against %s", len(model.ops), ", ".join(t.name for t in targets))
    results = tuple(check_model(model, t) for t in targets)
    quant_warnings = quantization_warnings(model, expected=expected, evaluation=evaluation,
                                           percentile=q.range_percentile)
    if exported.float_tflite is not None and evaluation is not None and q.mode.calibrated:
        quant_warnings += activation_warnings(exported.float_tflite, model, evaluation, batch,
                                              percentile=q.range_percentile)
    for w in quant_warnings:
        log.warning("calibration: %s", w.message)
    warnings += quant_warnings

    limits = gate_limits(config)
    early_checks = [
        *(verdict.off(f"{i}", note) for i, note in enumerate(limits.notes)),
        verdict.simple(
            "conversion.passes", verdict.Kind.CONVERSION, equivalence["passed"],
            f"the passes changed the outputs: max abs difference {equivalence['max_abs_diff']:.3g} > "
            f"verify.pass_tolerance {equivalence['tolerance']:g}" if not equivalence["passed"] else
            f"the passes changed nothing (max abs difference {equivalence['max_abs_diff']:.3g})",
            equivalence["max_abs_diff"], equivalence["tolerance"]),
        *(verdict.calibration_checks(warnings, limits) if cal_cfg is not None else ()),
    ]
    # Before any verdict, the built model must run on every sample the build has.
    from .verify import invoke

    clock.lap("check")
    clock.begin("running the built model on every sample")
    sets = [(calib.role, calib.batches(batch)), *([("evaluation", evaluation.batches(batch))] if evaluation else [])]
    runs = invoke.invoke_all(exported.tflite, sets, loaded.graph.layer_names())
    invoke_check = verdict.simple("runtime.invoke", verdict.Kind.RUNTIME, not runs["failed"], invoke.sentence(runs),
                                  runs["failed"], 0)
    clock.lap("invoke")

    def recollect(cfg: CalibrationConfig, n: int) -> SampleSet:
        (work / f"repair-data-{n}").mkdir()
        return _collect(cfg, "calibration", inputs, config, work / f"repair-data-{n}", progress)

    clock.begin("measuring parity")
    verification = (_verify(config, loaded, reference, converter, calib, evaluation, exported, model,
                            suggest_keep_float, progress, limits,
                            Repairing(targets, recollect, clock, expected)
                            if repaired is None and config.repair.enabled
                            else None) if not runs["failed"] else Verification())
    clock.lap("verify")
    if verification.repair is not None and verification.repair["chosen"] is not None:
        import yaml

        from .verify.repair import apply

        assert verification.repair["snippet"] is not None
        log.info("repair: building with trial %d", verification.repair["chosen"])
        (work / "repaired").mkdir()
        # What the build as configured found stays in the report next to the fix (the rebuilt model may no
        # longer show it), and the time it and the search took is the rebuilt build's "repair" stage.
        searched: rm.Repair = {**verification.repair, "seconds": round(time.perf_counter() - clock.start, 2),
                               "as_configured": {"failed": verdict.failed_sentences(verification.checks),
                                                 "findings": [w.to_json() for w in warnings]}}
        return _build(apply(config, yaml.safe_load(verification.repair["snippet"])), out_dir, targets,
                      work / "repaired", progress, suggest_keep_float, baseline, worker, searched)
    found = repaired if repaired is not None else verification.repair
    repair_checks = (verdict.simple("repair.search", verdict.Kind.AGREEMENT, found["chosen"] is not None,
                                    found["summary"], len(found["trials"]), config.repair.max_trials),) if found else ()
    if config.output.onnx is not None:
        clock.begin("exporting and running ONNX")
    onnx = (_onnx(config, graph, reference, exported.tflite, model, evaluation or calib, work)
            if config.output.onnx is not None else None)
    fw = _firmware(config, model, exported.tflite, evaluation, batch)
    layer_names = loaded.graph.layer_names()
    targets_json = report.targets_json(results, layer_names)
    overlays = explorer.node_data(model, targets_json, verification.op_errors)
    checks = (*verdict.target_checks(results, limits, layer_names), *early_checks, invoke_check,
              *verification.checks, *repair_checks, *(onnx.checks if onnx is not None else ()),
              *verdict.memory_checks(fw.memory, limits))
    clock.lap("onnx" if config.output.onnx is not None else "report")
    body: rm.Report = {
        **_head(config, out_dir),
        "model": _model_json(config, out_dir, loaded.format, loaded.framework, loaded.graph.inputs,
                             loaded.graph.outputs, len(loaded.graph.layers), loaded.notes),
        "artifacts": _artifacts(config, model, overlays),
        "passes": [report.pass_json(p) for p in pass_results],
        "equivalence": equivalence,
        "quantization": _quantization_json(config, out_dir, calib if cal_cfg is not None else None, warnings,
                                           targets),
        "evaluation": _data_json(evaluation, out_dir) if evaluation is not None else None,
        "tflite": report.model_json(model),
        "targets": targets_json,
        "gate": verdict.Verdict(checks).to_json(),
        "memory": fw.memory,
        "firmware": fw.firmware,
        "parity": verification.parity,
        "culprits": verification.culprits,
        "keep_float_suggestion": verification.keep_float_suggestion,
        "repair": found,
        "invoke": runs,
        "onnx": onnx.section if onnx is not None else None,
        "baseline": None,
        "timings": clock.to_json(),
    }
    if baseline is not None:
        body = _against_baseline(body, baseline, checks, config)
    graph_io = ([i.node for i in loaded.graph.inputs], [canonical(o.tensor) for o in loaded.graph.outputs])
    files = {**fw.files, **(onnx.files if onnx is not None else {}), **overlays}
    return _commit(config, out_dir, tflite_name, exported.tflite, body, results, graph_io, files)


@dataclasses.dataclass(frozen=True)
class Verification:
    """What parity on the built model found: its report sections and its checks."""

    parity: rm.Parity | None = None
    culprits: list[rm.Culprit] | None = None
    op_errors: list[rm.Culprit] | None = None  # every op's, for the Model Explorer overlay
    keep_float_suggestion: rm.KeepFloatSuggestion | None = None
    checks: tuple[verdict.Check, ...] = ()
    repair: rm.Repair | None = None


@dataclasses.dataclass(frozen=True)
class Repairing:
    """What the repair search needs from the build: the targets, a way to draw calibration data anew (with
    a counter for its folder), and the clock that shows it as a stage."""

    targets: Sequence[Target]
    recollect: Callable[[CalibrationConfig, int], SampleSet]
    clock: _Clock
    expected: Mapping[str, tuple[float, float]]  # the declared input ranges the inputs' quantization is checked on


@dataclasses.dataclass(frozen=True)
class OnnxResult:
    files: dict[str, bytes]
    section: rm.Onnx
    checks: tuple[verdict.Check, ...]


@dataclasses.dataclass(frozen=True)
class FirmwareResult:
    files: dict[str, bytes]
    memory: rm.Memory
    firmware: rm.Firmware


class _Clock:
    """Seconds per build stage, for the report and the console's last lines; and the count-less
    stages' start and end for ``progress`` (a spinner on a terminal: ``total`` 0, ``done`` 0 then 1)."""

    def __init__(self, progress: Progress | None) -> None:
        self.start = self.last = time.perf_counter()
        self.stages: dict[str, float] = {}
        self.progress = progress
        self.label: str | None = None

    def begin(self, label: str) -> None:
        cancel.check()
        self._end()
        self.label = label
        if self.progress is not None:
            self.progress(label, 0, 0)

    def lap(self, stage: str) -> None:
        cancel.check()
        self._end()
        now = time.perf_counter()
        self.stages[stage] = self.stages.get(stage, 0.0) + now - self.last
        self.last = now

    def _end(self) -> None:
        if self.label is not None and self.progress is not None:
            self.progress(self.label, 1, 0)
        self.label = None

    def carry(self, stage: str, seconds: float) -> None:
        """A stage that ran before this clock started (the build as configured and the repair search, before
        the rebuild): counted in the stages and the total."""
        self.stages[stage] = self.stages.get(stage, 0.0) + seconds
        self.start -= seconds

    def to_json(self) -> rm.Timings:
        return {"stages_s": {k: round(v, 2) for k, v in self.stages.items()},
                "total_s": round(self.last - self.start, 2)}


SOURCE_CHUNK = 256  # samples per call of the source model in parity (when it takes any batch)


def _verify(config: PipelineConfig, loaded: LoadedModel, reference: Any, converter: Any, calib: SampleSet,
            evaluation: SampleSet | None, exported: Any, model: TFLiteModel, suggest_keep_float: bool,
            progress: Progress | None, limits: verdict.Limits, repairing: Repairing | None = None) -> Verification:
    """Parity on the evaluation data (or, without any, on the calibration samples: no build goes
    unchecked), the layers that add the most error, and (asked for) which layers to keep in float;
    with the agreement, accuracy and float-conversion checks."""
    from .converters.tflite_export import ExportOptions
    from .verify import culprits, parity
    from .verify.runner import TFLiteRunner

    q = config.quantization
    batch = config.model.batch_size
    if not config.verify.parity:
        return Verification()
    samples = evaluation if evaluation is not None else calib
    log.info("parity: comparing the source model, the float .tflite and the built .tflite on %d %s samples",
             samples.count, samples.role)
    # With evaluation data the float .tflite is converted with the build (same worker) and must match the
    # source; on the calibration samples only the built model is compared with the source model.
    float_tflite = exported.float_tflite
    shapes = {o.name: tuple(o.shape) for o in loaded.graph.outputs}
    labels = samples.label_values() if samples.labels else None

    # The source model's outputs, batch by batch: computed once, compared again by every keep-float trial.
    # A reference that takes any number of samples runs them in chunks (one call per SOURCE_CHUNK samples).
    source_outputs: list[dict[str, Any]] = []
    chunk = max(1, SOURCE_CHUNK // batch) * batch if loaded.any_batch else batch
    chunks = samples.batches(chunk, partial=True)

    def measure(data: bytes, *, with_float: bool = False) -> rm.Parity:
        runs = {"tflite_float": TFLiteRunner(float_tflite).run} if with_float and float_tflite is not None else {}
        runs["built"] = TFLiteRunner(data).run
        step = itertools.count()

        def source(feeds: Mapping[str, Any]) -> dict[str, Any]:
            k = next(step)
            if k == len(source_outputs):
                outputs = reference(next(chunks))
                size = len(next(iter(outputs.values())))
                source_outputs.extend({o: v[i:i + batch] for o, v in outputs.items()} for i in range(0, size, batch))
            return source_outputs[k]

        return {**parity.measure(source, runs, samples.batches(batch), shapes, labels, config.verify.outputs),
                "data": samples.role}

    result = measure(exported.tflite, with_float=True)
    # The INT8 model's agreement first: when both fail, that is the line the user reads.
    checks = verdict.agreement_checks(result, limits)
    if float_tflite is not None:
        checks += parity.float_conversion_checks(result, config.verify.float_tolerance, len(model.ops))
    final = [model.main.tensors[i].name for i in model.main.outputs]
    # A dequantized float output is fed by the quantized op's tensor: that op ends the model too.
    final += [op.inputs[0].name for op in model.ops if op.type == "DEQUANTIZE" and op.inputs[0] is not None
              and op.outputs[0].name in final]
    ranked = culprits.rank(exported.layers, loaded.graph.layer_names(), final) if exported.layers else None
    suggestion = None
    if (suggest_keep_float or config.verify.suggest_keep_float) and ranked:
        def trial(patterns: list[str]) -> tuple[list[str], dict[str, Any]]:
            log.info("suggest-keep-float: trying %d op(s) in float", len(patterns))
            options = ExportOptions("float32", "float32", q.per_channel, batch, mode=q.mode.value,
                                    keep_float=tuple(patterns))
            data = converter.convert(calib, options, f"keep{len(patterns)}").tflite
            measured = measure(data)
            accuracy = measured["accuracy"]
            cost = {"bytes": len(data), "accuracy": accuracy.get("built") if accuracy is not None else None,
                    "sqnr_db": {o: m["built"]["sqnr_db"] for o, m in measured["outputs"].items()}}
            return verdict.failed_sentences(verdict.agreement_checks(measured, limits)), cost

        suggestion = culprits.suggest(ranked, config.verify.max_keep_float, trial)
    found = None
    if repairing is not None and any(c.outcome.fails for c in checks
                                     if c.kind in (verdict.Kind.AGREEMENT, verdict.Kind.ACCURACY)):
        found = _repair(config, repairing, converter, calib, evaluation, measure, ranked, limits, progress)
    return Verification(result, ranked[:config.verify.culprits] if ranked is not None else None, ranked,
                        suggestion, tuple(checks), found)


def _repair(config: PipelineConfig, repairing: Repairing, converter: Any, calib: SampleSet,
            evaluation: SampleSet | None, measure: Callable[[bytes], rm.Parity], ranked: list[rm.Culprit] | None,
            limits: verdict.Limits,
            progress: Progress | None) -> rm.Repair:
    """The repair search (edgeconv/verify/repair.py): each candidate converted by the build's converter
    worker, measured on the build's samples, checked against every target and the inputs' ranges."""
    from .verify import repair

    repairing.clock.lap("verify")
    repairing.clock.begin("repair: searching")
    targets = repairing.targets
    count = itertools.count(1)

    def trial(candidate: repair.Candidate) -> repair.TrialResult:
        n = next(count)
        patched = repair.apply(config, candidate.change)
        pq = patched.quantization
        data = (calib if patched.calibration is None or patched.calibration == config.calibration
                else repairing.recollect(patched.calibration, n))
        options = export_options(pq, config.model.batch_size)
        try:
            built = converter.convert(data, options, f"repair{n}", progress).tflite
        except ModelError as exc:  # the change does not apply to this model (a pattern matches no op): a failed trial
            return repair.TrialResult([f"the conversion failed: {exc}"], 0, None, {}, {},
                                      {t.name: 0.0 for t in targets})
        measured = measure(built)
        model = parse_tflite(built, f"repair trial {n}")
        results = tuple(check_model(model, t) for t in targets)
        # The inputs' quantization judged as the build judges it: a trial that clips its inputs fails here too.
        findings = quantization_warnings(model, expected=repairing.expected, evaluation=evaluation,
                                         percentile=pq.range_percentile)
        failed = verdict.failed_sentences([*verdict.agreement_checks(measured, limits),
                                           *verdict.target_checks(results, limits),
                                           *verdict.calibration_checks(findings, limits)])
        accuracy = measured["accuracy"]
        return repair.TrialResult(
            failed, len(built), accuracy.get("built") if accuracy is not None else None,
            {o: m["built"]["sqnr_db"] for o, m in measured["outputs"].items()},
            {o: m["built"]["top1_agreement"] for o, m in measured["outputs"].items()},
            {r.target.name: round(r.shares()["macs"], 4) for r in results})

    cands, skipped = repair.candidates(
        config, no_float=[t.name for t in targets if not t.quantization.float_fallback],
        no_int16=[t.name for t in targets if "int16x8" not in t.quantization.modes], available=calib.available,
        used=calib.count, ranked=ranked, max_keep_float=config.verify.max_keep_float,
        quantizer=repair.quantizer_problem(config))
    log.info("repair: the gates fail; %d change(s) to try (repair.max_trials %d)", len(cands),
             config.repair.max_trials)
    found = repair.search(cands, trial, max_trials=config.repair.max_trials,
                          max_seconds=config.repair.max_minutes * 60, pipeline=config.source, skipped=skipped,
                          log=log.info)
    repairing.clock.lap("repair")
    return found


def export_options(q: QuantizationConfig, batch: int) -> Any:
    """What the converter worker is asked for, from the pipeline's quantization section."""
    from .converters.tflite_export import ExportOptions

    return ExportOptions(q.io("input").value, q.io("output").value, q.per_channel, batch, mode=q.mode.value,
                         keep_float=q.keep_float, engine=q.engine.value, int16_ops=q.int16_ops,
                         range_percentile=q.range_percentile)


def _onnx(config: PipelineConfig, graph: FrozenGraph, reference: Any, tflite: bytes, model: TFLiteModel,
          data: SampleSet, work: Path) -> OnnxResult:
    """The float ONNX model of the cleaned graph (and the INT8 QDQ one of the built .tflite), run with
    ONNX Runtime on the evaluation data: the float one against the source model (within
    verify.float_tolerance, else the build fails), the INT8 one against the .tflite."""
    from .converters import onnx_export
    from .verify import parity
    from .verify.onnx_run import OnnxRunner
    from .verify.runner import TFLiteRunner

    o = config.output.onnx
    assert o is not None
    quantized = o.quantized if o.quantized is not None else config.quantization.mode.value == "int8"
    log.info("exporting ONNX (opset %d)%s", o.opset, " and the INT8 QDQ model" if quantized else "")
    batch = config.model.batch_size
    shapes = {t.name: tuple(t.shape) for t in graph.outputs}
    stem = config.build_name
    float_proto = onnx_export.export_float(graph, o.opset)
    files = {f"{stem}.onnx": float_proto.SerializeToString()}
    labels = data.label_values() if data.labels else None
    float_runner = OnnxRunner(files[f"{stem}.onnx"])
    runs: rm.OnnxParity = {"float": parity.measure(reference, {"onnx_float": float_runner.run}, data.batches(batch),
                                                   shapes, labels)}
    worst = max(per["onnx_float"]["max_abs_error"] for per in runs["float"]["outputs"].values())
    tolerance = config.verify.float_tolerance
    check = verdict.simple(
        "conversion.onnx_float", verdict.Kind.CONVERSION, worst <= tolerance,
        f"the float ONNX model differs from the source model by {worst:.3g}"
        + (f" (> verify.float_tolerance {tolerance:g}): a tf2onnx conversion problem" if worst > tolerance else ""),
        worst, tolerance)
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


def _firmware(config: PipelineConfig, model: TFLiteModel, data: bytes, evaluation: SampleSet | None,
              batch: int) -> FirmwareResult:
    """The C array, op-resolver header and golden vectors the pipeline asks for, and the memory estimate."""
    from .verify import firmware, memory

    files: dict[str, bytes] = {}
    name = (config.output.c_array.name if config.output.c_array is not None and config.output.c_array.name
            else f"{_c_name(config.build_name)}_model")
    source = f"{config.build_name}.tflite"
    listed: list[str] = []
    if config.output.c_array is not None:
        arrays = firmware.c_array(data, name, source=source, sha256=model.sha256,
                                  cplusplus=config.output.c_array.language.value == "cc")
        files.update({k: v.encode() for k, v in arrays.items()})
        listed += list(arrays)
    if config.output.op_resolver:
        headers = firmware.op_resolver(model, name, source=source)
        files.update({k: v.encode() for k, v in headers.items()})
        listed += list(headers)
    golden_meta = None
    if config.output.golden is not None and evaluation is not None:
        count = config.output.golden.samples
        samples = list(evaluation.batches(batch, limit=count * batch))  # one model call each
        golden_files, golden_meta = firmware.golden(data, samples, name, source=source,
                                                    intermediates=config.output.golden.intermediates)
        files.update(golden_files)
        listed += list(golden_files)
    return FirmwareResult(files, memory.estimate(model),
                          {"files": listed, "c_name": name if listed else None, "golden": golden_meta})


def _c_name(text: str) -> str:
    name = re.sub(r"[^A-Za-z0-9_]", "_", text)
    return name if not name[0].isdigit() else f"m_{name}"


def _with_repair(config: PipelineConfig) -> PipelineConfig:
    """--repair: the pipeline with repair.enabled, refused where the pipeline file would be."""
    problems = []
    if config.model.resolved_format() is ModelFormat.TFLITE:
        problems.append("--repair does not apply to an existing .tflite model (it is checked as it is)")
    elif config.evaluation is None or not config.verify.parity:
        problems.append("--repair needs an evaluation section and verify.parity (the gates it meets are measured "
                        "there)")
    elif not config.quantization.mode.calibrated:
        problems.append(f"--repair applies to modes int8 and int16x8 only (mode is {config.quantization.mode.value})")
    if problems:
        raise ConfigError(problems)
    return config.replace(repair=dataclasses.replace(config.repair, enabled=True))


def _can_suggest(config: PipelineConfig, targets: Sequence[Target]) -> None:
    """--suggest-keep-float needs what verify.suggest_keep_float needs in the pipeline file."""
    limits = gate_limits(config)
    problems = []
    if config.evaluation is None or all(v is None for v in (limits.max_accuracy_drop, limits.min_top1_agreement,
                                                            limits.min_sqnr_db, limits.min_cosine)):
        problems.append("--suggest-keep-float needs an evaluation section and a parity gate to meet "
                        "(gates.max_accuracy_drop, min_top1_agreement, min_sqnr_db or min_cosine)")
    problems += [f"--suggest-keep-float: target {t.name!r} runs no float ops left in a quantized model: "
                 f"{quantization_line(t)}" for t in targets if not t.quantization.float_fallback]
    if problems:
        raise ConfigError(problems)


def _check_io_types(model: TFLiteModel, input_type: str, output_type: str, int16_ops: bool = False) -> None:
    """The .tflite must have the input/output types the report will claim. A model whose output the
    converter keeps float (an op with no quantized kernel feeds it) is a property of the model: a clear
    error naming the output, the op and the fix, not a crash."""
    sg = model.main
    sig = model.signatures[0] if model.signatures else None
    names = {v: k for k, v in sig.outputs.items()} if sig else {}
    names.update({v: k for k, v in sig.inputs.items()} if sig else {})
    problems = []
    for which, indices, want in (("input", sg.inputs, input_type), ("output", sg.outputs, output_type)):
        for index in indices:
            tensor = sg.tensors[index]
            if tensor.dtype.value == want:
                continue
            name = names.get(index, tensor.name)
            op = model.producer(tensor)
            if int16_ops and tensor.dtype.value == "int16":
                problems.append(f"model {which} '{name}' is int16, not the configured {want}: quantization.int16_ops "
                                f"gives int16 activations to the op that {'reads' if which == 'input' else 'writes'} "
                                "it. Fix: leave that op out of int16_ops")
                continue
            cause = f" (written by op #{op.index} {op.label} '{op.name}')" if op is not None else ""
            fix = f"set quantization.{which}_type: {tensor.dtype.value}" + (
                f", or replace {op.label} with an op the converter quantizes" if op is not None else "")
            problems.append(f"the converter kept model {which} '{name}' {tensor.dtype.value}, not the configured "
                            f"{want}{cause}: the model has an op the converter does not quantize there. Fix: {fix}")
    if problems:
        raise ModelError("; ".join(problems))


def _collect(cfg: CalibrationConfig | EvaluationConfig, role: str, inputs: Sequence[TensorSpec],
             config: PipelineConfig, work: Path, progress: Progress | None) -> SampleSet:
    """Open a data section's source, then draw, check and spool its samples."""
    source = resolve_source(cfg)
    assert source is not None  # checked with the pipeline file
    where = rel(cfg.path) if cfg.path is not None else str(cfg.function)
    log.info("reading %s data %s (%s)", role, where, source)
    reader = SOURCES[source]().open(cfg, inputs, config.source.parent)
    labels = cfg.labels if isinstance(cfg, EvaluationConfig) else None
    return collect(reader, inputs, role=role, source=source, samples=cfg.samples, seed=cfg.seed, folder=work,
                   labels=labels, progress=progress)


def _expected_ranges(config: PipelineConfig, inputs: Sequence[TensorSpec]) -> dict[str, tuple[float, float]]:
    """The declared input range per model input: calibration.expected_range, else what an image
    source's preprocessing maps pixels 0-255 to."""
    cal = config.calibration
    if cal is None:
        return {}
    out = {name: (float(lo), float(hi)) for name, (lo, hi) in cal.expected_range.items()}
    if cal.preprocess is not None and resolve_source(cal) == "images":
        from .calibration.sources.images import pick_input

        spec = pick_input(cal, inputs, "calibration")
        channels = 1 if cal.preprocess.color.value == "grayscale" else 3
        out.setdefault(spec.name, cal.preprocess.value_range(channels))
    return out


def _check_existing(config: PipelineConfig, out_dir: Path, targets: list[Target],
                    baseline: dict[str, Any] | None) -> BuildResult:
    """A .tflite model: nothing to load, clean or convert; check it and write the same outputs."""
    path = config.model.path
    log.info("reading %s (an existing .tflite: no passes, no conversion)", rel(path))
    data = path.read_bytes()
    tflite_name = f"{config.build_name}.tflite"
    model = parse_tflite(data, rel(path))
    log.info("checking %d ops against %s", len(model.ops), ", ".join(t.name for t in targets))
    results = tuple(check_model(model, t) for t in targets)
    io = report.model_json(model)
    source = _model_json(config, out_dir, "tflite", "tflite", (), (), 0,
                         ("an existing .tflite: loading, passes and conversion were skipped; only the checks ran",))
    source["inputs"] = [{"name": t.get("signature_name", t["name"]), "shape": t["shape"], "dtype": t["dtype"]}
                        for t in io["inputs"]]
    source["outputs"] = [{"name": t.get("signature_name", t["name"]), "shape": t["shape"], "dtype": t["dtype"]}
                         for t in io["outputs"]]
    fw = _firmware(config, model, data, None, 1)
    targets_json = report.targets_json(results)
    overlays = explorer.node_data(model, targets_json)
    limits = gate_limits(config)
    checks = (*verdict.target_checks(results, limits),
              *(verdict.off(f"{i}", note) for i, note in enumerate(limits.notes)),
              *verdict.memory_checks(fw.memory, limits))
    body: rm.Report = {
        **_head(config, out_dir),
        "model": source,
        "artifacts": _artifacts(config, model, overlays),
        "passes": [],
        "equivalence": None,
        "quantization": None,
        "evaluation": None,
        "tflite": io,
        "targets": targets_json,
        "gate": verdict.Verdict(checks).to_json(),
        "memory": fw.memory,
        "firmware": fw.firmware,
        "parity": None,
        "culprits": None,
        "keep_float_suggestion": None,
        "repair": None,
        "invoke": None,
        "onnx": None,
        "baseline": None,
        "timings": None,
    }
    if baseline is not None:
        body = _against_baseline(body, baseline, checks, config)
    return _commit(config, out_dir, tflite_name, data, body, results, None, {**fw.files, **overlays})


def _against_baseline(body: rm.Report, baseline: Mapping[str, Any], checks: Sequence[verdict.Check],
                      config: PipelineConfig) -> rm.Report:
    """The report with what changed since the baseline report and the regression gates it fails; the
    comparison is made with the verdict before those gates."""
    changes = diff(baseline, body)
    failed = regressions(changes, config.gates.regression)
    final = verdict.Verdict((*checks, *verdict.regression_checks(failed, config.gates.regression.names)))
    out = body.copy()  # a new report: the one given stays as it was
    out["baseline"] = {"diff": changes, "regressions": failed}
    out["gate"] = final.to_json()
    return out


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


def _model_json(config: PipelineConfig, out_dir: Path, fmt: str, framework: str, inputs: Sequence[TensorSpec],
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


def _data_json(data: SampleSet, out_dir: Path, listed: int = 20) -> rm.Data:
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


def _quantization_json(config: PipelineConfig, out_dir: Path, calib: SampleSet | None,
                       warnings: Sequence[DataWarning], targets: Sequence[Target]) -> rm.Quantization:
    q = config.quantization
    cal: rm.CalibrationData | None = None
    if calib is not None:
        cal = rm.CalibrationData(**_data_json(calib, out_dir), warnings=[w.to_json() for w in warnings])
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


class _Head(TypedDict):
    schema_version: Literal[1]
    edgeconv_version: str
    created: str
    name: str
    pipeline: str
    toolchain: dict[str, str]


def _head(config: PipelineConfig, out_dir: Path) -> _Head:
    """What every report begins with: the schema, edgeconv and the toolchain, when, which pipeline."""
    return {
        "schema_version": report.REPORT_SCHEMA_VERSION,
        "edgeconv_version": __version__,
        "created": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "name": config.build_name,
        "pipeline": os.path.relpath(config.source, out_dir),
        "toolchain": installed_toolchain(),
    }


def _artifacts(config: PipelineConfig, model: TFLiteModel, overlays: Mapping[str, bytes]) -> rm.Artifacts:
    return {
        "tflite": {"path": f"{config.build_name}.tflite", "sha256": model.sha256, "bytes": model.size},
        "report_md": {"path": "report.md"},
        "resolved_pipeline": {"path": "pipeline.resolved.yaml"},
        "explorer": [{"path": name} for name in overlays],
    }
