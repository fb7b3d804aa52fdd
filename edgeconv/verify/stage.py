"""The verification stage: parity of the built model with the source model, the layers that add the most
error, which to keep in float, and the repair search when the gates fail."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from .. import report_model as rm
from .. import verdict
from .._log import get_logger
from .._record import record
from ..calibration.checks import DataWarning, quantization_warnings
from ..calibration.config import CalibrationConfig
from ..calibration.samples import Progress, SampleSet
from ..clock import Clock
from ..config import ModelFormat, PipelineConfig
from ..converters.model import LoadedModel
from ..converters.tflite_export import export_options
from ..converters.tflite_reader import TFLiteModel, parse_tflite
from ..errors import ConfigError, ModelError
from ..gates import Limits, gate_limits
from ..targets.checker import check_model
from ..targets.describe import quantization_line
from ..targets.target import Target
from .recorded import Recordings

log = get_logger(__name__)


@record
class Verification:
    """What parity on the built model found: its report sections and its checks."""

    parity: rm.Parity | None = None
    culprits: list[rm.Culprit] | None = None
    op_errors: list[rm.Culprit] | None = None  # every op's, for the Model Explorer overlay
    keep_float_suggestion: rm.KeepFloatSuggestion | None = None
    checks: tuple[verdict.Check, ...] = ()
    repair: rm.Repair | None = None
    diagnosis: rm.Diagnosis | None = None


@record
class Repairing:
    """What the repair search needs from the build: the targets, a way to draw calibration data anew (with
    a counter for its folder), and the clock that shows it as a stage."""

    targets: Sequence[Target]
    recollect: Callable[[CalibrationConfig, int], SampleSet]
    clock: Clock
    expected: Mapping[str, tuple[float, float]]  # the declared input ranges the inputs' quantization is checked on


SOURCE_CHUNK = 256  # samples per call of the source model in parity at most (when it takes any batch)
# Activation bytes per call of the source model in parity: a call of n samples holds about n times a sample's
# activations (MobileNetV2 1.0 @ 224: 100 samples grew the build by 1,497 MiB, 32 by 521 MiB).
SOURCE_BYTES = 256 * 2 ** 20


def source_chunk(model: TFLiteModel, batch: int, any_batch: bool) -> int:
    """Samples per call of the source model: as many whole batches as keep its activations (every tensor the
    model computes, as float32: an upper bound, TensorFlow frees some before the call ends) within
    SOURCE_BYTES, at least one batch and at most SOURCE_CHUNK samples; one batch when the model takes no
    other size."""
    if not any_batch:
        return batch
    per_sample = 4 * sum(t.elements for t in model.main.tensors if not t.constant) / max(batch, 1)
    fits = int(SOURCE_BYTES // max(per_sample, 1.0))
    return max(1, min(fits, SOURCE_CHUNK) // batch) * batch


def verify(config: PipelineConfig, loaded: LoadedModel, reference: Any, converter: Any, calib: SampleSet,
            evaluation: SampleSet | None, exported: Any, model: TFLiteModel, suggest_keep_float: bool,
            progress: Progress | None, limits: Limits, repairing: Repairing | None = None,
            findings: Sequence[DataWarning] = (), recorded: Recordings | None = None) -> Verification:
    """Parity on the evaluation data (or, without any, on the calibration samples: no build goes
    unchecked), the layers that add the most error, and (asked for) which layers to keep in float;
    with the agreement, accuracy and float-conversion checks. The float and built .tflite's outputs on
    these samples are read from ``recorded`` where the build's earlier runs recorded them (edgeconv/verify/
    recorded.py): each model runs over the samples once."""
    from ..converters.tflite_export import ExportOptions
    from . import culprits, parity
    from .runner import TFLiteRunner

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
    # A reference that takes any number of samples runs them in chunks bounded by their activations' bytes.
    source_outputs: list[dict[str, Any]] = []
    chunk = source_chunk(model, batch, loaded.any_batch)
    chunks = samples.batches(chunk, partial=True)

    played = recorded or Recordings()

    def measure(data: bytes, *, with_float: bool = False, part: tuple[int, int] | None = None) -> rm.Parity:
        """The model ``data`` against the source model (and the float .tflite), on every sample or on
        ``part`` (first sample, count; the first a whole number of batches)."""
        start, count = part if part is not None else (0, samples.count)
        runs = {}
        if with_float and float_tflite is not None:
            runs["tflite_float"] = played.replay("float_tflite", lambda: TFLiteRunner(float_tflite).run,
                                                 samples.role, batch, start)
        # The build's own model (the bytes the runtime check ran) is read back; a trial's model runs.
        runs["built"] = (played.replay("built", lambda: TFLiteRunner(data).run, samples.role, batch, start)
                         if data is exported.tflite else TFLiteRunner(data).run)
        step = itertools.count(start // batch)

        def source(feeds: Mapping[str, Any]) -> dict[str, Any]:
            k = next(step)
            while k >= len(source_outputs):
                outputs = reference(next(chunks))
                size = len(next(iter(outputs.values())))
                source_outputs.extend({o: v[i:i + batch] for o, v in outputs.items()} for i in range(0, size, batch))
            return source_outputs[k]

        truth = labels[start:start + count] if labels is not None else None
        return {**parity.measure(source, runs, samples.batches(batch, count, start=start), shapes, truth,
                                 config.verify.outputs), "data": samples.role}

    result = measure(exported.tflite, with_float=True)
    # The INT8 model's agreement first: when both fail, that is the line the user reads.
    checks = verdict.agreement_checks(result, limits)
    if samples.labels and result["accuracy"] is None:
        checks.append(verdict.labels_unused(samples.labels, result.get("kinds", {})))
        log.warning("%s", checks[-1].sentence)
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
    failed = [c.id for c in checks if c.outcome.fails and c.kind in (verdict.Kind.AGREEMENT, verdict.Kind.ACCURACY)]
    found = why = None
    if failed:
        from . import diagnosis

        float_run = TFLiteRunner(float_tflite).run if float_tflite is not None else reference
        recorded_float = (None if float_tflite is None else lambda: played.replay(
            "float_tflite", lambda: TFLiteRunner(float_tflite).run, samples.role, batch))
        setting = diagnosis.Setting(model, float_run, samples, batch, shapes, labels, result.get("kinds", {}),
                                    loaded.graph.layer_names(), recorded_float)
        try:
            why = diagnosis.diagnose(setting, result, findings, ranked, failed)
        except Exception as exc:  # the verdict stands without its explanation; the log says why
            log.warning("diagnosis: not made (%s: %s); the gates' verdict stands", type(exc).__name__, exc)
            log.debug("diagnosis failed", exc_info=True)
        from ..report import cause_line

        if (said := cause_line(why)) is not None:
            log.info("diagnosis: %s", said)
    if repairing is not None and failed:
        from . import repair

        pointed = repair.diagnosis_candidates(config, model, why)
        found = _repair(config, repairing, converter, calib, evaluation, measure, ranked, limits, progress, pointed)
    return Verification(result, ranked[:config.verify.culprits] if ranked is not None else None, ranked,
                        suggestion, tuple(checks), found, why)


HELD_BACK = 1 / 3  # of the evaluation samples, kept out of the choice to validate the repair's winner on
MIN_HELD_BACK = 20  # fewer held-back samples than this validate nothing: the search uses every sample


def held_back_split(total: int, batch: int) -> tuple[tuple[int, int], tuple[int, int]] | None:
    """The samples the repair search chooses on and the ones it validates the winner on (each a first sample
    and a count, whole batches), or None when too few would be held back."""
    hold = int(total * HELD_BACK) // batch * batch
    if hold < MIN_HELD_BACK:
        return None
    choose = (total - hold) // batch * batch
    return (0, choose), (choose, (total - choose) // batch * batch)


def _repair(config: PipelineConfig, repairing: Repairing, converter: Any, calib: SampleSet,
            evaluation: SampleSet | None, measure: Callable[..., rm.Parity], ranked: list[rm.Culprit] | None,
            limits: Limits, progress: Progress | None, pointed: Sequence[Any] = ()) -> rm.Repair:
    """The repair search (edgeconv/verify/repair.py): each candidate converted by the build's converter
    worker, measured on two thirds of the build's samples (the choice), checked against every target and the
    inputs' ranges; and on the held-back third, which the winner is validated on."""
    from . import repair

    repairing.clock.lap("verify")
    repairing.clock.begin("repair: searching")
    targets = repairing.targets
    count = itertools.count(1)
    split = held_back_split((evaluation or calib).count, config.model.batch_size)

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
            said = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            return repair.TrialResult([f"the conversion failed: {said[:200]}"], 0, None, {}, {},
                                      {t.name: 0.0 for t in targets})
        measured = measure(built, part=split[0] if split else None)
        held = measure(built, part=split[1]) if split else None
        model = parse_tflite(built, f"repair trial {n}")
        results = tuple(check_model(model, t) for t in targets)
        # The inputs' quantization judged as the build judges it: a trial that clips its inputs fails here too.
        findings = quantization_warnings(model, expected=repairing.expected, evaluation=evaluation,
                                         percentile=pq.range_percentile)
        failed = verdict.failed_sentences([*verdict.agreement_checks(measured, limits),
                                           *verdict.target_checks(results, limits),
                                           *verdict.calibration_checks(findings, limits)])
        return repair.TrialResult(failed, len(built), *repair.figures(measured),
                                  {r.target.name: round(r.shares()["macs"], 4) for r in results},
                                  None if held is None else {
                                      "failed": verdict.failed_sentences(verdict.agreement_checks(held, limits)),
                                      **dict(zip(("accuracy", "sqnr_db", "top1_agreement"), repair.figures(held))),
                                      "accuracy_drop": (held["accuracy"] or {}).get("drop", {}).get("built")})

    cands, skipped = repair.candidates(
        config, no_float=[t.name for t in targets if not t.quantization.float_fallback],
        no_int16=[t.name for t in targets if "int16x8" not in t.quantization.modes], available=calib.available,
        used=calib.count, ranked=ranked, max_keep_float=config.verify.max_keep_float,
        quantizer=repair.quantizer_problem(config))
    # Where the diagnosis points first (the input's normalization, an imposed range), then the usual ones.
    cands, held = repair.keep_interface(config, [*pointed, *cands], config.repair.allow_interface_change)
    skipped = [*skipped, *held]
    log.info("repair: the gates fail; %d change(s) to try (repair.max_trials %d)", len(cands),
             config.repair.max_trials)
    found = repair.search(cands, trial, max_trials=config.repair.max_trials,
                          max_seconds=config.repair.max_minutes * 60, pipeline=config.source, skipped=skipped,
                          log=log.info, samples=(split[0][1], split[1][1]) if split else None)
    repairing.clock.lap("repair")
    return found


def verification_stage(config: PipelineConfig, loaded: LoadedModel, reference: Any, converted: Any, data: Any,
                       *, suggest_keep_float: bool, progress: Progress | None, limits: Limits,
                       targets: Sequence[Target], clock: Clock, work: Any, repaired: bool,
                       findings: Sequence[DataWarning] = (), recorded: Recordings | None = None) -> Verification:
    """Parity and what follows from it (:func:`verify`), with the repair search when the pipeline turns it
    on and this build is not itself the repaired one; nothing when the built model does not run."""
    from ..calibration.stage import collect_section

    def recollect(cfg: CalibrationConfig, n: int) -> SampleSet:
        (work / f"repair-data-{n}").mkdir()
        return collect_section(cfg, "calibration", loaded.graph.inputs, config.source.parent,
                               work / f"repair-data-{n}", progress)

    repairing = (Repairing(targets, recollect, clock, data.expected) if not repaired and config.repair.enabled
                 else None)
    return verify(config, loaded, reference, converted.converter, data.calib, data.evaluation, converted.exported,
                  converted.model, suggest_keep_float, progress, limits, repairing, findings, recorded)


def repaired_pipeline(config: PipelineConfig, verification: Verification, warnings: Sequence[Any],
                      seconds: float) -> tuple[PipelineConfig, rm.Repair] | None:
    """When the repair search chose a change: the pipeline with it, and the search as the rebuilt build's
    report shows it (what the build as configured found stays next to the fix, since the rebuilt model may
    no longer show it; the time it and the search took is the rebuilt build's "repair" stage)."""
    found = verification.repair
    if found is None or found["chosen"] is None:
        return None
    import yaml

    from .repair import apply

    assert found["snippet"] is not None
    log.info("repair: building with trial %d", found["chosen"])
    searched: rm.Repair = {**found, "seconds": round(seconds, 2),
                           "as_configured": {"failed": verdict.failed_sentences(verification.checks),
                                             "findings": [w.to_json() for w in warnings]}}
    return apply(config, yaml.safe_load(found["snippet"])), searched


def with_repair(config: PipelineConfig) -> PipelineConfig:
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


def can_suggest(config: PipelineConfig, targets: Sequence[Target]) -> None:
    """--suggest-keep-float needs what verify.suggest_keep_float needs in the pipeline file."""
    limits = gate_limits(config)
    problems = []
    if config.evaluation is None or not limits.any_parity_gate:
        problems.append("--suggest-keep-float needs an evaluation section and a parity gate to meet "
                        "(gates.max_accuracy_drop, min_top1_agreement, min_sqnr_db or min_cosine)")
    problems += [f"--suggest-keep-float: target {t.name!r} runs no float ops left in a quantized model: "
                 f"{quantization_line(t)}" for t in targets if not t.quantization.float_fallback]
    if problems:
        raise ConfigError(problems)
