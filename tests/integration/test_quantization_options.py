"""Quantization settings reach the .tflite: uint8 model I/O and per-tensor weights."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from edgeconv.cli import main
from edgeconv.converters.tflite_reader import TensorType, read_tflite


def test_uint8_io_and_per_tensor_weights(example_copy: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = example_copy / "pipeline.yaml"
    text = path.read_text().replace("input_type: int8", "input_type: uint8")
    text = text.replace("output_type: int8", "output_type: uint8").replace("per_channel: true", "per_channel: false")
    path.write_text(text.replace("samples: 200", "samples: 64"))
    assert main(["build", str(path), "-q"]) == 0, capsys.readouterr().err
    out = example_copy / "build" / "digits"
    model = read_tflite(out / "digits.tflite")
    sg = model.main
    assert [sg.tensors[i].dtype for i in (*sg.inputs, *sg.outputs)] == [TensorType.UINT8, TensorType.UINT8]
    assert model.ops[0].type == "QUANTIZE" and model.ops[-1].type == "QUANTIZE"
    weights = [op.inputs[1] for op in model.ops if op.type in ("CONV_2D", "FULLY_CONNECTED")]
    assert weights and all(w is not None and w.quantization and not w.quantization.per_axis for w in weights)
    report = json.loads((out / "report.json").read_text())
    assert report["quantization"]["input_type"] == "uint8" and report["quantization"]["per_channel"] is False
    assert report["quantization"]["calibration"]["samples"] == 64
    assert report["gate"]["verdict"] == "pass"
