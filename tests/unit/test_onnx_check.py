"""`edgeconv check model.onnx` and the ONNX canonical form, without TensorFlow (the onnx package only)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv.cli import main
from edgeconv.converters.onnx_export import canonicalize

onnx = pytest.importorskip("onnx")  # edgeconv[onnx]; the dev extra installs it
helper = onnx.helper
FLOAT = onnx.TensorProto.FLOAT


def model(nodes: list[Any], inits: list[Any] = (), opset: int = 17, domains: tuple[str, ...] = ()) -> Any:
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", FLOAT, [1, 5])],
                              [helper.make_tensor_value_info("y", FLOAT, [1, 5])], initializer=list(inits))
    opsets = [helper.make_opsetid("", opset)] + [helper.make_opsetid(d, 1) for d in domains]
    return helper.make_model(graph, opset_imports=opsets)


def test_check_lists_ops_and_flags_what_runtimes_may_not_run(tmp_path: Path,
                                                             capsys: pytest.CaptureFixture[str]) -> None:
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu"),
             helper.make_node("Bucketize", ["a"], ["b"], name="bucket"),
             helper.make_node("Foo", ["b"], ["c"], name="foo", domain="com.acme"),
             helper.make_node("Relu", ["c"], ["y"], name="relu2")]
    path = tmp_path / "odd.onnx"
    onnx.save(model(nodes, domains=("com.acme",)), str(path))
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        f"{path}: ONNX, opset ai.onnx 17, com.acme 1, 4 ops",
        "  Bucketize x1", "  Relu x2", "  com.acme.Foo x1",
        "warning: custom domain com.acme: runs only where that domain's ops are implemented",
        "warning: op Bucketize is not defined by ONNX (a converter left it; no runtime knows it)"]
    assert main(["check", str(path), "--fail-on-warnings", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["custom_domains"] == ["com.acme"] and data["unknown_ops"] == ["Bucketize"]
    assert data["inputs"] == [{"name": "x", "dtype": "float32", "shape": [1, 5]}]


def test_a_clean_model_passes_and_reads_well_in_markdown(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    w = onnx.numpy_helper.from_array(np.eye(5, dtype=np.float32), "w")
    path = tmp_path / "mm.onnx"
    onnx.save(model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [w]), str(path))
    assert main(["check", str(path), "--format", "md", "--fail-on-warnings"]) == 0
    out = capsys.readouterr().out
    assert "| MatMul | 1 |" in out and "- input `x` float32 [1, 5]" in out and "warning" not in out
    assert "`w`" not in out  # a weight is not an input


@pytest.mark.parametrize(("content", "args", "expected"), [
    (b"this is not protobuf at all \xff\xfe", [], "not an ONNX model"),
    (b"", [], "not an ONNX model (no graph in it)"),
    (None, [], "no such file"),
    (b"", ["--target", "edgetpu"],
     "--target applies to .tflite models: there are no target rules for ONNX models yet"),
])
def test_bad_onnx_inputs_are_one_line_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                             content: bytes | None, args: list[str], expected: str) -> None:
    path = tmp_path / "m.onnx"
    if content is not None:
        path.write_bytes(content)
    assert main(["check", str(path), *args]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("edgeconv: error: ") and expected in err[0], err


def _numbered(first: int, reverse: bool) -> Any:
    """x -> Relu -> Mul(weight) -> Add(weight) -> y, with tf2onnx-style __N names from ``first``."""
    a, b = f"Relu__{first}", f"Mul__{first + 1}"
    wm = onnx.numpy_helper.from_array(np.full((1, 5), 2.0, np.float32), f"scale__{first + 2}")
    wa = onnx.numpy_helper.from_array(np.arange(5, dtype=np.float32)[None], f"shift__{first + 3}")
    nodes = [helper.make_node("Relu", ["x"], [f"{a}:0"], name=a),
             helper.make_node("Mul", [f"{a}:0", wm.name], [f"{b}:0"], name=b),
             helper.make_node("Add", [f"{b}:0", wa.name], ["y"], name=f"Add__{first + 4}")]
    inits = [wm, wa]
    if reverse:  # tf2onnx's set-ordered output: same graph, other order
        nodes, inits = nodes[::-1], inits[::-1]
    return model(nodes, inits)


@pytest.mark.parametrize("location", ["weights.data", "../../../../../../dev/zero", "fifo.data"])
def test_weights_in_external_files_are_not_read(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                location: str) -> None:
    """A model whose weights are in a file beside it (missing here, outside the folder, a FIFO): its ops are
    listed without reading them (a missing .data file made it "not an ONNX model")."""
    import os

    w = onnx.TensorProto(name="w", data_type=FLOAT, dims=[5, 5], data_location=onnx.TensorProto.EXTERNAL)
    for key, value in (("location", location), ("length", str(8 << 30))):
        w.external_data.add(key=key, value=value)
    if location == "fifo.data":
        os.mkfifo(tmp_path / location)
    path = tmp_path / "ext.onnx"
    path.write_bytes(model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")], [w]).SerializeToString())
    assert main(["check", str(path)]) == 0
    assert capsys.readouterr().out.splitlines() == [f"{path}: ONNX, opset ai.onnx 17, 1 ops", "  MatMul x1"]


def test_canonical_form_does_not_depend_on_numbering_or_order() -> None:
    import onnxruntime as ort

    one, two = _numbered(17, reverse=False), _numbered(117, reverse=True)
    assert one.SerializeToString() != two.SerializeToString()
    canonicalize(one)
    canonicalize(two)
    assert one.SerializeToString() == two.SerializeToString()
    onnx.checker.check_model(one, full_check=True)
    assert [n.name for n in one.graph.node] == ["Relu__1", "Mul__2", "Add__4"]
    assert [i.name for i in one.graph.initializer] == ["scale__3", "shift__5"]
    x = np.array([[-1, 0, 1, 2, 3]], np.float32)
    y = ort.InferenceSession(one.SerializeToString(), providers=["CPUExecutionProvider"]).run(["y"], {"x": x})[0]
    np.testing.assert_array_equal(y, np.maximum(x, 0) * 2 + np.arange(5))
