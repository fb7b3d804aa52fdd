"""Quantization settings reach the .tflite (uint8 model I/O, per-tensor weights), and gates
configured in the pipeline decide the exit code."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeconv.cli import main
from edgeconv.converters.tflite_reader import TensorType, read_tflite


def test_uint8_io_per_tensor_weights_and_a_fallback_gate(example_copy: Path,
                                                         capsys: pytest.CaptureFixture[str]) -> None:
    path = example_copy / "pipeline.yaml"
    text = path.read_text().replace("input_type: int8", "input_type: uint8")
    text = text.replace("output_type: int8", "output_type: uint8").replace("per_channel: true", "per_channel: false")
    text = text.replace("samples: 200", "samples: 64")
    path.write_text(text + "gates:\n  max_cpu_fallback_ops: {arm-neon: 0}\n")
    assert main(["build", str(path), "-q"]) == 1
    out = capsys.readouterr().out
    # SOFTMAX (int8) and the two uint8<->int8 QUANTIZE ops: XNNPACK requantizes only within one signedness.
    reason = "target arm-neon: 3 op(s) fall back to the CPU, more than gates.max_cpu_fallback_ops.arm-neon = 0"
    assert f"  - {reason}" in out.splitlines()
    build = example_copy / "build" / "digits"
    model = read_tflite(build / "digits.tflite")
    sg = model.main
    assert [sg.tensors[i].dtype for i in (*sg.inputs, *sg.outputs)] == [TensorType.UINT8, TensorType.UINT8]
    assert model.ops[0].type == "QUANTIZE" and model.ops[-1].type == "QUANTIZE"
    weights = [op.inputs[1] for op in model.ops if op.type in ("CONV_2D", "FULLY_CONNECTED")]
    assert weights and all(w is not None and w.quantization and not w.quantization.per_axis for w in weights)
    report = json.loads((build / "report.json").read_text())
    assert report["quantization"]["input_type"] == "uint8" and report["quantization"]["per_channel"] is False
    assert report["quantization"]["calibration"]["samples"] == 64
    assert (report["gate"]["verdict"], report["gate"]["reasons"]) == ("fail", [reason])
    assert all(t["verdict"] == "pass" for t in report["targets"])


# -- every quantization mode ---------------------------------------------------------------------

ANY_MODE_TARGET = """
schema_version: 1
name: any-mode-cpu
title: A CPU that runs every mode and float ops (a user's target file)
sources: {ME: "the firmware team's own LiteRT build"}
quantization: {modes: [int8, int16x8, dynamic, float16, none], float_fallback: true, source: ME}
unlisted: {source: ME}
ops:
  CONV_2D: {source: ME}
  FULLY_CONNECTED: {source: ME}
  MAX_POOL_2D: {source: ME}
  RESHAPE: {source: ME}
  SOFTMAX: {source: ME}
  QUANTIZE: {source: ME}
  DEQUANTIZE: {source: ME}
"""


def mode_pipeline(example_copy: Path, quantization: str, *, calibration: bool = True) -> Path:
    (example_copy / "any-mode.yaml").write_text(ANY_MODE_TARGET)
    text = (example_copy / "pipeline.yaml").read_text()
    head, rest = text.split("quantization:\n", 1)
    rest = rest.split("targets:\n", 1)[1]
    rest = "\n".join(line for line in rest.splitlines() if not line.startswith("  - "))
    if not calibration:
        head = head.split("calibration:\n")[0] + "evaluation:" + head.split("evaluation:", 1)[1]
    path = example_copy / "pipeline.yaml"
    path.write_text(f"{head}quantization: {quantization}\ntargets: [any-mode.yaml]\n{rest}\n")
    return path


def accuracy(tflite: Path) -> float:
    import numpy as np

    from ..conftest import EXAMPLE
    from .models import run_tflite

    data = np.load(EXAMPLE / "eval.npz")
    hits = sum(int(run_tflite(tflite, {"image": x[None]})["digit"].argmax() == y)
               for x, y in zip(data["image"], data["label"]))
    return hits / len(data["label"])


@pytest.mark.parametrize(("mode", "io", "dtypes"), [
    # int16 activations, int8 weights (int64 biases)
    ("int16x8", "int16", {"int16", "int8", "int64"}),
    # int8 weights, float activations
    ("dynamic", "float32", {"float32", "int8"}),
    # float16 weights dequantized at load
    ("float16", "float32", {"float32", "float16"}),
    ("none", "float32", {"float32"}),
])
def test_every_mode_builds_what_it_says_within_a_point_of_float(example_copy: Path, mode: str, io: str,
                                                                dtypes: set[str]) -> None:
    import edgeconv

    result = edgeconv.build(mode_pipeline(example_copy, f"{{mode: {mode}}}"))
    assert result.passed, result.report["gate"]
    model = read_tflite(result.tflite_path)
    sg = model.main
    assert {t.dtype.value for t in sg.tensors} - {"int32"} == dtypes
    assert {sg.tensors[i].dtype.value for i in (*sg.inputs, *sg.outputs)} == {io}
    q = result.report["quantization"]
    assert (q["mode"], q["input_type"], q["output_type"]) == (mode, io, io)
    assert q["allowed_by_targets"][0]["target"] == "any-mode-cpu"
    assert accuracy(result.tflite_path) >= 0.9889 - 0.01


def test_uncalibrated_mode_needs_no_calibration_data(example_copy: Path) -> None:
    import edgeconv

    result = edgeconv.build(mode_pipeline(example_copy, "{mode: float16}", calibration=False))
    assert result.report["quantization"]["calibration"] is None
    assert result.report["equivalence"]["inputs"] == ("seeded random inputs (the mode needs no calibration data "
                                                      "and the pipeline gives none)")
    assert result.report["equivalence"]["max_abs_diff"] <= 1e-5


def test_keep_float_leaves_the_named_ops_float(example_copy: Path) -> None:
    import edgeconv

    result = edgeconv.build(mode_pipeline(example_copy, "{mode: int8, keep_float: ['digit_1/MatMul']}"))
    ops = [(op.type, op.outputs[0].dtype.value) for op in read_tflite(result.tflite_path).ops]
    assert ("FULLY_CONNECTED", "float32") in ops and ("FULLY_CONNECTED", "int8") in ops
    assert ("CONV_2D", "int8") in ops
    assert result.report["quantization"]["keep_float"] == ["digit_1/MatMul"]
    assert result.report["quantization"]["input_type"] == "float32"
    assert accuracy(result.tflite_path) >= 0.9889 - 0.01


def test_keep_float_pattern_must_match_an_op(example_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = mode_pipeline(example_copy, "{mode: int8, keep_float: ['dense_7']}")
    assert main(["build", str(path), "-q"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(
        "edgeconv: error: quantization.keep_float: 'dense_7' matches no op output of the model (e.g. ")
    assert not (example_copy / "build").exists()
