from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from edgeconv import ModelFileError
from edgeconv.converters.tflite_reader import TensorType, parse_tflite, read_tflite

from ..conftest import ORACLES, REPO

DATA = REPO / "tests" / "data"


def test_reads_a_converted_conv_model() -> None:
    model = read_tflite(DATA / "conv2d-relu.int8.tflite")
    assert len(model.subgraphs) == 1
    (op,) = model.ops
    assert (op.type, op.version, op.custom_code) == ("CONV_2D", 3, None)
    x, w, b = op.inputs
    assert (x.dtype, x.shape) == (TensorType.INT8, (1, 9, 7, 3))
    assert (w.dtype, w.shape, w.constant) == (TensorType.INT8, (5, 3, 3, 3), True)
    assert (b.dtype, b.shape, b.constant) == (TensorType.INT32, (5,), True)
    assert w.quantization is not None and w.quantization.per_axis and len(w.quantization.scale) == 5
    assert w.quantization.zero_point == (0,) * 5
    (y,) = op.outputs
    assert (y.dtype, y.shape, y.constant) == (TensorType.INT8, (1, 9, 7, 5), False)
    assert y.quantization is not None and not y.quantization.per_axis
    assert op.options["padding"] == "SAME" and op.options["fused_activation_function"] == "RELU"
    assert op.options["stride_w"] == 1 and op.options["dilation_h_factor"] == 1
    assert model.main.inputs == (x.index,) and model.main.outputs == (y.index,)


def test_reads_fixed_softmax_quantization() -> None:
    model = read_tflite(DATA / "softmax-dense.int8.tflite")
    assert [op.type for op in model.ops] == ["FULLY_CONNECTED", "SOFTMAX"]
    out = model.ops[1].outputs[0].quantization
    assert out is not None and out.scale == (0.00390625,) and out.zero_point == (-128,)


def test_reads_dynamic_shape_signature() -> None:
    op = read_tflite(DATA / "dense-dynamic.int8.tflite").ops[0]
    x = op.inputs[0]
    assert x is not None and x.shape == (1, 6) and x.shape_signature == (-1, 6) and x.dynamic


def test_reads_custom_and_flex_codes() -> None:
    (op,) = read_tflite(DATA / "erf-flex.float32.tflite").ops
    assert (op.type, op.custom_code, op.label) == ("CUSTOM", "FlexErf", "CUSTOM:FlexErf")


@pytest.mark.parametrize(("name", "ops"), [
    ("mobilenet_v1_0.25_128_quant", {"CONV_2D": 15, "DEPTHWISE_CONV_2D": 13, "AVERAGE_POOL_2D": 1, "RESHAPE": 1,
                                     "SOFTMAX": 1}),
    ("split_concat", {"CONCATENATION": 2, "SPLIT": 1}),
    ("keras_lstm_mnist_ptq", {"QUANTIZE": 2, "UNIDIRECTIONAL_SEQUENCE_LSTM": 1, "RESHAPE": 1,
                              "FULLY_CONNECTED": 1, "SOFTMAX": 1}),
    ("bodypix_mobilenet_v1_075_512_512_16_quant_decoder", {"QUANTIZE": 7, "PAD": 1, "CONV_2D": 21,
                                                           "DEPTHWISE_CONV_2D": 13, "CONCATENATION": 1,
                                                           "CUSTOM:PosenetDecoderOp": 1}),
])
def test_reads_old_uint8_models_from_other_converters(name: str, ops: dict[str, int]) -> None:
    model = read_tflite(ORACLES / f"{name}.tflite")
    counts: dict[str, int] = {}
    for op in model.ops:
        counts[op.label] = counts.get(op.label, 0) + 1
    assert counts == ops


def test_rejects_the_broken_oracle_model() -> None:
    with pytest.raises(ModelFileError) as info:
        read_tflite(ORACLES / "model_invoking_error.tflite")
    assert str(info.value).endswith("model_invoking_error.tflite: invalid TFLite model: tensor 0 of subgraph 0 uses "
                                    "buffer 0, but the model has 0 buffers")


def _truncations() -> list[int]:
    size = (DATA / "conv2d-relu.int8.tflite").stat().st_size
    return [8, 64, size // 2, size - 100]


@pytest.mark.parametrize("keep", _truncations())
def test_truncated_files_are_clear_errors(keep: int) -> None:
    data = (DATA / "conv2d-relu.int8.tflite").read_bytes()[:keep]
    with pytest.raises(ModelFileError, match=r"^cut\.tflite: (corrupt or truncated TFLite flatbuffer|invalid TFLite "
                                             r"model)"):
        parse_tflite(data, "cut.tflite")


@pytest.mark.parametrize(("data", "message"), [
    (b"", "x.tflite: the file is empty, not a TFLite model"),
    (b"\x00\x01", "x.tflite: not a TFLite flatbuffer (no 'TFL3' file identifier)"),
    (np.random.default_rng(7).bytes(4096), "x.tflite: not a TFLite flatbuffer (no 'TFL3' file identifier)"),
    (b"{\"not\": \"a model\"}", "x.tflite: not a TFLite flatbuffer (no 'TFL3' file identifier)"),
])
def test_not_a_model(data: bytes, message: str) -> None:
    with pytest.raises(ModelFileError) as info:
        parse_tflite(data, "x.tflite")
    assert str(info.value) == message


def test_random_bytes_behind_a_valid_identifier() -> None:
    data = b"\x18\x00\x00\x00TFL3" + np.random.default_rng(3).bytes(2000)
    with pytest.raises(ModelFileError, match=r"^x\.tflite: (corrupt or truncated|invalid TFLite model)"):
        parse_tflite(data, "x.tflite")


def test_missing_and_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(ModelFileError, match=r"^nope\.tflite: file not found$"):
        read_tflite(Path("nope.tflite"))
    os.mkdir("d.tflite")
    with pytest.raises(ModelFileError, match=r"^d\.tflite: is a directory"):
        read_tflite(Path("d.tflite"))


def test_the_op_name_list_is_the_installed_schemas() -> None:
    """validate checks op names against tflite_ops without loading the schema; a newer ai-edge-litert that adds
    operators fails here with the list to paste into edgeconv/converters/tflite_ops.py."""
    from ai_edge_litert import schema_py_generated as schema

    from edgeconv.converters.tflite_ops import BUILTIN_OP_NAMES

    installed = {name for name in vars(schema.BuiltinOperator) if not name.startswith("_")}
    assert installed == BUILTIN_OP_NAMES, sorted(installed)


@pytest.mark.parametrize("path", [
    REPO / "tests" / "data" / "conv2d-relu.int8.tflite",
    REPO / "tests" / "data" / "softmax-dense.int8.tflite",
    REPO / "tests" / "data" / "oracles" / "edgetpu" / "deeplabv3_mnv2_dm05_pascal_quant.tflite",  # uint8 (TF1)
    REPO / "tests" / "data" / "oracles" / "edgetpu" / "keras_lstm_mnist_ptq.tflite",
], ids=lambda p: p.name)
def test_constants_read_as_the_runtime_reads_them(path: Path) -> None:
    """Every constant tensor's value and dtype, as LiteRT's interpreter holds it: an INT8 weight read as
    UINT8 (or the reverse) would turn every rule and cost that looks at weights wrong."""
    from ai_edge_litert.interpreter import Interpreter

    from edgeconv.converters.tflite_reader import read_tflite

    model = read_tflite(path)
    interpreter = Interpreter(model_path=str(path))
    interpreter.allocate_tensors()
    compared: dict[str, int] = {}
    for tensor in model.subgraphs[0].tensors:
        value = model.constant(tensor)
        if value is None:
            continue
        expected = interpreter.get_tensor(tensor.index)
        assert value.dtype == expected.dtype, tensor.name
        assert np.array_equal(value, expected), tensor.name
        assert model.constant_values(tensor) == tuple(expected.reshape(-1).tolist()), tensor.name
        compared[str(value.dtype)] = compared.get(str(value.dtype), 0) + 1
    assert compared.get("int8", 0) + compared.get("uint8", 0) > 0, compared


MODELS = sorted(DATA.rglob("*.tflite"))


@pytest.mark.parametrize("path", MODELS, ids=lambda p: str(p.relative_to(DATA)))
def test_reads_every_model_as_flatcs_generated_reader_does(path: Path) -> None:
    """The reader walks the flatbuffer with struct and the schema as data; flatc's generated Python (with
    flatbuffers and NumPy) must read each of the repository's models into the same TFLiteModel, options
    included, or refuse it too."""
    from ..flatc_reader import parse

    data = path.read_bytes()
    try:
        expected = parse(data, "m.tflite")
    except (IndexError, KeyError):  # a model the oracle cannot read either
        with pytest.raises(ModelFileError, match=r"^m\.tflite: invalid TFLite model: "):
            parse_tflite(data, "m.tflite")
        return
    model = parse_tflite(data, "m.tflite")
    assert model == expected
    assert model.buffers == expected.buffers
    assert [op.options for op in model.ops] == [op.options for op in expected.ops]


def test_readers_are_the_ops_that_read_each_tensor() -> None:
    """TFLiteModel.readers (a float16 constant's DEQUANTIZE is judged by the ops that read its output) gives,
    for every tensor of every model here, the ops that list it among their inputs, in op order, each once
    (an op reading a tensor twice, as MUL x*x does, is one reader); a tensor no op reads has none."""
    checked = twice = 0
    for path in MODELS:
        try:
            model = read_tflite(path)
        except ModelFileError:
            continue
        for s, graph in enumerate(model.subgraphs):
            for tensor in graph.tensors:
                expected = tuple(o for o in graph.ops if any(t is not None and t.index == tensor.index
                                                             for t in o.inputs))
                assert model.readers(tensor.index, s) == expected, (path.name, s, tensor.index)
                checked += 1
            twice += sum(1 for o in graph.ops if len({t.index for t in o.inputs if t is not None})
                         < sum(1 for t in o.inputs if t is not None))
    assert checked > 2_000 and twice > 0, (checked, twice)
    assert model.readers(10**6) == ()


def test_the_differential_models_cover_the_op_kinds() -> None:
    """The models above are not a handful of convolutions: they hold many op types and option tables."""
    types = {op.type for path in MODELS if path.name != "model_invoking_error.tflite" for op in read_tflite(path).ops}
    assert len(MODELS) >= 150 and len(types) >= 60, (len(MODELS), sorted(types))


def _options_model(kind: str, fields: dict[str, object]) -> bytes:
    """A one-op model whose op carries builtin options of table ``kind`` with ``fields`` set."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    options = getattr(schema, kind + "T")()
    for name, value in fields.items():
        setattr(options, name, value)
    code = {v: k for k, v in vars(schema.BuiltinOptions).items()}
    model = schema.ModelT()
    model.version = 3
    opcode = schema.OperatorCodeT()
    opcode.builtinCode = schema.BuiltinOperator.ADD
    model.operatorCodes = [opcode]
    buffer = schema.BufferT()
    model.buffers = [buffer]
    tensor = schema.TensorT()
    tensor.shape = [1, 4]
    sg = schema.SubGraphT()
    sg.tensors = [tensor]
    op = schema.OperatorT()
    op.opcodeIndex = 0
    op.inputs = [0]
    op.outputs = [0]
    op.builtinOptionsType = getattr(schema.BuiltinOptions, kind)
    op.builtinOptions = options
    sg.operators = [op]
    model.subgraphs = [sg]
    assert code[op.builtinOptionsType] == kind
    builder = flatbuffers.Builder(256)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def _not_default(fmt: str, kind: str, seed: int) -> object:
    """A value of a field's type that is not its default (so the writer keeps it)."""
    if kind == "string":
        return f"s{seed}".encode()
    one = {"?": True, "f": 0.5 + seed, "d": 0.25 + seed}.get(fmt, 3 + seed)
    if kind == "vector":
        return [one, {"?": False}.get(fmt, one)] if fmt == "?" else [one, 0, one]
    return one


def _option_kinds() -> list[str]:
    from edgeconv.converters import tflite_schema as fbs

    return sorted(k for k in fbs.BUILTIN_OPTIONS.values() if k in fbs.TABLES)


@pytest.mark.parametrize("kind", _option_kinds())
def test_reads_every_builtin_options_table_as_flatc_does(kind: str) -> None:
    """Each builtin-options table, its fields left out (the defaults) and then each set to a value that is not
    its default: the reader's dict equals flatc's object API's, key for key."""
    from edgeconv.converters import tflite_schema as fbs

    from ..flatc_reader import parse

    fields = {}
    for i, (name, _, field_kind, fmt, _) in enumerate(fbs.TABLES[kind]):
        camel = "".join(w.capitalize() if j else w for j, w in enumerate(name.split("_")))
        assert field_kind in ("scalar", "vector", "string"), (kind, name, field_kind)
        fields[camel] = _not_default(fmt, field_kind, i)
    for setting in ({}, fields):
        data = _options_model(kind, setting)
        (op,) = parse_tflite(data).ops
        (expected,) = parse(data).ops
        assert op.options == expected.options, setting
        if setting and fields:
            assert all(v is not None for v in op.options.values()), op.options


def test_the_schema_data_is_what_the_generator_writes_from_the_installed_schema() -> None:
    """edgeconv/converters/tflite_schema.py is generated from ai-edge-litert's flatc output; a newer ai-edge-litert
    that adds fields or options fails here: run python scripts/gen_tflite_schema.py. (One whose schema is the
    same passes: the version the module names is not compared.)"""
    import importlib.util
    import re

    spec = importlib.util.spec_from_file_location("gen_tflite_schema", REPO / "scripts" / "gen_tflite_schema.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text = (REPO / "edgeconv" / "converters" / "tflite_schema.py").read_text(encoding="utf-8")
    found = re.search(r"from ai-edge-litert (\S+) ", text)
    assert found is not None
    assert text == module.render(found.group(1))


def test_reading_and_checking_a_model_imports_neither_numpy_nor_flatbuffers() -> None:
    """`edgeconv check` pays for what it reads: a fresh process reads and checks models with a PAD, a MEAN and
    a STRIDED_SLICE (constant paddings, axes and strides read as numbers) without NumPy or flatbuffers, and
    gives the verdicts it gives with them loaded."""
    import subprocess
    import sys

    from edgeconv import check

    names = ("pad", "mean_hw", "strided_slice_s2", "concat2")
    paths = [str(DATA / "ops" / f"{name}.int8.tflite") for name in names]
    targets = ["edgetpu", "arm-neon", "tflm-cmsis-nn", "generic-int8"]
    probe = ("import json, sys; from edgeconv import check; "
             "print(json.dumps([check(p, sys.argv[2].split(',')).to_json() for p in sys.argv[3:]])); "
             "print(sorted(m for m in ('numpy', 'flatbuffers', 'ai_edge_litert') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", probe, "-", ",".join(targets), *paths], capture_output=True,
                         text=True, check=True)
    verdicts, modules = out.stdout.splitlines()
    assert modules == "[]", modules
    import json

    assert json.loads(verdicts) == json.loads(json.dumps([check(p, targets).to_json() for p in paths]))
    ops = {op.type for p in paths for op in read_tflite(p).ops}
    assert {"PAD", "MEAN", "STRIDED_SLICE", "CONCATENATION"} <= ops, ops


def test_a_string_that_runs_past_the_end_is_refused_not_cut() -> None:
    """A tensor name whose length runs past the end of the file: flatc's reader returned the bytes up to the
    end (a cut name); this one refuses the file, as TFLite's verifier does."""
    data = (DATA / "conv2d-relu.int8.tflite").read_bytes()
    name = read_tflite(DATA / "conv2d-relu.int8.tflite").main.tensors[0].name.encode()
    at = data.index(len(name).to_bytes(4, "little") + name)
    broken = data[:at] + (len(data)).to_bytes(4, "little") + data[at + 4:]
    with pytest.raises(ModelFileError, match=r"^m\.tflite: corrupt or truncated TFLite flatbuffer \(ValueError: string "
                       r"'name' runs past the end of the file\)$"):
        parse_tflite(broken, "m.tflite")


def _renamed(tflite: bytes, old: str, new: str) -> bytes:
    """``tflite`` with a string of the same length replaced in place (the flatbuffer stays valid)."""
    assert len(old.encode()) == len(new.encode()) and tflite.count(old.encode()) >= 1
    return tflite.replace(old.encode(), new.encode())


def test_a_name_with_control_characters_reaches_no_output_as_it_is(tmp_path: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    """A .tflite is a pull request's to write: a tensor name holding a terminal escape and a newline is read
    with U+FFFD in their place (the reader is where every output gets its names: `check`'s text, Markdown and
    JSON quote them in the rules' details)."""
    from edgeconv.cli import main

    data = _renamed((DATA / "dense.float32.tflite").read_bytes(), "Identity", "Id\x1b[2J\nt")
    path = tmp_path / "hostile.tflite"
    path.write_bytes(data)
    assert [t.name for t in parse_tflite(data, "m").main.tensors] == ["x", "MatMul", "add", "Id\ufffd[2J\ufffdt"]
    for fmt in ("text", "md", "json"):
        assert main(["check", str(path), "--format", fmt]) == 1
        shown = capsys.readouterr().out.replace("\\ufffd", "\ufffd")  # JSON writes it escaped
        assert "\x1b" not in shown
        # the text output gives the model-wide cause instead of each op's details
        assert ("output 0 'Id\ufffd[2J\ufffdt' is float32" in shown) is (fmt != "text")


def test_a_description_keeps_its_lines() -> None:
    from edgeconv.converters.tflite_reader import _text

    assert _text(b"two\nlines\tand a \x07bell", lines=True) == "two\nlines\tand a \ufffdbell"
    assert _text(b"a\nname") == "a\ufffdname"
    assert _text(None) == ""
