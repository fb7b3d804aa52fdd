"""The parity arithmetic, the gates' messages, the culprit ranking and keep-float search, the firmware
files and the arena planner, without TensorFlow (the integration tests prove them on real builds)."""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv import verdict
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.verify import culprits, firmware, memory, parity

from ..conftest import REPO

DATA = REPO / "tests" / "data"


def _fixed(outputs: dict[str, np.ndarray]) -> parity.Run:
    """A model that answers every batch with the next slice of fixed outputs."""
    seen = {"n": 0}

    def run(feeds: Any) -> dict[str, np.ndarray]:
        size = next(iter(feeds.values())).shape[0]
        start = seen["n"]
        seen["n"] += size
        return {k: v[start:start + size] for k, v in outputs.items()}
    return run


def test_measure_by_hand() -> None:
    want = np.array([[1.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 3.0], [1.0, 1.0, 0.0]], np.float32)
    got = np.array([[1.0, 0.5, 0.0], [0.0, 2.0, 0.0], [3.0, 0.0, 2.0], [1.0, 1.0, 0.0]], np.float32)
    labels = np.array([0, 1, 2, 1])
    batches = [{"x": np.zeros((2, 5))}, {"x": np.zeros((2, 5))}]
    result = parity.measure(_fixed({"p": want}), {"built": _fixed({"p": got})}, batches, {"p": (1, 3)}, labels)
    m = result["outputs"]["p"]["built"]
    assert result["samples"] == 4
    assert m["max_abs_error"] == 3.0
    assert m["mean_abs_error"] == pytest.approx((0.5 + 3 + 1) / 12)
    signal, noise = 1 + 4 + 9 + 2, 0.25 + 9 + 1
    assert m["sqnr_db"] == pytest.approx(10 * math.log10(signal / noise))
    cos = [1 / math.sqrt(1.25), 1.0, 6 / (3 * math.sqrt(13)), 1.0]
    assert m["cosine"] == pytest.approx(sum(cos) / 4)
    assert m["top1_agreement"] == 0.75  # the third sample's argmax moves from 2 to 0
    # argmax of [1, 1, 0] is 0 in both: label 1 is missed by the source too
    assert result["accuracy"] == {"output": "p", "source": 0.75, "built": 0.5, "drop": {"built": 0.25}}


def test_identical_outputs_have_no_sqnr_and_full_agreement() -> None:
    want = np.eye(4, dtype=np.float32)[[0, 3, 1]]
    result = parity.measure(_fixed({"p": want}), {"built": _fixed({"p": want.copy()})},
                            [{"x": np.zeros((3, 1))}], {"p": (1, 4)}, None)
    m = result["outputs"]["p"]["built"]
    assert (m["max_abs_error"], m["sqnr_db"], m["cosine"], m["top1_agreement"]) == (0.0, None, 1.0, 1.0)
    assert result["accuracy"] is None


@pytest.mark.parametrize(("shape", "classifier"), [((1, 10), True), ((None, 2), True), ((1, 1), False),
                                                    ((1, 4, 4, 3), False), ((7,), False)])
def test_what_counts_as_a_classifier(shape: tuple[int, ...], classifier: bool) -> None:
    assert parity.is_classifier(shape) is classifier  # type: ignore[arg-type]


PARITY = {"outputs": {"probs": {"built": {"sqnr_db": 18.25, "cosine": 0.98765, "top1_agreement": 0.975},
                                "tflite_float": {"max_abs_error": 2e-5}}},
          "accuracy": {"output": "probs", "source": 0.9889, "built": 0.9750, "drop": {"built": 0.0139}}}


NONE = verdict.Limits(max_accuracy_drop=None, min_top1_agreement=None, min_sqnr_db=None)


@pytest.mark.parametrize(("limits", "reasons"), [
    (NONE, []),
    (verdict.Limits(max_accuracy_drop=0.02, min_top1_agreement=0.97, min_sqnr_db=18, min_cosine=0.98), []),
    (verdict.Limits(), ["output 'probs': SQNR 18.2 dB < gates.min_sqnr_db 20 (on the evaluation samples)"]),
    (dataclasses.replace(NONE, min_sqnr_db=18.25), []),  # the limit itself passes
    (dataclasses.replace(NONE, min_sqnr_db=18.26), [
        "output 'probs': SQNR 18.2 dB < gates.min_sqnr_db 18.26 (on the evaluation samples)"]),
    (dataclasses.replace(NONE, min_cosine=0.99), ["output 'probs': cosine similarity 0.9877 < gates.min_cosine 0.99"]),
    (dataclasses.replace(NONE, min_top1_agreement=0.99),
     ["output 'probs': top-1 agreement 97.50% < gates.min_top1_agreement 99.00% (on the evaluation samples)"]),
    (dataclasses.replace(NONE, max_accuracy_drop=0.01),
     ["accuracy drop 1.39 points (98.89% -> 97.50%) > gates.max_accuracy_drop 1.00 points"]),
    (dataclasses.replace(NONE, max_accuracy_drop=0.0139), []),
])
def test_agreement_checks_say_the_measured_value_and_the_threshold(limits: verdict.Limits,
                                                                   reasons: list[str]) -> None:
    checks = verdict.agreement_checks(PARITY, limits)
    assert verdict.failed_sentences(checks) == reasons
    assert all(c.limit is not None for c in checks)


def test_default_limits_are_the_strict_defaults() -> None:
    limits = verdict.Limits()
    assert (limits.max_accuracy_drop, limits.min_top1_agreement, limits.min_sqnr_db,
            limits.min_accelerator_mac_share) == (0.03, 0.90, 20.0, 0.5)


@pytest.mark.parametrize(("tolerance", "ops", "reasons"), [
    (1e-5, 1, ["output 'probs': the float .tflite differs from the source model by 2e-05 (> verify.float_tolerance "
               "1e-05): a conversion bug, not quantization"]),
    (2e-5, 1, []),  # the limit itself
    (1e-4, 1, []),
    # 151 ops at output scale 1: float32 rounding alone can reach 4 x 2^-23 x 151 = 7.2e-05.
    (1e-5, 151, []),
    (1e-5, 42, []),  # 4 x 2^-23 x 42 = 2.003e-05: just inside
    (1e-5, 41, ["output 'probs': the float .tflite differs from the source model by 2e-05 (> the float32 rounding "
                "bound 1.96e-05 of 41 ops at output scale 0): a conversion bug, not quantization"]),  # just outside
])
def test_float_conversion_must_match_the_source_up_to_rounding(tolerance: float, ops: int, reasons: list[str]) -> None:
    assert verdict.failed_sentences(parity.float_conversion_checks(PARITY, tolerance, ops)) == reasons


LAYERS = [
    {"op": "FULLY_CONNECTED", "tensor": "model/dense/MatMul", "erased": 0.02, "sqnr_db": 30.0, "rmse_per_scale": 0.3,
     "scale": 0.1},
    {"op": "CONV_2D", "tensor": "model/wide/Relu", "erased": 0.9, "sqnr_db": 40.0, "rmse_per_scale": 0.29,
     "scale": 2.0},
    {"op": "SOFTMAX", "tensor": "StatefulPartitionedCall:0", "erased": 0.95, "sqnr_db": 25.0,
     "rmse_per_scale": 0.3, "scale": 1 / 256},
    {"op": "ADD", "tensor": "model/mix/add", "erased": 0.02, "sqnr_db": 12.0, "rmse_per_scale": 0.4, "scale": 0.05},
    {"op": "MEAN", "tensor": "model/pool/Mean", "erased": 0.0, "sqnr_db": None, "rmse_per_scale": 0.0,
     "scale": 0.01},
]


def test_rank_puts_erased_intermediates_first_then_lowest_sqnr() -> None:
    ranked = culprits.rank(LAYERS, ["dense", "wide", "mix", "pool"], outputs=["StatefulPartitionedCall:0"])
    assert [(r["rank"], r["tensor"]) for r in ranked] == [
        (1, "model/wide/Relu"), (2, "model/mix/add"), (3, "model/dense/MatMul"), (4, "StatefulPartitionedCall:0"),
        (5, "model/pool/Mean")]
    assert [r["source_layers"] for r in ranked[:3]] == [["wide"], ["mix"], ["dense"]]
    assert [r["model_output"] for r in ranked] == [False, False, False, True, False]


def _trial(needed: set[str], log: list[list[str]]) -> Any:
    def trial(patterns: list[str]) -> tuple[list[str], dict[str, Any]]:
        log.append(patterns)
        kept = {re.sub(r"\\|\^|\$", "", p) for p in patterns}
        return ([] if needed <= kept else ["accuracy drop too large"]), {"size_bytes": 100 * len(patterns)}
    return trial


def test_suggest_grows_until_the_gates_pass_then_drops_what_is_not_needed() -> None:
    ranked = culprits.rank(LAYERS, ["dense", "wide", "mix", "pool"], outputs=["StatefulPartitionedCall:0"])
    log: list[list[str]] = []
    found = culprits.suggest(ranked, 5, _trial({"model/wide/Relu", "model/dense/MatMul"}, log))
    assert found["found"] is True
    assert found["keep_float"] == [r"^model/wide/Relu$", r"^model/dense/MatMul$"]
    assert found["layers"] == ["dense", "wide"]
    assert [s["step"] for s in found["steps"]] == [
        "keep the 1 worst op(s) in float", "keep the 2 worst op(s) in float", "keep the 3 worst op(s) in float",
        "without CONV_2D wide", "without ADD mix"]
    assert [s["passes_gates"] for s in found["steps"]] == [False, False, True, False, True]
    assert found["steps"][2]["size_bytes"] == 300 and len(log) == 5


def test_suggest_gives_up_after_the_step_limit() -> None:
    ranked = culprits.rank(LAYERS, ["dense", "wide", "mix", "pool"])
    found = culprits.suggest(ranked, 2, _trial({"model/pool/Mean"}, []))
    assert (found["found"], found["keep_float"], len(found["steps"])) == (False, None, 2)
    assert found["steps"][-1]["failed"] == ["accuracy drop too large"]


# Method names as tflite-micro's micro_mutable_op_resolver.h spells them.
@pytest.mark.parametrize(("op", "method"), [
    ("CONV_2D", "AddConv2D"), ("DEPTHWISE_CONV_2D", "AddDepthwiseConv2D"), ("FULLY_CONNECTED", "AddFullyConnected"),
    ("MAX_POOL_2D", "AddMaxPool2D"), ("AVERAGE_POOL_2D", "AddAveragePool2D"), ("L2_POOL_2D", "AddL2Pool2D"),
    ("L2_NORMALIZATION", "AddL2Normalization"), ("BATCH_TO_SPACE_ND", "AddBatchToSpaceNd"),
    ("SPACE_TO_BATCH_ND", "AddSpaceToBatchNd"), ("GATHER_ND", "AddGatherNd"), ("ADD_N", "AddAddN"),
    ("RELU6", "AddRelu6"), ("REVERSE_V2", "AddReverseV2"), ("SELECT_V2", "AddSelectV2"), ("SPLIT_V", "AddSplitV"),
    ("PADV2", "AddPadV2"), ("BATCH_MATMUL", "AddBatchMatMul"), ("CUMSUM", "AddCumSum"),
    ("UNIDIRECTIONAL_SEQUENCE_LSTM", "AddUnidirectionalSequenceLSTM"), ("LOG_SOFTMAX", "AddLogSoftmax"),
    ("RESIZE_NEAREST_NEIGHBOR", "AddResizeNearestNeighbor"), ("SQUARED_DIFFERENCE", "AddSquaredDifference"),
    ("HARD_SWISH", "AddHardSwish"), ("TRANSPOSE_CONV", "AddTransposeConv"), ("QUANTIZE", "AddQuantize"),
])
def test_resolver_method_names(op: str, method: str) -> None:
    assert firmware.resolver_method(op) == method


def test_c_array_is_aligned_and_holds_every_byte() -> None:
    data = bytes(range(256)) + b"\x07"
    files = firmware.c_array(data, "kws_model", source="m.tflite", sha256="ab" * 32, cplusplus=False)
    assert set(files) == {"kws_model.c", "kws_model.h"}
    body = files["kws_model.c"]
    assert "_Alignas(16) const unsigned char kws_model[] = {" in body
    assert "const unsigned int kws_model_len = 257;" in body
    assert bytes(int(b, 16) for b in re.findall(r"0x([0-9a-f]{2})", body)) == data
    assert "extern const unsigned char kws_model[];" in files["kws_model.h"]
    cc = firmware.c_array(data, "kws_model", source="m.tflite", sha256="ab" * 32, cplusplus=True)
    assert 'extern "C" alignas(16) const unsigned char kws_model[] = {' in cc["kws_model.cc"]


def test_a_custom_op_code_stays_inside_the_comments_of_the_op_resolver(tmp_path: Path) -> None:
    """A .tflite is a pull request's to write, and its custom op codes are quoted in the header's comments: a
    code holding "*/" ended the comment, and what followed compiled into the firmware."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf((DATA / "erf-flex.float32.tflite").read_bytes(), 0)
    (code,) = [c for c in model.operatorCodes if c.customCode]
    code.customCode = b"X*/ int pwned = 1; /*"
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    (tmp_path / "m.tflite").write_bytes(builder.Output())
    header = firmware.op_resolver(read_tflite(tmp_path / "m.tflite"), "m_model", source="m*/x.tflite")
    text = header["m_model_op_resolver.h"]
    code_only = re.sub(r"/\*.*?\*/", "", text, flags=re.DOTALL)  # what a C compiler reads
    assert "pwned" not in code_only and "/*" not in code_only and "*/" not in code_only
    assert "/* CUSTOM:X* / int pwned = 1; /*: a custom op; register your implementation" in text
    assert "from m* /x.tflite. Do not edit." in text


def test_golden_c_names_stay_distinct_when_tensor_names_differ_only_in_other_characters(tmp_path: Path) -> None:
    """Inputs named ``a-b`` and ``a_b`` were both ``..._input_a_b`` in the golden header, which then defined one
    array twice and did not compile; the second is ``..._a_b_2``. Compiled with the machine's C compiler when
    it has one."""
    import shutil
    import subprocess

    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf((DATA / "ops" / "add.int8.tflite").read_bytes(), 0)
    graph = model.subgraphs[0]
    graph.tensors[graph.inputs[0]].name, graph.tensors[graph.inputs[1]].name = b"a-b", b"a_b"
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    data = builder.Output()
    feeds = {"a-b": np.zeros((1, 6, 5, 4), np.float32), "a_b": np.ones((1, 6, 5, 4), np.float32)}
    files, _ = firmware.golden(bytes(data), [feeds, feeds], "m_model", intermediates=False, source="m.tflite")
    header = files["m_model_golden.h"].decode()
    names = re.findall(r"static const \w+ (\w+)\[", header)
    assert names == [f"m_model_golden_{k}_{kind}" for k in (0, 1)
                     for kind in ("input_a_b", "input_a_b_2", "output_Identity")]
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is not None:
        (tmp_path / "g.c").write_text(header)
        done = subprocess.run([compiler, "-fsyntax-only", "-Wall", "-Werror", "-Wno-unused-const-variable",
                               str(tmp_path / "g.c")], capture_output=True, text=True)
        assert done.returncode == 0, done.stderr


def test_op_resolver_registers_each_op_type_once() -> None:
    model = read_tflite(DATA / "add-uint8io.int8.tflite")
    header = firmware.op_resolver(model, "g_model", source="add.tflite")["g_model_op_resolver.h"]
    assert "constexpr unsigned int kGModelOpCount = 2;" in header
    assert re.findall(r"resolver\.(\w+)\(\)", header) == ["AddAdd", "AddQuantize"]
    assert "The model uses 2 op type(s): ADD x1, QUANTIZE x2." in header


@pytest.mark.parametrize(("name", "activations"), [
    ("conv2d-relu.int8", 192 + 320),  # input 1x9x7x3 and output 1x9x7x5 live together, each 16-byte aligned
    ("softmax-dense.int8", 16 + 16),  # the input's buffer is free again when the softmax writes its output
    ("add-uint8io.int8", 32 + 32),  # a chain of 24-byte tensors: two alive at any op
])
def test_activation_plan(name: str, activations: int) -> None:
    model = read_tflite(DATA / f"{name}.tflite")
    assert memory.plan_activations(model) == activations
    est = memory.estimate(model)
    assert est["flash_bytes"] == (DATA / f"{name}.tflite").stat().st_size
    assert est["arena_bytes"] == int((activations + est["bookkeeping_bytes"]) * 1.25)


@pytest.mark.parametrize(("value", "ctype", "text"), [
    (np.float32(0.5), "float", "0.5f"), (np.float32(np.nan), "float", "NAN"), (np.float32(np.inf), "float", "INFINITY"),
    (np.float32(-np.inf), "float", "-INFINITY"), (np.int8(-128), "int8_t", "-128"), (np.int16(300), "int16_t", "300"),
])
def test_c_values_keep_what_the_model_gave(value: Any, ctype: str, text: str) -> None:
    assert firmware._c_value(value, ctype) == text


def _measure(reference: np.ndarray, built: np.ndarray, kinds: dict[str, str] | None = None,
             labels: np.ndarray | None = None) -> dict[str, Any]:
    return parity.measure(lambda feeds: {"y": reference}, {"built": lambda feeds: {"y": built}},
                          [{"x": np.zeros((len(reference), 1))}], {"y": reference.shape}, labels, kinds)


BOXES = np.array([[0.1, 0.2, 0.5, 0.9], [0.3, 0.1, 0.8, 0.4], [0.0, 0.0, 0.2, 0.7]])
PROBS = np.array([[0.1, 0.7, 0.2], [0.6, 0.3, 0.1], [0.2, 0.2, 0.6]])


@pytest.mark.parametrize(("reference", "kinds", "labels", "kind"), [
    (BOXES, None, None, "regression"),  # box coordinates: top-1 agreement would mean nothing
    (PROBS, None, None, "classification"),  # class probabilities
    (BOXES * 3 - 1, None, np.array([0, 1, 2]), "classification"),  # logits the labels score
    (BOXES, {"y": "classification"}, None, "classification"),  # declared in verify.outputs
    (PROBS, {"y": "regression"}, None, "regression"),
])
def test_metrics_follow_the_output_kind(reference: np.ndarray, kinds: dict[str, str] | None,
                                        labels: np.ndarray | None, kind: str) -> None:
    result = _measure(reference, reference[:, ::-1].copy(), kinds, labels)
    assert result["kinds"] == {"y": kind}
    top1 = result["outputs"]["y"]["built"]["top1_agreement"]
    assert (top1 is None) is (kind == "regression")
    assert result["outputs"]["y"]["built"]["cosine"] is not None


def test_a_scope_covering_the_whole_graph_does_not_name_every_op() -> None:
    """A TF1 graph under one model scope: every op would be 'Openpose'; name the deeper scope instead."""
    rows = [{"op": op, "tensor": t, "erased": e, "sqnr_db": 10.0, "rmse_per_scale": 0.3, "scale": 0.1}
            for op, t, e in [("CONV_2D", "Openpose/MobilenetV1/Conv2d_3/Relu6", 0.2),
                             ("CONV_2D", "Openpose/paf/stage1/Conv2D;Openpose/paf/stage1/BiasAdd", 0.1),
                             ("ADD", "Openpose/heat/add", 0.0)]]
    ranked = culprits.rank(rows, ["Openpose"])
    assert [r["source_layers"] for r in ranked] == [["MobilenetV1/Conv2d_3"], ["paf/stage1"], ["heat"]]
    distinct = culprits.rank(rows, ["MobilenetV1", "paf", "heat"])  # layers that tell them apart: kept
    assert [r["source_layers"] for r in distinct] == [["MobilenetV1"], ["paf"], ["heat"]]


def test_an_output_the_converter_keeps_float_is_a_model_error_naming_the_op() -> None:
    """A TF 2.4-era audio model: the converter left one output float32 although int8 was asked for."""
    from edgeconv.converters.io_check import check_io_types
    from edgeconv.errors import ModelError

    from ..synthetic import Builder

    b = Builder()
    x, spec = b.tensor("int8", (1, 16), name="audio"), b.tensor("float32", (1, 8), name="logmel")
    _, model = b.op("CUSTOM", [x], [spec], custom_code="AudioSpectrogram")
    sg = dataclasses.replace(model.main, inputs=(x.index,), outputs=(spec.index,))
    model = dataclasses.replace(model, subgraphs=(sg,))
    with pytest.raises(ModelError) as info:
        check_io_types(model, "int8", "int8")
    assert str(info.value) == (
        "the converter kept model output 'logmel' float32, not the configured int8 (written by op #0 "
        "CUSTOM:AudioSpectrogram 'logmel'): the model has an op the converter does not quantize there. Fix: set "
        "quantization.output_type: float32, or replace CUSTOM:AudioSpectrogram with an op the converter quantizes")
    check_io_types(model, "int8", "float32")  # what the fix says: no error


def _one_op_model(input_dtype: str, output_dtype: str) -> Any:
    from ..synthetic import Builder

    b = Builder()
    x, y = b.tensor(input_dtype, (1, 16), name="ids"), b.tensor(output_dtype, (1,), name="cls")
    _, model = b.op("ARG_MAX", [x], [y])
    sg = dataclasses.replace(model.main, inputs=(x.index,), outputs=(y.index,))
    return dataclasses.replace(model, subgraphs=(sg,))


def test_integer_tensors_of_the_source_model_keep_their_dtype() -> None:
    """Ids in and an argmax's class out: no quantization reaches them, so the configured int8 does not apply
    to the tensors the source model declares integer (the loader's inputs and outputs, by name)."""
    from edgeconv.converters.io_check import check_io_types
    from edgeconv.errors import ModelError

    model = _one_op_model("int32", "int32")
    check_io_types(model, "int8", "int8", integers={"input": {"ids": "int32"}, "output": {"cls": "int32"}})
    with pytest.raises(ModelError) as info:  # an int64 source input the converter made int32: not the same dtype
        check_io_types(model, "int8", "int8", integers={"input": {"ids": "int64"}, "output": {"cls": "int32"}})
    assert str(info.value).startswith("the converter kept model input 'ids' int32, not the configured int8")
    with pytest.raises(ModelError) as info:  # the names are the source model's: "cls" as an input is not it
        check_io_types(model, "int8", "int8", integers={"input": {"cls": "int32"}, "output": {"ids": "int32"}})
    assert "model input 'ids'" in str(info.value) and "model output 'cls'" in str(info.value)


def test_a_fix_names_only_a_setting_the_pipeline_allows() -> None:
    """An int32 output (ARG_MAX) the source model does not declare integer: no quantization.output_type gives
    int32, so the fix is the op, not a value the pipeline would refuse."""
    from edgeconv.converters.io_check import check_io_types
    from edgeconv.errors import ModelError

    with pytest.raises(ModelError) as info:
        check_io_types(_one_op_model("int8", "int32"), "int8", "int8")
    assert str(info.value) == (
        "the converter kept model output 'cls' int32, not the configured int8 (written by op #0 ARG_MAX 'cls'): "
        "the model has an op the converter does not quantize there. Fix: replace ARG_MAX with an op the converter "
        "quantizes")
    with pytest.raises(ModelError) as info:
        check_io_types(_one_op_model("int32", "int8"), "int8", "int8")
    assert str(info.value) == (
        "the converter kept model input 'ids' int32, not the configured int8: the model has an op the converter "
        "does not quantize there. Fix: give the model's input 'ids' a float or int8 dtype")


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


# A segmentation model's per-pixel class probabilities: 4 samples of 3 x 2 pixels, 5 classes.
PIXELS = _softmax(np.random.default_rng(9).normal(size=(4, 3, 2, 5)) * 3)


def test_a_segmentation_map_s_classes_are_compared_pixel_by_pixel() -> None:
    """Class probabilities along the last axis of a map: a classification, its top-1 agreement the share of
    pixels whose top class is the source model's (an argmax over the whole flattened map meant nothing)."""
    flipped = PIXELS.copy()
    changed = [(0, 0, 1), (2, 1, 0), (3, 2, 1)]
    for n, h, w in changed:  # the top class swapped with the lowest: those pixels disagree
        top, low = PIXELS[n, h, w].argmax(), PIXELS[n, h, w].argmin()
        flipped[n, h, w, [top, low]] = PIXELS[n, h, w, [low, top]]
    result = _measure(PIXELS, flipped)
    assert result["kinds"] == {"y": "classification"}
    assert result["outputs"]["y"]["built"]["top1_agreement"] == (24 - len(changed)) / 24
    logits = np.log(PIXELS) + 2.0  # the same map's logits: not probabilities, a regression
    assert _measure(logits, np.log(flipped) + 2.0)["kinds"] == {"y": "regression"}


# An argmax's class per sample (int32), and a segmentation map's (int64): the built model changes 1 of 8
# classes and 3 of 24 pixels.
CLASSES = np.array([[3], [0], [4], [4], [1], [2], [0], [3]], np.int32)
MAP = np.array([[[0, 1, 1], [2, 2, 0]], [[1, 1, 1], [0, 0, 2]], [[2, 0, 1], [1, 2, 2]], [[0, 0, 0], [1, 1, 1]]])


CHANGED = np.where(np.arange(8)[:, None] == 5, 0, CLASSES).astype(np.int32)


@pytest.mark.parametrize(("reference", "built", "kinds", "agreement", "kind"), [
    (CLASSES, CHANGED, None, 7 / 8, "index"),
    (MAP, np.where(np.isin(np.arange(24).reshape(4, 2, 3), [1, 9, 20]), 2, MAP), None, 21 / 24, "index"),
    (CLASSES.astype(np.float32), CHANGED.astype(np.float32), None, None, "regression"),  # integral floats
    (CLASSES, CHANGED, {"y": "regression"}, None, "regression"),  # declared in verify.outputs
    (CLASSES.astype(np.float32), CHANGED.astype(np.float32), {"y": "index"}, 7 / 8, "index"),
])
def test_an_output_of_integers_is_compared_value_by_value(reference: np.ndarray, built: np.ndarray,
                                                          kinds: dict[str, str] | None, agreement: float | None,
                                                          kind: str) -> None:
    """An argmax's class or a segmentation map (the source model gives integers): the share of values equal
    to the source model's is its agreement, gated as a top-1 agreement; no SQNR (it would weigh a wrong class
    by how far its number is from the right one)."""
    result = _measure(reference, built, kinds)
    m = result["outputs"]["y"]["built"]
    assert (result["kinds"], m["top1_agreement"]) == ({"y": kind}, agreement)
    assert (m["sqnr_db"] is None) is (kind == "index")
    if kind == "index" and agreement is not None and agreement < 0.9:
        result["data"] = "evaluation"
        (check,) = [c for c in verdict.agreement_checks(result, verdict.Limits()) if c.id == "agreement.top1.y"]
        assert (check.outcome, check.sentence) == (verdict.Outcome.FAIL, (
            f"output 'y': agreement of its values {agreement:.2%} < gates.min_top1_agreement 90.00% (on the "
            "evaluation samples)"))


@pytest.mark.parametrize(("reference", "built", "labels", "kinds", "accuracy", "kind"), [
    # An argmax's class scored by the labels: 6 of 8 right in float, 5 built (sample 5 changed to class 0).
    (CLASSES, CHANGED, np.array([3, 0, 4, 1, 1, 2, 2, 3]), None, (6 / 8, 5 / 8), "index"),
    # Two classes, 0/1 labels: a binary head's decision is its value; the kind says it is an index.
    (CLASSES % 2, np.array([[0], [0], [0], [0], [1], [0], [0], [1]], np.int32), np.array([1, 0, 0, 0, 1, 1, 0, 1]),
     None, (7 / 8, 6 / 8), "index"),
    # Integral values in a float output: not known to be classes, so the labels score nothing.
    (CLASSES.astype(np.float32), CHANGED.astype(np.float32), np.array([3, 0, 4, 1, 1, 2, 2, 3]), None, None,
     "regression"),
    # ... unless declared.
    (CLASSES.astype(np.float32), CHANGED.astype(np.float32), np.array([3, 0, 4, 1, 1, 2, 2, 3]), {"y": "index"},
     (6 / 8, 5 / 8), "index"),
])
def test_labels_score_an_output_that_gives_the_class_itself(reference: np.ndarray, built: np.ndarray,
                                                            labels: np.ndarray, kinds: dict[str, str] | None,
                                                            accuracy: tuple[float, float] | None, kind: str) -> None:
    """A model that outputs its class (an argmax inside): the labels compare with the value itself, so the
    accuracy gate works for it (the labels were left unused, a warning)."""
    result = _measure(reference, built, kinds, labels)
    assert result["kinds"] == {"y": kind}
    if accuracy is None:
        assert result["accuracy"] is None
    else:
        acc = result["accuracy"]
        assert (acc["output"], acc["source"], acc["built"]) == ("y", *accuracy)


# One sigmoid unit: 8 samples, 5 of them label 1. The reference calls 7 of 8 right (4 of them 1); the built model
# collapses to "0" for every sample (the decision at 0.5), as an INT8 input that erased its features does.
SIGMOID = np.array([[0.9], [0.8], [0.3], [0.7], [0.6], [0.2], [0.1], [0.4]])
TRUTH = np.array([1, 1, 0, 1, 1, 0, 0, 1])
COLLAPSED = np.full((8, 1), 0.3)


@pytest.mark.parametrize(("kinds", "labels", "kind", "accuracy"), [
    (None, TRUTH, "binary", (7 / 8, 3 / 8)),  # inferred: one probability per sample, 0/1 labels score it
    (None, None, "regression", None),  # no labels: one value per sample is not assumed to be a decision
    ({"y": "binary"}, None, "binary", None),  # declared: the decision agreement without labels
    (None, TRUTH * 2, "regression", None),  # labels 0/2 cannot score a sigmoid unit
    ({"y": "regression"}, TRUTH, "regression", None),
])
def test_one_sigmoid_unit_is_a_binary_head(kinds: dict[str, str] | None, labels: np.ndarray | None, kind: str,
                                           accuracy: tuple[float, float] | None) -> None:
    """The accuracy is the decision at 0.5 against the labels (argmax over one value said "class 0" for every
    sample: the share of label 0, whatever the model did), and the agreement is the share of decisions kept."""
    result = _measure(SIGMOID, COLLAPSED, kinds, labels)
    assert result["kinds"] == {"y": kind}
    top1 = result["outputs"]["y"]["built"]["top1_agreement"]
    assert top1 == (None if kind == "regression" else 4 / 8)  # the four samples the reference calls 0
    if accuracy is None:
        assert result["accuracy"] is None
    else:
        acc = result["accuracy"]
        assert (acc["output"], acc["source"], acc["built"]) == ("y", *accuracy)
        assert acc["drop"]["built"] == pytest.approx(accuracy[0] - accuracy[1])


def test_a_collapsed_binary_head_fails_the_accuracy_and_agreement_gates() -> None:
    result = _measure(SIGMOID, COLLAPSED, None, TRUTH)
    result["data"] = "evaluation"
    found = {c.id: c for c in verdict.agreement_checks(result, verdict.Limits())}
    assert found["agreement.top1.y"].outcome is verdict.Outcome.FAIL
    assert found["agreement.top1.y"].sentence == ("output 'y': decision agreement (at 0.5) 50.00% < "
                                                  "gates.min_top1_agreement 90.00% (on the evaluation samples)")
    assert found["accuracy.drop"].outcome is verdict.Outcome.FAIL


def test_multilabel_tags_are_decided_one_by_one() -> None:
    """Four independent tags per sample (declared): each tag's decision at 0.5, averaged; no accuracy from
    one-class labels."""
    reference = np.array([[0.9, 0.1, 0.6, 0.4], [0.2, 0.8, 0.7, 0.3]])
    built = np.array([[0.8, 0.2, 0.4, 0.4], [0.3, 0.6, 0.7, 0.6]])  # 2 of 8 decisions flip
    result = _measure(reference, built, {"y": "multilabel"}, np.array([0, 1]))
    assert result["kinds"] == {"y": "multilabel"}
    assert result["outputs"]["y"]["built"]["top1_agreement"] == 6 / 8
    assert result["accuracy"] is None


def test_labels_no_output_can_use_are_said() -> None:
    check = verdict.labels_unused("label", {"y": "regression"})
    assert (check.id, check.outcome) == ("accuracy.labels_unused", verdict.Outcome.WARN)
    assert check.sentence == ("the evaluation labels 'label' score no output (y regression): no accuracy is measured; "
                              "declare the output they score in verify.outputs (classification, or binary for one "
                              "sigmoid unit with 0/1 labels)")


WRAPPED_KEY_ERROR = ('in user code:\n\n    File "/x/keras_loader.py", line 183, in None  *\n        lambda *args: '
                     'call(args)\n    File "/x/keras_loader.py", line 176, in call  *\n        return {k: result[k] '
                     "for k in out_names}\n\n    KeyError: 'argmax'\n")
NO_SOURCE_FRAMES = ('in user code:\n\n    File "<frozen>", line 1, in call\n    File "<string>", line 2, in f\n\n'
                    '    TypeError: f() takes 1 positional argument\n')


@pytest.mark.parametrize(("text", "said"), [
    (WRAPPED_KEY_ERROR, "KeyError: 'argmax'"),
    (NO_SOURCE_FRAMES, "TypeError: f() takes 1 positional argument"),
    ("Exception encountered when calling Bad.call().\n\n\x1b[1mneeds 2\x1b[0m\n\nArguments received by Bad.call():\n"
     "  \u2022 x=tf.Tensor(shape=(1, 5), dtype=float32)", "ValueError in Bad.call(): needs 2"),
    ("shapes (1, 3) and (4,) are incompatible\nmore detail", "shapes (1, 3) and (4,) are incompatible"),
    ("bell\x07 and \x1b]0;title\x07 escape", "bell  and  ]0;title  escape"),
    ("", "ValueError"),
    ("in user code:\n", "in user code:"),
])
def test_a_trace_s_error_is_one_line_of_what_went_wrong(text: str, said: str) -> None:
    """TensorFlow's "in user code:" and the stack, Keras's "Exception encountered when calling", terminal
    escapes and control characters (a model's own text): the line says the error and its message."""
    from edgeconv.converters.keras_loader import _traced_error

    assert _traced_error(ValueError(text)) == said


@pytest.mark.parametrize(("found", "entry"), [
    (("function", "act", "actmod"), "{act: 'actmod:act'}"),
    (("class", "Scale", "pkg.layers"), "{Scale: 'pkg.layers:Scale'}"),
    (("function", "act", "builtins"), "{act: 'module:function'}"),  # a function defined in a script
    (("function", "act", "__main__"), "{act: 'module:function'}"),
    (("class", "Dense", "keras.layers"), "{Dense: 'module:Class'}"),  # not Keras's to be imported from
    (("class", "Scale", None), "{Scale: 'module:Class'}"),
    (("class", "Scale", "a b"), "{Scale: 'module:Class'}"),  # not a module name
    (("class", "Bad\x1bName", "pkg"), "{Name: 'module:Class'}"),  # the file's text is quoted, never pasted
])
def test_an_unregistered_class_or_function_is_named_with_the_entry_to_write(
        found: tuple[str, str, str | None], entry: str) -> None:
    from edgeconv.converters.keras_loader import _unregistered_words

    kind, name, _ = found
    assert _unregistered_words(*found) == (
        f"the model uses the custom {kind} {name!r}, which is not registered; name it in the pipeline "
        f"(model.custom_objects: {entry}, with model.trust_code: true), or list the module that registers it "
        "with @keras.saving.register_keras_serializable in model.custom_modules")


def test_the_innermost_unlocated_function_is_the_one_named() -> None:
    """Keras wraps a layer's activation error in the layer's and then the model's: the innermost names it."""
    from edgeconv.converters.keras_loader import _unregistered

    inner = TypeError("Could not locate function 'act'. Make sure ... Full object config: {'module': 'actmod', "
                      "'class_name': 'function', 'config': 'act', 'registered_name': 'act'}")
    layer = TypeError("<class 'Dense'> could not be deserialized properly. config={'module': 'keras.layers'}")
    layer.__cause__ = inner
    model = TypeError("<class 'Functional'> could not be deserialized properly.")
    model.__cause__ = layer
    assert _unregistered(model) == ("function", "act", "actmod")
    assert _unregistered(TypeError("unrelated")) is None
