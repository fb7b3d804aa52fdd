"""The report model (edgeconv/report_model.py): the values its string fields allow are the producers'
own enums, and the generated schema holds real reports to the model."""

from __future__ import annotations

import enum
import typing
from typing import Any

import jsonschema
import pytest

from edgeconv import report_model as rm
from edgeconv.config import IOType, QuantMode
from edgeconv.targets.checker import Verdict as TargetVerdict
from edgeconv.targets.target import Effect, OpStatus
from edgeconv.verdict import Kind, Outcome


def one_of(cls: type, field: str) -> tuple[str, ...]:
    hint = typing.get_type_hints(cls, include_extras=True)[field]
    while typing.get_origin(hint) is typing.NotRequired:
        hint = typing.get_args(hint)[0]
    (found,) = [m for m in typing.get_args(hint)[1:] if isinstance(m, rm.OneOf)]
    return found.values


@pytest.mark.parametrize(("cls", "field", "source"), [
    (rm.OpVerdict, "status", OpStatus),
    (rm.Violation, "effect", Effect),
    (rm.TargetVerdict, "verdict", TargetVerdict),
    (rm.Check, "kind", Kind),
    (rm.Check, "outcome", Outcome),
    (rm.Quantization, "mode", QuantMode),
    (rm.Quantization, "input_type", IOType),
    (rm.Quantization, "output_type", IOType),
])
def test_allowed_values_are_the_producers_enum(cls: type, field: str, source: type[enum.Enum]) -> None:
    # auto is resolved (QuantizationConfig.io) before the report is written
    assert set(one_of(cls, field)) == {e.value for e in source} - {"auto"}


def test_gate_verdict_is_pass_or_fail() -> None:
    assert one_of(rm.Gate, "verdict") == ("pass", "fail")


def minimal_report() -> dict[str, Any]:
    sha = "0" * 64
    return {
        "schema_version": 1, "edgeconv_version": "0", "created": "now", "name": "m", "pipeline": "p.yaml",
        "toolchain": {"python": "3.11", "edgeconv": "0"},
        "model": {"path": "m.tflite", "format": "tflite", "sha256": sha},
        "artifacts": {"tflite": {"path": "m.tflite", "sha256": sha, "bytes": 1}},
        "passes": [], "equivalence": None, "quantization": None,
        "tflite": {"sha256": sha, "bytes": 1, "ops": 0, "op_types": {}, "inputs": [], "outputs": []},
        "targets": [], "gate": {"verdict": "pass", "reasons": [], "checks": []},
    }


def test_the_schema_accepts_the_smallest_report() -> None:
    jsonschema.validate(minimal_report(), rm.json_schema())


@pytest.mark.parametrize(("path", "value", "message"), [
    (("schema_version",), 2, "1 was expected"),
    (("gate", "verdict"), "maybe", "'maybe' is not one of ['pass', 'fail']"),
    (("toolchain",), {"python": "3.11"}, "'edgeconv' is a required property"),
    (("artifacts", "tflite", "bytes"), 0, "0 is less than the minimum of 1"),
    (("model", "sha256"), "abc", "'abc' does not match '^[0-9a-f]{64}$'"),
    (("tflite", "op_types"), {"CONV_2D": -1}, "-1 is less than the minimum of 0"),
])
def test_the_schema_rejects_what_the_model_does_not_allow(path: tuple[str, ...], value: Any, message: str) -> None:
    report = minimal_report()
    node = report
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError) as caught:
        jsonschema.validate(report, rm.json_schema())
    assert caught.value.message == message


def test_a_type_the_generator_does_not_know_is_a_clear_error() -> None:
    class Odd(typing.TypedDict):
        when: complex

    with pytest.raises(TypeError, match="no JSON Schema for <class 'complex'>"):
        rm._schema(Odd, {})
