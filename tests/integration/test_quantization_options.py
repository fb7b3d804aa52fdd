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
    assert report["gate"] == {"verdict": "fail", "reasons": [reason]}
    assert all(t["verdict"] == "pass" for t in report["targets"])
