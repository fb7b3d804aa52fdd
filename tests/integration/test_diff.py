"""What changed between releases: `edgeconv diff` and `build --baseline` on the example and on the
example with one more layer (a GELU after fc1, which the Edge TPU cannot run)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from edgeconv.cli import main
from edgeconv.report import SCHEMA_PATH

from ..conftest import REPO, tree


def gelu_variant(source: Path, target: Path) -> None:
    """The example model with a GELU after fc1: same weights, one more op."""
    import keras

    model = keras.saving.load_model(source)
    h = model.inputs[0]
    for layer in model.layers[1:]:
        h = layer(h)
        if layer.name == "fc1":
            h = keras.layers.Activation("gelu", name="fc1_gelu")(h)
    keras.Model(model.inputs, h, name="digits_cnn").save(target)


@pytest.fixture(scope="module")
def builds(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("diff")
    shutil.copytree(REPO / "examples", root / "examples")
    shutil.copy(REPO / "pipeline.yaml", root / "pipeline.yaml")
    assert main(["build", str(root / "pipeline.yaml"), "-q"]) == 0
    shutil.copytree(root / "build" / "digits", root / "release-1.0")
    gelu_variant(root / "examples" / "digits" / "model.keras", root / "model_v2.keras")
    text = (root / "pipeline.yaml").read_text().replace("path: examples/digits/model.keras", "path: model_v2.keras")
    (root / "v2.yaml").write_text(text.replace("dir: build/digits", "dir: build/v2"))
    assert main(["build", str(root / "v2.yaml"), "-q"]) == 1  # GELU: unsupported on edgetpu and tflm-cmsis-nn
    return {"root": root, "old": root / "release-1.0", "new": root / "build" / "v2"}


def test_diff_shows_what_changed(builds: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["diff", str(builds["old"]), str(builds["new"] / "report.json")]) == 0  # no gate asked for
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Model: changed (") and "size 36,528 -> 36,928 bytes (+400); gate PASS -> FAIL." in out[0]
    assert "- ops added: GELU x1" in out and "- ops removed: -" in out
    assert "- accuracy (built): 98.89% -> 98.89% (+0.00 points)" in out
    assert ("| edgetpu | PASS -> FAIL | 8 -> 6 | 0 -> 2 | 0 -> 1 | FULLY_CONNECTED x1, SOFTMAX x1, GELU x1 | - |"
            in out)
    assert out[-1] == "No regression gate failed."


def test_a_regression_gate_fails_with_exit_1(builds: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    args = ["diff", str(builds["old"]), str(builds["new"]), "--no-new-fallback", "edgetpu", "--max-size-growth",
            "0.005", "--format", "json"]
    assert main(args) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["regressions"] == [
        "model size grew +400 bytes (+1.1%: 36,528 -> 36,928) > max_size_growth 0.5%",
        "edgetpu: new cpu_fallback op(s) since the baseline: FULLY_CONNECTED x1, SOFTMAX x1",
        "edgetpu: new unsupported op(s) since the baseline: GELU x1"]
    assert data["ops"] == {"added": {"GELU": 1}, "removed": {}}
    # The same build against itself: nothing to fail.
    assert main(["diff", str(builds["old"]), str(builds["old"]), "--no-new-fallback", "edgetpu"]) == 0
    assert capsys.readouterr().out.startswith("Model: unchanged")


def test_build_with_a_baseline_records_the_change_and_gates_it(builds: dict[str, Path],
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    root = builds["root"]
    path = root / "v2-gated.yaml"
    path.write_text((root / "v2.yaml").read_text().replace("dir: build/v2", "dir: build/v2-gated")
                    + "gates: {no_new_fallback: [edgetpu], max_accuracy_regression: 0.01}\n")
    assert main(["build", str(path), "-q", "--baseline", str(builds["old"] / "report.json")]) == 1
    out = capsys.readouterr().out
    assert "  - regression since the baseline: edgetpu: new unsupported op(s) since the baseline: GELU x1" in out
    report = json.loads((root / "build" / "v2-gated" / "report.json").read_text())
    jsonschema.validate(report, json.loads(SCHEMA_PATH.read_text()))
    assert report["baseline"]["regressions"] == [
        "edgetpu: new cpu_fallback op(s) since the baseline: FULLY_CONNECTED x1, SOFTMAX x1",
        "edgetpu: new unsupported op(s) since the baseline: GELU x1"]  # accuracy held: 98.89% both
    text = (root / "build" / "v2-gated" / "report.md").read_text()
    assert "## Since the baseline" in text and "- **regression**: edgetpu: new unsupported op(s)" in text


@pytest.mark.parametrize(("content", "expected"), [
    (None, "no such report (give a report.json or the output folder holding one)"),
    ("{not json", "not an edgeconv report (Expecting property name"),
    ('{"name": "x"}', "not an edgeconv report (no tflite or targets section)"),
])
def test_a_bad_baseline_is_refused_before_building(builds: dict[str, Path], tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str], content: str | None,
                                                   expected: str) -> None:
    baseline = tmp_path / "report.json"
    if content is not None:
        baseline.write_text(content)
    before = tree(builds["root"] / "build")
    assert main(["build", str(builds["root"] / "v2.yaml"), "-q", "--baseline", str(baseline)]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and expected in err[0], err
    assert tree(builds["root"] / "build") == before
    assert main(["diff", str(baseline), str(builds["old"])]) == 2


def test_report_of_a_build_without_baseline_says_so(builds: dict[str, Path]) -> None:
    report: dict[str, Any] = json.loads((builds["old"] / "report.json").read_text())
    assert report["baseline"] is None
