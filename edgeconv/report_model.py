"""The build report's model: typed sections, and the JSON Schema generated from them.

report.json is plain JSON that CI tooling reads, so each section is a ``TypedDict``: the stages build
their section as a checked type (mypy holds every key and value to it), the report stays the dict
that is written, read back by ``edgeconv diff`` and served from the cache, and
``edgeconv/schemas/report.schema.json`` is generated from these classes (``edgeconv schema report``;
a unit test keeps the committed file equal to it). Field documentation and bounds ride along in
``Annotated``: ``Doc``, ``Min``, ``Pattern``, ``MinLength``, and ``Keys`` for the keys a mapping
always has.
"""

import json
import types
import typing
from typing import Annotated, Any, Literal, NotRequired, TypedDict, Union

from ._record import record
from ._version import SCHEMA_BASE_URL

REPORT_SCHEMA_VERSION: Literal[1] = 1


@record
class Doc:
    text: str


@record
class Min:
    value: float


@record
class Pattern:
    regex: str


@record
class MinLength:
    value: int


@record
class OneOf:
    """The values a ``str`` field takes: those of a Python enum at the producer (a unit test holds the
    two equal), so producers write ``member.value`` without a cast."""

    values: tuple[str, ...]


@record
class Keys:
    """Keys a ``dict[str, X]`` always holds (it may hold more)."""

    required: tuple[str, ...]


Sha256 = Annotated[str, Pattern("^[0-9a-f]{64}$")]
Count = Annotated[int, Min(0)]
Counts = dict[str, Count]
Number = Union[float, str, None]  # noqa: UP007 (a runtime alias: the schema generator reads it)


# -- the model and its data --------------------------------------------------------------------

class IO(TypedDict):
    name: str
    shape: list[int]
    dtype: str


class ModelSection(TypedDict):
    path: str
    format: str
    framework: NotRequired[str]
    sha256: Sha256
    inputs: NotRequired[list[IO]]
    outputs: NotRequired[list[IO]]
    layers: NotRequired[Count]
    notes: NotRequired[Annotated[list[str], Doc("What the loader decided: bindings, default inputs/outputs, "
                                                "fallbacks.")]]


class TfliteArtifact(TypedDict):
    path: Annotated[str, Doc("Relative to the report.")]
    sha256: Sha256
    bytes: Annotated[int, Min(1)]


class Artifact(TypedDict):
    path: str


class Artifacts(TypedDict):
    tflite: TfliteArtifact
    report_md: NotRequired[Artifact]
    resolved_pipeline: NotRequired[Artifact]
    explorer: NotRequired[Annotated[list[Artifact], Doc(
        "Model Explorer node data: each target's op status and its rule and fix, the per-op quantization SQNR "
        "(edgeconv view shows them; any Model Explorer loads them with 'Add per-node data')")]]


class Rewrite(TypedDict):
    layers: list[str]
    node: str
    description: str


class PassSection(TypedDict):
    name: str
    removed: Counts
    removed_by_layer: NotRequired[dict[str, Counts]]
    removed_by_reason: NotRequired[dict[str, Counts]]
    ops_before: Counts
    ops_after: Counts
    rewrites: NotRequired[list[Rewrite]]
    notes: NotRequired[list[str]]


class Equivalence(TypedDict):
    """The cleaned graph against the model in inference mode."""

    samples: Annotated[int, Min(1)]
    tolerance: Annotated[float, Min(0)]
    max_abs_diff: Annotated[float, Min(0)]
    per_output: NotRequired[dict[str, float]]
    inputs: NotRequired[Annotated[str, Doc("What the comparison ran on: calibration samples or seeded random "
                                           "inputs.")]]
    passed: bool


class InputStats(TypedDict):
    min: float
    max: float
    mean: float
    std: float
    constant: NotRequired[bool]
    neighbour_correlation: NotRequired[float]
    per_channel: NotRequired[dict[str, list[float]]]


class Data(TypedDict):
    """Provenance of a sample set: source, files, exactly which samples (seed, hash), statistics."""

    source: str
    path: str
    file_sha256: NotRequired[Sha256 | None]
    files: NotRequired[Annotated[list[str], Doc("The first 20 files read.")]]
    file_count: NotRequired[Count]
    available: NotRequired[Annotated[int, Min(1)]]
    samples: Annotated[int, Min(1)]
    seed: Count
    samples_sha256: Sha256
    stats: NotRequired[dict[str, InputStats]]
    notes: NotRequired[list[str]]


class DataFinding(TypedDict):
    check: Annotated[str, OneOf(("min_samples", "constant", "noise", "range_mismatch", "expected_range",
                                 "input_quantization", "activation_range", "imposed_range"))]
    input: str | None
    message: str
    severe: NotRequired[Annotated[bool, Doc("Known to ruin an INT8 model: fails the build by default")]]


class CalibrationData(Data):
    """The calibration samples, and what was found about them."""

    warnings: NotRequired[Annotated[list[DataFinding], Doc(
        "Findings about the calibration data; the ones known to ruin a model fail the build by default.")]]


class TargetAllowance(TypedDict):
    target: str
    modes: list[str]
    float_fallback: bool
    why: str


IOType = Annotated[str, OneOf(("int8", "uint8", "int16", "float32"))]


class Quantization(TypedDict):
    mode: Annotated[str, OneOf(("int8", "int16x8", "dynamic", "float16", "none"))]
    input_type: IOType
    output_type: IOType
    per_channel: NotRequired[bool]
    keep_float: NotRequired[Annotated[list[str], Doc("Patterns of op output names left float (selective "
                                                     "quantization).")]]
    engine: NotRequired[Annotated[str, OneOf(("converter", "ai-edge-quantizer")),
                                  Doc("What quantized the model: the TFLite converter, or AI Edge Quantizer "
                                      "applied to the float .tflite.")]]
    int16_ops: NotRequired[Annotated[list[str], Doc("Patterns of op output names given int16 activations in an "
                                                    "int8 model (AI Edge Quantizer).")]]
    range_percentile: NotRequired[Annotated[float | None, Doc(
        "Activation ranges at this percentile of the calibration values (null: their min and max).")]]
    allowed_by_targets: NotRequired[Annotated[list[TargetAllowance], Doc(
        "What each target allows: the modes its verdicts hold for, and whether it runs float ops left in a "
        "quantized model.")]]
    calibration: Annotated[CalibrationData | None, Doc("null for a mode that needs no calibration data when the "
                                                       "pipeline gives none.")]


# -- verification --------------------------------------------------------------------------------

class OutputParity(TypedDict):
    max_abs_error: float
    mean_abs_error: float
    cosine: float
    sqnr_db: float | None
    top1_agreement: Annotated[float | None, Doc(
        "Share of the top-1 decisions the compared model shares with the reference: the top-1 class "
        "(classification), the decision at 0.5 (binary; multilabel: per tag, averaged); null for regression")]
    reference_max_abs: NotRequired[float]
    mean_iou: NotRequired[Annotated[float | None, Doc(
        "boxes outputs: the mean intersection over union of each box with the reference's")]]


class Parity(TypedDict):
    samples: Count
    data: NotRequired[Annotated[str, OneOf(("evaluation", "calibration", "random")), Doc(
        "The samples it ran on: the evaluation data, or without any, the calibration samples.")]]
    kinds: NotRequired[dict[str, Annotated[str, OneOf(("classification", "binary", "multilabel", "regression",
                                                        "boxes", "index"))]]]
    outputs: Annotated[dict[str, dict[str, OutputParity]], Doc("Per model output, per pair compared.")]
    accuracy: Annotated[dict[str, Any] | None, Doc(
        "Top-1 accuracy against the labels: the output scored, one share per model compared (source, tflite_float, "
        "built, ...), and the drop of each from the source model's"), Keys(("output", "source", "drop"))]


class Culprit(TypedDict):
    rank: Annotated[int, Min(1)]
    op: str
    tensor: str
    source_layers: list[str]
    model_output: bool
    erased: float
    sqnr_db: float | None
    rmse_per_scale: float
    scale: NotRequired[float]


class RepairTrial(TypedDict):
    trial: Annotated[int, Min(1)]
    change: Annotated[str, Doc("What the trial changes, in words")]
    snippet: Annotated[str, Doc("The change as pipeline.yaml text")]
    interface_change: NotRequired[Annotated[str | None, Doc(
        "How the change changes the model's input and output types (tried only with "
        "repair.allow_interface_change); null when it keeps them")]]
    passes_gates: bool
    failed: Annotated[list[str], Doc("The gates the trial still fails (a target it fails included)")]
    bytes: Annotated[int, Min(1)]
    accuracy: float | None
    sqnr_db: dict[str, float | None]
    top1_agreement: dict[str, float | None]
    mac_share: Annotated[dict[str, float], Doc("Per target: the share of the MACs on supported kernels")]
    seconds: float
    held_back: NotRequired[Annotated[dict[str, Any], Doc(
        "The same figures (accuracy, sqnr_db, top1_agreement) and the agreement gates it fails (failed) on the "
        "held-back samples, which the choice did not see; accuracy_drop from the source model there"),
        Keys(("failed", "accuracy", "sqnr_db", "top1_agreement", "accuracy_drop"))]]


class RepairCause(TypedDict):
    failed: list[str]
    findings: list[DataFinding]


class Cause(TypedDict):
    rank: Annotated[int, Min(1)]
    id: Annotated[str, OneOf(("calibration_data", "input_resolution", "index_input", "output_resolution",
                              "imposed_range", "calibration_coverage", "op_error")),
                  Doc("What kind of cause (docs/VERIFICATION.md \"Why a build fails\")")]
    confirmed: Annotated[bool, Doc(
        "Measured to explain the failure: the input's (or the output's) quantization alone gives at least half of "
        "the INT8 model's error, the calibration data has a severe finding, or the tensor's op is among the 3 that "
        "add the most error. Unconfirmed causes come last.")]
    sentence: str
    fix: str
    subject: Annotated[str | None, Doc("The input or tensor the cause is about")]
    source_layers: list[str]
    evidence: Annotated[dict[str, Any], Doc("The numbers behind the sentence")]


class Diagnosis(TypedDict):
    failed: Annotated[list[str], Doc("The ids of the agreement and accuracy checks that failed")]
    causes: Annotated[list[Cause], Doc("Ranked: confirmed causes first, then the op that adds the most error, "
                                       "then what was found but not confirmed")]


class Repair(TypedDict):
    trials: list[RepairTrial]
    chosen: Annotated[int | None, Doc("The trial the output is built with (None: no trial passed)")]
    snippet: Annotated[str | None, Doc("The chosen change, to paste into pipeline.yaml")]
    stopped: Annotated[str, Doc("Why the search ended")]
    closest: Annotated[int | None, Doc("Without a passing trial: the one that failed the fewest gates")]
    skipped: Annotated[list[str], Doc("The kinds of change not tried, and why")]
    summary: str
    samples: NotRequired[Annotated[dict[str, int], Keys(("chosen_on", "held_back")), Doc(
        "The evaluation samples the trials were compared on, and the ones held back to validate the winner on")]]
    seconds: NotRequired[Annotated[float, Doc("The build as configured and the search, before the rebuild with "
                                              "the chosen change")]]
    as_configured: NotRequired[Annotated[RepairCause, Doc(
        "What the build as configured found, before the change: the gates it failed and its calibration findings "
        "(the rebuilt model may no longer show them)")]]


class KeepFloatSuggestion(TypedDict):
    found: bool
    keep_float: list[str] | None
    layers: NotRequired[list[str] | None]
    steps: Annotated[list[dict[str, Any]], Doc("Each trial: what was kept in float, the gates it failed, its cost")]


class Memory(TypedDict):
    flash_bytes: Annotated[int, Min(1)]
    arena_bytes: Count
    activations_bytes: NotRequired[Count]
    bookkeeping_bytes: NotRequired[Count]
    margin: NotRequired[float]
    method: NotRequired[str]


class OnnxSummary(TypedDict):
    bytes: int
    sha256: Sha256
    ir_version: NotRequired[int]
    opsets: dict[str, int]
    inputs: Any
    outputs: Any
    ops: dict[str, int]
    custom_domains: list[str]
    unknown_ops: list[str]


class OnnxModel(OnnxSummary):
    file: str


class FloatOnnxModel(OnnxModel):
    from_tf: Annotated[dict[str, dict[str, int]], Doc("Per TF op type, the ONNX ops tf2onnx made of it")]


class OnnxInt8Parity(Parity):
    bit_exact: Annotated[float | None, Doc("Share of the INT8 ONNX model's outputs equal to the .tflite's")]


class OnnxParity(TypedDict):
    float: Parity
    int8: NotRequired[OnnxInt8Parity]


class Onnx(TypedDict):
    opset: int
    data: Annotated[str, OneOf(("evaluation", "calibration"))]
    models: Annotated[dict[str, OnnxModel], Keys(("float",)), Doc(
        "float (a FloatOnnxModel: it also says which ONNX ops each TF op became) and, when written, int8")]
    parity: OnnxParity


class Baseline(TypedDict):
    diff: Annotated[dict[str, Any], Keys(("old", "new", "same_model", "ops", "size", "targets"))]
    regressions: list[str]


class Firmware(TypedDict):
    files: NotRequired[list[str]]
    c_name: NotRequired[str | None]
    golden: NotRequired[dict[str, Any] | None]


class RuntimeDrift(TypedDict):
    samples: Count
    data: Annotated[str, OneOf(("evaluation", "calibration", "reference-inputs")), Doc("The samples compared on")]
    runtimes: Annotated[dict[str, dict[str, Any]], Doc(
        "Per runtime (builtin, xnnpack, tflm): the target it runs, max_lsb over every op output it exposes, "
        "tensors_compared, and ops: each op output that differs (op, type, tensor, max_lsb, differ: the share of "
        "its values that differ); or error when it could not be compared")]


class Tensor(TypedDict):
    name: str
    signature_name: NotRequired[str]
    dtype: str
    shape: list[int]
    scale: NotRequired[float]
    zero_point: NotRequired[int]


class TfliteSection(TypedDict):
    sha256: Sha256
    bytes: int
    subgraphs: NotRequired[int]
    ops: int
    op_types: Counts
    inputs: list[Tensor]
    outputs: list[Tensor]


# -- targets and the verdict ------------------------------------------------------------------------

class Violation(TypedDict):
    rule: Annotated[str, Pattern(r"^[a-z0-9-]+\.[A-Z0-9_]+\.[a-z0-9_]+$")]
    text: Annotated[str, MinLength(1)]
    detail: str
    fix: str  # the report writes all three, and its readers (report.md, JUnit, the console) rely on them
    effect: Annotated[str, OneOf(("cpu_fallback", "unsupported", "uncertain", "warning"))]
    source: str


class OpVerdict(TypedDict):
    index: Count
    subgraph: NotRequired[Count]
    type: str
    version: Annotated[int, Min(1)]
    name: str
    custom_code: NotRequired[str]
    source_layers: NotRequired[list[str]]
    status: Annotated[str, OneOf(("supported", "uncertain", "cpu_fallback", "unsupported")), Doc(
        "uncertain: past the largest size known to run on the accelerator; it may fall back")]
    blocked_by: NotRequired[Annotated[int, Doc("The blocking (or uncertain) op this op depends on"), Min(0)]]
    follows_blocking_op: NotRequired[Annotated[bool, Doc("On the CPU only because it depends on a blocking op")]]
    violations: list[Violation]
    macs: NotRequired[Count]
    weight_bytes: NotRequired[Count]
    gemm: NotRequired[Annotated[dict[str, int], Keys(("m", "n", "k"))]]


class BlockingOp(TypedDict):
    """A root cause of a segment placement's CPU fallback: the op, its reasons, its layers."""

    index: Count
    type: str
    name: str
    rules: list[str]
    reasons: list[str]
    fixes: list[str]
    source_layers: NotRequired[list[str]]


class TargetVerdict(TypedDict):
    name: str
    title: NotRequired[str]
    verdict: Annotated[str, OneOf(("pass", "fail", "error")), Doc(
        "error: the target's own tool (Vela) failed on the model; see error")]
    error: NotRequired[str]
    first_blocking_op: NotRequired[BlockingOp | None]
    blocking_ops: NotRequired[Annotated[list[BlockingOp], Doc(
        "Segment placement: every op that cannot be mapped but depends on the segment")]]
    counts: Annotated[Counts, Keys(("supported", "cpu_fallback", "unsupported"))]
    macs: NotRequired[Annotated[Counts, Doc("MACs per op status")]]
    shares: NotRequired[Annotated[dict[str, float], Doc("Share of the ops and of the MACs that run on the target")]]
    warnings: NotRequired[Count]
    weight_bytes: NotRequired[Count]
    estimates: NotRequired[Annotated[dict[str, Any], Doc(
        "The target's own tool's estimates (Vela: SRAM, cycles, inferences/s), or an accelerator's parameter "
        "memory from its target file's layout (edgetpu: parameter_bytes, parameters_off_chip_min_bytes / "
        "_max_bytes, the on-chip cache range, ops_not_modelled)")]]
    estimates_basis: NotRequired[Annotated[str, Doc(
        "What the estimates assumed: Vela's system config and memory mode, or the target file's layout")]]
    ops: list[OpVerdict]


class Check(TypedDict):
    id: str
    kind: Annotated[str, OneOf(("target", "accelerator", "gate", "calibration", "agreement", "accuracy", "conversion",
                                "runtime", "memory", "regression"))]
    outcome: Annotated[str, OneOf(("pass", "fail", "error", "warn", "off"))]
    sentence: str
    measured: NotRequired[Number]
    limit: NotRequired[Number]
    target: NotRequired[str | None]


class Gate(TypedDict):
    verdict: Annotated[str, OneOf(("pass", "fail"))]
    reasons: Annotated[list[str], Doc("The sentence of every failed check")]
    disabled: NotRequired[Annotated[list[str], Doc("Default gates the pipeline turned off or loosened, and where")]]
    checks: list[Check]


class Invoke(TypedDict):
    samples: NotRequired[int]
    failed: NotRequired[int]
    per_set: NotRequired[dict[str, dict[str, Count]]]
    error: NotRequired[str | None]
    op: NotRequired[dict[str, Any] | None]


class Timings(TypedDict):
    stages_s: dict[str, float]
    total_s: float


class Report(TypedDict):
    """report.json written by `edgeconv build`. Keys listed as required are a contract that CI tooling relies
    on; later versions add keys, they do not remove or rename these within schema_version 1."""

    schema_version: Literal[1]
    edgeconv_version: str
    created: Annotated[str, Doc("UTC build time; the only field that changes between identical builds.")]
    name: str
    pipeline: Annotated[str, Doc("Pipeline file, relative to the report's folder.")]
    toolchain: Annotated[dict[str, str], Keys(("python", "edgeconv"))]
    model: ModelSection
    artifacts: Artifacts
    passes: list[PassSection]
    equivalence: Annotated[Equivalence | None, Doc("null when the model is an existing .tflite (no passes ran).")]
    quantization: Annotated[Quantization | None, Doc("null when the model is an existing .tflite (no conversion "
                                                     "ran).")]
    evaluation: NotRequired[Annotated[Data | None, Doc(
        "The evaluation data the calibration data was checked against; null without an evaluation section.")]]
    parity: NotRequired[Annotated[Parity | None, Doc(
        "Source model vs float .tflite vs built .tflite on the evaluation data (or, without any, the calibration "
        "samples); null when the built model could not run.")]]
    culprits: NotRequired[Annotated[list[Culprit] | None, Doc("Quantized ops that add the most error, worst "
                                                              "first.")]]
    keep_float_suggestion: NotRequired[KeepFloatSuggestion | None]
    runtime_drift: NotRequired[Annotated[RuntimeDrift | None, Doc(
        "Each target's runtime against edgeconv's reference, op by op (verify.runtime_drift); null when not "
        "measured.")]]
    diagnosis: NotRequired[Annotated[Diagnosis | None, Doc(
        "Why the agreement or accuracy gates failed, causes ranked with their evidence; null when they pass.")]]
    repair: NotRequired[Annotated[Repair | None, Doc(
        "The search for a quantization that passes the gates (repair.enabled, build --repair): every trial, the "
        "one the output is built with; null when no search ran.")]]
    memory: NotRequired[Memory]
    onnx: NotRequired[Annotated[Onnx | None, Doc("ONNX models written beside the .tflite (output.onnx) and how "
                                                 "they agree.")]]
    baseline: NotRequired[Annotated[Baseline | None, Doc(
        "What changed since the baseline report (build --baseline), and the regression gates it fails.")]]
    firmware: NotRequired[Firmware]
    tflite: TfliteSection
    targets: Annotated[list[TargetVerdict], Doc("Per-target verdicts; also the JSON printed by `edgeconv check "
                                                "--format json`.")]
    gate: Annotated[Gate, Doc("The verdict, computed once (edgeconv/verdict.py); every output renders it.")]
    invoke: NotRequired[Annotated[Invoke | None, Doc(
        "The built model run on every calibration and evaluation sample before the verdict.")]]
    timings: NotRequired[Annotated[Timings | None, Doc(
        "Wall-clock seconds of each build stage (load, data, passes, convert, check, invoke, verify, "
        "onnx/report) and in total; null for a checked .tflite.")]]


# -- the JSON Schema ---------------------------------------------------------------------------------

_SCALARS = {str: "string", int: "integer", float: "number", bool: "boolean", type(None): "null"}


def json_schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of report.json, from :class:`Report`: one ``$defs`` entry per
    section class. Keys outside the model are allowed (later versions add keys)."""
    defs: dict[str, Any] = {}
    root = _object(Report, defs)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema",
            "$id": SCHEMA_BASE_URL + "report.schema.json",
            "title": "edgeconv build report", **root, "$defs": dict(sorted(defs.items()))}


def json_schema_text() -> str:
    return json.dumps(json_schema(), indent=2) + "\n"


def _object(cls: type, defs: dict[str, Any]) -> dict[str, Any]:
    hints = typing.get_type_hints(cls, include_extras=True)
    out: dict[str, Any] = {"type": "object"}
    if cls.__doc__ and cls.__doc__ is not TypedDict.__doc__ and not cls.__doc__.startswith(cls.__name__ + "("):
        out["description"] = " ".join(cls.__doc__.split())
    out["required"] = [k for k, hint in hints.items() if typing.get_origin(hint) is not NotRequired]
    out["properties"] = {k: _schema(hint, defs) for k, hint in hints.items()}
    return out


def _schema(hint: Any, defs: dict[str, Any]) -> dict[str, Any]:
    origin = typing.get_origin(hint)
    if origin is NotRequired:
        return _schema(typing.get_args(hint)[0], defs)
    if origin is Annotated:
        base, *meta = typing.get_args(hint)
        out = _schema(base, defs)
        for m in meta:
            if isinstance(m, Doc):
                out["description"] = m.text
            elif isinstance(m, Min):
                out["minimum"] = m.value
            elif isinstance(m, Pattern):
                out["pattern"] = m.regex
            elif isinstance(m, MinLength):
                out["minLength"] = m.value
            elif isinstance(m, OneOf):
                out = {k: v for k, v in out.items() if k != "type"} | {"enum": list(m.values)}
            elif isinstance(m, Keys):
                out["required"] = list(m.required)
        return out
    if hint is Any:
        return {}
    if hint in _SCALARS:
        return {"type": _SCALARS[hint]}
    if origin is Literal:
        values = list(typing.get_args(hint))
        return {"const": values[0]} if len(values) == 1 else {"enum": values}
    if origin in (Union, types.UnionType):
        parts = [_schema(a, defs) for a in typing.get_args(hint)]
        if all(set(p) == {"type"} for p in parts):  # str | None -> {"type": ["string", "null"]}
            return {"type": [p["type"] for p in parts]}
        return {"anyOf": parts}
    if origin is list:
        return {"type": "array", "items": _schema(typing.get_args(hint)[0], defs)}
    if origin is dict:
        return {"type": "object", "additionalProperties": _schema(typing.get_args(hint)[1], defs)}
    if typing.is_typeddict(hint):
        if hint.__name__ not in defs:
            defs[hint.__name__] = {}  # reserved first: a section may refer to itself
            defs[hint.__name__] = _object(hint, defs)
        return {"$ref": f"#/$defs/{hint.__name__}"}
    raise TypeError(f"report_model: no JSON Schema for {hint!r}")
