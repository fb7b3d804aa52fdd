"""The shipped example, end to end: edgeconv build pipeline.yaml."""

from __future__ import annotations

import contextlib
import io
import json
import re
import shutil
from typing import Any

import jsonschema
import numpy as np
import pytest
import yaml

from edgeconv import load_pipeline
from edgeconv.cli import main
from edgeconv.converters.tflite_reader import TensorType, read_tflite
from edgeconv.report import SCHEMA_PATH

from ..conftest import EXAMPLE, REPO


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("example")
    shutil.copytree(EXAMPLE, root / "examples" / "digits")
    shutil.copy(REPO / "pipeline.yaml", root / "pipeline.yaml")
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed), contextlib.chdir(root):
        code = main(["build", "pipeline.yaml", "-q"])
    out = root / "build" / "digits"
    return {"code": code, "out": out, "root": root, "report": json.loads((out / "report.json").read_text()),
            "printed": printed.getvalue()}


def test_the_readme_shows_what_the_example_prints(built: dict[str, Any]) -> None:
    """The console block under the README's "Reading the output" is the example's result, line for line (the
    stage times vary from run to run: only the time line's shape is compared)."""
    readme = (REPO / "README.md").read_text().split("## Reading the output", 1)[1]
    shown = re.search(r"```\n(.*?)```", readme, re.S)
    assert shown is not None
    timing = re.compile(r"^time: load [0-9.]+ s, .* \(total [0-9.]+ s\)$")
    expected = [line for line in shown.group(1).splitlines() if not timing.match(line)]
    printed = [line for line in built["printed"].splitlines() if not timing.match(line)]
    assert printed == expected
    assert sum(bool(timing.match(line)) for line in built["printed"].splitlines()) == 1


def test_builds_and_passes(built: dict[str, Any]) -> None:
    assert built["code"] == 0
    assert sorted(p.name for p in built["out"].iterdir()) == [
        ".edgeconv-output", "digits.tflite", "explorer", "pipeline.resolved.yaml", "report.json", "report.md"]
    assert (built["report"]["gate"]["verdict"], built["report"]["gate"]["reasons"]) == ("pass", [])
    assert built["report"]["gate"]["disabled"] == []  # the example meets every strict default
    assert built["report"]["repair"] is None  # no search configured (and none needed)
    assert {c["id"] for c in built["report"]["gate"]["checks"]} >= {
        "target.edgetpu", "accelerator.edgetpu", "agreement.sqnr_db.digit", "agreement.top1.digit", "accuracy.drop",
        "conversion.passes", "conversion.float_tflite.digit", "runtime.invoke"}


def test_report_is_schema_valid(built: dict[str, Any]) -> None:
    jsonschema.validate(built["report"], json.loads(SCHEMA_PATH.read_text()))


def test_int8_in_and_out_with_no_random_flex_or_float_ops(built: dict[str, Any]) -> None:
    model = read_tflite(built["out"] / "digits.tflite")
    assert [op.type for op in model.ops] == ["CONV_2D", "MAX_POOL_2D", "CONV_2D", "MAX_POOL_2D", "RESHAPE",
                                             "FULLY_CONNECTED", "FULLY_CONNECTED", "SOFTMAX"]
    io = [model.main.tensors[i] for i in (*model.main.inputs, *model.main.outputs)]
    assert [t.dtype for t in io] == [TensorType.INT8, TensorType.INT8]
    assert not [t for t in model.main.tensors if t.is_float]
    assert not [op for op in model.ops if op.custom_code is not None or op.type.startswith("RANDOM")]
    assert model.signatures[0].inputs.keys() == {"image"} and model.signatures[0].outputs.keys() == {"digit"}
    report = built["report"]
    assert report["artifacts"]["tflite"]["sha256"] == model.sha256
    assert report["artifacts"]["tflite"]["bytes"] == (built["out"] / "digits.tflite").stat().st_size
    counts = {t["name"]: t["counts"] for t in report["targets"]}
    assert counts == {
        "generic-int8": {"supported": 8, "uncertain": 0, "cpu_fallback": 0, "unsupported": 0},
        # int8 SOFTMAX: builtin kernel
        "arm-neon": {"supported": 7, "uncertain": 0, "cpu_fallback": 1, "unsupported": 0},
        "edgetpu": {"supported": 8, "uncertain": 0, "cpu_fallback": 0, "unsupported": 0},
        # RESHAPE: reference kernel
        "tflm-cmsis-nn": {"supported": 7, "uncertain": 0, "cpu_fallback": 1, "unsupported": 0},
    }


def test_strip_pass_log_names_the_dropout_layers(built: dict[str, Any]) -> None:
    (strip,) = built["report"]["passes"]
    assert strip["name"] == "strip-training"
    assert strip["notes"] == [
        "Dropout layer 'dropout1', rate=0.25: no ops in the traced graph; tracing with training=False already made "
        "it an identity",
        "Dropout layer 'dropout2', rate=0.4: no ops in the traced graph; tracing with training=False already made "
        "it an identity"]
    assert strip["removed"] == {"Identity": 15, "NoOp": 1}
    assert strip["removed_by_layer"]["bn1"] == {"Identity": 4}
    assert "Identity" not in strip["ops_after"] and "NoOp" not in strip["ops_after"]
    assert built["report"]["equivalence"]["max_abs_diff"] <= 1e-5


def test_report_records_provenance(built: dict[str, Any]) -> None:
    report = built["report"]
    cal = report["quantization"]["calibration"]
    assert (cal["source"], cal["samples"], cal["seed"], cal["available"]) == ("npz", 200, 0, 400)
    assert report["model"]["path"] == "../../examples/digits/model.keras"
    assert report["model"]["inputs"] == [{"name": "image", "shape": [1, 16, 16, 1], "dtype": "float32"}]
    assert {"python", "edgeconv", "tensorflow", "keras", "ai-edge-litert"} <= report["toolchain"].keys()
    assert report["tflite"]["inputs"][0]["scale"] == pytest.approx(1 / 255, rel=1e-3)


def test_resolved_pipeline_rebuilds_the_same_config(built: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    # From the project (no git here: the working directory is the project the resolved pipeline's paths are in).
    monkeypatch.chdir(built["root"])
    resolved = load_pipeline(built["out"] / "pipeline.resolved.yaml")
    original = load_pipeline(built["root"] / "pipeline.yaml")
    assert resolved.model.path == original.model.path and resolved.calibration == original.calibration
    assert resolved.output_dir == built["out"]
    assert yaml.safe_load((built["out"] / "pipeline.resolved.yaml").read_text())["verify"]["pass_tolerance"] == 1e-5


def test_the_model_explorer_overlays_cover_every_op(built: dict[str, Any]) -> None:
    """Every op of the built model has its status per target and its quantization SQNR (the whole per-op
    ranking, not only the culprits the report lists); the report's culprits agree with the overlay."""
    out, report = built["out"], built["report"]
    model = read_tflite(out / "digits.tflite")
    # SOFTMAX falls back to LiteRT's builtin kernel on arm-neon, RESHAPE to a reference kernel on TFLite Micro.
    assert [a["path"] for a in report["artifacts"]["explorer"]] == [
        "explorer/generic-int8.status.json", "explorer/arm-neon.status.json", "explorer/arm-neon.why.json",
        "explorer/edgetpu.status.json", "explorer/tflm-cmsis-nn.status.json", "explorer/tflm-cmsis-nn.why.json",
        "explorer/quantization-sqnr.json"]
    indices = sorted(str(op.index) for op in model.ops)
    for t in report["targets"]:
        status = json.loads((out / "explorer" / f"{t['name']}.status.json").read_text())["main"]["results"]
        by_op = {str(op["index"]): op["status"] for op in t["ops"]}
        assert {k: v["value"] for k, v in status.items()} == by_op and sorted(status) == indices
        if (out / "explorer" / f"{t['name']}.why.json").exists():
            why = json.loads((out / "explorer" / f"{t['name']}.why.json").read_text())["main"]["results"]
            assert sorted(why) == sorted(k for k, v in by_op.items() if v != "supported")
            (only,) = why.values()
            assert only["value"].startswith(f"{t['name']}.")
    sqnr = json.loads((out / "explorer" / "quantization-sqnr.json").read_text())["main"]["results"]
    assert sorted(sqnr) == indices
    producer = {op.outputs[0].name: str(op.index) for op in model.ops}
    for culprit in report["culprits"]:
        assert sqnr[producer[culprit["tensor"]]]["value"] == pytest.approx(culprit["sqnr_db"], abs=0.005)


def test_markdown_report_reads_well(built: dict[str, Any]) -> None:
    text = (built["out"] / "report.md").read_text()
    assert text.startswith("# edgeconv report: digits\n\n**Gate: PASS**. Built `digits.tflite`")
    assert "| generic-int8 | **PASS** | 8 | 0 | 0 | 0 | 0 | 100.0% |" in text
    assert "| edgetpu | **PASS** | 8 | 0 | 0 | 0 | 0 | 100.0% |" in text
    assert "removed 16: Identity x15, NoOp x1." in text
    assert "- Dropout layer 'dropout1', rate=0.25" in text


def test_int8_accuracy_matches_float(built: dict[str, Any]) -> None:
    import keras
    from ai_edge_litert.interpreter import Interpreter

    data = np.load(EXAMPLE / "eval.npz")
    images, labels = data["image"], data["label"]
    float_acc = float(np.mean(keras.models.load_model(EXAMPLE / "model.keras").predict(images, verbose=0)
                              .argmax(1) == labels))
    runner = Interpreter(model_path=str(built["out"] / "digits.tflite")).get_signature_runner()
    q = built["report"]["tflite"]["inputs"][0]
    hits = 0
    for image, label in zip(images, labels):
        x = np.clip(np.round(image / q["scale"] + q["zero_point"]), -128, 127).astype(np.int8)
        hits += int(runner(image=x[None])["digit"].argmax() == label)
    int8_acc = hits / len(labels)
    assert float_acc >= 0.97
    assert int8_acc >= float_acc - 0.01, (float_acc, int8_acc)


def test_reader_agrees_with_the_tflite_runtime(built: dict[str, Any]) -> None:
    from ai_edge_litert.interpreter import Interpreter

    path = built["out"] / "digits.tflite"
    interpreter = Interpreter(model_path=str(path))
    runtime = {d["index"]: d for d in interpreter.get_tensor_details()}
    model = read_tflite(path)
    assert [d["op_name"] for d in interpreter._get_ops_details()] == [op.type for op in model.ops]
    for t in model.main.tensors:
        d = runtime[t.index]
        assert d["name"] == t.name and tuple(d["shape"]) == t.shape
        assert np.dtype(d["dtype"]).name == t.dtype.value
        if t.quantization is not None:
            np.testing.assert_allclose(d["quantization_parameters"]["scales"], t.quantization.scale)
            assert tuple(d["quantization_parameters"]["zero_points"]) == t.quantization.zero_point
