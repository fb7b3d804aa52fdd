"""The NumPy reference (edgeconv.reference) is bit-exact against LiteRT's reference kernels
(OpResolverType.BUILTIN_REF, every tensor kept): every op model it computes, the probes, and third-party
full-integer models, on seeded random inputs. No TensorFlow."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv import reference
from edgeconv.converters.tflite_reader import TFLiteModel, read_tflite
from edgeconv.reference.fixedpoint import (
    multiply_by_quantized_multiplier,
    quantize_multiplier,
    rounding_divide_by_pot,
    saturating_rounding_doubling_high_mul,
)

from ..conftest import REPO

DATA = REPO / "tests" / "data"


def _computable(path: Path) -> bool:
    """Only ops the reference computes, integer tensors, and a model LiteRT's reference kernels prepare (an
    int8 CONCATENATION whose inputs are quantized differently is refused there)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    try:
        model = read_tflite(path)
        Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF).allocate_tensors()
    except Exception:
        return False
    return all(op.type in reference.SUPPORTED for op in model.ops) and not any(
        t is not None and t.is_float and op.type not in ("QUANTIZE", "DEQUANTIZE")
        for op in model.ops for t in (*op.inputs, *op.outputs))


MODELS = sorted(p for d in ("ops", "ops16", "probes", "oracles", "thirdparty") for p in (DATA / d).rglob("*.tflite")
                if not p.name.endswith("_edgetpu.tflite") and _computable(p)) + sorted(
    p for p in DATA.glob("*.tflite") if _computable(p))


def _litert(path: Path, model: TFLiteModel, seed: int) -> tuple[dict[str, np.ndarray], dict[int, np.ndarray]]:
    """Seeded inputs (uniform over the dtype, or [-1, 1] for a float input) and every tensor LiteRT's reference
    kernels compute from them."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF,
                     experimental_preserve_all_tensors=True)
    it.allocate_tensors()
    rng = np.random.default_rng(seed)
    feeds = {}
    for d in it.get_input_details():
        if d["dtype"] == np.float32:
            x = rng.uniform(-1, 1, d["shape"]).astype(np.float32)
        else:
            info = np.iinfo(d["dtype"])
            x = rng.integers(info.min, info.max + 1, d["shape"]).astype(d["dtype"])
        it.set_tensor(d["index"], x)
        feeds[model.main.tensors[d["index"]].name] = x
    it.invoke()
    return feeds, {t.index: it.get_tensor(t.index) for op in model.ops for t in op.outputs}


def test_there_are_models_to_check() -> None:
    assert len(MODELS) >= 35
    # Not in a model LiteRT's reference kernels run here: the reshape aliases, RELU_N1_TO_1, DEQUANTIZE, and
    # TILE v3 and DEPTH_TO_SPACE v2 (ai-edge-litert 2.3.0's reference resolver lacks those versions): by hand
    # below; NOT_EQUAL, which the converter leaves float: on an edited model below.
    assert {op.type for p in MODELS for op in read_tflite(p).ops} == set(reference.SUPPORTED) - {
        "EXPAND_DIMS", "SQUEEZE", "RELU_N1_TO_1", "DEQUANTIZE", "TILE", "DEPTH_TO_SPACE", "NOT_EQUAL"}


def test_tile_and_depth_to_space_by_hand() -> None:
    """The op models' own shapes: TILE [1, 6, 5, 4] x [1, 2, 1, 1], DEPTH_TO_SPACE block 2 of [1, 6, 5, 4]
    (the inverse of SPACE_TO_DEPTH, which is checked against LiteRT)."""
    from edgeconv.reference.ops import OPS

    for name in ("tile", "depth_to_space"):
        model = read_tflite(DATA / "ops" / f"{name}.int8.tflite")
        x = np.random.default_rng(0).integers(-128, 128, (1, 6, 5, 4)).astype(np.int8)
        out = reference.run(model, {model.main.tensors[model.main.inputs[0]].name: x}).outputs(model)
        (y,) = out.values()
        if name == "tile":
            assert np.array_equal(y, np.concatenate([x, x], axis=1))
        else:
            back, _ = OPS["SPACE_TO_DEPTH"](dataclasses.replace(model.ops[0], options={"block_size": 2}), model, [y])
            assert y.shape == (1, 12, 10, 1) and np.array_equal(back[0], x)
            assert y[0, 0, 1, 0] == x[0, 0, 0, 1] and y[0, 1, 0, 0] == x[0, 0, 0, 2]


def test_dequantize_by_hand() -> None:
    from edgeconv.reference.ops import dequantize

    from ..synthetic import Builder

    b = Builder()
    op, model = b.op("DEQUANTIZE", [b.tensor("int8", (1, 3), scale=0.1, zero_point=-3)],
                     [b.tensor("float32", (1, 3), scale=None)])
    (out,), _ = dequantize(op, model, [np.array([[-128, -3, 127]], np.int8)])
    assert out.dtype == np.float32
    assert out.tolist() == [[np.float32(0.1 * -125), 0.0, np.float32(0.1 * 130)]]


@pytest.mark.parametrize("path", MODELS, ids=lambda p: p.name)
def test_every_tensor_is_bit_exact_with_litert_reference_kernels(path: Path) -> None:
    """Seeded inputs until at least 20,000 output values were compared (at least 2 runs, at most 200): a
    rounding that differs only near a tie shows up on a small model too (the per-channel FULLY_CONNECTED's
    single rounding differed on 24 of 10,000 values, and on none of the 10 that 2 runs compared)."""
    model = read_tflite(path)
    per_run = sum(t.elements for i in model.main.outputs for t in (model.main.tensors[i],))
    for seed in range(min(max(2, -(-20_000 // max(per_run, 1))), 200)):
        feeds, want = _litert(path, model, seed)
        got = reference.run(model, feeds)
        for op in model.ops:
            for t in op.outputs:
                have = got.tensors[t.name]
                assert have.dtype == want[t.index].dtype and have.shape == want[t.index].shape, (op.index, op.type)
                differ = int(np.count_nonzero(have != want[t.index]))
                assert differ == 0, f"#{op.index} {op.type} '{t.name}': {differ} of {have.size} values differ"


def test_the_trace_says_the_gemm_and_the_requantization() -> None:
    model = read_tflite(DATA / "ops" / "conv2d.int8.tflite")
    x = np.random.default_rng(0).integers(-128, 128, (1, 6, 5, 4)).astype(np.int8)
    (step,) = reference.run(model, {"in0": x}).steps
    assert step.op == "CONV_2D"
    assert step.trace["gemm"] == [30, 7, 36]  # M = 6x5 output positions, N = 7 filters, K = 3x3x4
    assert step.trace["kernel"] == [3, 3] and step.trace["stride"] == [1, 1] and step.trace["padding"] == [1, 1]
    assert len(step.trace["output_multiplier"]) == 7  # per channel
    assert step.trace["accumulator"][0] <= step.trace["accumulator"][1]


@pytest.mark.parametrize(("name", "message"), [
    ("dense.float32.tflite", "op #0 FULLY_CONNECTED computes in float: the reference runs full-integer models "
                             "(quantize it with edgeconv, quantization.mode: int8)"),
    # A quantized model with a float island: quantizing again cannot help, and the op's name alone (SIN is not
    # among the ops the reference computes) would say the wrong thing.
    ("sin-island.int8.tflite", "op #2 SIN computes in float: the reference runs full-integer models, and the "
                               "converter kept this one in float between the model's integer ops (it has no "
                               "integer form of it; `edgeconv check` lists such ops under generic-int8)"),
    ("ops/neg.int8.tflite", "op #1 NEG computes in float: the reference runs full-integer models, and the "
                            "converter kept this one in float between the model's integer ops (it has no integer "
                            "form of it; `edgeconv check` lists such ops under generic-int8)"),
    ("ops/reduce_sum.int8.tflite", None),  # an integer op the reference does not compute (docs/REFERENCE.md)
])
def test_what_it_cannot_compute_is_refused_by_name(name: str, message: str | None) -> None:
    model = read_tflite(DATA / name)
    feeds = {model.main.tensors[i].name: np.zeros(model.main.tensors[i].shape, model.main.tensors[i].dtype.value)
             for i in model.main.inputs}
    with pytest.raises(reference.ReferenceError) as refused:
        reference.run(model, feeds)
    if message is None:
        assert str(refused.value).startswith("op #0 SUM is not computed by the reference (it computes ABS, ADD, ")
    else:
        assert str(refused.value) == message


def test_inputs_are_checked() -> None:
    model = read_tflite(DATA / "ops" / "conv2d.int8.tflite")
    with pytest.raises(reference.ReferenceError, match=r"^no model input 'image' \(inputs: in0\)$"):
        reference.run(model, {"image": np.zeros((1, 6, 5, 4), np.int8)})
    with pytest.raises(reference.ReferenceError, match=r"^input 'in0' is float32 \[1, 6, 5, 4\], the model takes "
                                                         r"int8 \[1, 6, 5, 4\]$"):
        reference.run(model, {"in0": np.zeros((1, 6, 5, 4), np.float32)})
    with pytest.raises(reference.ReferenceError, match=r"^inputs not given: in0$"):
        reference.run(model, {})


# -- the fixed-point arithmetic, by hand -----------------------------------------------------------------

@pytest.mark.parametrize(("real", "expected"), [
    (0.0, (0, 0)),
    (0.5, (1 << 30, 0)),
    (1.0, (1 << 30, 1)),
    (0.75, (3 << 29, 0)),
    (2.0**-40, (0, 0)),  # below 2^-31 of a Q0.31: zero
    (0.0029, (1594291860, -8)),  # 0.0029 * 2^8 = 0.7424; 0.7424 * 2^31 = 1594291860.3
])
def test_quantize_multiplier(real: float, expected: tuple[int, int]) -> None:
    m, s = quantize_multiplier(real)
    assert (m, s) == expected
    if m:
        assert abs(m * 2.0 ** (s - 31) - real) <= 2.0 ** (s - 32)


def test_rounding_is_the_kernels() -> None:
    # Doubling high multiply: round to nearest, a negative product nudged the other way, C division.
    assert saturating_rounding_doubling_high_mul(np.array([1 << 30, -(1 << 30), 3]), 1 << 30).tolist() == [
        1 << 29, -(1 << 29), 2]
    assert saturating_rounding_doubling_high_mul(np.array([-(2**31)]), -(2**31)).tolist() == [2**31 - 1]
    # Divide by a power of two: halves away from zero.
    assert rounding_divide_by_pot(np.array([5, -5, 6, -6, 7, -7]), 1).tolist() == [3, -3, 3, -3, 4, -4]
    assert rounding_divide_by_pot(np.array([5, -5, 6, -6]), np.array([2, 2, 2, 2])).tolist() == [1, -1, 2, -2]
    # x * 0.5: 1.5 -> 2 but -1.5 -> -1 (the doubling high multiply's nudge), as the kernels do.
    m, s = quantize_multiplier(0.5)
    assert multiply_by_quantized_multiplier(np.array([3, -3, 4]), m, s).tolist() == [2, -1, 2]


# -- edgeconv reference: the command -------------------------------------------------------------------------

MOBILENET = DATA / "oracles" / "edgetpu" / "mobilenet_v1_0.25_128_quant.tflite"


def test_the_command_writes_every_tensor_and_the_trace(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                       capsys: pytest.CaptureFixture[str]) -> None:
    """Float samples are quantized with the input's scale; tensors.npz holds what LiteRT's reference kernels
    compute from the same uint8 input; the trace names each op's GEMM."""
    import json

    from edgeconv.cli import main

    monkeypatch.chdir(tmp_path)
    images = np.random.default_rng(2).uniform(-1, 0.99, (3, 128, 128, 3)).astype(np.float32)  # scale 1/128, zp 128
    np.savez(tmp_path / "x.npz", input=images)
    assert main(["reference", str(MOBILENET), "--inputs", "x.npz", "--sample", "2", "--out", "ref"]) == 0
    assert capsys.readouterr().out.endswith("31 ops computed by hand; every tensor in ref/tensors.npz, each op's "
                                            "arithmetic in ref/trace.md and trace.json\n")
    tensors = np.load(tmp_path / "ref" / "tensors.npz")
    model = read_tflite(MOBILENET)
    q = model.main.tensors[model.main.inputs[0]].quantization
    assert q is not None
    fed = tensors["input"]
    assert fed.dtype == np.uint8 and fed.shape == (1, 128, 128, 3)
    assert np.abs(fed.astype(np.float64) - (images[2:3] / q.scale[0] + q.zero_point[0])).max() <= 0.5 + 1e-6
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    it = Interpreter(model_path=str(MOBILENET), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(model.main.inputs[0], fed)
    it.invoke()
    (out,) = (model.main.tensors[i] for i in model.main.outputs)
    assert np.array_equal(tensors[out.name], it.get_tensor(out.index))
    trace = json.loads((tmp_path / "ref" / "trace.json").read_text())
    assert [op["op"] for op in trace["ops"]][:2] == ["CONV_2D", "DEPTHWISE_CONV_2D"]
    assert trace["ops"][0]["trace"]["gemm"] == [64 * 64, 8, 27] and trace["ops"][0]["trace"]["stride"] == [2, 2]
    assert "| 0 | CONV_2D |" in (tmp_path / "ref" / "trace.md").read_text()


@pytest.mark.parametrize(("args", "error"), [
    (["--inputs", "wrong.npz"], "edgeconv: error: wrong.npz: array 'image' is not a model input (inputs: input)"),
    (["--inputs", "x.npz", "--sample", "3"], "edgeconv: error: x.npz: sample 3 of 3 in 'input'"),
    (["--inputs", "x.npz", "--out", "."], "edgeconv: error: output folder . holds the inputs x.npz"),
])
def test_the_command_refuses_bad_inputs_and_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                           capsys: pytest.CaptureFixture[str], args: list[str],
                                                           error: str) -> None:
    from edgeconv.cli import main

    monkeypatch.chdir(tmp_path)
    np.savez(tmp_path / "x.npz", input=np.zeros((3, 128, 128, 3), np.float32))
    np.savez(tmp_path / "wrong.npz", image=np.zeros((3, 128, 128, 3), np.float32))
    before = sorted(p.name for p in tmp_path.iterdir())
    argv = ["reference", str(MOBILENET), *args] + ([] if "--out" in args else ["--out", "ref"])
    assert main(argv) == 2
    assert error in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == before


def _pickled_npz(path: Path) -> None:
    np.savez(path, input=np.array([{"__reduce__": "os.system"}], dtype=object))


@pytest.mark.parametrize(("make", "error"), [
    (_pickled_npz, "x.npz: not a readable .npz (Object arrays cannot be loaded when allow_pickle=False)"),
    (lambda p: p.write_bytes(b"\x80\x04K\x01."), "x.npz: not a readable .npz (This file contains pickled (object) "
                                                  "data."),
    (lambda p: p.write_bytes(b""), "x.npz: not a readable .npz"),
    (lambda p: p.symlink_to("/dev/zero"), "x.npz"),
])
def test_hostile_inputs_run_no_code_and_write_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                      capsys: pytest.CaptureFixture[str], make: Any,
                                                      error: str) -> None:
    """An .npz from a pull request: a pickled object array, a bare pickle, an empty file, a device behind a
    link. Nothing is unpickled (allow_pickle=False), the answer is exit 2 naming the file, nothing is written."""
    from edgeconv.cli import main

    monkeypatch.chdir(tmp_path)
    make(tmp_path / "x.npz")
    assert main(["reference", str(MOBILENET), "--inputs", "x.npz", "--out", "ref"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"edgeconv: error: {error}") and len(err.strip().splitlines()) == 1, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.npz"]


# -- golden vectors and runtimes against the reference ------------------------------------------------

def test_a_runtime_that_differs_is_named_at_its_first_op_with_lsbs_and_share() -> None:
    from edgeconv.reference.drift import compare, first_difference
    from edgeconv.verify.runner import TFLiteRunner

    data = (DATA / "conv2d-relu.int8.tflite").read_bytes()
    model = read_tflite(DATA / "conv2d-relu.int8.tflite")
    runner = TFLiteRunner(data, reference=True, keep_tensors=True)
    rng = np.random.default_rng(5)
    (name, index), = runner.inputs.items()
    shape = tuple(model.main.tensors[index].shape)
    raw = {name: rng.integers(-128, 128, shape, dtype=np.int8)}
    runner.run_raw(raw)
    got = runner.tensors()
    computed = reference.run(model, raw)
    exact = compare(model, [(computed.tensors, got)])
    assert exact and first_difference(exact) is None
    last = model.main.ops[-1].outputs[0]
    bent = {**got, last.index: got[last.index].copy()}
    value = int(bent[last.index].flat[0])
    bent[last.index].flat[0] = value + 3 if value <= 124 else value - 3  # one element 3 LSB off, in the last op
    first = first_difference(compare(model, [(computed.tensors, bent)]))
    assert first is not None and (first.op, first.tensor, first.max_lsb) == (model.main.ops[-1].index, last.name, 3)
    assert first.to_json()["differ"] == pytest.approx(1 / got[last.index].size, abs=1e-6)


def test_golden_vectors_of_a_float_model_are_not_cross_checked_and_say_why() -> None:
    from edgeconv.verify.firmware import cross_check

    model = read_tflite(DATA / "dense.float32.tflite")
    checked = cross_check(model, [({model.main.tensors[i].name: np.zeros(model.main.tensors[i].shape, np.float32)
                                    for i in model.main.inputs}, {})])
    assert checked["verdict"] == "not computed" and "computes in float" in checked["why"]


def test_a_runtime_that_stops_on_a_model_stops_its_own_process_and_is_said() -> None:
    """TFLite Micro on a model with a Flex op: its process dies (a segmentation fault after it fails to allocate,
    measured), and the caller gets the reason; the build's process goes on."""
    from edgeconv.reference.drift import RuntimeStopped, in_a_process

    model = read_tflite(DATA / "erf-flex.float32.tflite")
    spec = model.main.tensors[model.main.inputs[0]]
    with pytest.raises(RuntimeStopped, match=r"^the tflm runtime stopped on this model \(exit -?\d+\): \S"):
        in_a_process("tflm", (DATA / "erf-flex.float32.tflite").read_bytes(),
                     [{spec.index: np.zeros(spec.shape, np.float32)}])


def _both_ways(path: Path, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A one-input, one-output model's output from the reference and from LiteRT's reference kernels."""
    got, want, _ = _both_ways_many(path, [x])
    return got, want


@pytest.mark.parametrize("op", ["hard_swish", "leaky_relu", "gelu", "gelu_tanh", "exp"])
@pytest.mark.parametrize(("in_scale", "in_zp", "out_scale", "out_zp"), [
    (0.02, -5, 0.015, -60),  # a narrow input range: the reluish multiplier shifts right
    (0.5, 20, 0.3, -100),  # a wide one (MobileNetV3's partly trained layers reach +-100): it shifts left
    (0.1, -128, 0.2, 127),  # zero points at the ends: the output clamps
    (0.0123, 0, 0.0123, 0),  # the same scale in and out
])
def test_element_wise_activations_are_bit_exact_at_every_input_and_many_scales(
        tmp_path: Path, op: str, in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> None:
    """Every one of the 256 int8 inputs, with the op model's quantization replaced (the kernels' fixed-point
    paths depend on the scales), against LiteRT's reference kernels."""
    from ..tflite_edit import edit

    def requantize(m: Any) -> None:
        sg = m.subgraphs[0]
        (o,) = sg.operators
        for index, scale, zp in ((o.inputs[0], in_scale, in_zp), (o.outputs[0], out_scale, out_zp)):
            sg.tensors[index].quantization.scale = [scale]
            sg.tensors[index].quantization.zeroPoint = [zp]
            sg.tensors[index].shape = [1, 256]
            sg.tensors[index].shapeSignature = [1, 256]

    path = tmp_path / f"{op}.tflite"
    path.write_bytes(edit((DATA / "ops" / f"{op}.int8.tflite").read_bytes(), requantize))
    x = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)
    got, want = _both_ways(path, x)
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


@pytest.mark.parametrize(("zero_point", "depth"), [(0, 4), (-7, 37), (100, 12_000)])
def test_l2_normalization_is_bit_exact_on_rows_at_the_edges(tmp_path: Path, zero_point: int, depth: int) -> None:
    """Rows at the edges of ``GetInvSqrtQuantizedMultiplierExp``: all at the zero point (a sum of squares of 0,
    taken as 1), one step off it (1), one element at each end of int8, every element at an end (the largest
    sums: 12,000 x 228^2 is past 2^29, brought back by shifts of two bits), and random rows; against LiteRT's
    reference kernel."""
    from ..tflite_edit import edit

    def reshape(m: Any) -> None:
        sg = m.subgraphs[0]
        (o,) = sg.operators
        for index in (o.inputs[0], o.outputs[0]):
            sg.tensors[index].shape = [8, depth]
            sg.tensors[index].shapeSignature = [8, depth]
        sg.tensors[o.inputs[0]].quantization.zeroPoint = [zero_point]

    path = tmp_path / "l2.tflite"
    path.write_bytes(edit((DATA / "ops" / "l2_normalize.int8.tflite").read_bytes(), reshape))
    rng = np.random.default_rng(depth)
    rows = np.full((8, depth), zero_point, np.int64)
    rows[1, 0] = zero_point + 1
    rows[2, 0], rows[2, -1] = -128, 127
    rows[3, :] = -128
    rows[4, :] = 127
    rows[5:] = rng.integers(-128, 128, (3, depth))
    got, want = _both_ways(path, rows.astype(np.int8))
    assert np.array_equal(got, want), [(r, np.flatnonzero(got[r] != want[r])[:5]) for r in range(8)]


@pytest.mark.parametrize(("op_type", "out_scale", "want"), [
    ("REDUCE_MAX", 0.1, [[7], [9]]), ("REDUCE_MIN", 0.1, [[-128], [-3]]), ("REDUCE_MAX", 0.2, None)])
def test_reduce_max_and_min_need_one_quantization(op_type: str, out_scale: float, want: Any) -> None:
    """The stored values' largest or smallest over the axes (checked against LiteRT on the op models above);
    an output quantized unlike the input is what TFLite's kernel refuses too: a clear error, no guess."""
    from edgeconv.reference.ops import OPS, Unsupported

    from ..synthetic import Builder

    b = Builder()
    x = np.array([[7, -128, 0], [9, -3, 4]], np.int8)
    op, model = b.op(op_type, [b.tensor("int8", (2, 3), scale=0.1, zero_point=1),
                               b.tensor("int32", (1,), value=np.array([1], np.int32), scale=None)],
                     [b.tensor("int8", (2, 1), scale=out_scale, zero_point=1)], options={"keep_dims": True})
    if want is None:
        with pytest.raises(Unsupported) as refused:
            OPS[op_type](op, model, [x, np.array([1], np.int32)])
        assert str(refused.value) == ("the input and output are quantized differently; TFLite's kernel requires "
                                      "them to be the same")
    else:
        (out,), trace = OPS[op_type](op, model, [x, np.array([1], np.int32)])
        assert out.tolist() == want and trace == {"axes": [1]}


@pytest.mark.parametrize(("in_scale", "in_zp"), [(0.0078, 0), (0.05, -20), (0.3, 100), (1.7, -128)])
def test_log_softmax_is_bit_exact_over_many_rows_and_input_scales(tmp_path: Path, in_scale: float,
                                                                  in_zp: int) -> None:
    """64 rows of 256 values each (every int8 value once per row, shuffled, then some rows narrowed to a few
    values): the exp sum, its log and the diff_min cut-offs depend on the input scale, against LiteRT's
    reference kernel (the output quantization is fixed: 16/256, zero point 127)."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from ..tflite_edit import edit

    def requantize(m: Any) -> None:
        sg = m.subgraphs[0]
        (o,) = sg.operators
        sg.tensors[o.inputs[0]].quantization.scale = [in_scale]
        sg.tensors[o.inputs[0]].quantization.zeroPoint = [in_zp]
        for index in (o.inputs[0], o.outputs[0]):
            sg.tensors[index].shape = [64, 256]
            sg.tensors[index].shapeSignature = [64, 256]

    path = tmp_path / "log_softmax.tflite"
    path.write_bytes(edit((DATA / "ops" / "log_softmax.int8.tflite").read_bytes(), requantize))
    rng = np.random.default_rng(7)
    x = np.stack([rng.permutation(np.arange(-128, 128)) for _ in range(64)]).astype(np.int8)
    x[32:] = np.clip(x[32:] // np.arange(1, 33)[:, None], -128, 127).astype(np.int8)  # narrower rows
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], x)
    it.invoke()
    want = it.get_tensor(it.get_output_details()[0]["index"])
    model = read_tflite(path)
    (got,) = reference.run(model, {model.main.tensors[model.main.inputs[0]].name: x}).outputs(model).values()
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


@pytest.mark.parametrize("scales", [(0.02, 3, 0.5, -10, 0.9, -128), (0.3, -100, 0.001, 50, 0.05, -120),
                                    (1.0, 10, 0.6, -3, 50.0, -128), (0.9, 0, 0.35, 7, 20.0, -100)])
def test_squared_difference_is_bit_exact_at_many_scales(tmp_path: Path, scales: tuple[Any, ...]) -> None:
    """Its left shift (7) and multipliers (in double) were measured with these scales: with a shift of 8, or
    multipliers in float32, some of the 3,600 values differ by 1 LSB."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    from ..tflite_edit import edit

    s1, z1, s2, z2, so, zo = scales

    def requantize(m: Any) -> None:
        sg = m.subgraphs[0]
        (o,) = sg.operators
        for index, scale, zp in ((o.inputs[0], s1, z1), (o.inputs[1], s2, z2), (o.outputs[0], so, zo)):
            sg.tensors[index].quantization.scale = [scale]
            sg.tensors[index].quantization.zeroPoint = [zp]

    path = tmp_path / "sqdiff.tflite"
    path.write_bytes(edit((DATA / "ops" / "squared_difference.int8.tflite").read_bytes(), requantize))
    model = read_tflite(path)
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    ins = it.get_input_details()
    for seed in range(30):
        rng = np.random.default_rng(seed)
        a, b = (rng.integers(-128, 128, d["shape"]).astype(np.int8) for d in ins)
        it.set_tensor(ins[0]["index"], a)
        it.set_tensor(ins[1]["index"], b)
        it.invoke()
        want = it.get_tensor(it.get_output_details()[0]["index"])
        names = [model.main.tensors[i].name for i in model.main.inputs]
        (got,) = reference.run(model, dict(zip(names, (a, b), strict=True))).outputs(model).values()
        assert np.array_equal(got, want), (seed, np.flatnonzero(got != want)[:10])


def _one_op(tmp_path: Path, model: str, quantization: list[tuple[float, int]], shapes: dict[int, list[int]],
            **options: Any) -> Path:
    """The last op of ``model`` (a path under tests/data) alone (the ops before it dropped, its inputs made the
    model's), with the given (scale, zero point) for its inputs then its output, the given shapes by position
    (inputs, then output), and the given builtin options (``fusedActivationFunction``, ``beta``)."""
    from ..tflite_edit import edit

    def change(m: Any) -> None:
        sg = m.subgraphs[0]
        op = sg.operators[-1]
        sg.operators = [op]
        sg.inputs = [i for i in op.inputs if m.buffers[sg.tensors[i].buffer].data is None]  # not the constants
        for k, index in enumerate((*op.inputs, *op.outputs)):
            t = sg.tensors[index]
            t.quantization.scale, t.quantization.zeroPoint = [quantization[k][0]], [quantization[k][1]]
            if k in shapes:
                t.shape = t.shapeSignature = shapes[k]
        for key, value in options.items():
            setattr(op.builtinOptions, key, value)

    path = tmp_path / f"{Path(model).stem}-only.tflite"
    path.write_bytes(edit((DATA / model).read_bytes(), change))
    return path


def _both_ways_many(path: Path, feeds: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The output of a model of several inputs from the reference and from LiteRT's reference kernels, and the
    reference's trace of its last op."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    model = read_tflite(path)
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    for d, x in zip(it.get_input_details(), feeds, strict=True):
        it.set_tensor(d["index"], x)
    it.invoke()
    computed = reference.run(model, {model.main.tensors[i].name: x
                                     for i, x in zip(model.main.inputs, feeds, strict=True)})
    (got,) = computed.outputs(model).values()
    return got, it.get_tensor(it.get_output_details()[0]["index"]), computed.steps[-1].trace


EVERY_INT8 = np.arange(-128, 128, dtype=np.int8).reshape(1, 256)


@pytest.mark.parametrize("op", ["abs", "log", "rsqrt"])
@pytest.mark.parametrize(("in_scale", "in_zp", "out_scale", "out_zp"), [
    (0.02, -128, 0.015, -60),
    (0.5, -128, 0.3, -100),
    (0.1, -128, 0.2, 127),  # the output clamps
    (0.0123, -128, 0.0123, 0),  # one scale in and out: ABS adds no multiplier
    (0.0078, -128, 0.0027, -128),
])
def test_abs_log_and_rsqrt_are_bit_exact_at_every_input_and_many_scales(
        tmp_path: Path, op: str, in_scale: float, in_zp: int, out_scale: float, out_zp: int) -> None:
    """Every int8 input at or above the zero point (RSQRT refuses the others), against LiteRT's reference
    kernels, with the op alone."""
    path = _one_op(tmp_path, f"ops/{op}.int8.tflite", [(in_scale, in_zp), (out_scale, out_zp)],
                   {0: [1, 256], 1: [1, 256]})
    got, want, _ = _both_ways_many(path, [EVERY_INT8])
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


def test_abs_is_bit_exact_below_its_zero_point(tmp_path: Path) -> None:
    path = _one_op(tmp_path, "ops/abs.int8.tflite", [(0.03, 17), (0.02, -90)], {0: [1, 256], 1: [1, 256]})
    got, want, trace = _both_ways_many(path, [EVERY_INT8])
    assert np.array_equal(got, want) and trace["clamped"] > 0


def test_rsqrt_of_a_value_under_its_zero_point_is_refused_as_the_kernel_refuses_it(tmp_path: Path) -> None:
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    path = _one_op(tmp_path, "ops/rsqrt.int8.tflite", [(0.02, 0), (0.015, -60)], {0: [1, 256], 1: [1, 256]})
    model = read_tflite(path)
    message = r"^op #0 RSQRT: a negative input \(-128, under the zero point 0\): the kernel refuses it$"
    with pytest.raises(reference.ReferenceError, match=message):
        reference.run(model, {model.main.tensors[model.main.inputs[0]].name: EVERY_INT8})
    it = Interpreter(model_path=str(path), experimental_op_resolver_type=OpResolverType.BUILTIN_REF)
    it.allocate_tensors()
    it.set_tensor(it.get_input_details()[0]["index"], EVERY_INT8)
    with pytest.raises(RuntimeError, match="Rsqrt is only defined for positive values"):
        it.invoke()


DIVISORS = np.array([[v] * 256 for v in range(-128, 128)], np.int8)  # 256 x 256: every pair


@pytest.mark.parametrize(("scales", "past_31"), [
    ((0.0078, 0, 0.0078, -128, 0.0076, -3), False),  # the op model's
    ((0.5, 10, 0.01, -20, 0.3, 5), False),
    ((0.01, -128, 0.9, 100, 0.002, -100), True),
    ((1.0, 0, 1.0, 0, 1.0, 0), True),  # a quotient of 1 / 128 is 0.008 steps: the shift passes 31
    ((0.003, 3, 0.2, 0, 40.0, 0), True),  # every quotient under 1/1000 of a step
])
def test_div_is_bit_exact_on_every_pair_of_int8_values(tmp_path: Path, scales: tuple[Any, ...],
                                                        past_31: bool) -> None:
    """Every dividend with every divisor but the divisor's zero point (a division by zero), against LiteRT's
    reference kernel, including the quotients whose rounding shift passes 31 bits (undefined in C, computed
    as x86 does, and counted in the trace)."""
    s1, z1, s2, z2, so, zo = scales
    divisors = DIVISORS[DIVISORS[:, 0] != z2]
    path = _one_op(tmp_path, "ops/div.int8.tflite", [(s1, z1), (s2, z2), (so, zo)],
                   {0: [255, 256], 1: [255, 256], 2: [255, 256]})
    dividends = np.tile(EVERY_INT8, (255, 1))
    got, want, trace = _both_ways_many(path, [dividends, divisors])
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]
    assert (trace["shift_past_31"] > 0) is past_31


def test_div_fuses_its_activation_and_refuses_a_division_by_zero(tmp_path: Path) -> None:
    shapes = {0: [255, 256], 1: [255, 256], 2: [255, 256]}
    path = _one_op(tmp_path, "ops/div.int8.tflite", [(0.05, 3), (0.02, -7), (0.04, 10)], shapes,
                   fusedActivationFunction=1)  # RELU
    divisors = DIVISORS[DIVISORS[:, 0] != -7]
    got, want, trace = _both_ways_many(path, [np.tile(EVERY_INT8, (255, 1)), divisors])
    assert np.array_equal(got, want) and trace["activation_range"] == [10, 127] and got.min() == 10
    model = read_tflite(path)
    names = [model.main.tensors[i].name for i in model.main.inputs]
    with pytest.raises(reference.ReferenceError, match=r"^op #0 DIV: a divisor equal to its zero point \(a division "
                                                       r"by zero; the kernel's result is undefined\)$"):
        reference.run(model, dict(zip(names, (np.tile(EVERY_INT8, (255, 1)), DIVISORS[1:]), strict=True)))


@pytest.mark.parametrize("scales", [(0.0078, 0, 0.004, 0, 0.0059, -41), (0.5, -20, 0.01, 30, 0.3, 5),
                                    (0.01, -128, 0.9, -100, 0.002, 127), (0.05, 100, 0.003, -7, 0.8, -128)])
def test_prelu_is_bit_exact_at_every_input_and_many_scales(tmp_path: Path, scales: tuple[Any, ...]) -> None:
    """Every int8 input in each of 4 channels, each with its own slope (the alpha zero point non-zero in
    two sets), against LiteRT's reference kernel."""
    si, zi, sa, za, so, zo = scales
    path = _one_op(tmp_path, "ops/prelu.int8.tflite", [(si, zi), (sa, za), (so, zo)],
                   {0: [1, 256, 1, 4], 2: [1, 256, 1, 4]})
    x = np.repeat(EVERY_INT8.reshape(1, 256, 1, 1), 4, axis=3)
    got, want, _ = _both_ways_many(path, [x])
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


def test_every_int16x8_op_model_is_computed() -> None:
    """The int16x8 op models (int16 activations, int8 weights, int64 biases) are all in MODELS, bit-exact above."""
    made = sorted((DATA / "ops16").glob("*.int16x8.tflite"))
    assert len(made) == 31 and set(made) <= set(MODELS)
    assert {op.type for p in made for op in read_tflite(p).ops} >= {
        "CONV_2D", "DEPTHWISE_CONV_2D", "TRANSPOSE_CONV", "FULLY_CONNECTED", "BATCH_MATMUL", "ADD", "SUB", "MUL",
        "LOGISTIC", "TANH", "SOFTMAX", "AVERAGE_POOL_2D", "MAX_POOL_2D", "MEAN", "LEAKY_RELU", "ABS"}


EVERY_INT16 = np.arange(-32768, 32768, dtype=np.int16).reshape(1, 65536)


@pytest.mark.parametrize("op", ["logistic", "tanh"])
@pytest.mark.parametrize("in_scale", [
    2.0**-12,  # a power of two: no multiplier (3 << shift)
    2.0**-11,  # one more: TANH still takes it as a power of two, LOGISTIC does not
    0.000457,  # the table's scale by a multiplier
    0.01,  # most of the range saturates
    3.05e-6,
])
def test_int16_logistic_and_tanh_are_bit_exact_at_every_input(tmp_path: Path, op: str, in_scale: float) -> None:
    """All 65,536 int16 inputs, against LiteRT's reference kernels (the table of sigmoid(i/24) interpolated)."""
    path = _one_op(tmp_path, f"ops16/{op}.int16x8.tflite", [(in_scale, 0), (2.0**-15, 0)],
                   {0: [1, 65536], 1: [1, 65536]})
    got, want, trace = _both_ways_many(path, [EVERY_INT16])
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]
    assert trace["input_multiplier"] > 0


@pytest.mark.parametrize(("in_scale", "beta"), [(0.0003, 1.0), (0.00003, 1.0), (0.002, 0.5), (1.5e-5, 2.0)])
def test_int16_softmax_is_bit_exact_over_many_rows(tmp_path: Path, in_scale: float, beta: float) -> None:
    """2,000 seeded rows of 37 values (and one of a single repeated value), against LiteRT's reference kernel:
    the exp and 1 / (1 + x) tables of gen_lut, interpolated."""
    path = _one_op(tmp_path, "ops16/softmax.int16x8.tflite", [(in_scale, 0), (1 / 32768, 0)],
                   {0: [2001, 37], 1: [2001, 37]}, beta=beta)
    rows = np.random.default_rng(7).integers(-32768, 32768, (2001, 37)).astype(np.int16)
    rows[0] = 1234
    got, want, _ = _both_ways_many(path, [rows])
    assert np.array_equal(got, want), np.flatnonzero(got != want)[:10]


@pytest.mark.parametrize("comparison", ["EQUAL", "NOT_EQUAL", "GREATER", "GREATER_EQUAL", "LESS", "LESS_EQUAL"])
@pytest.mark.parametrize("scales", [(0.0039, -3, 0.0078, 5), (0.5, 100, 0.25, -128), (0.013, 0, 0.013, 0)])
def test_comparisons_are_bit_exact_on_every_pair_of_int8_values(tmp_path: Path, comparison: str,
                                                               scales: tuple[Any, ...]) -> None:
    """The EQUAL op model's comparison turned into each of the six (same kernel, another comparator), both
    inputs requantized, every pair of int8 values: the bool output and what SELECT picks with it. Equal
    scales and zero points compare the stored values; others compare after each input's own rescaling."""
    from ai_edge_litert import schema_py_generated as schema

    from ..tflite_edit import edit

    s1, z1, s2, z2 = scales

    def change(m: Any) -> None:
        sg = m.subgraphs[0]
        equal = schema.BuiltinOperator.EQUAL
        compare = next(o for o in sg.operators if m.operatorCodes[o.opcodeIndex].builtinCode == equal)
        code = m.operatorCodes[compare.opcodeIndex]
        code.builtinCode = code.deprecatedBuiltinCode = getattr(schema.BuiltinOperator, comparison)
        sg.operators = [compare]
        sg.inputs, sg.outputs = list(compare.inputs), list(compare.outputs)
        for index, (scale, zp) in zip(compare.inputs, ((s1, z1), (s2, z2)), strict=True):
            t = sg.tensors[index]
            t.quantization.scale, t.quantization.zeroPoint = [scale], [zp]
        for index in (*compare.inputs, *compare.outputs):
            sg.tensors[index].shape = sg.tensors[index].shapeSignature = [256, 256]

    path = tmp_path / f"{comparison}.tflite"
    path.write_bytes(edit((DATA / "ops" / "equal_select.int8.tflite").read_bytes(), change))
    got, want, trace = _both_ways_many(path, [np.tile(EVERY_INT8, (256, 1)), DIVISORS])
    assert got.dtype == want.dtype == np.bool_ and np.array_equal(got, want), np.flatnonzero(got != want)[:10]
    assert 0 < np.count_nonzero(got) < got.size and trace["left_shift"] == 8


def test_the_depthwise_models_cover_depth_multipliers_strides_and_dilation() -> None:
    """Among the models held bit-exact above, in int8 and int16x8."""
    for folder in ("ops", "ops16"):
        options = [op.options for p in MODELS if p.parent.name == folder for op in read_tflite(p).ops
                   if op.type == "DEPTHWISE_CONV_2D"]
        assert any(o["depth_multiplier"] == 2 and o["stride_h"] == 2 and o["padding"] == "VALID" for o in options)
        assert any(o["dilation_h_factor"] == 2 and o["dilation_w_factor"] == 3 for o in options)


def _tile(tmp_path: Path, multiples: list[int], declared: list[int]) -> Path:
    """tests/data/ops/tile.int8.tflite (in0 [1, 6, 5, 4]) with other multiples and another declared output."""
    import flatbuffers
    from ai_edge_litert import schema_py_generated as schema

    model = schema.ModelT.InitFromPackedBuf((DATA / "ops" / "tile.int8.tflite").read_bytes(), 0)
    graph = model.subgraphs[0]
    op = graph.operators[0]
    model.buffers[graph.tensors[op.inputs[1]].buffer].data = np.frombuffer(
        np.array(multiples, dtype=np.int32).tobytes(), np.uint8)
    graph.tensors[op.outputs[0]].shape = np.array(declared, dtype=np.int32)
    graph.tensors[op.outputs[0]].shapeSignature = None
    builder = flatbuffers.Builder(1024)
    builder.Finish(model.Pack(builder), file_identifier=b"TFL3")
    path = tmp_path / "tile.tflite"
    path.write_bytes(builder.Output())
    return path


@pytest.mark.parametrize(("declared", "refused"), [
    ([1, 32768, 16384, 4], False),  # int8: 2 GiB exactly, the bound
    ([1, 3, 715827883, 1], True),  # 2**31 + 1 values: one byte more
    ([1, 240000, 200000, 4], True),
])
def test_a_declared_tensor_past_the_bound_is_refused_before_it_is_allocated(tmp_path: Path, declared: list[int],
                                                                             refused: bool) -> None:
    """A .tflite is a pull request's to write: a few hundred bytes can declare a 179 GiB tensor, which ended in
    numpy's MemoryError as edgeconv's internal error (exit 3). Refused by name, nothing allocated."""
    model = read_tflite(_tile(tmp_path, [1, 2, 1, 1], declared))
    said = reference._too_large(model.ops[0])
    if not refused:
        assert said is None
        return
    values = int(np.prod(declared, dtype=object))
    assert said == (f"op #0 TILE: its output 'Identity' {declared} holds {values:,} values "
                    f"({values / 1024**3:,.1f} GiB); the reference computes tensors of at most 2 GiB")
    with pytest.raises(reference.ReferenceError, match=r"^op #0 TILE: its output 'Identity'"):
        reference.run(model, {"in0": np.zeros((1, 6, 5, 4), np.int8)})


def test_a_tensor_too_large_to_allocate_is_the_model_s_error_not_a_crash(tmp_path: Path) -> None:
    """Multiples that make a 1.7 PiB tensor behind a small declared shape: numpy cannot allocate it (more than
    any address space), and `edgeconv reference` says so for the op, exit 2, writing nothing."""
    from edgeconv.cli import main

    path = _tile(tmp_path, [1, 4_000_000, 4_000_000, 1], [1, 12, 5, 4])
    with pytest.raises(reference.ReferenceError, match=r"^op #0 TILE: computing it needs more memory than this "
                       r"machine has \(Unable to allocate .* PiB"):
        reference.run(read_tflite(path), {"in0": np.zeros((1, 6, 5, 4), np.int8)})
    np.savez(tmp_path / "in.npz", in0=np.zeros((1, 6, 5, 4), np.float32))
    assert main(["reference", str(path), "--inputs", str(tmp_path / "in.npz"), "--out", str(tmp_path / "out")]) == 2
    assert not (tmp_path / "out").exists()
