"""quantization.engine: ai-edge-quantizer and the keys that need it (int16_ops, range_percentile): what the
pipeline may ask for, validated before any work. Real quantizations with it: tests/integration/test_aeq.py."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from edgeconv.config import QuantEngine, load_pipeline

from .test_config import MINIMAL, problems, project, write  # noqa: F401  (project is a fixture)

ARM = "targets: [arm-neon]\n"


def test_the_engine_and_its_keys_load(project: Path) -> None:
    config = load_pipeline(write(project, MINIMAL + ARM + "quantization:\n  engine: ai-edge-quantizer\n"
                                 "  int16_ops: ['mix', '^head$']\n  range_percentile: 99.9\n"))
    q = config.quantization
    assert (q.engine, q.int16_ops, q.range_percentile) == (QuantEngine.AI_EDGE_QUANTIZER, ("mix", "^head$"), 99.9)
    assert q.io("input").value == q.io("output").value == "int8"


def test_the_default_engine_is_the_converter(project: Path) -> None:
    q = load_pipeline(write(project, MINIMAL)).quantization
    assert (q.engine, q.int16_ops, q.range_percentile) == (QuantEngine.CONVERTER, (), None)


@pytest.mark.parametrize("value", [90, 90.0, 99.99, 100])
def test_range_percentile_inside_its_bounds_loads(project: Path, value: float) -> None:
    config = load_pipeline(write(project, MINIMAL + ARM + "quantization: {engine: ai-edge-quantizer, "
                                 f"range_percentile: {value}}}\n"))
    assert config.quantization.range_percentile == value


@pytest.mark.parametrize(("value", "expected"), [
    (89.99, "p.yaml:7: quantization.range_percentile: must be >= 90.0, got 89.99"),
    (100.01, "p.yaml:7: quantization.range_percentile: must be <= 100.0, got 100.01"),
])
def test_range_percentile_outside_its_bounds_is_refused(project: Path, value: float, expected: str) -> None:
    path = write(project, MINIMAL + ARM + f"quantization: {{engine: ai-edge-quantizer, range_percentile: {value}}}\n")
    assert problems(path) == [expected]


@pytest.mark.parametrize(("quantization", "expected"), [
    ("{int16_ops: [mix]}",
     ["p.yaml:6: quantization.int16_ops: needs engine: ai-edge-quantizer (the TFLite converter's quantizer cannot "
      "do it)"]),
    ("{range_percentile: 99.9}",
     ["p.yaml:6: quantization.range_percentile: needs engine: ai-edge-quantizer (the TFLite converter's "
      "quantizer cannot do it)"]),
    ("{engine: ai-edge-quantizer, mode: int16x8, int16_ops: [mix]}",
     ["p.yaml:6: quantization.int16_ops: applies to mode int8 only (mode is int16x8; int16x8 gives every op "
      "int16 activations)"]),
    ("{engine: ai-edge-quantizer, mode: dynamic}",
     ["p.yaml:6: quantization.engine: ai-edge-quantizer applies to modes int8 and int16x8 only (mode is dynamic)"]),
    ("{engine: ai-edge-quantizer, keep_float: [mix]}",
     ["p.yaml:6: quantization.keep_float: is done by the converter's selective quantization, not with engine "
      "ai-edge-quantizer; use one or the other"]),
    ("{engine: ai-edge-quantizer, input_type: float32}",
     ["p.yaml:6: quantization.input_type: engine ai-edge-quantizer gives int8 inputs in mode int8; set "
      "input_type: int8 or auto"]),
    ("{engine: ai-edge-quantizer, mode: int16x8, output_type: float32}",
     ["p.yaml:6: quantization.output_type: engine ai-edge-quantizer gives int16 outputs in mode int16x8; set "
      "output_type: int16 or auto"]),
    ("{engine: ai-edge-quantizer, int16_ops: ['mix(']}",
     ["p.yaml:6: quantization.int16_ops[0]: 'mix(' is not a regular expression (missing ), unterminated "
      "subpattern at position 3)"]),
    ("{engine: ai-edge-quantizer, int16_ops: [mix]}\ntargets: [edgetpu]",
     ["p.yaml:6: quantization.int16_ops: target 'edgetpu' runs no int16x8 op: {line}"]),
    ("{engine: ai-edge-quantizr}",
     ["p.yaml:6: quantization.engine: unknown value 'ai-edge-quantizr' (allowed: ai-edge-quantizer, converter); "
      "did you mean 'ai-edge-quantizer'?"]),
])
def test_what_the_engine_cannot_do_is_refused_before_any_work(project: Path, quantization: str,
                                                              expected: list[str]) -> None:
    from edgeconv.targets import load_target
    from edgeconv.targets.describe import quantization_line

    text = MINIMAL + f"quantization: {quantization}\n"
    if "targets:" not in text:
        text += ARM
    line = quantization_line(load_target("edgetpu"))
    assert problems(write(project, text)) == [e.format(line=line) for e in expected]


def test_the_engine_not_installed_is_refused_with_how_to_install(project: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ai_edge_quantizer" else real(name, *a))
    path = write(project, MINIMAL + ARM + "quantization: {engine: ai-edge-quantizer}\n")
    assert problems(path) == ["p.yaml:7: quantization.engine: ai-edge-quantizer is not installed: pip install "
                              "'edgeconv[tf]'"]
