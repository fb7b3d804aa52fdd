"""Exit codes of edgeconv build: 1 for a failed gate (artifacts written), 2 for user
mistakes (clear message, nothing written, nothing lost), 3 for toolchain crashes."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import jsonschema
import numpy as np
import pytest

from edgeconv.cli import main
from edgeconv.report import SCHEMA_PATH

from ..conftest import TARGET_CHOICES, run_edgeconv, tree
from . import models


def build(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(["build", *args, "-q"])
    return code, capsys.readouterr().err


def test_float_island_fails_the_gate_with_exit_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layers = models.write_custom_layers(tmp_path, "sin_layers")
    models.dense_model(tmp_path / "sin.keras", layers.Sin(name="wave"))
    models.calibration(tmp_path / "cal.npz")
    code, err = build([str(models.pipeline(tmp_path, "sin.keras", "cal.npz", modules=("sin_layers",)))], capsys)
    assert code == 1, err
    out = tmp_path / "build" / "sin"
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert (report["gate"]["verdict"], report["gate"]["reasons"]) == ("fail", [
        "target generic-int8: 3 unsupported op(s): DEQUANTIZE x1, QUANTIZE x1, SIN x1"])
    bad = {op["type"]: op for op in report["targets"][0]["ops"] if op["status"] == "unsupported"}
    assert [v["rule"] for v in bad["SIN"]["violations"]] == ["generic-int8.SIN.op_listed"]
    assert bad["SIN"]["source_layers"] == ["wave"]
    assert [v["rule"] for v in bad["DEQUANTIZE"]["violations"]] == ["generic-int8.DEQUANTIZE.tensor_dtype"]
    assert "a float island" in bad["QUANTIZE"]["violations"][0]["detail"]
    assert (out / "sin.tflite").exists()
    assert "| SIN | unsupported | `generic-int8.SIN.op_listed` |" in (out / "report.md").read_text()


def test_a_data_file_s_text_reaches_the_console_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A CSV header is a pull request's to write, and the error listing the columns quotes it: an escape
    sequence is shown escaped, and a line break in it starts a line behind "edgeconv: error: " like every line
    of an error (no line starts with what the file wrote: a GitHub runner reads a line starting with "::" as
    a workflow command); nothing is written."""
    models.dense_model(tmp_path / "m.keras", _identity())
    (tmp_path / "d.csv").write_text('"a\x1b[2J\r\n::error::x",b\n1,2\n', newline="")
    path = tmp_path / "p.yaml"
    path.write_text("version: 1\nmodel: {path: m.keras}\n"
                    "calibration: {source: csv, path: d.csv, columns: {feat: [x]}}\n")
    code, err = build([str(path)], capsys)
    assert code == 2
    assert err.splitlines() == [f"edgeconv: error: {tmp_path / 'd.csv'}: no column 'x' (columns: a\\x1b[2J",
                                "edgeconv: error: ::error::x, b)"]
    assert not (tmp_path / "build").exists()


def _identity() -> Any:
    import keras

    return keras.layers.Identity(name="same")


def test_a_tf_op_without_builtin_is_named_with_its_layer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    layers = models.write_custom_layers(tmp_path, "erf_layers")
    models.dense_model(tmp_path / "erf.keras", layers.Erf(name="gelu_like"))
    models.calibration(tmp_path / "cal.npz")
    code, err = build([str(models.pipeline(tmp_path, "erf.keras", "cal.npz", modules=("erf_layers",)))], capsys)
    assert code == 2
    assert err.splitlines() == [
        "edgeconv: error: the model uses TensorFlow op(s) with no TFLite builtin: Erf (layer 'gelu_like'). They "
        "would run as Flex ops, which INT8 calibration cannot execute and edge runtimes do not ship. Fix: rewrite "
        "them with ops TFLite supports, or move them out of the model"]
    assert not (tmp_path / "build").exists()


@pytest.mark.parametrize(("fixture", "code", "rule"), [
    ("dense.float32", 1, "generic-int8.FULLY_CONNECTED.tensor_dtype"),
    ("erf-flex.float32", 1, "generic-int8.CUSTOM.op_builtin"),
    ("conv2d-relu.int8", 0, None),
])
def test_check_gates_float_and_flex_models(fixture: str, code: int, rule: str | None) -> None:
    from ..conftest import REPO

    result = run_edgeconv("check", REPO / "tests" / "data" / f"{fixture}.tflite", "--format", "json")
    assert result.returncode == code, result.stderr
    (target,) = json.loads(result.stdout)
    rules = [v["rule"] for op in target["ops"] for v in op["violations"]]
    assert (rules[0] if rules else None) == rule
    if fixture == "erf-flex.float32":
        assert target["ops"][0]["custom_code"] == "FlexErf"


def test_a_known_converter_crash_is_a_model_error_naming_the_fix(tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Full-int8 conversion of a Keras 3 LSTM segfaults TF 2.21's converter (a real crash): a known
    limitation of the model's layers, exit 2 with the cause and the fix, nothing written (issue 17)."""
    import keras

    inp = keras.Input((5, 3), name="seq")
    out = keras.layers.Dense(2, name="head")(keras.layers.LSTM(4, name="lstm")(inp))
    keras.Model(inp, out).save(tmp_path / "lstm.keras")
    np.savez(tmp_path / "cal.npz", seq=np.random.default_rng(0).normal(size=(10, 5, 3)).astype(np.float32))
    code, err = build([str(models.pipeline(tmp_path, "lstm.keras", "cal.npz", samples=10))], capsys)
    assert code == 2
    assert err.splitlines() == [
        "edgeconv: error: the TFLite converter crashed (SIGSEGV) while converting the model; the graph holds a "
        "while loop (LSTM 'lstm'): full-int8 conversion of Keras 3 recurrent layers is known to crash TF 2.21's "
        "converter; unrolling them (unroll=True) avoids the loop"]
    assert not (tmp_path / "build").exists()



# -- user mistakes: exit 2, one clear line per problem, nothing written -----------------------

@pytest.fixture
def project(example_copy: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(example_copy)
    return example_copy


def _cal(project: Path, **arrays: Any) -> None:
    np.savez(project / "bad.npz", **arrays)
    text = (project / "pipeline.yaml").read_text().replace("examples/digits/calibration.npz", "bad.npz")
    (project / "pipeline.yaml").write_text(text)


GOOD = np.random.default_rng(0).random((300, 16, 16, 1), dtype=np.float32)


@pytest.mark.parametrize(("arrays", "message"), [
    ({"image": GOOD[:, :15]},
     "bad.npz: input 'image' has samples of shape (15, 16, 1), the model expects (16, 16, 1) (array shape (N, 16, "
     "16, 1) for model input shape (1, 16, 16, 1))"),
    ({"image": (GOOD * 255).astype(np.uint8)},
     "bad.npz: input 'image' is uint8 but the model input is float32: apply the model's preprocessing (e.g. scale "
     "to the range it was trained on) and save float data"),
    ({"image": np.where(np.arange(300)[:, None, None, None] == 17, np.nan, GOOD)[:200]},
     "bad.npz: NaN or Inf in 1 sample(s) of the calibration data: bad.npz sample 17 ('image')"),
    ({"image": GOOD[:9]}, "bad.npz: the calibration data holds 9 sample(s); at least 10 are needed"),
    ({"images": GOOD},
     "bad.npz: array 'images' is not a model input (inputs: image); did you mean 'image'?"),
])
def test_bad_calibration_data(project: Path, capsys: pytest.CaptureFixture[str], arrays: dict[str, Any],
                              message: str) -> None:
    _cal(project, **arrays)
    code, err = build(["pipeline.yaml"], capsys)
    assert code == 2
    assert f"edgeconv: error: {message}" in err.splitlines()
    assert not (project / "build").exists()


@pytest.mark.parametrize(("edit", "message"), [
    (lambda t: t.replace("samples: 200", "samples: 200\n  sample: 3"),
     "pipeline.yaml:13: calibration: unknown key 'sample' (allowed: columns, expected_range, features, function, "
     "input, min_samples, path, preprocess, samples, seed, source, stride, trust_code, window); did you mean "
     "'samples'?"),
    (lambda t: t.replace("  - generic-int8", "  - generic-int"),
     f"pipeline.yaml:25: targets[0]: unknown target 'generic-int' (allowed: {TARGET_CHOICES}); did you mean "
     "'generic-int8'?"),
    (lambda t: t.replace("path: examples/digits/model.keras", "path: examples/digits/modle.keras"),
     "pipeline.yaml:7: model.path: file not found: 'examples/digits/modle.keras' (resolved to "
     "{project}/examples/digits/modle.keras)"),
    (lambda t: t.replace("version: 1", "version: 1\nmodel: [oops"), None),
])
def test_bad_pipeline_files(project: Path, capsys: pytest.CaptureFixture[str], edit: Any, message: str | None) -> None:
    path = project / "pipeline.yaml"
    path.write_text(edit(path.read_text()))
    code, err = build(["pipeline.yaml"], capsys)
    assert code == 2
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("edgeconv: error: pipeline.yaml:")
    if message:
        assert lines[0] == f"edgeconv: error: {message.format(project=project)}"
    assert not (project / "build").exists()


def test_corrupt_model_file(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "examples" / "digits" / "model.keras").write_bytes(b"\x00" * 1000)
    code, err = build(["pipeline.yaml"], capsys)
    assert code == 2
    assert err.splitlines() == ["edgeconv: error: examples/digits/model.keras: not a Keras 3 .keras archive (a "
                                ".keras file is a zip archive)"]
    with zipfile.ZipFile(project / "examples" / "digits" / "model.keras", "w") as z:
        z.writestr("config.json", "{not json")
    code, err = build(["pipeline.yaml"], capsys)
    assert code == 2 and err.startswith("edgeconv: error: examples/digits/model.keras: cannot load the Keras model")
    assert not (project / "build").exists()


def test_a_failed_build_keeps_the_previous_output(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from edgeconv.output import commit

    out = project / "build" / "digits"
    commit(out, {"digits.tflite": b"last release"})
    before = tree(out)
    _cal(project, image=GOOD[:, :15])  # samples of the wrong shape: the build stops after the model loaded
    code, _ = build(["pipeline.yaml"], capsys)
    assert code == 2
    assert tree(out) == before
    assert sorted(p.name for p in out.parent.iterdir()) == ["digits"]


def test_refuses_to_overwrite_a_folder_it_does_not_own(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (project / "firmware").mkdir()
    (project / "firmware" / "main.c").write_text("int main(void) { return 0; }")
    code, err = build(["pipeline.yaml", "--out", "firmware"], capsys)
    assert code == 2
    assert err.splitlines() == ["edgeconv: error: output folder firmware exists, is not empty and was not created by "
                                "edgeconv; choose another folder (--out) or empty it"]
    assert [p.name for p in (project / "firmware").iterdir()] == ["main.c"]


def test_a_full_disk_during_the_build_is_exit_2_and_keeps_the_previous_output(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    import errno

    from edgeconv.calibration import stage as calibration_stage

    models.dense_model(tmp_path / "m.keras", lambda x: x)
    models.calibration(tmp_path / "cal.npz")
    path = models.pipeline(tmp_path, "m.keras", "cal.npz")
    code, err = build([str(path)], capsys)
    assert code in (0, 1), err
    good = tree(tmp_path / "build" / "m")
    spool = tmp_path / "tmp" / "spool.bin"

    def full(*args: Any, **kwargs: Any) -> Any:  # what writing the sample spool raises on a full TMPDIR
        raise OSError(errno.ENOSPC, "No space left on device", str(spool))

    monkeypatch.setattr(calibration_stage, "collect_section", full)
    code, err = build([str(path)], capsys)
    assert code == 2
    assert err.strip().splitlines() == [
        f"edgeconv: error: no space left on the device while building ({spool}): No space left on device; free "
        "some space or set TMPDIR to a folder with more (the previous output is unchanged)"]
    assert tree(tmp_path / "build" / "m") == good
