from __future__ import annotations

import dataclasses
import inspect
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv import ConfigError
from edgeconv.converters.tflite_reader import (
    OpInfo,
    TensorInfo,
    TFLiteModel,
    parse_tflite,
    read_tflite,
)
from edgeconv.errors import allowed_list
from edgeconv.targets import DATA_DIR, builtin_target_names, load_target
from edgeconv.targets.checker import Verdict, check_model, check_op
from edgeconv.targets.constraints import AFTER_PLACEMENT, CONSTRAINTS, expand_spec
from edgeconv.targets.target import Rule, Target, load_target_file

from ..conftest import REPO, TARGET_CHOICES, run_edgeconv
from ..synthetic import Builder
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


@pytest.mark.parametrize("name", builtin_target_names())
def test_each_builtin_target_loads_from_a_twin_equal_to_its_yaml(name: str) -> None:
    """A built-in target loads from its compiled JSON twin (no YAML parsed): the twin is what
    scripts/gen_compiled_targets.py writes from the YAML now, and holds a Target equal to the YAML's."""
    from edgeconv.targets.compiled import load_compiled, to_json
    from edgeconv.targets.twins import COMPILED_DIR, dumps

    path = DATA_DIR / f"{name}.yaml"
    from_yaml = load_target_file(path, expected_name=name)
    twin = COMPILED_DIR / f"{name}.json"
    assert twin.read_text(encoding="utf-8") == dumps(to_json(from_yaml, path.read_bytes())), \
        "run python scripts/gen_compiled_targets.py"
    assert load_compiled(name, path) == from_yaml
    assert load_target(name) == from_yaml


def test_the_runtime_version_table_loads_from_a_twin_equal_to_its_yaml() -> None:
    from edgeconv.targets.compiled import runtime_versions_json
    from edgeconv.targets.constraints.versions import TABLE, parse_table, runtime_versions
    from edgeconv.targets.twins import COMPILED_DIR, dumps, twin_of

    twin = COMPILED_DIR / "runtime_versions.json"
    assert twin.read_text(encoding="utf-8") == dumps(runtime_versions_json(parse_table(), TABLE.read_bytes()))
    assert twin_of(TABLE, twin) is not None
    parsed = {op: {int(v): str(r) for v, r in versions.items()} for op, versions in parse_table()["ops"].items()}
    assert runtime_versions() == parsed and parsed["CONV_2D"][3] == "1.14.0"


def test_a_twin_is_not_used_for_yaml_it_was_not_made_from(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An edited built-in target file (its title changed) is parsed again; so is one whose twin is missing,
    unreadable or of another format. The loaded target then says what the edited YAML says."""
    from edgeconv import targets
    from edgeconv.targets import compiled, twins

    data, folder = tmp_path / "data", tmp_path / "compiled"
    data.mkdir()
    folder.mkdir()
    text = (DATA_DIR / "edgetpu.yaml").read_text(encoding="utf-8")
    (data / "edgetpu.yaml").write_text(text, encoding="utf-8")
    (folder / "edgetpu.json").write_bytes((twins.COMPILED_DIR / "edgetpu.json").read_bytes())
    monkeypatch.setattr(targets, "DATA_DIR", data)
    monkeypatch.setattr(compiled, "COMPILED_DIR", folder)
    loaded = compiled.load_compiled("edgetpu", data / "edgetpu.yaml")
    assert loaded is not None and loaded.title == load_target_file(DATA_DIR / "edgetpu.yaml").title

    edited = text.replace("title: ", "title: Edited ", 1)
    assert edited != text
    (data / "edgetpu.yaml").write_text(edited, encoding="utf-8")
    assert compiled.load_compiled("edgetpu", data / "edgetpu.yaml") is None
    targets.load_target.cache_clear()
    try:
        assert targets.load_target("edgetpu").title.startswith("Edited ")
        (data / "edgetpu.yaml").write_text(text, encoding="utf-8")
        for broken in ("{", '{"format": 2}', "[]"):
            (folder / "edgetpu.json").write_text(broken, encoding="utf-8")
            assert compiled.load_compiled("edgetpu", data / "edgetpu.yaml") is None
        (folder / "edgetpu.json").unlink()
        assert compiled.load_compiled("edgetpu", data / "edgetpu.yaml") is None
    finally:
        targets.load_target.cache_clear()


def test_checking_with_builtin_targets_parses_no_yaml() -> None:
    """`edgeconv check` with built-in targets imports no YAML library (the twins are JSON)."""
    import subprocess
    import sys

    probe = ("import sys; from edgeconv.cli import main; main(['check', sys.argv[1], '--target', 'edgetpu', "
             "'--target', 'tflm-cmsis-nn', '--format', 'json'])")  # edgetpu reads the op-version table
    code = (f"import sys\ntry:\n    exec({probe!r})\nexcept SystemExit as e:\n    pass\n"
            "print('yaml' in sys.modules, 'edgeconv.report_model' in sys.modules, file=sys.stderr)")
    out = subprocess.run([sys.executable, "-c", code, str(REPO / "tests" / "data" / "conv2d-relu.int8.tflite")],
                         capture_output=True, text=True, check=True)
    assert out.stderr.strip().splitlines()[-1] == "False False", out.stderr


def test_every_constraint_documents_its_rule() -> None:
    for name, fn in CONSTRAINTS.items():
        assert inspect.getdoc(fn), f"constraint {name} has no docstring (its rule text)"
        assert name == fn.__name__


# -- every rule of every built-in target fails for its own reason ------------------------

def _first(spec: str) -> str:
    alt = spec.removesuffix("...").split("|")[0]
    return {"any": "int8", "float32-io": "float32"}.get(alt, alt)


def _conforming(b: Builder, op_type: str, rule: Rule) -> tuple[list[TensorInfo], list[TensorInfo]]:
    ins = expand_spec(rule.params["inputs"], len(rule.params["inputs"]))
    outs = expand_spec(rule.params["outputs"], len(rule.params["outputs"]))
    return [b.tensor(_first(s)) for s in ins], [b.tensor(_first(s)) for s in outs]


def _violate(op_type: str, rule: Rule) -> tuple[OpInfo, TFLiteModel, str]:
    """An op that breaks this rule, and (part of) the detail the rule must report."""
    op_type, _, code = op_type.partition(":")
    b, p = Builder(), dict(rule.params)
    b.custom_code = code or None
    x, y = b.tensor, b.tensor
    check = rule.check
    if check == "tensor_dtype":
        ins, outs = _conforming(b, op_type, rule)
        bad = "float32" if "float32" not in p["inputs"][0] else "int64"
        ins[0] = b.tensor(bad)
        island = " inside the model (a float island)" if bad == "float32" else ""
        return *b.op(op_type, ins, outs), f"input 0 't{ins[0].index}' is {bad}{island}, expected"
    if check == "output_quantization":
        return *b.op(op_type, [x()], [y(scale=0.25, zero_point=3, name="out")]), \
            "output 'out' has scale 0.25 and zero point 3"
    if check == "shape_static":
        return *b.op(op_type, [x(signature=(-1, 4), name="dyn")], [y()]), "dynamic shape: 'dyn' [-1, 4]"
    if check == "shape_static_except_batch":
        return *b.op(op_type, [x(signature=(-1, 4, -1), shape=(1, 4, 5), name="dyn")], [y()]), \
            "dynamic dimension other than the batch: 'dyn' [-1, 4, -1]"
    if check == "custom_op_known":
        return *b.op("CUSTOM", [x("float32")], [y("float32")], custom_code="FlexErf"), "Flex op 'FlexErf'"
    if check in ("output_elements_known", "output_elements_mapped"):
        n = p["maximum"] + 1
        return *b.op(op_type, [x(shape=(1, n))], [y(shape=(1, n), name="big")]), f"= {n:,} elements"
    if check == "reshape_size_mapped":  # rank 4 kept, one element past the rank-4 bound
        n = p["rank4_maximum"] + 1
        return *b.op(op_type, [x(shape=(1, 1, 1, n)), x("int32", (4,), value=[1, n, 1, 1])],
                     [y(shape=(1, n, 1, 1), name="big")]), f"= {n:,} elements, over {p['rank4_maximum']:,} for a rank-4"
    if check == "align_corners_identity":
        return *b.op(op_type, [x(shape=(1, 2, 3, 4)), x("int32", (2,), value=[4, 6])], [y(shape=(1, 4, 6, 4))],
                     align_corners=True), "align_corners=True resizing 2x3 to 4x6"
    if check == "same_quantization":
        dt = p["dtypes"][0]
        return *b.op(op_type, [x(dt, name="a")], [y(dt, scale=0.5, name="b")]), "'b' scale 0.5"
    if check == "activation_per_tensor":
        return *b.op(op_type, [x(scale=(0.1, 0.2), name="act")], [y()]), "'act' has 2 scales"
    if check == "op_builtin":
        return *b.op("CUSTOM", [x("float32")], [y("float32")], custom_code="FlexErf"), "Flex op 'FlexErf'"
    if check == "op_version_runtime":
        return *b.op(op_type, [x(), x()], [y()], version=99), "version 99 is newer than any version in the table"
    if check == "tensor_outer_dims_one":
        shape = (2,) + (3,) * p["inner"]
        return *b.op(op_type, [x(shape=shape, name="big")], [y()]), f"'big' is {'x'.join(map(str, shape))}"
    if check == "input_rank":
        rank = max(p["ranks"]) + 1
        return *b.op(op_type, [x(shape=(1,) * rank, name="r")], [y()]), f"has rank {rank}"
    if check == "axis_not_batch":
        if op_type in ("PAD", "PADV2", "MIRROR_PAD"):
            pads = x("int32", (2, 2), value=[[1, 0], [0, 0]])
            return *b.op(op_type, [x(shape=(1, 4)), pads], [y()]), "pads the batch axis by [1, 0]"
        if op_type == "PACK":
            return *b.op(op_type, [x(), x()], [y()], axis=0), "packs along axis 0"
        axes = x("int32", (2,), value=[0, 2])
        return *b.op(op_type, [x(shape=(1, 3, 4)), axes], [y()]), "reduces over axes [0, 2]"
    if check == "reduce_depth_multiple":
        depth = p["multiple"] + 1
        axes = x("int32", (1,), value=[3])
        return *b.op(op_type, [x(shape=(1, 2, 2, depth)), axes], [y()]), f"over a depth of {depth}"
    if check == "innermost_elements_max":
        n = p["maximum"] + 1
        return *b.op(op_type, [x(shape=(1, n))], [y(shape=(1, n))]), f"has {n} elements"
    if check == "output_innermost_only":
        return *b.op(op_type, [x()], [y(shape=(1, 2, 3), name="o")]), "output 'o' is 1x2x3"
    if check == "squeeze_leading_ones":
        return *b.op(op_type, [x(shape=(3, 1, 4))], [y(shape=(3, 4))]), "squeezes 3x1x4 to 3x4"
    if check == "alpha_innermost":
        return *b.op(op_type, [x(), x(shape=(2, 3), value=np.zeros((2, 3)), name="alpha")], [y()]), \
            "alpha 'alpha' is 2x3"
    if check == "constant_inputs_zero_pad":
        return *b.op(op_type, [x(), x(value=[1, 2, 3, 4]), x()], [y()]), "3 inputs, 1 of them constant"
    if check == "operands_constant":
        i = p["inputs"][0]
        ins = [x() for _ in range(i + 1)]
        return *b.op(op_type, ins, [y()]), f"not constant: input {i}"
    if check == "input_present":
        return *b.op(op_type, [x(), x(value=[1, 2, 3, 4])], [y()]), f"input {p['index']} is missing"
    if check == "input_count":
        n = p["maximum"] + 1
        return *b.op(op_type, [x() for _ in range(n)], [y()]), f"{n} inputs"
    if check == "output_count":
        n = p["maximum"] + 1
        return *b.op(op_type, [x("int32", (), value=3), x()], [y() for _ in range(n)]), f"{n} outputs"
    if check == "paddings_non_negative":
        pads = x("int32", (2, 2), value=[[0, 0], [-1, 0]])
        return *b.op(op_type, [x(), pads], [y()]), "paddings [[0, 0], [-1, 0]]"
    if check == "slice_strides_one":
        idx = [x("int32", (2,), value=[0, 0]), x("int32", (2,), value=[1, 4]), x("int32", (2,), value=[1, 2])]
        return *b.op(op_type, [x(), *idx], [y()], shrink_axis_mask=0), "strides [1, 2]"
    if check == "fused_activation":
        return *b.op(op_type, [x(), x()], [y()], fused_activation_function="TANH"), "fused activation TANH"
    if check == "option_value":
        bad = True if p["allowed"] == [False] else "__not_allowed__"
        return *b.op(op_type, [x(), x()], [y()], **{p["option"]: bad}), f"{p['option']} is {bad}"
    if check == "option_min":
        low = p["minimum"] - 1
        return *b.op(op_type, [x()], [y()], **{p["option"]: low}), f"{p['option']} is {low}"
    if check == "dilation_equal":
        return *b.op(op_type, [x()], [y()], dilation_w_factor=1, dilation_h_factor=2), "dilation 2x1"
    if check == "unit_window_stride":
        return *b.op(op_type, [x()], [y()], filter_height=1, filter_width=1, stride_h=2, stride_w=2), \
            "1x1 window with stride 2x2"
    if check == "input_output_scale_ratio":
        return *b.op(op_type, [x(scale=p["maximum"] * 4.0), x(scale=1.0)], [y(scale=1.0)]), \
            "input 0 / output scale"
    if check == "product_scale_ratio":
        return *b.op(op_type, [x(scale=p["maximum"] * 4.0), x(scale=1.0)], [y(scale=1.0)]), \
            "input scales product / output scale"
    if check == "requantize_same_sign":
        return *b.op(op_type, [x("int8")], [y("uint8")]), "int8 to uint8"
    if check == "kernel_dtype":
        return *b.op(op_type, [x("float32")], [y("float32")]), "no optimized kernel for float32 input"
    if check == "optimized_kernel":
        return *b.op(op_type, [x()], [y()]), "only the portable reference kernel exists"
    if check == "inputs_same_shape":
        return *b.op(op_type, [x(shape=(1, 4)), x(shape=(4,))], [y()]), "broadcasts 1x4 with 4"
    if check == "no_hybrid":
        return *b.op(op_type, [x("float32", name="f"), x("int8", value=[1, 2, 3, 4], name="w")], [y("float32")]), \
            "float32 input 'f' with int8 weights 'w'"
    if check == "softmax_input_scale":
        return *b.op(op_type, [x(scale=1e-9)], [y()]), "input scale 1e-09 gives a multiplier"
    if check == "consumers_delegated":  # a float16 table read by a GATHER the delegate does not run
        table = x("float16", shape=(5, 4), value=np.ones((5, 4)), scale=None, name="table")
        op, model = b.op(op_type, [table], [y("float32", shape=(5, 4), scale=None, name="deq")])
        gather = OpInfo(1, 0, "GATHER", 1, None, (op.outputs[0], x("int32", scale=None)), (y("float32"),), {})
        model = dataclasses.replace(model, subgraphs=(dataclasses.replace(
            model.main, tensors=tuple(b.tensors), ops=(op, gather)),))
        return op, model, "read by #1 GATHER (cpu_fallback), which the delegate does not run"
    raise AssertionError(f"no violation recipe for constraint {check}: add one")


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
    if rule.check in AFTER_PLACEMENT:  # judged with the statuses of the ops that read its output
        ok, observed = rule.fn(op, model, {(0, 1): "cpu_fallback"}, **rule.params)
        assert not ok and detail in observed
        found = {v.rule: v for v in check_model(model, target).ops[0].violations}
        assert found[f"{target.name}.{op.type}.{rule.id}"].effect is rule.effect
        return
    ok, observed = rule.fn(op, model, **rule.params)
    assert not ok
    assert detail in observed
    if op.label == op_type or rule.check == "op_builtin":
        result = check_op(op, model, target)
        found = {v.rule: v for v in result.violations}
        rule_id = f"{target.name}.{op.type}.{rule.id}"
        assert rule_id in found, [v.rule for v in result.violations]
        assert found[rule_id].text == rule.text and found[rule_id].effect is rule.effect


def test_every_constraint_kind_is_used_or_tested() -> None:
    used = {r.check for name in builtin_target_names() for entry in load_target(name).ops.values()
            for r in (*load_target(name).all_ops, *entry.rules)}
    # output_elements_known (effect uncertain) is for target files of a user's own: the built-in targets
    # learned the sizes they used it for (test_target_proofs: the uncertain mechanism with it).
    assert used | {"op_listed", "single_segment", "compiler_placement", "output_elements_known"} == set(CONSTRAINTS)


def test_conforming_ops_pass_their_dtype_rules() -> None:
    for name in builtin_target_names():
        target = load_target(name)
        for op_name, entry in target.ops.items():
            for rule in entry.rules:
                if rule.check == "tensor_dtype":
                    b = Builder()
                    ins, outs = _conforming(b, op_name, rule)
                    op, model = b.op(op_name.split(":")[0], ins, outs)
                    model = dataclasses.replace(model, subgraphs=(dataclasses.replace(
                        model.main, inputs=tuple(t.index for t in ins), outputs=tuple(t.index for t in outs)),))
                    ok, detail = rule.fn(op, model, **rule.params)
                    assert ok, (name, op_name, detail)


# -- the same rules on real converted models ---------------------------------------------

@pytest.mark.parametrize(("fixture", "expected"), [
    ("conv2d-relu.int8", {}),
    ("softmax-dense.int8", {}),
    ("add-uint8io.int8", {}),
    ("dense.float32", {0: ["generic-int8.FULLY_CONNECTED.tensor_dtype"]}),
    ("dense-dynamic.int8", {}),  # its batch is -1 (test_a_batch_only_dynamic_dimension_runs)
    ("erf-flex.float32", {0: ["generic-int8.CUSTOM.op_builtin", "generic-int8.CUSTOM.op_listed"]}),
    ("random-uniform.float32", {0: ["generic-int8.RANDOM_UNIFORM.op_listed"],
                                1: ["generic-int8.MUL.tensor_dtype"]}),
    ("sin-island.int8", {1: ["generic-int8.DEQUANTIZE.tensor_dtype"], 2: ["generic-int8.SIN.op_listed"],
                         3: ["generic-int8.QUANTIZE.tensor_dtype"]}),
])
def test_generic_int8_on_converted_models(fixture: str, expected: dict[int, list[str]]) -> None:
    assert violations(DATA / f"{fixture}.tflite") == expected


BATCH_ONLY = [DATA / "dense-dynamic.int8.tflite",
              *sorted((DATA / "oracles" / "edgetpu-public" / "jorgitou98").glob("*_quant.tflite"))]


def _only_the_batch_is_dynamic(path: Path) -> bool:
    tensors = [t for sg in read_tflite(path).subgraphs for t in sg.tensors]
    return any(t.dynamic for t in tensors) and not any(d < 0 for t in tensors for d in t.shape_signature[1:])


@pytest.mark.parametrize("path", BATCH_ONLY, ids=lambda p: p.stem)
def test_a_batch_only_dynamic_dimension_runs(path: Path) -> None:
    """A -1 in the batch dimension only: LiteRT's builtin kernels allocate and run the model at its stored
    batch (the oracle), so generic-int8 does not reject it (244 ops in 10 third-party models did)."""
    from ai_edge_litert.interpreter import Interpreter

    assert _only_the_batch_is_dynamic(path)
    interpreter = Interpreter(model_path=str(path), experimental_preserve_all_tensors=False)
    interpreter.allocate_tensors()
    for d in interpreter.get_input_details():
        assert d["shape_signature"][0] == -1 and d["shape"][0] == 1
        interpreter.set_tensor(d["index"], np.zeros(d["shape"], d["dtype"]))
    interpreter.invoke()
    rules = [v.rule for r in check_model(read_tflite(path), load_target("generic-int8")).ops for v in r.violations]
    assert not [r for r in rules if ".shape_static" in r], rules


def test_a_dynamic_dimension_other_than_the_batch_still_fails_generic_int8() -> None:
    """The same model with its feature dimension made -1 as well: not a batch-only signature; rejected."""
    def widen(model: Any) -> None:
        for t in model.subgraphs[0].tensors:
            if t.shapeSignature is not None and len(t.shapeSignature) == 2:
                t.shapeSignature = [-1, -1]

    data = edit((DATA / "dense-dynamic.int8.tflite").read_bytes(), widen)
    found = check_model(parse_tflite(data, "m.tflite"), load_target("generic-int8"))
    (op,) = found.ops
    assert op.status.value == "unsupported"
    assert [v.rule for v in op.violations] == ["generic-int8.FULLY_CONNECTED.shape_static_except_batch"]
    assert op.violations[0].detail.startswith("dynamic dimension other than the batch: ")


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
     f"mine.yaml:7: ops.ADD.rules[0].check: unknown constraint 'tensor_dtyp' (allowed: {allowed_list(CONSTRAINTS)}); "
     "did you mean 'tensor_dtype'?"),
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
    ("ops:\n  ADD: {source: DOC, rules: [{check: shape_static, effect: maybe}]}\n",
     "mine.yaml:7: ops.ADD.rules[0].effect: unknown effect 'maybe' (allowed: cpu_fallback, uncertain, unsupported, "
     "warning)"),
    ("ops:\n  ADD: {source: DOC, rules: [{check: shape_static, status: cpu_fallback}]}\n",
     "mine.yaml:7: ops.ADD.rules[0]: unknown key 'status' for constraint 'shape_static' (allowed: check, effect, fix, "
     "id, source)"),
    ("placement: {kind: prefx, source: DOC}\nops: {}\n",
     "mine.yaml:6: placement.kind: unknown placement 'prefx' (allowed: independent, prefix, segment); did you mean "
     "'prefix'?"),
    ("opps: {}\n", "mine.yaml:6: top level: unknown key 'opps' (allowed: accelerator, all_ops, compiler, "
                   "default_effect, "
                   "description, fixes, name, notes, ops, parameter_memory, placement, quantization, schema_version, "
                   "sources, title, unlisted); did you mean 'ops'?"),
    ("parameter_memory: {array_rows: 64, row_multiple: 0, wide_row_multiple: 64, fc_row_multiple: 64, "
     "input_multiple: 4, bytes_per_row: 8, cache_min_bytes: 10, cache_max_bytes: 20, source: DOC}\nops: {}\n",
     "mine.yaml:6: parameter_memory.row_multiple: expected a whole number of at least 1, got '0'"),
    ("parameter_memory: {array_rows: 64, row_multiple: 16, wide_row_multiple: 64, fc_row_multiple: 64, "
     "input_multiple: 4, bytes_per_row: -1, cache_min_bytes: 10, cache_max_bytes: 20, source: DOC}\nops: {}\n",
     "mine.yaml:6: parameter_memory.bytes_per_row: expected a whole number of at least 0, got '-1'"),
    ("parameter_memory: {array_rows: 64, row_multiple: 16, wide_row_multiple: 64, fc_row_multiple: 64, "
     "input_multiple: 4, bytes_per_row: 8, cache_min_bytes: 21, cache_max_bytes: 20, source: DOC}\nops: {}\n",
     "mine.yaml:6: parameter_memory.cache_min_bytes: 21 is more than cache_max_bytes 20"),
    ("parameter_memory: {array_rows: 64, row_multiple: 16, wide_row_multiple: 64, fc_row_multiple: 64, "
     "input_multiple: 4, bytes_per_row: 8, cache_min_bytes: 10, cache_max_bytes: 20, source: DOCS}\nops: {}\n",
     "mine.yaml:6: parameter_memory.source: unknown source 'DOCS' (defined: DOC); did you mean 'DOC'?"),
    ("parameter_memory: {array_rows: 64, row_multiple: 16, wide_row_multiple: 64, fc_row_multiple: 64, "
     "input_multiple: 4, bytes_per_row: 8, cache_min_bytes: 10, cache_max_bytes: 20, source: DOC, rows: 3}\nops: {}\n",
     "mine.yaml:6: parameter_memory: unknown key 'rows' (allowed: array_rows, bytes_per_row, cache_max_bytes, "
     "cache_min_bytes, fc_row_multiple, input_multiple, row_multiple, source, wide_row_multiple)"),
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
    shown = run_edgeconv("targets", "show", "generic-int8", "--op", "softmax")
    assert shown.returncode == 0
    assert shown.stdout.splitlines()[0] == "generic-int8: SOFTMAX"
    at = shown.stdout.splitlines().index("  generic-int8.SOFTMAX.output_quantization [QS]")
    assert " ".join(" ".join(shown.stdout.splitlines()[at + 1:at + 3]).split()).startswith(
        "The int8 output has the fixed quantization scale 0.00390625 and zero point -128.")
    typo = run_edgeconv("targets", "show", "generic-int8", "--op", "SOFTMX")
    assert typo.returncode == 2
    assert typo.stderr.strip() == ("edgeconv: error: unknown op 'SOFTMX': not a TFLite builtin op nor CUSTOM:<code>; "
                                   "did you mean 'SOFTMAX'?")
    bad = run_edgeconv("targets", "show", "generic-int9")
    assert bad.returncode == 2
    assert bad.stderr.strip() == (f"edgeconv: error: unknown target 'generic-int9' (allowed: {TARGET_CHOICES}); "
                                  "did you mean 'generic-int8'?")


@pytest.mark.parametrize("name", ["generic-int8", "arm-neon", "edgetpu", "tflm-cmsis-nn"])
def test_targets_show_says_each_rule_and_fix_once(name: str) -> None:
    """Grouped per rule: a rule id with its fix appears once, with every op it applies to; no line
    is wider than the width asked for (COLUMNS, what a terminal says)."""
    from edgeconv.targets.describe import describe

    target = load_target(name)
    text = describe(target, width=90)
    assert all(len(line) <= 90 or len(line.split()[-1]) > 40 for line in text.splitlines())  # or one long URL
    rules = [r for entry in target.ops.values() for r in entry.rules if r.fix]
    flat = " ".join(text.split())
    for fix in {r.fix for r in rules}:  # once per rule id and effect it belongs to, not once per op
        said = " ".join(fix.split())
        assert flat.count(f"Fix: {said}") == len({(r.id, r.effect) for r in rules if r.fix == fix}), said
    shown = sorted({op for op in target.ops})
    listed = " ".join(text.split("Supported ops (")[1].split("\n\n")[0].split())
    assert all(f" {op}," in f" {listed.split(': ', 1)[1]}".replace(".", ",") for op in shown)


@pytest.mark.parametrize("name", ["generic-int8", "arm-neon", "edgetpu", "tflm-cmsis-nn"])
@pytest.mark.parametrize("io", ["none", "inputs_only", "outputs_only", "scalars", "optional_missing"])
def test_rules_never_assume_an_op_has_inputs_or_outputs(name: str, io: str) -> None:
    """Fuzzed and hand-edited files have ops without inputs or outputs, scalars where a kernel expects
    4-D tensors, and left-out optional inputs: every rule answers, none crashes (issue 17)."""
    from edgeconv.targets.cost import op_cost

    target = load_target(name)
    for op_type in [*sorted(target.ops), "CUSTOM:Unknown", "UNIDIRECTIONAL_SEQUENCE_LSTM", "BATCH_MATMUL"]:
        b = Builder()
        kind, _, code = op_type.partition(":")
        if io == "none":
            ins: list[TensorInfo | None] = []
            outs: list[TensorInfo] = []
        elif io == "inputs_only":
            ins, outs = [b.tensor(), b.tensor("int32", (1,))], []
        elif io == "outputs_only":
            ins, outs = [], [b.tensor()]
        elif io == "scalars":
            ins, outs = [b.tensor(shape=()), b.tensor(shape=()), b.tensor("int32", ())], [b.tensor(shape=())]
        else:
            ins, outs = [None, b.tensor(), None, b.tensor("int32", (2,))], [b.tensor()]
        op, model = b.op(kind, ins, outs, custom_code=code or None)
        check_op(op, model, target)
        op_cost(op)



def test_a_model_of_thousands_of_float16_dequantizes_is_checked_in_linear_time() -> None:
    """A .tflite is a pull request's to write: 6,000 DEQUANTIZE ops of one float16 constant (a few hundred KB)
    made the float16 folding rule ask every op of the graph which of them read each one's output, 36 million
    questions (about 9 s against arm-neon). Each tensor's readers are found once per model now
    (TFLiteModel.readers): well under a second."""
    import copy
    import time

    from ai_edge_litert import schema_py_generated as schema

    def many(model: Any) -> None:
        graph = model.subgraphs[0]
        dequantize = next(o for o in graph.operators
                          if model.operatorCodes[o.opcodeIndex].builtinCode == schema.BuiltinOperator.DEQUANTIZE)
        for k in range(6000):
            out = copy.copy(graph.tensors[dequantize.outputs[0]])
            out.name = f"copy{k}".encode()
            graph.tensors.append(out)
            op = copy.copy(dequantize)
            op.outputs = [len(graph.tensors) - 1]
            graph.operators.append(op)

    model = parse_tflite(edit((DATA / "probes" / "xnn-dequantize_fp16_fc.tflite").read_bytes(), many), "many.tflite")
    assert sum(op.type == "DEQUANTIZE" for op in model.ops) == 6001
    start = time.perf_counter()
    result = check_model(model, load_target("arm-neon"))
    assert time.perf_counter() - start < 3.0
    assert result.verdict is Verdict.PASS and len(result.ops) == 6002
