"""Target predictions against what real compilers and runtimes decided (no TensorFlow needed).

Edge TPU: the Coral oracle pairs (tests/data/oracles/edgetpu) - what the real compiler left
outside its edgetpu-custom-op. Arm NEON: the XNNPACK delegate of ai-edge-litert on the
committed single-op models (tests/data/ops, scripts/make_op_models.py).
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.targets import load_target
from edgeconv.targets.checker import check_model
from edgeconv.targets.target import OpStatus

from ..conftest import ORACLES, REPO
from ..oracles import xnnpack_delegated

OP_MODELS = sorted((REPO / "tests" / "data" / "ops").glob("*.tflite"))
FIXTURES = sorted((REPO / "tests" / "data").glob("*.tflite"))
PAIRS = sorted(p.name.removesuffix("_edgetpu.tflite") for p in ORACLES.glob("*_edgetpu.tflite"))


def compiler_cpu_ops(compiled: Path) -> Counter[str]:
    """Ops the Edge TPU compiler left on the CPU: everything but its edgetpu-custom-op."""
    return Counter(op.label for op in read_tflite(compiled).ops if op.custom_code != "edgetpu-custom-op")


@pytest.mark.parametrize("name", PAIRS)
def test_edgetpu_predicts_what_the_compiler_left_on_the_cpu(name: str) -> None:
    result = check_model(read_tflite(ORACLES / f"{name}.tflite"), load_target("edgetpu"))
    predicted = Counter(r.op.label for r in result.ops if r.status is not OpStatus.SUPPORTED)
    assert predicted == compiler_cpu_ops(ORACLES / f"{name}_edgetpu.tflite")
    mapped = [r.op.index for r in result.ops if r.status is OpStatus.SUPPORTED]
    if mapped:  # one contiguous segment
        assert mapped == list(range(mapped[0], mapped[0] + len(mapped)))


def test_edgetpu_names_the_first_blocking_op_of_deeplab() -> None:
    result = check_model(read_tflite(ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite"), load_target("edgetpu"))
    first = result.first_blocking
    assert first is not None and (first.op.index, first.op.type) == (64, "RESIZE_BILINEAR")
    assert [v.rule for v in first.violations] == ["edgetpu.RESIZE_BILINEAR.option_value"]
    following = [r for r in result.ops if r.follows_blocking]
    assert [(r.op.index, r.op.type) for r in following] == [(65, "QUANTIZE"), (66, "CONCATENATION"),
                                                            (67, "CONV_2D"), (68, "CONV_2D")]
    assert result.shares()["ops"] == pytest.approx(64 / 72)
    assert result.macs()["cpu_fallback"] > 0


def test_edgetpu_leaves_a_custom_op_at_the_end_on_the_cpu() -> None:
    result = check_model(read_tflite(ORACLES / "bodypix_mobilenet_v1_075_512_512_16_quant_decoder.tflite"),
                         load_target("edgetpu"))
    assert result.first_blocking is not None and result.first_blocking.op.custom_code == "PosenetDecoderOp"
    assert result.shares()["macs"] == 1.0


@pytest.mark.parametrize("path", OP_MODELS + FIXTURES, ids=[p.name for p in OP_MODELS + FIXTURES])
def test_arm_neon_predicts_what_xnnpack_delegates(path: Path) -> None:
    result = check_model(read_tflite(path), load_target("arm-neon"))
    predicted = [(r.op.index, r.op.type, r.status is OpStatus.SUPPORTED) for r in result.ops]
    try:
        actual = xnnpack_delegated(path)
    except RuntimeError as exc:  # the runtime cannot even load it: a Flex op without the Flex delegate
        assert "Flex" in str(exc)
        assert [r.op.custom_code for r in result.ops if r.status is OpStatus.UNSUPPORTED] == ["FlexErf"]
        return
    assert predicted == actual
    # Builtins always run on the CPU; only Flex/custom ops cannot.
    assert all((r.status is OpStatus.UNSUPPORTED) == (r.op.custom_code is not None) for r in result.ops)


def test_there_are_op_models_to_prove_against() -> None:
    assert len(OP_MODELS) >= 60 and len(PAIRS) == 5
