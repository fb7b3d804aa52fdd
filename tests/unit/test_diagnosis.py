"""One sentence for a model that is not what integer targets expect (issue 18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.targets.diagnosis import FIX, diagnose

from ..conftest import ORACLES, REPO, run_edgeconv

DATA = REPO / "tests" / "data"


@pytest.mark.parametrize(("path", "kind", "sentence"), [
    (DATA / "dense.float32.tflite", "float", f"the model is not quantized: its only op computes in float; {FIX}"),
    (DATA / "erf-flex.float32.tflite", "float", f"the model is not quantized: its only op computes in float; {FIX}"),
    (DATA / "sin-island.int8.tflite", "partly_float",
     "1 of 3 ops compute in float (SIN); they run only where a target runs float ops"),
    (ORACLES / "bodypix_mobilenet_v1_075_512_512_16_quant_decoder.tflite", "partly_float",
     "1 of 37 ops compute in float (CUSTOM); they run only where a target runs float ops"),
    (ORACLES / "mobilenet_v1_0.25_128_quant.tflite", "uint8",
     "the model is uint8-quantized (the TF1 quantization-aware scheme); targets whose kernels are int8-only (each "
     "target's tensor_dtype rules say which) need the TF2 converter's int8 scheme"),
])
def test_models_that_are_not_full_int8_are_named(path: Path, kind: str, sentence: str) -> None:
    found = diagnose(read_tflite(path))
    assert found is not None
    assert (found.kind, found.sentence) == (kind, sentence)


@pytest.mark.parametrize("name", ["conv2d-relu.int8.tflite", "softmax-dense.int8.tflite", "add-uint8io.int8.tflite",
                                  "dense-dynamic.int8.tflite"])
def test_a_full_int8_model_needs_no_diagnosis(name: str) -> None:
    assert diagnose(read_tflite(DATA / name)) is None  # uint8 model I/O around int8 ops, a dynamic shape: int8


def test_check_says_it_in_one_line_instead_of_one_per_op() -> None:
    done = run_edgeconv("check", DATA / "dense.float32.tflite", "--target", "generic-int8", "--target", "tflm-cmsis-nn")
    assert done.returncode == 1
    lines = done.stdout.splitlines()
    assert lines[0] == f"model: the model is not quantized: its only op computes in float; {FIX}"
    assert not [line for line in lines if line.startswith("  #")]  # no per-op dtype lines
    assert "(every op fails an integer target for that reason; per-op details: --format md or json)" in lines
    md = run_edgeconv("check", DATA / "dense.float32.tflite", "--format", "md")
    assert f"**Model:** the model is not quantized: its only op computes in float; {FIX}" in md.stdout
    assert "generic-int8.FULLY_CONNECTED.tensor_dtype" in md.stdout  # the details are still there


def test_a_partly_float_model_keeps_its_per_op_lines() -> None:
    done = run_edgeconv("check", DATA / "sin-island.int8.tflite")
    lines = done.stdout.splitlines()
    assert lines[0] == "model: 1 of 3 ops compute in float (SIN); they run only where a target runs float ops"
    assert any(line.startswith("  #2 SIN [unsupported] generic-int8.SIN.op_listed") for line in lines)
