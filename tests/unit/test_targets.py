from __future__ import annotations

import inspect
import textwrap
from pathlib import Path
from typing import Any

import pytest

from edgeconv import ConfigError
from edgeconv.converters.tflite_reader import (
    OpInfo,
    Quantization,
    SubgraphInfo,
    TensorInfo,
    TensorType,
    TFLiteModel,
    parse_tflite,
    read_tflite,
)
from edgeconv.targets import DATA_DIR, builtin_target_names, load_target
from edgeconv.targets.checker import Verdict, check_model, check_op
from edgeconv.targets.constraints import CONSTRAINTS, expand_spec
from edgeconv.targets.target import Rule, Target, load_target_file

from ..conftest import REPO, run_edgeconv
from ..tflite_edit import edit, tensor

DATA = REPO / "tests" / "data"


def violations(path: Path, target: str = "generic-int8") -> dict[int, list[str]]:
    result = check_model(read_tflite(path), load_target(target))
    return {r.op.index: [v.rule for v in r.violations] for r in result.ops if r.violations}


# -- the registry and the data files --------------------------------------------------------

def test_builtin_targets_are_the_data_files() -> None:
    assert builtin_target_names() == sorted(p.stem for p in DATA_DIR.glob("*.yaml"))
    for name in builtin_target_names():
        target = load_target(name)
        assert target.name == name
        for entry in target.ops.values():
            for rule in (*target.all_ops, *entry.rules):
                assert rule.source in target.sources, f"{name}: {entry.name}.{rule.id} has no source"
                assert rule.text and "{" not in rule.text


def test_every_constraint_documents_its_rule() -> None:
    for name, fn in CONSTRAINTS.items():
        assert inspect.getdoc(fn), f"constraint {name} has no docstring (its rule text)"
        assert name == fn.__name__


# -- every rule of every built-in target fails for its own reason ------------------------

def _tensor(index: int, dtype: str, *, constant: bool = False, shape: tuple[int, ...] = (1, 4)) -> TensorInfo:
    kind = TensorType(dtype)
    quant = Quantization((0.05,), (0,)) if kind in (TensorType.INT8, TensorType.UINT8, TensorType.INT16) else None
    return TensorInfo(index, f"t{index}", kind, shape, shape, quant, index if constant else 0, 64 if constant else 0)


def _model(op: OpInfo, io: tuple[int, ...] = ()) -> TFLiteModel:
    tensors = tuple(t for t in (*op.inputs, *op.outputs) if t is not None)
    sg = SubgraphInfo(0, "main", tensors, (op,), io, ())
    return TFLiteModel("synthetic", "0" * 64, 0, 3, "", (sg,), (), ())


def _first(spec: str) -> str:
    alt = spec.removesuffix("...").split("|")[0]
    return {"any": "int8", "float32-io": "float32"}.get(alt, alt)


def _conforming(op_type: str, rule: Rule) -> OpInfo:
    ins = expand_spec(rule.params["inputs"], len(rule.params["inputs"]))
    outs = expand_spec(rule.params["outputs"], len(rule.params["outputs"]))
    inputs = tuple(_tensor(i, _first(s)) for i, s in enumerate(ins))
    outputs = tuple(_tensor(len(ins) + i, _first(s)) for i, s in enumerate(outs))
    return OpInfo(0, 0, op_type, 1, None, inputs, outputs, {})


def _violate(op_type: str, rule: Rule) -> tuple[OpInfo, TFLiteModel, str]:
    """An op that breaks exactly this rule, and the detail the rule must report."""
    if rule.check == "tensor_dtype":
        op = _conforming(op_type, rule)
        bad = "float32" if not any("float32" in s for s in rule.params["inputs"][:1]) else "int64"
        changed = (_tensor(0, bad), *op.inputs[1:])
        op = OpInfo(0, 0, op_type, 1, None, changed, op.outputs, {})
        island = " inside the model (a float island)" if bad == "float32" else ""
        return op, _model(op), f"input 0 't0' is {bad}{island}, expected"
    if rule.check == "output_quantization":
        out = TensorInfo(1, "out", TensorType.INT8, (1, 4), (1, 4), Quantization((0.25,), (3,)), 0, 0)
        op = OpInfo(0, 0, op_type, 1, None, (_tensor(0, "int8"),), (out,), {})
        return op, _model(op), "output 'out' has scale 0.25 and zero point 3"
    if rule.check == "shape_static":
        t = TensorInfo(0, "dyn", TensorType.INT8, (1, 4), (-1, 4), Quantization((0.1,), (0,)), 0, 0)
        op = OpInfo(0, 0, op_type, 1, None, (t,), (_tensor(1, "int8"),), {})
        return op, _model(op), "dynamic shape: 'dyn' [-1, 4]"
    if rule.check == "activation_per_tensor":
        t = TensorInfo(0, "act", TensorType.INT8, (1, 4), (1, 4), Quantization((0.1, 0.2), (0, 0)), 0, 0)
        op = OpInfo(0, 0, op_type, 1, None, (t,), (_tensor(1, "int8"),), {})
        return op, _model(op), "'act' has 2 scales"
    if rule.check == "op_builtin":
        op = OpInfo(0, 0, "CUSTOM", 1, "FlexErf", (_tensor(0, "float32"),), (_tensor(1, "float32"),), {})
        return op, _model(op, (0, 1)), "Flex op 'FlexErf'"
    raise AssertionError(f"no violation recipe for constraint {rule.check}: add one")


def _all_rules() -> list[Any]:
    cases = []
    for name in builtin_target_names():
        target = load_target(name)
        for rule in target.all_ops:
            cases.append(pytest.param(target, "ADD", rule, id=f"{name}.<all>.{rule.id}"))
        for op_name, entry in sorted(target.ops.items()):
            for rule in entry.rules:
                cases.append(pytest.param(target, op_name, rule, id=f"{name}.{op_name}.{rule.id}"))
    return cases


@pytest.mark.parametrize(("target", "op_type", "rule"), _all_rules())
def test_every_rule_fails_for_its_own_reason(target: Target, op_type: str, rule: Rule) -> None:
    op, model, detail = _violate(op_type, rule)
    result = check_op(op, model, target)
    by_id = {v.rule: v for v in result.violations}
    rule_id = f"{target.name}.{op.type}.{rule.id}"
    assert rule_id in by_id, [v.rule for v in result.violations]
    assert detail in by_id[rule_id].detail
    assert by_id[rule_id].text == rule.text
    assert result.status is rule.status


def test_conforming_ops_pass_their_dtype_rules() -> None:
    target = load_target("generic-int8")
    for name, entry in target.ops.items():
        for rule in entry.rules:
            if rule.check == "tensor_dtype":
                op = _conforming(name, rule)
                result = check_op(op, _model(op, tuple(range(len(op.inputs) + len(op.outputs)))), target)
                assert not [v for v in result.violations if v.rule.endswith(".tensor_dtype")], name


# -- the same rules on real converted models ---------------------------------------------

@pytest.mark.parametrize(("fixture", "expected"), [
    ("conv2d-relu.int8", {}),
    ("softmax-dense.int8", {}),
    ("add-uint8io.int8", {}),
    ("dense.float32", {0: ["generic-int8.FULLY_CONNECTED.tensor_dtype"]}),
    ("dense-dynamic.int8", {0: ["generic-int8.FULLY_CONNECTED.shape_static"]}),
    ("erf-flex.float32", {0: ["generic-int8.CUSTOM.op_builtin", "generic-int8.CUSTOM.op_listed"]}),
    ("random-uniform.float32", {0: ["generic-int8.RANDOM_UNIFORM.op_listed"],
                                1: ["generic-int8.MUL.tensor_dtype"]}),
    ("sin-island.int8", {1: ["generic-int8.DEQUANTIZE.tensor_dtype"], 2: ["generic-int8.SIN.op_listed"],
                         3: ["generic-int8.QUANTIZE.tensor_dtype"]}),
])
def test_generic_int8_on_converted_models(fixture: str, expected: dict[int, list[str]]) -> None:
    assert violations(DATA / f"{fixture}.tflite") == expected


def test_known_unsupported_ops_explain_themselves() -> None:
    result = check_model(read_tflite(DATA / "random-uniform.float32.tflite"), load_target("generic-int8"))
    (v,) = result.ops[0].violations
    assert v.detail.startswith("random op: a training-only node (Dropout, noise, sampling) reached the model")
    assert v.fix == "Export with training=False and keep the strip-training pass in the pipeline."
    assert result.verdict is Verdict.FAIL


@pytest.mark.parametrize(("change", "rule", "detail"), [
    (lambda m: setattr(tensor(m, "Identity").quantization, "scale", [0.5]),
     "generic-int8.SOFTMAX.output_quantization", "output 'Identity' has scale 0.5 and zero point -128"),
    (lambda m: setattr(tensor(m, "Identity").quantization, "zeroPoint", [0]),
     "generic-int8.SOFTMAX.output_quantization", "output 'Identity' has scale 0.00390625 and zero point 0"),
    (lambda m: (setattr(tensor(m, "x").quantization, "scale", [0.1, 0.2]),
                setattr(tensor(m, "x").quantization, "zeroPoint", [0, 0])),
     "generic-int8.FULLY_CONNECTED.activation_per_tensor", "'x' has 2 scales"),
])
def test_hand_edited_models_fail_the_right_rule(change: Any, rule: str, detail: str) -> None:
    model = parse_tflite(edit((DATA / "softmax-dense.int8.tflite").read_bytes(), change))
    found = [v for r in check_model(model, load_target("generic-int8")).ops for v in r.violations]
    assert [v.rule for v in found] == [rule]
    assert found[0].detail == detail


# -- target files are validated like the pipeline ----------------------------------------

def _target_file(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "mine.yaml"
    path.write_text(textwrap.dedent("""
        schema_version: 1
        name: mine
        title: My NPU
        sources:
          DOC: vendor manual 1.2, section 4
        """).lstrip() + textwrap.dedent(body))
    return path


@pytest.mark.parametrize(("body", "problem"), [
    ("ops:\n  ADD: {source: DOC, rules: [{check: tensor_dtyp, inputs: [int8], outputs: [int8]}]}\n",
     "mine.yaml:7: ops.ADD.rules[0].check: unknown constraint 'tensor_dtyp' (allowed: activation_per_tensor, "
     "op_builtin, op_listed, output_quantization, shape_static, tensor_dtype); did you mean 'tensor_dtype'?"),
    ("ops:\n  ADDD: {source: DOC}\n", "mine.yaml:7: ops.ADDD: unknown TFLite op 'ADDD'; did you mean 'ADD'?"),
    ("ops:\n  ADD: {source: DOCS}\n", "mine.yaml:7: ops.ADD.source: unknown source 'DOCS' (defined: DOC); "
                                      "did you mean 'DOC'?"),
    ("ops:\n  ADD: {rules: []}\n", "mine.yaml: ops.ADD.source: missing: every fact in a target file names its "
                                   "source"),
    ("ops:\n  ADD: {source: DOC, rules: [{check: tensor_dtype, inputs: [int7], outputs: [int8]}]}\n",
     "mine.yaml:7: ops.ADD.rules[0].inputs: unknown dtype 'int7' (allowed: any, bfloat16, bool, complex128, "
     "complex64, float16, float32, float32-io, float64, float8_e4m3fn, float8_e5m2, int16, int2, int32, int4, "
     "int64, int8, resource, string, uint16, uint32, uint4, uint64, uint8, variant); did you mean 'int8'?"),
    ("ops:\n  ADD: {source: DOC, rules: [{check: tensor_dtype, inputs: [int8]}]}\n",
     "mine.yaml:7: ops.ADD.rules[0]: constraint 'tensor_dtype' needs parameter 'outputs'"),
    ("ops:\n  ADD: {source: DOC, rules: [{check: output_quantization, scale: big, zero_point: 0}]}\n",
     "mine.yaml:7: ops.ADD.rules[0].scale: expected a number, got 'big'"),
    ("ops:\n  ADD: {source: DOC, rules: [{check: shape_static, status: maybe}]}\n",
     "mine.yaml:7: ops.ADD.rules[0].status: unknown status 'maybe' (allowed: cpu_fallback, unsupported)"),
    ("opps: {}\n", "mine.yaml:6: top level: unknown key 'opps' (allowed: all_ops, description, fixes, name, notes, "
                   "ops, schema_version, sources, title, unlisted); did you mean 'ops'?"),
])
def test_target_file_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, problem: str) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError) as info:
        load_target_file(_target_file(tmp_path, body).relative_to(tmp_path))
    assert problem in info.value.problems


def test_a_user_target_file_works(tmp_path: Path) -> None:
    target = load_target_file(_target_file(tmp_path, """
        ops:
          CONV_2D: {source: DOC, rules: [{check: tensor_dtype, inputs: [int8, int8, int32], outputs: [int8]}]}
        """))
    result = check_model(read_tflite(DATA / "softmax-dense.int8.tflite"), target)
    assert [[v.rule for v in r.violations] for r in result.ops] == [["mine.FULLY_CONNECTED.op_listed"],
                                                                      ["mine.SOFTMAX.op_listed"]]


def test_targets_cli(tmp_path: Path) -> None:
    listed = run_edgeconv("targets", "list")
    assert listed.returncode == 0 and "generic-int8: Generic full-integer INT8" in listed.stdout
    shown = run_edgeconv("targets", "show", "generic-int8")
    assert shown.returncode == 0
    assert "generic-int8.SOFTMAX.output_quantization: The int8 output has the fixed quantization scale " \
           "0.00390625 and zero point -128." in shown.stdout
    bad = run_edgeconv("targets", "show", "generic-int9")
    assert bad.returncode == 2
    assert bad.stderr.strip() == ("edgeconv: error: unknown target 'generic-int9' (allowed: generic-int8); "
                                  "did you mean 'generic-int8'?")
