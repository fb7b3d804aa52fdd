"""The pipeline file: its schema (frozen dataclasses), loader and checks.

Nothing here imports TensorFlow: ``edgeconv validate`` and the first stage of
``edgeconv build`` run in well under a second.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib.util
import json
import math
import re
import sys
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from . import _yaml
from ._record import record
from ._schema import INVALID, Ctx, dump_value, json_schema_of, parse_dataclass, parse_mapping, relpath, setting
from ._version import SCHEMA_BASE_URL
from .calibration import SOURCES, resolve_source
from .calibration.config import HARD_FLOOR, SOURCE_KEYS, CalibrationConfig, DataConfig, EvaluationConfig, set_keys
from .calibration.sources import folder_kinds
from .diff import RegressionGates
from .errors import ConfigError, allowed_list, did_you_mean, rel
from .gates import DEFAULT_GATES
from .inputs import GRANT, leads_outside, not_a_regular_file, outside_project, project_of
from .passes import PASSES, GraphPass
from .targets import builtin_target_names, is_target_file, load_target
from .targets.vela import INSTALL_HINT as VELA_HINT
from .targets.vela import vela_available

SCHEMA_VERSION = 1


class ModelFormat(enum.Enum):
    AUTO = "auto"
    KERAS = "keras"  # Keras 3 .keras archive
    H5 = "h5"  # legacy Keras 2 HDF5
    SAVEDMODEL = "savedmodel"  # SavedModel directory
    GRAPHDEF = "graphdef"  # TF1 frozen GraphDef (.pb)
    TFLITE = "tflite"  # an existing .tflite: no conversion, only the checks


class QuantMode(enum.Enum):
    INT8 = "int8"  # full integer: int8 weights and activations, calibrated
    INT16X8 = "int16x8"  # int16 activations, int8 weights, calibrated
    DYNAMIC = "dynamic"  # dynamic-range: int8 weights, float activations
    FLOAT16 = "float16"  # float16 weights
    NONE = "none"  # float32

    @property
    def calibrated(self) -> bool:
        return self in (QuantMode.INT8, QuantMode.INT16X8)


class QuantEngine(enum.Enum):
    CONVERTER = "converter"  # the TFLite converter's own quantizer (min/max calibration, one mode per model)
    AI_EDGE_QUANTIZER = "ai-edge-quantizer"  # Google's AI Edge Quantizer, applied to the float .tflite


class UncertainPolicy(enum.Enum):
    FAIL = "fail"  # an op that may not run on the accelerator fails the build (the default)
    WARN = "warn"  # a warning; the op still counts as off the accelerator in its share of the MACs


class IOType(enum.Enum):
    AUTO = "auto"  # int8 for int8, int16 for int16x8, float32 otherwise
    INT8 = "int8"
    UINT8 = "uint8"
    INT16 = "int16"
    FLOAT32 = "float32"


# Model input/output types each mode can have.
MODE_IO: dict[QuantMode, tuple[IOType, ...]] = {
    QuantMode.INT8: (IOType.INT8, IOType.UINT8, IOType.FLOAT32),
    QuantMode.INT16X8: (IOType.INT16, IOType.FLOAT32),
    QuantMode.DYNAMIC: (IOType.FLOAT32,),
    QuantMode.FLOAT16: (IOType.FLOAT32,),
    QuantMode.NONE: (IOType.FLOAT32,),
}


MODEL_SUFFIXES = {".keras": ModelFormat.KERAS, ".h5": ModelFormat.H5, ".hdf5": ModelFormat.H5,
                  ".pb": ModelFormat.GRAPHDEF, ".tflite": ModelFormat.TFLITE}


MAX_BATCH = 4096  # edge models run a batch of 1; a huge one would only exhaust memory while tracing
MAX_INPUT_ELEMENTS = 2**31 - 1  # TFLite counts a tensor's elements in a 32-bit int

# Model settings that apply to some formats only.
MODEL_KEY_FORMATS: dict[str, tuple[ModelFormat, ...]] = {
    "signature": (ModelFormat.SAVEDMODEL,),
    "bind": (ModelFormat.GRAPHDEF, ModelFormat.SAVEDMODEL),
    "inputs": (ModelFormat.GRAPHDEF,),
    "outputs": (ModelFormat.GRAPHDEF,),
    "custom_modules": (ModelFormat.KERAS, ModelFormat.H5),
    "custom_objects": (ModelFormat.KERAS, ModelFormat.H5),
    "trust_code": (ModelFormat.KERAS, ModelFormat.H5, ModelFormat.SAVEDMODEL, ModelFormat.GRAPHDEF),
}


def _parse_bind(node: yaml.Node, key: str, ctx: Ctx) -> Any:
    """Placeholder name -> constant (true/false or a number)."""
    if not isinstance(node, yaml.MappingNode):
        return ctx.error(node, key, "expected a mapping of placeholder name to value, e.g. {is_training: false}")
    out: dict[str, bool | int | float] = {}
    for k, v in node.value:
        name = str(k.value)
        value = _yaml.to_python(v) if isinstance(v, yaml.ScalarNode) and v.style is None else None
        if not isinstance(value, (bool, int, float)):
            ctx.error(v, f"{key}.{name}", f"expected true, false or a number, got {_yaml_text(v)}")
            continue
        out[name] = value
    return types.MappingProxyType(out) if len(out) == len(node.value) else INVALID


OUTPUT_KINDS = ("classification", "binary", "multilabel", "regression", "boxes", "index")
_FILE_NAME = re.compile(r"^[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}$")
_OBJECT_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


def _parse_text_map(node: yaml.Node, key: str, ctx: Ctx, what: str, problem: Any) -> Any:
    """A mapping of names to text values; ``problem(value, node)`` says what is wrong with a value, or None."""
    if not isinstance(node, yaml.MappingNode):
        return ctx.error(node, key, f"expected a mapping of {what}")
    out: dict[str, str] = {}
    for k, v in node.value:
        value = v.value if isinstance(v, yaml.ScalarNode) else None
        wrong = problem(value, v)
        if wrong:
            ctx.error(v, f"{key}.{k.value}", wrong)
            continue
        out[str(k.value)] = str(value)
    return types.MappingProxyType(out) if len(out) == len(node.value) else INVALID


def _parse_custom_objects(node: yaml.Node, key: str, ctx: Ctx) -> Any:
    """Class name -> 'module:Class'."""
    return _parse_text_map(node, key, ctx, "class name to 'module:Class'", lambda value, v: None if (
        isinstance(value, str) and _OBJECT_REF.match(value)) else f"expected 'module:Class', got {_yaml_text(v)}")


def _parse_output_kinds(node: yaml.Node, key: str, ctx: Ctx) -> Any:
    """Model output name -> classification | binary | multilabel | regression | boxes | index."""
    return _parse_text_map(node, key, ctx, "model output name to an output kind", lambda value, v: None
                           if value in OUTPUT_KINDS else f"unknown output kind {_yaml_text(v)} (allowed: "
                           f"{allowed_list(OUTPUT_KINDS)}){did_you_mean(str(value), OUTPUT_KINDS)}")


def _yaml_text(node: yaml.Node) -> str:
    return repr(node.value) if isinstance(node, yaml.ScalarNode) else "a collection"


@record
class ModelConfig:
    """The model to convert."""

    path: Path = setting("Model file or SavedModel folder, relative to the pipeline file (.keras, .h5, .pb, "
                         ".tflite, or a folder with saved_model.pb).", must_exist=True)
    format: ModelFormat = setting("Model format; 'auto' picks it from the file suffix (a folder is a SavedModel).",
                                  default=ModelFormat.AUTO)
    signature: str = setting("SavedModel signature to convert.", default="serving_default")
    inputs: tuple[str, ...] = setting(
        "GraphDef: the placeholders that are the model inputs (default: every placeholder not bound).",
        factory=tuple)
    outputs: tuple[str, ...] = setting(
        "GraphDef: the nodes whose outputs are the model outputs (default: the nodes nothing else consumes).",
        factory=tuple)
    bind: Mapping[str, Any] = setting(
        "GraphDef/SavedModel: placeholders to replace by constants before anything else, e.g. "
        "{is_training: false}.",
        factory=dict, parse=_parse_bind,
        json_schema=lambda: {"type": "object", "additionalProperties": {"type": ["boolean", "number"]}})
    batch_size: int = setting("Batch size the model is traced with (the batch dimension is fixed).",
                              default=1, minimum=1, maximum=MAX_BATCH)
    input_shapes: Mapping[str, tuple[int, ...]] = setting(
        "Full static shape per model input name, batch included, to pin dimensions the model leaves "
        "open (None). Inputs not listed get batch_size as their batch and must have no other open "
        "dimension.", factory=dict)
    custom_modules: tuple[str, ...] = setting(
        "Python modules to import before loading, so custom Keras classes (registered with "
        "@keras.saving.register_keras_serializable) are found; looked up next to the pipeline file. "
        "Needs trust_code: true.", factory=tuple)
    custom_objects: Mapping[str, str] = setting(
        "Custom Keras classes the package never registered, by the class name the model file uses: "
        "{ClassName: 'module:Class'} (module looked up next to the pipeline file). Needs trust_code: true.",
        factory=dict, parse=_parse_custom_objects,
        json_schema=lambda: {"type": "object", "additionalProperties": {"type": "string",
                                                                        "pattern": "^[\\w.]+:[\\w.]+$"}})
    trust_code: bool = setting("Run code the pipeline does not show: modules from the pipeline's folder "
                               "(custom_modules, custom_objects), a Keras Lambda layer's function (stored in the "
                               "model file as bytecode), and what a SavedModel or graph runs beyond "
                               "inference (init ops, resource initializers, ops with effects outside the graph).",
                               default=False)

    def resolved_format(self) -> ModelFormat:
        if self.format is not ModelFormat.AUTO:
            return self.format
        if self.path.is_dir() or (not self.path.suffix and not self.path.exists()):
            return ModelFormat.SAVEDMODEL  # a folder (one not fetched yet: validate --no-files)
        return MODEL_SUFFIXES[self.path.suffix.lower()]


@record
class QuantizationConfig:
    """How the model is quantized."""

    mode: QuantMode = setting("int8 (full integer, calibrated), int16x8 (int16 activations, int8 weights, "
                              "calibrated), dynamic (int8 weights, float activations), float16, none (float32). "
                              "Every target must allow the mode.", default=QuantMode.INT8)
    input_type: IOType = setting("dtype of the model inputs in the .tflite; auto: int8 for int8, int16 for "
                                 "int16x8, float32 otherwise. An input the model declares integer (raw uint8 "
                                 "pixels, int32 ids) keeps its dtype.", default=IOType.AUTO)
    output_type: IOType = setting("dtype of the model outputs in the .tflite; auto as input_type. An output the "
                                  "model computes as integers (an argmax's class) keeps its dtype.",
                                  default=IOType.AUTO)
    per_channel: bool = setting("Per-channel (per-axis) weight quantization for conv/FC weights; "
                                "false gives per-tensor weights.", default=True)
    keep_float: tuple[str, ...] = setting(
        "Regular expressions over the .tflite's op output names; matching ops stay float in an int8/int16x8 "
        "model (selective quantization). Every target must run float ops.", factory=tuple)
    engine: QuantEngine = setting(
        "What quantizes: converter (the TFLite converter's quantizer, min/max ranges, one mode for the whole "
        "model) or ai-edge-quantizer (Google's AI Edge Quantizer applied to the float .tflite; needed for "
        "int16_ops and range_percentile; installed with edgeconv[tf]).", default=QuantEngine.CONVERTER)
    int16_ops: tuple[str, ...] = setting(
        "Regular expressions over the float .tflite's op output names; matching ops get int16 activations "
        "(int8 weights) and the rest of the int8 model stays int8 (engine ai-edge-quantizer). Every target "
        "must run int16x8.", factory=tuple)
    range_percentile: float | None = setting(
        "Activation ranges from this percentile of the calibration values (and the mirror one below) instead "
        "of their min and max, so that rare outliers clip instead of coarsening every other value; e.g. 99.99 "
        "(engine ai-edge-quantizer).", default=None, minimum=90.0,
        maximum=100.0)

    def io(self, which: str) -> IOType:
        value: IOType = getattr(self, f"{which}_type")
        if value is not IOType.AUTO:
            return value
        if self.keep_float:
            return IOType.FLOAT32  # TF's selective quantization keeps float inputs and outputs
        return {QuantMode.INT8: IOType.INT8, QuantMode.INT16X8: IOType.INT16}.get(self.mode, IOType.FLOAT32)


@record
class VerifyConfig:
    """Numerical checks run during the build."""

    pass_tolerance: float = setting(
        "Largest absolute output difference allowed between the model in inference mode and the "
        "graph after the passes.", default=1e-5, minimum=0.0)
    pass_samples: int = setting("Calibration samples used to compare the graph before and after "
                                "the passes.", default=8, minimum=1)
    parity: bool = setting("Compare the built model with the source model and a float .tflite on the evaluation "
                           "data (needs an evaluation section).", default=True)
    float_tolerance: float = setting(
        "Largest absolute output difference allowed between the float .tflite and the source model; more is a "
        "conversion bug and fails the build.", default=1e-5, minimum=0.0)
    runtime_drift: int = setting(
        "Evaluation samples each target's runtime here (XNNPACK, LiteRT's optimized kernels, TFLite Micro) is "
        "compared on with edgeconv's reference (the INT8 arithmetic by hand), op by op; 0: not measured (the "
        "reference runs in NumPy: about 0.2 s a sample on MobileNetV2).", default=0, minimum=0)
    culprits: int = setting("How many of the ops that add the most quantization error the report lists (0: no "
                            "per-op analysis: it runs TF's QuantizationDebugger on the evaluation data, or without "
                            "any on the calibration samples, a large part of the build time on big models).",
                            default=5, minimum=0)
    outputs: Mapping[str, str] = setting(
        "Kind of each model output: classification (top-1 agreement and accuracy are measured), binary (one "
        "sigmoid unit: the decision at 0.5 is its top-1, and 0/1 labels score it), multilabel (independent "
        "sigmoid tags: each tag's decision at 0.5, averaged), boxes (detection boxes as corners, 4 values each, "
        "(ymin, xmin, ymax, xmax) or (xmin, ymin, xmax, ymax): also the mean IoU of each built box with the source "
        "model's), index (integers that must match exactly: an argmax's class, a segmentation map, ids: the share "
        "of values equal to the source model's is its top-1 agreement, no SQNR) or regression (offsets, "
        "landmarks, embeddings: SQNR, cosine and max error only). Default: "
        "classification for an output of class scores (vectors along its last axis of non-negative values "
        "summing to 1: one per sample, or one per pixel of a segmentation map, whose top-1 agreement is then "
        "the share of pixels; or the output the evaluation labels score), binary for one "
        "value per sample in [0, 1] that 0/1 labels score, index for an output the source model gives as "
        "integers (with one value per sample, the labels score it: its value is the class), regression "
        "otherwise.", factory=dict,
        parse=_parse_output_kinds,
        json_schema=lambda: {"type": "object", "additionalProperties": {"enum": list(OUTPUT_KINDS)}})
    suggest_keep_float: bool = setting(
        "Try keeping the worst layers in float, one more at a time, until the parity gates pass (targets must "
        "allow float ops); also edgeconv build --suggest-keep-float.", default=False)
    max_keep_float: int = setting("Most layers suggest_keep_float tries.", default=5, minimum=1)


@record
class RepairConfig:
    """When the quantized model fails the agreement or accuracy gates: search for the cheapest change to the
    quantization that passes them, within what every target runs (also edgeconv build --repair)."""

    enabled: bool = setting(
        "Search when the agreement or accuracy gates fail: per-channel weights, more calibration samples, "
        "percentile activation ranges, int16 activations for the worst ops, the worst ops kept in float, int16x8 "
        "(each only where every target runs it). The output is built with the change chosen, and report.md shows "
        "it as a snippet to paste.", default=False)
    allow_interface_change: bool = setting(
        "Also try changes that change the model's interface (the input or output type: keeping ops in float makes "
        "them float32, int16x8 makes them int16); a chosen one is shown as an interface change everywhere. Off: "
        "firmware that feeds int8 buffers keeps working with the repaired model.", default=False)
    max_trials: int = setting("Most trials (conversions) the search runs.", default=12, minimum=1)
    max_minutes: float = setting("Time budget of the search; no trial starts after it.", default=20.0,
                                 minimum=0.0)


def _per_output(minimum: float | None, maximum: float | None) -> dict[str, Any]:
    """A gate given as one number for every model output or as a mapping of output name to number: the
    ``parse``, ``json_schema`` and ``dump`` of its setting (the names are checked once the model is loaded)."""
    bounds = {"minimum": minimum, "maximum": maximum}

    def number(node: yaml.Node, key: str, ctx: Ctx) -> Any:
        from ._schema import parse_node

        return parse_node(float, node, key, ctx, bounds)

    def parse(node: yaml.Node, key: str, ctx: Ctx) -> Any:
        from ._yaml import is_null

        if is_null(node):
            return None
        if isinstance(node, yaml.SequenceNode):
            return ctx.error(node, key, "expected a number for every output, or {output name: number}, got a list")
        if not isinstance(node, yaml.MappingNode):
            return number(node, key, ctx)
        if not node.value:
            return ctx.error(node, key, "an empty mapping: give a number for every output, or {output name: number}")
        return parse_mapping(node, key, ctx, lambda v_node, sub: number(v_node, sub, ctx))

    def schema() -> dict[str, Any]:
        one = {"type": "number", **{k: v for k, v in bounds.items() if v is not None}}
        return {"anyOf": [one, {"type": "object", "minProperties": 1, "additionalProperties": one},
                          {"type": "null"}]}

    return {"parse": parse, "json_schema": schema}


@record
class GatesConfig:
    """Thresholds that fail the build (exit 1) beyond the target verdicts. Keys are target names."""

    max_cpu_fallback_ops: Mapping[str, int] = setting(
        "Most ops allowed to fall back to the CPU (or to reference kernels), per target.", factory=dict)
    min_supported_mac_share: Mapping[str, float] = setting(
        "Least share (0..1) of the model's multiply-accumulates that must run supported, per target.",
        factory=dict)
    fail_on_warnings: bool = setting("Fail when a target reports a warning (an unverified or size-dependent "
                                     "limit).", default=False)
    fail_on_calibration_warnings: bool = setting(
        "Fail also on the mild calibration findings (too few samples, a range that covers 25-50 % of the one in "
        "use). The severe ones (a range 4x off, synthetic noise, constant inputs) fail by default.",
        default=False)
    max_accuracy_drop: float | None = setting(
        "Largest drop in task accuracy (0..1) from the source model to the built one (evaluation labels); "
        "default 0.03 when the evaluation data has labels.",
        default=None, minimum=0.0, maximum=1.0)
    min_top1_agreement: float | Mapping[str, float] | None = setting(
        "Least share (0..1) of samples where the built model's top-1 class matches the source model's "
        "(classifier outputs; the decision at 0.5 for binary and multilabel ones); default 0.90. A number for every "
        "output, or one per output ({name: share}; outputs not named keep the default).",
        default=None, **_per_output(0.0, 1.0))
    min_sqnr_db: float | Mapping[str, float] | None = setting(
        "Least signal-to-quantization-noise ratio (dB) of every output against the source model; default 20. A "
        "number for every output, or one per output ({boxes: 15, scores: 20}; outputs not named keep the "
        "default).", default=None, **_per_output(None, None))
    min_cosine: float | Mapping[str, float] | None = setting(
        "Least cosine similarity of every output against the source model; a number for every output, or one per "
        "output (outputs not named are not gated).", default=None, **_per_output(-1.0, 1.0))
    max_arena_bytes: int | None = setting("Largest estimated TFLite Micro tensor arena, in bytes.", default=None,
                                          minimum=1)
    max_flash_bytes: int | None = setting("Largest model size (flash), in bytes.", default=None, minimum=1)
    max_runtime_drift_lsb: int | None = setting(
        "Largest difference, in LSBs, between a target's runtime (XNNPACK for arm-neon, LiteRT's optimized "
        "kernels for generic-int8, TFLite Micro for tflm-cmsis-nn) and edgeconv's reference on any op output it "
        "exposes; 0 requires bit-exact agreement. Measured on verify.runtime_drift samples (8 when that is 0).",
        default=None, minimum=0)
    max_size_growth: float | None = setting(
        "With a baseline (build --baseline): largest growth of the .tflite, as a share of the baseline's size.",
        default=None, minimum=0.0)
    max_arena_growth: float | None = setting(
        "With a baseline: largest growth of the tensor-arena estimate, as a share of the baseline's.",
        default=None, minimum=0.0)
    max_accuracy_regression: float | None = setting(
        "With a baseline: largest fall of the built model's accuracy (0..1, absolute; evaluation labels).",
        default=None, minimum=0.0, maximum=1.0)
    no_new_fallback: tuple[str, ...] = setting(
        "With a baseline: targets on which no op type may newly fall back to the CPU or become unsupported "
        "(e.g. [edgetpu]).", factory=tuple)
    uncertain: UncertainPolicy = setting(
        "An op an accelerator target cannot say it runs (past a size limit whose value no source gives, or "
        "after such an op): fail (the default) or warn. Either way it counts as off the accelerator.",
        default=UncertainPolicy.FAIL)
    disable: tuple[str, ...] = setting(
        "Default gates to turn off: accuracy, agreement, calibration, accelerator. The report and the console "
        "say so.", factory=tuple)

    @property
    def regression(self) -> RegressionGates:
        return RegressionGates(self.max_size_growth, self.max_arena_growth, self.max_accuracy_regression,
                               self.no_new_fallback)


class CLanguage(enum.Enum):
    C = "c"
    CC = "cc"


@record
class CArrayConfig:
    """The model as C source, for firmware that links it into flash."""

    name: str | None = setting("C identifier of the array; default <build name>_model.", default=None)
    language: CLanguage = setting("c: a .c/.h pair; cc: a .cc/.h pair.", default=CLanguage.C)


@record
class GoldenConfig:
    """Golden test vectors: real evaluation samples and the outputs TFLite's reference kernels give."""

    samples: int = setting("Evaluation samples to write.", default=4, minimum=1)
    intermediates: bool = setting("Also every intermediate tensor, to find the first layer where a device "
                                  "diverges.", default=False)


# The toolchain a pipeline may pin (requires:): key -> distributions that provide it, first installed wins.
TOOLCHAIN: dict[str, tuple[str, ...]] = {
    "python": (), "edgeconv": ("edgeconv",), "tensorflow": ("tensorflow", "tensorflow-cpu"), "keras": ("keras",),
    "ai-edge-litert": ("ai-edge-litert",), "numpy": ("numpy",), "onnx": ("onnx",), "onnxruntime": ("onnxruntime",),
    "tf2onnx": ("tf2onnx",), "ethos-u-vela": ("ethos-u-vela",), "ai-edge-quantizer": ("ai-edge-quantizer",),
}


def toolchain_version(key: str) -> str | None:
    """The installed version of a toolchain part, without importing it (None: not installed)."""
    from . import installed

    if key == "python":
        return sys.version.split()[0]  # what platform.python_version() reads it from
    if key == "edgeconv":
        from ._version import __version__

        return __version__
    for dist in TOOLCHAIN[key]:
        found = installed.version(dist)
        if found is not None:
            return found
    return None


def installed_toolchain() -> dict[str, str]:
    """Versions of every installed toolchain part (the keys `requires:` takes); read once per process."""
    return dict(_installed_toolchain())


@functools.cache
def _installed_toolchain() -> dict[str, str]:
    return {key: v for key in TOOLCHAIN if (v := toolchain_version(key)) is not None}


ONNX_OPSETS = (13, 18)  # tf2onnx 1.17 writes up to opset 18; per-channel QuantizeLinear needs 13
ONNX_HINT = "pip install 'edgeconv[onnx]'"


@record
class OnnxConfig:
    """ONNX models beside the .tflite, from the same cleaned graph and calibration (tf2onnx)."""

    opset: int = setting(f"ONNX opset, {ONNX_OPSETS[0]} to {ONNX_OPSETS[1]}.", default=17)
    quantized: bool | None = setting("Also write the INT8 (QDQ) ONNX model, converted from the built int8 .tflite "
                                     "(same scales and zero points); default: when quantization.mode is int8.",
                                     default=None)


@record
class OutputConfig:
    """Where the artifacts go, and the firmware artifacts written beside the .tflite."""

    dir: Path | None = setting("Output folder, relative to the pipeline file; default build/<name>. Not a "
                               "symbolic link; edgeconv replaces it only while it holds exactly what edgeconv "
                               "wrote there.", default=None, no_link=True)
    c_array: CArrayConfig | None = setting("Write the model as a C array (.c/.h).", default=None)
    op_resolver: bool = setting("Write a TFLite Micro op-resolver header registering exactly the model's ops.",
                                default=False)
    golden: GoldenConfig | None = setting("Write golden test vectors (needs an evaluation section).", default=None)
    onnx: OnnxConfig | None = setting("Write the float ONNX model (and the INT8 QDQ one), validated with "
                                      "onnx.checker and ONNX Runtime (needs edgeconv[onnx]).", default=None)


def _parse_passes(node: yaml.Node, key: str, ctx: Ctx) -> Any:
    if not isinstance(node, yaml.SequenceNode):
        return ctx.error(node, key, "expected a list of pass names or {name: ..., options} mappings")
    out: list[GraphPass] = []
    for i, item in enumerate(node.value):
        sub = f"{key}[{i}]"
        if isinstance(item, yaml.ScalarNode):
            name, options = item.value, None
        elif isinstance(item, yaml.MappingNode):
            entries = {str(k.value): (k, v) for k, v in item.value}
            if "name" not in entries:
                ctx.error(item, sub, "missing required key 'name'")
                continue
            name = str(entries["name"][1].value)
            options = yaml.MappingNode(item.tag, [kv for kv in item.value if kv[0].value != "name"],
                                       start_mark=item.start_mark, end_mark=item.end_mark)
        else:
            ctx.error(item, sub, "expected a pass name or a mapping")
            continue
        if name not in PASSES:
            ctx.error(item, sub, f"unknown pass {name!r} (allowed: {allowed_list(PASSES)})"
                      f"{did_you_mean(name, PASSES)}")
            continue
        if options is None:
            out.append(PASSES[name]())
            continue
        parsed = parse_dataclass(PASSES[name], options, sub, ctx)
        if parsed is not INVALID:
            out.append(parsed)
    names = [p.name for p in out]
    for dup in sorted({n for n in names if names.count(n) > 1}):
        ctx.error(node, key, f"pass {dup!r} is listed more than once")
    return tuple(out) if len(out) == len(node.value) else INVALID


def _passes_schema() -> dict[str, Any]:
    variants: list[dict[str, Any]] = [{"enum": sorted(PASSES)}]
    for name, cls in sorted(PASSES.items()):
        schema = json_schema_of(cls)
        schema["properties"] = {"name": {"const": name}, **schema["properties"]}
        schema["required"] = ["name", *schema.get("required", [])]
        variants.append(schema)
    return {"type": "array", "items": {"anyOf": variants}}


def _dump_passes(passes: tuple[GraphPass, ...], base_dir: Path) -> Any:
    return [{"name": p.name, **dump_value(p, base_dir)} for p in passes]


def _parse_targets(node: yaml.Node, key: str, ctx: Ctx) -> Any:
    """Built-in target names, or paths (relative to the pipeline) of the user's own target files."""
    if not isinstance(node, yaml.SequenceNode) or not node.value:
        return ctx.error(node, key, "expected a non-empty list of target names")
    names = builtin_target_names()
    out: list[str] = []
    seen: list[str] = []
    for i, item in enumerate(node.value):
        value = item.value if isinstance(item, yaml.ScalarNode) else None
        sub = f"{key}[{i}]"
        if value is not None and is_target_file(value):
            path = (ctx.base_dir / value).resolve()
            outside = outside_project(ctx.base_dir / value, ctx.project) if ctx.project is not None else None
            if outside:
                ctx.error(item, sub, f"target file {value!r} {outside}")
                continue
            if not path.is_file():
                ctx.error(item, sub, f"target file not found: {value!r} (resolved to {path})")
                continue
            try:
                name = load_target(str(path)).name
            except ConfigError as exc:
                ctx.problems.extend(exc.problems)
                continue
            value = str(path)
        elif value in names:
            name = value
            if load_target(value).compiler is not None and not vela_available():
                ctx.error(item, sub, f"target {value!r} is checked by the Arm Vela compiler, which is not installed: "
                          f"{VELA_HINT}")
                continue
        else:
            shown = repr(value) if value is not None else "a non-name value"
            ctx.error(item, sub, f"unknown target {shown} (allowed: {allowed_list(names)}, or a path to a target "
                      f".yaml file){did_you_mean(str(value), names)}")
            continue
        if name in seen:
            ctx.error(item, sub, f"target {name!r} is listed more than once")
            continue
        seen.append(name)
        out.append(value)
    return tuple(out) if len(out) == len(node.value) else INVALID


def _dump_targets(targets: tuple[str, ...], base_dir: Path) -> Any:
    return [relpath(Path(t), base_dir) if is_target_file(t) else t for t in targets]


@record
class PipelineConfig:
    """An edgeconv pipeline: model -> passes -> calibrated INT8 .tflite -> target checks."""

    version: int = setting(f"Pipeline schema version; must be {SCHEMA_VERSION}.",
                           json_schema=lambda: {"const": SCHEMA_VERSION})
    model: ModelConfig = setting("The model to convert.")
    calibration: CalibrationConfig | None = setting(
        "Representative data for calibration (not needed when the model is already a .tflite).", default=None)
    evaluation: EvaluationConfig | None = setting(
        "Held-out data the calibration data is checked against (ranges); same keys as calibration.", default=None)
    name: str | None = setting("Name of the build; names the .tflite. Default: the model file stem.",
                               default=None)
    passes: tuple[GraphPass, ...] = setting(
        "Graph cleanup passes, in order.", factory=lambda: (PASSES["strip-training"](),),
        parse=_parse_passes, json_schema=_passes_schema, dump=_dump_passes)
    quantization: QuantizationConfig = setting("Quantization settings.", factory=QuantizationConfig)
    targets: tuple[str, ...] = setting(
        "Targets the .tflite is checked against; the build fails when one fails.",
        factory=lambda: ("generic-int8",), parse=_parse_targets, dump=_dump_targets,
        json_schema=lambda: {"type": "array", "minItems": 1, "uniqueItems": True, "items": {"anyOf": [
            {"enum": sorted(builtin_target_names())},
            {"type": "string", "pattern": r"\.ya?ml$", "description": "path to a target file"}]}})
    verify: VerifyConfig = setting("Numerical checks.", factory=VerifyConfig)
    repair: RepairConfig = setting("The search for a quantization that passes the gates.", factory=RepairConfig)
    gates: GatesConfig = setting("Extra gates on the target results.", factory=GatesConfig)
    output: OutputConfig = setting("Output settings.", factory=OutputConfig)
    requires: Mapping[str, str] = setting(
        "Toolchain versions the build accepts, as PEP 440 specifiers (e.g. tensorflow: '>=2.20,<2.22'); a "
        f"converter upgrade changes the bytes and sometimes the accuracy. Keys: {', '.join(TOOLCHAIN)}.",
        factory=dict)
    # Derived from the file, not settable: where the pipeline file is, and the line of every key under gates
    # (a loosened default gate's note names it). Carried by replace(), not by dataclasses.replace().
    source: Path = dataclasses.field(default=Path("pipeline.yaml"), init=False, compare=False)
    gate_lines: Mapping[str, int] = dataclasses.field(default_factory=dict, init=False, compare=False, repr=False)


    @property
    def named_outputs(self) -> dict[str, tuple[str, ...]]:
        """The model output names the pipeline gives, per key (checked once the model is loaded)."""
        out = {"verify.outputs": tuple(self.verify.outputs)}
        for key in ("min_sqnr_db", "min_top1_agreement", "min_cosine"):
            value = getattr(self.gates, key)
            if isinstance(value, Mapping):
                out[f"gates.{key}"] = tuple(value)
        return out

    def replace(self, **changes: Any) -> PipelineConfig:
        """The pipeline with ``changes`` (as ``dataclasses.replace``), keeping what was derived from its file:
        ``dataclasses.replace`` gives fields outside ``__init__`` their defaults (the lost line numbers of
        loosened-gate notes after ``--repair`` were that)."""
        changed = dataclasses.replace(self, **changes)
        for f in dataclasses.fields(self):
            if not f.init:
                object.__setattr__(changed, f.name, getattr(self, f.name))
        return changed

    @property
    def build_name(self) -> str:
        return self.name or self.model.path.stem

    @property
    def output_dir(self) -> Path:
        if self.output.dir is not None:
            return self.output.dir
        return self.source.parent / "build" / self.build_name


def load_pipeline(path: str | Path, *, check_files: bool = True) -> PipelineConfig:
    """Read and validate a pipeline file; raise ConfigError listing every problem. ``check_files=False``
    (``edgeconv validate --no-files``): the model and data files may be absent, and nothing their presence
    would decide is checked."""
    path = Path(path)
    project = project_of(path.absolute().parent)  # where the file is named, not where a link leads
    # A link a pull request planted where the workflow looks for pipelines (to a device: the read says so).
    if not_a_regular_file(path) is None and leads_outside(path, project):
        raise ConfigError([f"{rel(path)}: a link that leads outside its project ({project}): a pipeline file is "
                           f"read only from its project; {GRANT}"])
    node = _yaml.compose_file(path)
    ctx = Ctx(rel(path), path.resolve().parent, check_files=check_files, project=project)
    if isinstance(node, yaml.MappingNode):
        version = next((v for k, v in node.value if k.value == "version"), None)
        if version is not None and not (isinstance(version, yaml.ScalarNode) and version.value == str(SCHEMA_VERSION)):
            shown = version.value if isinstance(version, yaml.ScalarNode) else "a non-scalar"
            raise ConfigError([f"{ctx.file}:{_yaml.line_of(version)}: version: unsupported pipeline "
                               f"schema version {shown!r} (supported: {SCHEMA_VERSION})"])
    config = parse_dataclass(PipelineConfig, node, "", ctx)
    if config is not INVALID:
        config = _inherit_preprocess(config)
        _check_semantics(config, node, ctx)
    if ctx.problems:
        raise ConfigError(ctx.problems)
    object.__setattr__(config, "source", path.resolve())
    object.__setattr__(config, "gate_lines", _gate_lines(node))
    return config  # type: ignore[no-any-return]


def _gate_lines(root: yaml.Node) -> dict[str, int]:
    """Line of every key under gates (and of verify.parity): where a pipeline loosened a default gate."""
    lines: dict[str, int] = {}
    gates = _node_at(root, "gates")
    if isinstance(gates, yaml.MappingNode) and gates is not root:
        lines.update({str(k.value): _yaml.line_of(k) for k, _ in gates.value})
    verify = _node_at(root, "verify")
    if isinstance(verify, yaml.MappingNode) and verify is not root:
        lines.update({f"verify.{k.value}": _yaml.line_of(k) for k, _ in verify.value})
    return lines


def _node_at(node: yaml.Node, *keys: str) -> yaml.Node:
    for key in keys:
        if not isinstance(node, yaml.MappingNode):
            break
        found = next((v for k, v in node.value if k.value == key), None)
        if found is None:
            break
        node = found
    return node


def _inherit_preprocess(config: PipelineConfig) -> PipelineConfig:
    """Evaluation images are preprocessed like calibration images unless the pipeline says otherwise."""
    cal, ev = config.calibration, config.evaluation
    if cal is None or ev is None or ev.preprocess is not None or cal.preprocess is None:
        return config
    if resolve_source(ev) not in ("images", "tfrecord"):
        return config
    return config.replace(evaluation=dataclasses.replace(ev, preprocess=cal.preprocess))


def _check_semantics(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    """Checks that involve more than one field or the file system."""
    _check_model(config, root, ctx)
    _check_calibration(config, root, ctx)
    _check_quantization(config, root, ctx)
    if not _is_tflite(config.model):
        _check_verification(config, root, ctx)
    _check_gates(config, root, ctx)
    _check_onnx(config, root, ctx)
    _check_requires(config, root, ctx)
    out = config.output.dir
    if out is not None and out.exists() and not out.is_dir():
        ctx.error(_node_at(root, "output", "dir"), "output.dir", f"{str(out)!r} exists and is not a folder")
    if config.name is not None and not _FILE_NAME.match(config.name):
        ctx.error(_node_at(root, "name"), "name", f"{config.name[:80]!r} is not a file name: it names the files "
                  "written inside the output folder (letters, digits, '.', '_', '-'; not a path, not starting with "
                  "'.')")


def _check_model(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    model = config.model
    at_path = _node_at(root, "model", "path")
    shown = relpath(model.path, ctx.base_dir)
    absent = not ctx.check_files and not model.path.exists()
    if absent and model.format is ModelFormat.AUTO and not model.path.suffix:
        return  # a SavedModel folder not fetched yet: its format, keys and contents are checked with it
    if model.format is ModelFormat.AUTO and not model.path.is_dir() and model.path.suffix.lower() not in MODEL_SUFFIXES:
        ctx.error(at_path, "model.path", f"cannot tell the model format from suffix {model.path.suffix or '(none)'!r} "
                  f"(known: {allowed_list(MODEL_SUFFIXES)}, or a SavedModel folder); set model.format")
        return
    fmt = model.resolved_format()
    if absent:
        pass
    elif fmt is ModelFormat.SAVEDMODEL:
        if not model.path.is_dir():
            ctx.error(at_path, "model.path", f"{shown!r} is a file; a SavedModel is a folder")
        elif not any((model.path / n).exists() for n in ("saved_model.pb", "saved_model.pbtxt")):
            ctx.error(at_path, "model.path", f"{shown!r} is not a SavedModel folder (no saved_model.pb in it)")
    elif model.path.is_dir():
        ctx.error(at_path, "model.path", f"{shown!r} is a folder; a {fmt.value} model is a file")
    for key in ("custom_modules", "custom_objects"):
        if getattr(model, key) and not model.trust_code:
            ctx.error(_node_at(root, "model", key), f"model.{key}", "runs code from the pipeline's folder; set "
                      "model.trust_code: true if you trust that code")
    for key in ("inputs", "outputs", "bind", "custom_modules", "custom_objects"):
        formats = MODEL_KEY_FORMATS[key]
        if getattr(model, key) and fmt not in formats:
            kinds = " and ".join(f.value for f in formats)
            ctx.error(_node_at(root, "model", key), f"model.{key}",
                      f"applies to {kinds} models only (this model is {fmt.value})")
    if fmt is not ModelFormat.SAVEDMODEL and model.signature != "serving_default":
        ctx.error(_node_at(root, "model", "signature"), "model.signature",
                  f"applies to savedmodel models only (this model is {fmt.value})")
    for name, shape in model.input_shapes.items():
        if not shape or any(d < 1 for d in shape):
            ctx.error(_node_at(root, "model", "input_shapes", name), f"model.input_shapes.{name}",
                      f"expected a non-empty list of dimensions >= 1, got {list(shape)}")
        elif math.prod(shape) > MAX_INPUT_ELEMENTS:
            ctx.error(_node_at(root, "model", "input_shapes", name), f"model.input_shapes.{name}",
                      f"{list(shape)} holds {math.prod(shape):,} values; a model input may hold at most "
                      f"{MAX_INPUT_ELEMENTS:,}")


def _is_tflite(model: ModelConfig) -> bool:
    return model.format is ModelFormat.TFLITE or (model.format is ModelFormat.AUTO and not model.path.is_dir()
                                                  and model.path.suffix.lower() == ".tflite")


def _check_calibration(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    cal, model = config.calibration, config.model
    if _is_tflite(model):
        # Settings that would silently do nothing are errors, like unknown keys.
        for key in ("calibration", "evaluation", "passes", "quantization", "verify", "repair"):
            at = _node_at(root, key)
            if at is not root:
                ctx.error(at, key, "does not apply to an existing .tflite model (it is checked as it is: no "
                          "passes, no conversion); remove it")
        return
    if cal is None:
        if config.quantization.mode.calibrated:
            ctx.error(root, "top level", f"missing required key 'calibration' (quantization mode "
                      f"{config.quantization.mode.value} is calibrated on real data)")
        elif config.evaluation is not None:
            _check_data(config.evaluation, "evaluation", root, ctx)
        return
    _check_data(cal, "calibration", root, ctx)
    if config.evaluation is not None:
        _check_data(config.evaluation, "evaluation", root, ctx)
    if cal.samples < HARD_FLOOR:
        ctx.error(_node_at(root, "calibration", "samples"), "calibration.samples",
                  f"{cal.samples} samples cannot calibrate a model (at least {HARD_FLOOR}; "
                  f"calibration.min_samples, {cal.min_samples}, is where warnings stop)")
    for name, bounds in cal.expected_range.items():
        if len(bounds) != 2 or bounds[0] >= bounds[1]:
            ctx.error(_node_at(root, "calibration", "expected_range", name), f"calibration.expected_range.{name}",
                      f"expected [low, high] with low < high, got {list(bounds)}")
    if cal.samples % model.batch_size:
        ctx.error(_node_at(root, "calibration", "samples"), "calibration.samples",
                  f"{cal.samples} is not a multiple of model.batch_size ({model.batch_size}); each "
                  "calibration step feeds one full batch")
    if config.verify.pass_samples > cal.samples:
        ctx.error(_node_at(root, "verify", "pass_samples"), "verify.pass_samples",
                  f"{config.verify.pass_samples} is more than calibration.samples ({cal.samples})")


def _check_data(cfg: DataConfig, section: str, root: yaml.Node, ctx: Ctx) -> None:
    """Which source a data section uses, and that it sets the keys that source takes (and no others)."""
    at = _node_at(root, section)
    source = resolve_source(cfg)
    if source is None and not ctx.check_files and cfg.path is not None and not cfg.path.exists():
        return  # a data folder not fetched yet: its source is told from its files
    if source is None:
        if cfg.path is None:
            ctx.error(at, section, "missing required key 'path' (or 'function' with source: python)")
        elif cfg.path.is_dir():
            kinds = folder_kinds(cfg.path)
            found = f"files for {', '.join(kinds)}" if kinds else "no data files"
            ctx.error(_node_at(root, section, "path"), f"{section}.path", f"cannot tell the source of folder "
                      f"{relpath(cfg.path, ctx.base_dir)!r} (it holds {found}); set {section}.source")
        else:
            known = sorted(x for s in SOURCES.values() for x in s.suffixes)
            ctx.error(_node_at(root, section, "path"), f"{section}.path",
                      f"cannot tell the data source from suffix {cfg.path.suffix or '(none)'!r} "
                      f"(known: {', '.join(known)}, or a folder); set {section}.source")
        return
    if source != "python" and cfg.path is None:
        ctx.error(at, section, f"missing required key 'path' (source {source})")
    if source == "python" and cfg.path is not None:
        ctx.error(_node_at(root, section, "path"), f"{section}.path", "does not apply to source python (its "
                  "function gives the samples)")
    for key in set_keys(cfg):
        if source not in SOURCE_KEYS[key]:
            ctx.error(_node_at(root, section, key), f"{section}.{key}",
                      f"applies to source {' and '.join(SOURCE_KEYS[key])} only (this data is {source})")
    if source == "images" and cfg.preprocess is None:
        ctx.error(at, section, "source images needs preprocess: with scale/offset or mean/std (how pixels 0-255 "
                  "become the model input)")
    pre = cfg.preprocess
    if pre is not None and source in ("images", "tfrecord"):
        where = _node_at(root, section, "preprocess")
        if (pre.scale is None) == (not pre.mean and not pre.std):
            ctx.error(where, f"{section}.preprocess", "give either scale (and offset) or mean and std, e.g. "
                      "scale: 0.00392156862745098 for inputs in [0, 1]")
        elif pre.scale is None and (len(pre.mean) != len(pre.std) or len(pre.mean) not in (1, 3)
                                    or any(v == 0 for v in pre.std)):
            ctx.error(where, f"{section}.preprocess", "mean and std need the same length, 1 or 3 values, and no "
                      "zero std")
        if pre.size is not None and (len(pre.size) != 2 or min(pre.size) < 1):
            ctx.error(_node_at(root, section, "preprocess", "size"), f"{section}.preprocess.size",
                      f"expected [height, width], got {list(pre.size)}")
    if source == "csv" and not cfg.columns:
        ctx.error(at, section, "source csv needs columns: {input_name: [column, ...]}")
    if source == "tfrecord" and not cfg.features:
        ctx.error(at, section, "source tfrecord needs features: {input_name: {key, dtype, shape, decode}}")
    if source == "python":
        if cfg.function is None or ":" not in cfg.function:
            ctx.error(at, section, "source python needs function: 'module:function'")
        elif not cfg.trust_code:
            from .calibration.sources.pycode import UNTRUSTED

            ctx.error(_node_at(root, section, "function"), f"{section}.function",
                      UNTRUSTED.format(function=cfg.function))


def _check_quantization(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    """Input/output types the mode allows; the mode and keep_float against what every target allows."""
    from .targets.describe import quantization_line

    q = config.quantization
    if _is_tflite(config.model):
        return
    for which in ("input", "output"):
        value = getattr(q, f"{which}_type")
        if value is not IOType.AUTO and value not in MODE_IO[q.mode]:
            ctx.error(_node_at(root, "quantization", f"{which}_type"), f"quantization.{which}_type",
                      f"{value.value} is not a {which} type of mode {q.mode.value} (allowed: "
                      f"{allowed_list(t.value for t in MODE_IO[q.mode])}, or auto)")
    if q.keep_float and not q.mode.calibrated:
        ctx.error(_node_at(root, "quantization", "keep_float"), "quantization.keep_float",
                  f"applies to modes int8 and int16x8 only (mode is {q.mode.value})")
    for which in ("input", "output"):
        value = getattr(q, f"{which}_type")
        if q.keep_float and value not in (IOType.AUTO, IOType.FLOAT32):
            ctx.error(_node_at(root, "quantization", f"{which}_type"), f"quantization.{which}_type",
                      f"a model with keep_float has float32 {which}s (TF's selective quantization keeps them "
                      f"float); set {which}_type: float32 or auto")
    import re

    for key in ("keep_float", "int16_ops"):
        for i, pattern in enumerate(getattr(q, key)):
            try:
                re.compile(pattern)
            except re.error as exc:
                ctx.error(_node_at(root, "quantization", key), f"quantization.{key}[{i}]",
                          f"{pattern!r} is not a regular expression ({exc})")
    _check_engine(q, root, ctx)
    for name in config.targets:
        target = load_target(name)
        policy = target.quantization
        if q.mode.value not in policy.modes:
            ctx.error(_node_at(root, "quantization", "mode"), "quantization.mode",
                      f"{q.mode.value} is not allowed by target {target.name!r}: {quantization_line(target)}")
        if q.keep_float and not policy.float_fallback:
            ctx.error(_node_at(root, "quantization", "keep_float"), "quantization.keep_float",
                      f"target {target.name!r} runs no float ops left in a quantized model: "
                      f"{quantization_line(target)}")
        if q.int16_ops and "int16x8" not in policy.modes:
            ctx.error(_node_at(root, "quantization", "int16_ops"), "quantization.int16_ops",
                      f"target {target.name!r} runs no int16x8 op: {quantization_line(target)}")


ENGINE_HINT = "pip install 'edgeconv[tf]'"


def _check_engine(q: QuantizationConfig, root: yaml.Node, ctx: Ctx) -> None:
    """What engine ai-edge-quantizer gives and needs; int16_ops and range_percentile need it."""
    import importlib.util

    aeq = QuantEngine.AI_EDGE_QUANTIZER
    for key, used in (("int16_ops", bool(q.int16_ops)), ("range_percentile", q.range_percentile is not None)):
        if used and q.engine is not aeq:
            ctx.error(_node_at(root, "quantization", key), f"quantization.{key}",
                      f"needs engine: {aeq.value} (the TFLite converter's quantizer cannot do it)")
    if q.int16_ops and q.mode is not QuantMode.INT8:
        ctx.error(_node_at(root, "quantization", "int16_ops"), "quantization.int16_ops",
                  f"applies to mode int8 only (mode is {q.mode.value}; int16x8 gives every op int16 activations)")
    if q.engine is not aeq:
        return
    at = _node_at(root, "quantization", "engine")
    if not q.mode.calibrated:
        ctx.error(at, "quantization.engine", f"{aeq.value} applies to modes int8 and int16x8 only (mode is "
                  f"{q.mode.value})")
        return
    if q.keep_float:
        ctx.error(_node_at(root, "quantization", "keep_float"), "quantization.keep_float",
                  f"is done by the converter's selective quantization, not with engine {aeq.value}; "
                  "use one or the other")
    native = IOType.INT8 if q.mode is QuantMode.INT8 else IOType.INT16
    for which in ("input", "output"):
        value = getattr(q, f"{which}_type")
        if value not in (IOType.AUTO, native):
            ctx.error(_node_at(root, "quantization", f"{which}_type"), f"quantization.{which}_type",
                      f"engine {aeq.value} gives {native.value} {which}s in mode {q.mode.value}; set "
                      f"{which}_type: {native.value} or auto")
    if importlib.util.find_spec("ai_edge_quantizer") is None:
        ctx.error(at, "quantization.engine", f"{aeq.value} is not installed: {ENGINE_HINT}")


_C_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def valid_identifier(name: str) -> bool:
    """A C identifier (the firmware outputs' array name): letters, digits and _, not starting with a digit."""
    return _C_IDENTIFIER.fullmatch(name) is not None


def _check_verification(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    """What parity, the keep-float search and the firmware outputs need."""
    from .targets.describe import quantization_line

    g, v, o = config.gates, config.verify, config.output
    parity_gates = [k for k in ("max_accuracy_drop", "min_top1_agreement", "min_sqnr_db", "min_cosine")
                    if getattr(g, k) is not None]
    if config.evaluation is None:
        for key in parity_gates:
            ctx.error(_node_at(root, "gates", key), f"gates.{key}", "needs an evaluation section (the data parity "
                      "is measured on)")
        if o.golden is not None:
            ctx.error(_node_at(root, "output", "golden"), "output.golden", "needs an evaluation section (golden "
                      "vectors are real evaluation samples)")
    elif parity_gates and not v.parity:
        ctx.error(_node_at(root, "verify", "parity"), "verify.parity", f"is false, but gates.{parity_gates[0]} "
                  "needs the parity measurement")
    if g.max_accuracy_drop is not None and config.evaluation is not None and config.evaluation.labels is None:
        ctx.error(_node_at(root, "gates", "max_accuracy_drop"), "gates.max_accuracy_drop",
                  "needs labels: set evaluation.labels to the array, feature or column that holds them")
    if v.suggest_keep_float:
        at = _node_at(root, "verify", "suggest_keep_float")
        if not parity_gates or config.evaluation is None:
            ctx.error(at, "verify.suggest_keep_float", "needs an evaluation section and a parity gate to meet "
                      "(gates.max_accuracy_drop, min_top1_agreement, min_sqnr_db or min_cosine)")
        for name in config.targets:
            target = load_target(name)
            if not target.quantization.float_fallback:
                ctx.error(at, "verify.suggest_keep_float", f"target {target.name!r} runs no float ops left in a "
                          f"quantized model: {quantization_line(target)}")
    if config.repair.enabled and (config.evaluation is None or not v.parity):
        ctx.error(_node_at(root, "repair", "enabled"), "repair.enabled",
                  "needs an evaluation section and verify.parity (the gates it meets are measured there)")
    if config.repair.enabled and not config.quantization.mode.calibrated:
        ctx.error(_node_at(root, "repair", "enabled"), "repair.enabled",
                  f"applies to modes int8 and int16x8 only (mode is {config.quantization.mode.value})")
    if o.c_array is not None and o.c_array.name is not None and not valid_identifier(o.c_array.name):
        ctx.error(_node_at(root, "output", "c_array", "name"), "output.c_array.name",
                  f"{o.c_array.name!r} is not a C identifier (letters, digits and _, not starting with a digit)")


def _check_requires(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    if not config.requires:
        return
    from packaging.specifiers import InvalidSpecifier, SpecifierSet
    from packaging.version import InvalidVersion, Version

    for key, spec in config.requires.items():
        at = _node_at(root, "requires", key)
        if key not in TOOLCHAIN:
            ctx.error(at, f"requires.{key}", f"unknown toolchain part {key!r} (allowed: {allowed_list(TOOLCHAIN)})"
                      f"{did_you_mean(key, TOOLCHAIN)}")
            continue
        try:
            wanted = SpecifierSet(spec)
        except InvalidSpecifier:
            ctx.error(at, f"requires.{key}", f"{spec!r} is not a version specifier (e.g. '>=2.20,<2.22')")
            continue
        have = toolchain_version(key)
        if have is None:
            ctx.error(at, f"requires.{key}", f"{key} is not installed (the pipeline requires {spec})")
            continue
        try:
            ok = wanted.contains(Version(have), prereleases=True)
        except InvalidVersion:
            ok = False
        if not ok:
            ctx.error(at, f"requires.{key}", f"the installed {key} {have} is outside {spec!r}: a different toolchain "
                      "changes the bytes and sometimes the accuracy; install a matching version or change requires")


def onnx_available() -> bool:
    return all(importlib.util.find_spec(m) is not None for m in ("onnx", "onnxruntime", "tf2onnx"))


def _check_onnx(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    o = config.output.onnx
    if o is None:
        return
    at = _node_at(root, "output", "onnx")
    if _is_tflite(config.model):
        ctx.error(at, "output.onnx", "needs a TensorFlow model: an existing .tflite is only checked (ONNX is "
                  "exported from the cleaned TensorFlow graph)")
        return
    if not ONNX_OPSETS[0] <= o.opset <= ONNX_OPSETS[1]:
        ctx.error(_node_at(root, "output", "onnx", "opset"), "output.onnx.opset",
                  f"opset {o.opset} is not supported (allowed: {ONNX_OPSETS[0]} to {ONNX_OPSETS[1]}: tf2onnx writes "
                  f"up to {ONNX_OPSETS[1]}, per-channel QuantizeLinear needs {ONNX_OPSETS[0]})")
    mode = config.quantization.mode.value
    if o.quantized and mode != "int8":
        ctx.error(_node_at(root, "output", "onnx", "quantized"), "output.onnx.quantized",
                  f"the INT8 ONNX model is converted from the int8 .tflite, but quantization.mode is {mode!r} "
                  "(remove quantized, or set it to false)")
    if not onnx_available():
        ctx.error(at, "output.onnx", f"needs onnx, onnxruntime and tf2onnx, which are not installed: {ONNX_HINT}")


def _check_gates(config: PipelineConfig, root: yaml.Node, ctx: Ctx) -> None:
    target_names = [load_target(t).name for t in config.targets]
    for i, name in enumerate(config.gates.disable):
        if name not in DEFAULT_GATES:
            ctx.error(_node_at(root, "gates", "disable"), f"gates.disable[{i}]", f"unknown default gate {name!r} "
                      f"(allowed: {allowed_list(DEFAULT_GATES)}){did_you_mean(name, DEFAULT_GATES)}")
    for i, name in enumerate(config.gates.no_new_fallback):
        if name not in target_names:
            ctx.error(_node_at(root, "gates", "no_new_fallback"), f"gates.no_new_fallback[{i}]",
                      f"{name!r} is not one of the pipeline's targets ({allowed_list(target_names)})"
                      f"{did_you_mean(name, target_names)}")
    for key in ("max_cpu_fallback_ops", "min_supported_mac_share"):
        for name, value in getattr(config.gates, key).items():
            at = _node_at(root, "gates", key, name)
            if name not in target_names:
                ctx.error(at, f"gates.{key}.{name}", f"{name!r} is not one of the pipeline's targets "
                          f"({allowed_list(target_names)}){did_you_mean(name, target_names)}")
            elif value < 0 or (key == "min_supported_mac_share" and value > 1):
                ctx.error(at, f"gates.{key}.{name}", f"out of range: {value}")


def resolved_yaml(config: PipelineConfig, base_dir: Path,
                  graph_io: tuple[list[str], list[str]] | None = None) -> str:
    """The pipeline with every default filled in; paths relative to ``base_dir``.

    Written next to the built model, so that it can be rebuilt from there.
    ``graph_io`` are the inputs and outputs a GraphDef loader chose.
    """
    header = f"# Resolved by edgeconv from {config.source.name}: every setting, defaults included.\n"
    return header + _yaml.dump(resolved_data(config, base_dir, graph_io))


def resolved_data(config: PipelineConfig, base_dir: Path,
                  graph_io: tuple[list[str], list[str]] | None = None) -> dict[str, Any]:
    """What :func:`resolved_yaml` writes, as data (the build cache's key takes it as JSON: 1 ms, not 15)."""
    data: dict[str, Any] = dump_value(config, base_dir)
    data["name"] = config.build_name
    for section in ("calibration", "evaluation"):
        cfg = getattr(config, section)
        if cfg is None:
            data.pop(section, None)
            continue
        source = resolve_source(cfg)
        data[section]["source"] = source
        for key in SOURCE_KEYS:  # keys of other sources would only be noise
            if source not in SOURCE_KEYS[key]:
                data[section].pop(key, None)
    fmt = config.model.resolved_format()
    data["model"]["format"] = fmt.value
    # Settings that do not apply to this format are left out, not shown with defaults that do nothing.
    for key, formats in MODEL_KEY_FORMATS.items():
        if fmt not in formats:
            data["model"].pop(key, None)
    if fmt is ModelFormat.GRAPHDEF and graph_io is not None:
        data["model"]["inputs"], data["model"]["outputs"] = (list(names) for names in graph_io)
    if fmt is ModelFormat.TFLITE:
        for key in ("calibration", "evaluation", "passes", "quantization", "verify"):
            data.pop(key, None)
        for key in ("batch_size", "input_shapes"):
            data["model"].pop(key, None)
    data["output"]["dir"] = "."
    return data


def pipeline_json_schema() -> dict[str, Any]:
    schema = json_schema_of(PipelineConfig)
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_BASE_URL + "pipeline.schema.json",
        "title": "edgeconv pipeline",
        **schema,
    }


def pipeline_json_schema_text() -> str:
    return json.dumps(pipeline_json_schema(), indent=2, sort_keys=False) + "\n"
