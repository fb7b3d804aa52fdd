"""Target predictions against what real compilers and runtimes decided (no TensorFlow needed).

Edge TPU: the compiled oracle pairs (tests/data/oracles/edgetpu, google-coral/test_data; and
tests/data/oracles/edgetpu-public, third-party models with the compiler's logs) - what the real
compiler left outside its edgetpu-custom-op, op for op. Arm NEON: the XNNPACK delegate of
ai-edge-litert on the whole corpus (single-op models, probe models of the patterns real runtimes
decided, third-party models from packages); every disagreement must be in known_differences.yaml.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.targets import DATA_DIR, load_target
from edgeconv.targets.checker import check_model, check_op
from edgeconv.targets.target import OpStatus

from ..conftest import ORACLES, REPO
from ..oracles import CORPUS, compare_arm_neon, known_differences, xnnpack_delegated

OP_MODELS = sorted((REPO / "tests" / "data" / "ops").glob("*.tflite"))
FIXTURES = sorted((REPO / "tests" / "data").glob("*.tflite"))
PUBLIC = REPO / "tests" / "data" / "oracles" / "edgetpu-public" / "jorgitou98"
PAIRS = sorted([p.with_name(p.name.removesuffix("_edgetpu.tflite")) for p in ORACLES.glob("*_edgetpu.tflite")]
               + [p.with_name(p.name.removesuffix("_edgetpu.tflite")) for p in PUBLIC.glob("*_edgetpu.tflite")])


def compiler_cpu_ops(compiled: Path) -> Counter[str]:
    """Ops the Edge TPU compiler left on the CPU: everything but its edgetpu-custom-op."""
    return Counter(op.label for op in read_tflite(compiled).ops if op.custom_code != "edgetpu-custom-op")


@pytest.mark.parametrize("stem", PAIRS, ids=[p.name for p in PAIRS])
def test_edgetpu_predicts_what_the_compiler_left_on_the_cpu(stem: Path) -> None:
    result = check_model(read_tflite(stem.with_name(f"{stem.name}.tflite")), load_target("edgetpu"))
    predicted = Counter(r.op.label for r in result.ops if r.status is not OpStatus.SUPPORTED)
    assert predicted == compiler_cpu_ops(stem.with_name(f"{stem.name}_edgetpu.tflite"))
    assert not [r for r in result.ops if r.status is OpStatus.UNSUPPORTED]  # the compiler compiled them all


def test_edgetpu_names_the_first_blocking_op_of_deeplab() -> None:
    result = check_model(read_tflite(ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite"), load_target("edgetpu"))
    first = result.first_blocking
    assert first is not None and (first.op.index, first.op.type) == (64, "RESIZE_BILINEAR")
    assert [v.rule for v in first.violations] == ["edgetpu.RESIZE_BILINEAR.align_corners_identity"]
    following = [r for r in result.ops if r.follows_blocking]
    # #69 is a 33x33 -> 33x33 resize with align_corners (mappable on its own): it depends on #64.
    assert [(r.op.index, r.op.type) for r in following] == [(65, "QUANTIZE"), (66, "CONCATENATION"),
                                                            (67, "CONV_2D"), (68, "CONV_2D"),
                                                            (69, "RESIZE_BILINEAR")]
    assert {r.blocked_by for r in following} == {64}
    assert result.shares()["ops"] == pytest.approx(64 / 72)
    assert result.macs()["cpu_fallback"] > 0


def test_edgetpu_leaves_a_custom_op_at_the_end_on_the_cpu() -> None:
    result = check_model(read_tflite(ORACLES / "bodypix_mobilenet_v1_075_512_512_16_quant_decoder.tflite"),
                         load_target("edgetpu"))
    assert result.first_blocking is not None and result.first_blocking.op.custom_code == "PosenetDecoderOp"
    assert result.shares()["macs"] == 1.0


def test_the_accelerator_line_names_the_blocking_ops_layer_only_when_a_build_has_layers() -> None:
    """A build knows its graph's layer names and says the first blocking op's; `check` of a bare .tflite has
    none and says the op alone (and does not import the layer-name helper)."""
    from edgeconv.verdict import accelerator_line

    result = check_model(read_tflite(ORACLES / "bodypix_mobilenet_v1_075_512_512_16_quant_decoder.tflite"),
                         load_target("edgetpu"))
    head = "edgetpu: 43 of 44 ops (100.0% of MACs) on the Edge TPU; first blocking op #43 CUSTOM"
    assert accelerator_line(result).startswith(f"{head}: custom op 'PosenetDecoderOp'")
    assert accelerator_line(result, ["poses", "backbone"]).startswith(f"{head} (layer poses): custom op ")


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_arm_neon_agrees_with_xnnpack_on_the_corpus(path: Path) -> None:
    """Every op: supported <=> XNNPACK delegates it; a model the interpreter cannot load has an
    unsupported op; nothing that runs is called unsupported. Known differences are listed with why."""
    found = compare_arm_neon(path)
    wrong = sorted({*found["false_supported"], *found["false_unsupported"],  # type: ignore[misc]
                    *found.get("not_supported_but_delegated", [])})  # type: ignore[misc]
    assert wrong == known_differences().get((path.name, "arm-neon"), []), found


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


def test_the_xnnpack_oracle_sees_an_op_whose_only_reader_has_no_outputs() -> None:
    """pymicro-wakeword "okay nabu": three STRIDED_SLICE -> ASSIGN_VARIABLE pairs slice a CONCATENATION
    output that a SPLIT_V XNNPACK does not take also reads. The walk back from the DELEGATE nodes' outputs
    cannot reach them (the CONCATENATION output leaves the delegate, the ASSIGN_VARIABLE has no output);
    the arena shows where they run: a slice's output has no memory (only the delegate's kernel uses it),
    the CONCATENATION output the SPLIT_V reads has. Until this, the oracle called them CPU ops and
    edgeconv's "supported" a known difference."""
    from ai_edge_litert.interpreter import Interpreter

    from ..oracles import _has_no_memory

    path = next(p for p in CORPUS if p.name == "pymicro_wakeword-okay_nabu.tflite")
    found = {index: (op, on) for index, op, on in xnnpack_delegated(path)}
    assert [found[i] for i in (22, 23, 24, 25)] == [("CONCATENATION", True), ("STRIDED_SLICE", True),
                                                    ("ASSIGN_VARIABLE", True), ("SPLIT_V", False)]
    assert [found[i] for i in (33, 34, 35, 36, 43, 44, 45, 46)] == [
        ("CONCATENATION", True), ("STRIDED_SLICE", True), ("ASSIGN_VARIABLE", True), ("SPLIT_V", False)] * 2
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    slices, concatenated = (68, 79, 89), (67, 78, 88)
    assert [_has_no_memory(interpreter, t) for t in (*slices, *concatenated)] == [True] * 3 + [False] * 3


def test_there_are_models_to_prove_against() -> None:
    assert len(OP_MODELS) >= 60 and len(PAIRS) == 11 and len(CORPUS) >= 110


def test_known_differences_name_models_of_the_corpus() -> None:
    names = {p.name for p in CORPUS}
    assert {model for model, _ in known_differences()} <= names


def _etpu(name: str) -> list[tuple[str, str]]:
    result = check_model(read_tflite(REPO / "tests" / "data" / "probes" / f"{name}.tflite"), load_target("edgetpu"))
    return [(r.op.type, r.status.value) for r in result.ops]


def test_edgetpu_batch_only_dynamic_shape_compiles() -> None:
    """Compiler 16 compiles a shape_signature [-1, ...] at the stored batch (edgetpu-public logs)."""
    model = read_tflite(PUBLIC / "N32-nMACs41287680_quant.tflite")
    assert all(t.shape_signature[0] == -1 for t in model.main.tensors if not t.constant)
    result = check_model(model, load_target("edgetpu"))
    assert [(r.op.type, r.status.value) for r in result.ops] == [
        ("QUANTIZE", "cpu_fallback"), ("CONV_2D", "supported"), ("CONV_2D", "supported")]


def test_edgetpu_a_dynamic_dimension_besides_the_batch_is_not_compilable() -> None:
    from ai_edge_litert import schema_py_generated as schema

    from ..tflite_edit import edit

    def dynamic_width(model: schema.ModelT) -> None:
        for t in model.subgraphs[0].tensors:
            if t.shapeSignature is not None and len(t.shapeSignature) == 4:
                t.shapeSignature = [-1, t.shapeSignature[1], -1, t.shapeSignature[3]]

    data = edit((PUBLIC / "N32-nMACs41287680_quant.tflite").read_bytes(), dynamic_width)
    from edgeconv.converters.tflite_reader import parse_tflite

    result = check_model(parse_tflite(data), load_target("edgetpu"))
    conv = [r for r in result.ops if r.op.type == "CONV_2D"]
    assert {r.status for r in conv} == {OpStatus.UNSUPPORTED}
    assert "edgetpu.CONV_2D.shape_static_except_batch" in [v.rule for v in conv[0].violations]


def test_edgetpu_placement_follows_data_dependencies() -> None:
    """Ops that read only the backbone stay mapped after an ARG_MAX head that runs on the CPU."""
    assert _etpu("etpu-argmax_branch.int8") == [
        ("CONV_2D", "supported"), ("CONV_2D", "supported"), ("ARG_MAX", "cpu_fallback"), ("CAST", "cpu_fallback"),
        ("QUANTIZE", "cpu_fallback"), ("RESHAPE", "cpu_fallback"), ("STRIDED_SLICE", "cpu_fallback"),
        ("DEPTHWISE_CONV_2D", "supported"), ("CONV_2D", "supported"), ("LOGISTIC", "supported")]
    result = check_model(read_tflite(REPO / "tests" / "data" / "probes" / "etpu-argmax_branch.int8.tflite"),
                         load_target("edgetpu"))
    assert result.first_blocking is not None and result.first_blocking.op.type == "ARG_MAX"
    follows = [r for r in result.ops if r.follows_blocking]
    assert [r.op.type for r in follows] == ["RESHAPE", "STRIDED_SLICE"]
    assert {r.blocked_by for r in follows} == {2}


@pytest.mark.parametrize(("name", "expected"), [
    ("etpu-conv_dilation_h2_kernel_w1.int8", [("CONV_2D", "supported")]),
    ("etpu-resize_align_same.int8", [("MUL", "supported"), ("RESIZE_BILINEAR", "supported")]),
    ("etpu-resize_align_up.int8", [("MUL", "supported"), ("RESIZE_BILINEAR", "cpu_fallback")]),
    ("etpu-transpose_small.int8", [("MUL", "supported"), ("TRANSPOSE", "supported")]),
    ("etpu-transpose_large.int8", [("MUL", "supported"), ("TRANSPOSE", "cpu_fallback")]),
])
def test_edgetpu_patterns_compiler_16_decided(name: str, expected: list[tuple[str, str]]) -> None:
    assert _etpu(name) == expected


def test_edgetpu_tile_with_constant_multiples_is_in_the_table() -> None:
    target = load_target("edgetpu")
    result = check_model(read_tflite(REPO / "tests" / "data" / "probes" / "etpu-tile.int8.tflite"), target)
    tile = result.ops[0]
    # TF 2.21 writes a TILE version compiler 16 cannot parse; the op itself is in the table.
    assert [v.rule for v in tile.violations] == ["edgetpu.TILE.op_version_runtime"]


def test_edgetpu_uncertain_size_makes_what_depends_on_it_uncertain(tmp_path: Path) -> None:
    """A size limit of unknown value (output_elements_known, effect uncertain, in a target file of one's own):
    the op may not map, and what reads it maps only if it does: uncertain, never supported. The built-in
    edgetpu target sends the same TRANSPOSE to the CPU, and what reads it after it."""
    from ai_edge_litert import schema_py_generated as schema

    from edgeconv.converters.tflite_reader import parse_tflite
    from edgeconv.targets.target import load_target_file

    from ..tflite_edit import edit

    def chain(model: schema.ModelT) -> None:  # a second MUL reading the transpose's output
        sg = model.subgraphs[0]
        mul = sg.operators[0]
        out = sg.outputs[0]
        copy = schema.TensorT()
        src = sg.tensors[out]
        copy.shape, copy.type, copy.name, copy.buffer = list(src.shape), src.type, b"after", 0
        copy.quantization = src.quantization
        sg.tensors.append(copy)
        op = schema.OperatorT()
        op.opcodeIndex, op.inputs, op.outputs = mul.opcodeIndex, [out, out], [len(sg.tensors) - 1]
        op.builtinOptionsType, op.builtinOptions = mul.builtinOptionsType, mul.builtinOptions
        sg.operators.append(op)
        sg.outputs = [len(sg.tensors) - 1]

    data = edit((REPO / "tests" / "data" / "probes" / "etpu-transpose_large.int8.tflite").read_bytes(), chain)
    builtin = check_model(parse_tflite(data), load_target("edgetpu"))
    assert [(r.op.type, r.status.value) for r in builtin.ops] == [
        ("MUL", "supported"), ("TRANSPOSE", "cpu_fallback"), ("MUL", "cpu_fallback")]
    text = (DATA_DIR / "edgetpu.yaml").read_text().replace(
        "{check: output_elements_mapped, maximum: 57600,",
        "{check: output_elements_known, maximum: 57600, effect: uncertain,")
    (tmp_path / "edgetpu.yaml").write_text(text)
    result = check_model(parse_tflite(data), load_target_file(tmp_path / "edgetpu.yaml"))
    assert [(r.op.type, r.status.value) for r in result.ops] == [
        ("MUL", "supported"), ("TRANSPOSE", "uncertain"), ("MUL", "uncertain")]
    assert result.ops[2].violations[-1].detail == ("depends on #1 TRANSPOSE, which may not be mapped: it is mapped "
                                                   "only if that op is")
    assert result.shares()["ops"] == pytest.approx(1 / 3)


def _facts() -> list[dict[str, object]]:
    import yaml

    path = REPO / "tests" / "data" / "oracles" / "edgetpu-public" / "yolo-heads.yaml"
    return [{**op, "model": f"{m['repo']}/{m['path']}"} for m in yaml.safe_load(path.read_text()) for op in m["placed"]]


@pytest.mark.parametrize("fact", _facts(), ids=lambda f: f"{f['model']}#{f['index']}")
def test_edgetpu_places_large_reshape_and_transpose_as_compiler_16_did(fact: dict[str, Any]) -> None:
    """The RESHAPE and TRANSPOSE ops of three public YOLO heads, where compiler 16 put them (facts from their
    compiled pairs): an op that reads nothing the compiler left on the CPU is mapped exactly when the edgetpu
    target's own rules say supported; one that does stays on the CPU whatever its size (segment placement)."""
    from ..synthetic import Builder

    b = Builder()
    src, out = b.tensor(shape=tuple(fact["input"])), b.tensor(shape=tuple(fact["output"]), name="out")
    inputs = [src] if fact["op"] == "RESHAPE" else [src, b.tensor("int32", (len(fact["input"]),),
                                                                   value=_perm(fact["input"], fact["output"]))]
    if fact["op"] == "RESHAPE":
        inputs.append(b.tensor("int32", (len(fact["output"]),), value=fact["output"], scale=None))
    op, model = b.op(str(fact["op"]), inputs, [out])
    status = check_op(op, model, load_target("edgetpu")).status
    if fact["reads_cpu_op"]:
        assert fact["compiler"] == "cpu"
    else:
        assert (status is OpStatus.SUPPORTED) == (fact["compiler"] == "tpu"), (status, fact)
        assert status in (OpStatus.SUPPORTED, OpStatus.CPU_FALLBACK)  # learned: never uncertain


def _perm(src: list[int], out: list[int]) -> list[int]:
    """A permutation taking shape ``src`` to ``out`` (the facts keep shapes, not the perm operand)."""
    left = list(range(len(src)))
    perm = []
    for d in out:
        k = next(i for i in left if src[i] == d)
        left.remove(k)
        perm.append(k)
    return perm
