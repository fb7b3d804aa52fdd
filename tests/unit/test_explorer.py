"""The verdict as Model Explorer overlays (issue 18): the node data files, their keys checked against
Model Explorer's own TFLite adapter, and ``edgeconv view``'s errors. The viewer in a real browser is in
tests/integration/test_view.py."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from edgeconv import explorer
from edgeconv.checking import check
from edgeconv.converters.tflite_reader import parse_tflite, read_tflite
from edgeconv.errors import ConfigError, EdgeconvError, ModelFileError

from ..conftest import ORACLES, REPO
from ..tflite_edit import edit

DATA = REPO / "tests" / "data"
DEEPLAB = ORACLES / "deeplabv3_mnv2_dm05_pascal_quant.tflite"


def _files(path: Path, targets: list[str], op_errors: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    result = check(path, targets)
    return {name: json.loads(data) for name, data in explorer.node_data(result.model, result.to_json(),
                                                                         op_errors).items()}


def test_each_op_gets_its_status_colour_and_the_rule_and_fix() -> None:
    files = _files(DATA / "sin-island.int8.tflite", ["generic-int8"])
    assert sorted(files) == ["explorer/generic-int8.status.json", "explorer/generic-int8.why.json"]
    status = files["explorer/generic-int8.status.json"]["main"]
    assert status["name"] == "generic-int8 status"
    supported = {"value": "supported", "bgColor": "#c8e6c9"}
    unsupported = {"value": "unsupported", "bgColor": "#ef9a9a"}
    assert status["results"] == {"0": supported, "1": unsupported, "2": unsupported, "3": unsupported, "4": supported}
    why = files["explorer/generic-int8.why.json"]["main"]["results"]
    assert sorted(why) == ["1", "2", "3"]  # only the ops that are not supported
    assert why["2"] == {"value": "generic-int8.SIN.op_listed: SIN has no entry in the generic-int8 op table; fix: "
                                 + next(v["fix"] for t in check(DATA / "sin-island.int8.tflite").to_json()
                                        for op in t["ops"] for v in op["violations"] if op["index"] == 2)}
    assert why["1"]["value"].startswith("generic-int8.DEQUANTIZE.tensor_dtype: output 0 'tfl.dequantize' is float32 "
                                        "inside the model (a float island)")


def test_an_op_on_the_cpu_only_because_of_a_blocking_op_names_it() -> None:
    """deeplabv3 (Coral's compiled model): the Edge TPU compiler leaves op 64 and everything after it on the CPU."""
    result = check(DEEPLAB, ["edgetpu"])
    why = json.loads(explorer.node_data(result.model, result.to_json())["explorer/edgetpu.why.json"])["main"]
    assert sorted(int(k) for k in why["results"]) == list(range(64, 72))
    assert why["results"]["71"]["value"].startswith(
        "edgetpu.ARG_MAX.op_listed: not in the Edge TPU table; it runs on the CPU; fix: ")
    assert " | edgetpu.ARG_MAX.single_segment: depends on the output of blocking op #64 RESIZE_BILINEAR; fix: " in \
        why["results"]["71"]["value"]


def test_a_target_every_op_passes_gets_no_why_file() -> None:
    files = _files(DATA / "conv2d-relu.int8.tflite", ["generic-int8", "arm-neon"])
    assert sorted(files) == ["explorer/arm-neon.status.json", "explorer/generic-int8.status.json"]


def test_quantization_sqnr_lands_on_the_op_that_produces_the_tensor_and_skips_unknown_tensors() -> None:
    model = read_tflite(DATA / "softmax-dense.int8.tflite")
    last = model.ops[-1]
    errors = [{"tensor": last.outputs[0].name, "sqnr_db": 12.3456},
              {"tensor": "not/in/this/model", "sqnr_db": 40.0},
              {"tensor": model.ops[0].outputs[0].name, "sqnr_db": None}]
    sqnr = _files(DATA / "softmax-dense.int8.tflite", ["generic-int8"], errors)["explorer/quantization-sqnr.json"]
    assert sqnr["main"]["results"] == {str(last.index): {"value": 12.35}}
    assert sqnr["main"]["name"] == "quantization SQNR (dB)"
    assert sqnr["main"]["thresholds"] == [{"value": 10.0, "bgColor": "#ef9a9a"}, {"value": 20.0, "bgColor": "#ffcc80"},
                                          {"value": 30.0, "bgColor": "#fff59d"}, {"value": 1e9, "bgColor": "#c8e6c9"}]


def _subgraphs(data: bytes, names: list[bytes | None]) -> bytes:
    """The model with a copy of its main subgraph per extra name, and those names set."""
    import copy

    def change(model: Any) -> None:
        while len(model.subgraphs) < len(names):
            model.subgraphs.append(copy.deepcopy(model.subgraphs[0]))
        for sg, name in zip(model.subgraphs, names):
            sg.name = name

    return edit(data, change)


@pytest.mark.parametrize("names", [
    [b"main"],
    [None, None, None],
    [b"encoder", b"", b"while_body"],
], ids=["converter-default", "unnamed", "named"])
def test_graph_ids_and_node_ids_are_the_ones_model_explorer_gives(tmp_path: Path, names: list[bytes | None]) -> None:
    """Model Explorer's own TFLite adapter is the oracle: its graph ids and each op node's id and label."""
    adapter = pytest.importorskip("ai_edge_model_explorer_adapter")
    path = tmp_path / "m.tflite"
    path.write_bytes(_subgraphs((DATA / "softmax-dense.int8.tflite").read_bytes(), names))
    model = read_tflite(path)
    graphs = json.loads(adapter.ConvertFlatbufferDirectlyToJson(adapter.VisualizeConfig(), str(path)))[0]["subgraphs"]
    assert [g["id"] for g in graphs] == [explorer.graph_id(model, s.index) for s in model.subgraphs]
    for sg, graph in zip(model.subgraphs, graphs):
        nodes = {n["id"]: n["label"] for n in graph["nodes"]}
        assert {str(op.index): op.type.lower() for op in sg.ops} == {
            str(op.index): nodes[str(op.index)] for op in sg.ops}


def test_the_overlay_keys_match_the_adapter_on_a_third_party_model() -> None:
    adapter = pytest.importorskip("ai_edge_model_explorer_adapter")
    graphs = json.loads(adapter.ConvertFlatbufferDirectlyToJson(adapter.VisualizeConfig(), str(DEEPLAB)))[0]
    labels = {n["id"]: n["label"] for g in graphs["subgraphs"] for n in g["nodes"] if g["id"] == "main"}
    status = _files(DEEPLAB, ["edgetpu"])["explorer/edgetpu.status.json"]["main"]["results"]
    model = read_tflite(DEEPLAB)
    assert len(status) == len(model.ops) == 72
    assert all(labels[key] == model.ops[int(key)].type.lower() for key in status)


# -- which overlays, in which order ------------------------------------------------------------


def _build_dir(tmp_path: Path, targets: list[str], *, with_files: bool = True) -> Path:
    """An output folder as a build of an existing .tflite writes it (report.json names the model)."""
    out = tmp_path / "build"
    out.mkdir()
    shutil.copy(DEEPLAB, out / "seg.tflite")
    result = check(out / "seg.tflite", targets)
    (out / "report.json").write_text(json.dumps({
        "artifacts": {"tflite": {"path": "seg.tflite"}}, "targets": result.to_json(), "culprits": None}))
    if with_files:
        for name, data in explorer.node_data(result.model, result.to_json()).items():
            (out / name).parent.mkdir(exist_ok=True)
            (out / name).write_bytes(data)
    return out


def test_the_first_target_status_comes_last_so_model_explorer_shows_it(tmp_path: Path) -> None:
    out = _build_dir(tmp_path, ["edgetpu", "arm-neon"])
    (out / "explorer" / explorer.SQNR_FILE).write_text("{}")
    shown = explorer.overlays_for(out, None, tmp_path / "scratch")
    assert [f.name for f in shown.files] == [
        "quantization-sqnr.json", "edgetpu.why.json", "arm-neon.why.json", "arm-neon.status.json",
        "edgetpu.status.json"]
    assert shown.kept and shown.model == out / "seg.tflite"
    only = explorer.overlays_for(out, ["arm-neon"], tmp_path / "scratch")
    assert [f.name for f in only.files] == ["quantization-sqnr.json", "arm-neon.why.json", "arm-neon.status.json"]


def test_a_build_written_before_the_overlays_gets_them_from_its_report(tmp_path: Path) -> None:
    out = _build_dir(tmp_path, ["edgetpu"], with_files=False)
    (tmp_path / "scratch").mkdir()
    shown = explorer.overlays_for(out, None, tmp_path / "scratch")
    assert not shown.kept
    assert [f.name for f in shown.files] == ["edgetpu.why.json", "edgetpu.status.json"]
    assert all(tmp_path / "scratch" in f.parents for f in shown.files)
    assert not (out / "explorer").exists()  # the build's folder is not written to


def test_a_tflite_is_checked_now_against_the_targets_given(tmp_path: Path) -> None:
    (tmp_path / "scratch").mkdir()
    shown = explorer.overlays_for(DATA / "sin-island.int8.tflite", ["generic-int8"], tmp_path / "scratch")
    assert [f.name for f in shown.files] == ["generic-int8.why.json", "generic-int8.status.json"]
    assert not shown.kept


@pytest.mark.parametrize(("make", "error", "message"), [
    (lambda p: p.mkdir(), ConfigError,
     "{p}: not an edgeconv output folder (no report.json); give a build's output folder or a .tflite file"),
    (lambda p: p.write_text("x"), ConfigError, "{p}: give a build's output folder or a .tflite file"),
    (lambda p: (p.mkdir(), (p / "report.json").write_text("[1]")), ConfigError,
     "{p}/report.json: not an edgeconv report (list indices must be integers or slices, not str)"),
    (lambda p: (p.mkdir(), (p / "report.json").write_text('{"artifacts": {"tflite": {"path": "gone.tflite"}}}')),
     ModelFileError, "{p}/gone.tflite: the model the report names is missing"),
], ids=["folder-without-report", "not-a-model", "not-a-report", "model-missing"])
def test_what_view_cannot_show_is_named(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make: Any,
                                        error: type[Exception], message: str) -> None:
    monkeypatch.chdir(tmp_path)
    p = Path("thing")
    make(p)
    with pytest.raises(error) as caught:
        explorer.overlays_for(p, None, tmp_path)
    assert str(caught.value) == message.format(p=p)
    assert caught.value.__class__ is error


def test_a_target_the_build_did_not_check_is_refused_with_a_suggestion(tmp_path: Path) -> None:
    out = _build_dir(tmp_path, ["edgetpu", "arm-neon"])
    with pytest.raises(ConfigError) as caught:
        explorer.overlays_for(out, ["edgetpus"], tmp_path)
    assert str(caught.value).endswith(": --target 'edgetpus' was not checked by this build (it checked: edgetpu, "
                                      "arm-neon); did you mean 'edgetpu'?")


def test_without_model_explorer_view_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "model_explorer", None)  # as if not installed: import raises ImportError
    shown = explorer.Overlays(DATA / "conv2d-relu.int8.tflite", (), kept=True)
    with pytest.raises(EdgeconvError) as caught:
        explorer.url(shown, "127.0.0.1", 8080)
    assert str(caught.value) == ("edgeconv view needs Model Explorer, an optional extra: pip install "
                                 "'edgeconv[view]' (or pip install ai-edge-model-explorer)")


def test_the_url_carries_the_model_and_every_overlay_in_order(tmp_path: Path) -> None:
    pytest.importorskip("model_explorer")
    from urllib.parse import unquote

    files = (tmp_path / "a.json", tmp_path / "b.json")
    address = explorer.url(explorer.Overlays(DEEPLAB, files, kept=True), "127.0.0.1", 8123)
    assert address.startswith("http://127.0.0.1:8123/?data=")
    data = json.loads(unquote(address.split("data=", 1)[1]))
    assert data == {"models": [{"url": str(DEEPLAB)}], "nodeData": [str(f) for f in files],
                    "nodeDataTargets": ["", ""]}


def test_no_target_and_no_error_ranking_means_no_files() -> None:
    model = parse_tflite((DATA / "conv2d-relu.int8.tflite").read_bytes())
    assert explorer.node_data(model, [], None) == {}
    assert explorer.node_data(model, [], []) == {}


def test_view_refuses_what_it_cannot_show_with_exit_2_before_starting_anything(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edgeconv.cli import main

    (tmp_path / "notes.txt").write_text("x")
    assert main(["view", str(tmp_path / "notes.txt"), "--no-browser"]) == 2
    assert capsys.readouterr().err == (f"edgeconv: error: {tmp_path / 'notes.txt'}: give a build's output folder "
                                       "or a .tflite file\n")


def test_a_blocking_op_stands_out_from_the_ops_that_follow_it() -> None:
    """deeplabv3 on the Edge TPU: #64 RESIZE_BILINEAR blocks the segment (the one to fix) and the seven ops
    after it merely follow it onto the CPU: two colours."""
    result = check(DEEPLAB, ["edgetpu"])
    status = json.loads(explorer.node_data(result.model, result.to_json())["explorer/edgetpu.status.json"])
    results = status["main"]["results"]
    assert results["64"] == {"value": "cpu_fallback (blocking)", "bgColor": explorer.BLOCKING_COLOUR}
    assert {results[str(i)]["bgColor"] for i in range(65, 72)} == {explorer.STATUS_COLOURS["cpu_fallback"]}
    assert explorer.BLOCKING_COLOUR not in explorer.STATUS_COLOURS.values()


def _report(checks: list[dict[str, Any]]) -> dict[str, Any]:
    failed = [c for c in checks if c["outcome"] == "fail"]
    return {"gate": {"verdict": "fail" if failed else "pass", "checks": checks,
                     "reasons": [c["sentence"] for c in failed]}}


@pytest.mark.parametrize(("checks", "has_sqnr", "first"), [
    ([{"kind": "agreement", "outcome": "fail", "sentence": "s"}, {"kind": "target", "target": "edgetpu",
                                                                   "outcome": "fail", "sentence": "t"}],
     True, explorer.SQNR_FILE),  # the signal is lost: the per-op SQNR shows where
    ([{"kind": "accuracy", "outcome": "fail", "sentence": "a"}], False, None),  # nothing measured per op
    ([{"kind": "target", "target": "edgetpu", "outcome": "pass", "sentence": "t"},
      {"kind": "accelerator", "target": "arm-neon", "outcome": "fail", "sentence": "m"}], True, "arm-neon"),
    ([{"kind": "agreement", "outcome": "pass", "sentence": "s"}], True, None),  # a pass: the first target
])
def test_the_view_opens_on_the_overlay_that_shows_why(checks: list[dict[str, Any]], has_sqnr: bool,
                                                       first: str | None) -> None:
    assert explorer.opening_overlay(_report(checks), ["edgetpu", "arm-neon"], has_sqnr) == first


def test_the_failing_target_status_is_shown_on_opening(tmp_path: Path) -> None:
    names = [Path(n) for n in ("quantization-sqnr.json", "edgetpu.why.json", "edgetpu.status.json",
                               "arm-neon.why.json", "arm-neon.status.json")]
    assert [p.name for p in explorer._order(names, ["edgetpu", "arm-neon"], "arm-neon")] == [
        "quantization-sqnr.json", "edgetpu.why.json", "arm-neon.why.json", "edgetpu.status.json",
        "arm-neon.status.json"]
    assert [p.name for p in explorer._order(names, ["edgetpu", "arm-neon"], explorer.SQNR_FILE)][-1] == \
        "quantization-sqnr.json"


@pytest.mark.parametrize(("verdict", "reasons", "name"), [
    ("gate FAIL", ("target edgetpu: 8 ops on the CPU", "output 'digit': SQNR 3.1 dB < 20"),
     "seg - gate FAIL (target edgetpu, output 'digit').tflite"),
    ("gate PASS", (), "seg - gate PASS.tflite"),
    ("targets FAIL", ("a/b\\c: x",), "seg - targets FAIL (a b c).tflite"),  # a reason is never a path
])
def test_the_model_is_shown_under_its_verdict(tmp_path: Path, verdict: str, reasons: tuple[str, ...],
                                              name: str) -> None:
    model = tmp_path / "seg.tflite"
    shutil.copy(DATA / "conv2d-relu.int8.tflite", model)
    shown = explorer.titled(explorer.Overlays(model, (), kept=True, verdict=verdict, reasons=reasons), tmp_path)
    assert shown.name == name and shown.parent == tmp_path / "model"
    assert shown.read_bytes() == model.read_bytes()
    assert explorer.titled(explorer.Overlays(model, (), kept=True), tmp_path) == model  # no verdict: itself
