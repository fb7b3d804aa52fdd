"""The gate tells the truth by default (issue 15): three broken builds fail with no gate configured, and
every output says so the same way: exit code, console, report.json, report.md, JUnit, the Markdown
summary, the GitHub annotations and the results the Action hands over."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from ..conftest import REPO
from . import models


def build(folder: Path, pipeline: str) -> dict[str, Any]:
    """`edgeconv build` in a fresh process as a CI job runs it, with every CI output."""
    (folder / "pipeline.yaml").write_text(pipeline)
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_STEP_SUMMARY": str(folder / "step_summary.md")}
    proc = subprocess.run([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "--junit", "junit.xml",
                           "--summary", "summary.md", "--results-json", "results.json"], cwd=folder,
                          capture_output=True, text=True, env=env)
    (results,) = json.loads((folder / "results.json").read_text())["results"]
    out_dir = Path(results["output_dir"])
    return {"code": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr, "results": results,
            "report": json.loads((out_dir / "report.json").read_text()), "md": (out_dir / "report.md").read_text(),
            "junit": ET.parse(folder / "junit.xml").getroot(), "summary": (folder / "summary.md").read_text(),
            "step": (folder / "step_summary.md").read_text()}


def assert_fails_everywhere(run: dict[str, Any], check_id: str, sentence_start: str) -> str:
    """The check fails in every output, with the same sentence."""
    assert run["code"] == 1, run["stderr"][-2000:]
    gate = run["report"]["gate"]
    assert gate["verdict"] == "fail"
    failed = {c["id"]: c for c in gate["checks"] if c["outcome"] == "fail"}
    assert check_id in failed, sorted(failed)
    sentence = failed[check_id]["sentence"]
    assert sentence.startswith(sentence_start), sentence
    assert sentence in gate["reasons"]
    lines = run["stdout"].splitlines()
    assert "gate: FAIL" in lines and f"  - {sentence}" in lines
    assert f"- {sentence}" in run["md"].splitlines()
    junit_failures = {f.get("message") for f in run["junit"].iter("failure")}
    assert sentence in junit_failures and run["junit"].get("failures") == str(len(junit_failures))
    assert sentence in run["summary"] and run["summary"].startswith("## edgeconv: FAIL")
    assert sentence in run["step"]
    annotation = sentence.replace("%", "%25")
    assert any(line.startswith("::error") and line.endswith(annotation) for line in lines)
    assert run["results"]["exit_code"] == 1 and run["results"]["verdict"] == "fail"
    assert sentence in run["results"]["reasons"]
    return str(sentence)


def test_calibration_in_0_255_for_a_model_that_expects_0_1_fails_by_default(tmp_path: Path) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    calib = np.load(tmp_path / "examples" / "digits" / "calibration.npz")
    np.savez(tmp_path / "cal255.npz", image=calib["image"] * 255.0)
    pipeline = (REPO / "pipeline.yaml").read_text().replace("examples/digits/calibration.npz", "cal255.npz")
    run = build(tmp_path, pipeline)
    assert_fails_everywhere(run, "calibration.range_mismatch.image", "calibration: input 'image': calibration "
                            "range [0, 255] is 255x wider than the evaluation range [0, 1]")
    accuracy = next(c for c in run["report"]["gate"]["checks"] if c["id"] == "accuracy.drop")
    assert accuracy["outcome"] == "fail" and accuracy["measured"] > 0.3 and accuracy["limit"] == 0.03


def test_a_model_whose_int8_parity_is_poor_fails_by_default(tmp_path: Path) -> None:
    """One unit of 'wide' is 1000x larger than the rest (per-tensor INT8 crushes the others); no gate set,
    no evaluation data: the agreement gate runs on the calibration samples."""
    models.hostile(tmp_path / "m.keras", classes=5)
    np.savez(tmp_path / "cal.npz", x=np.random.default_rng(0).normal(size=(200, 12)).astype(np.float32))
    run = build(tmp_path, "version: 1\nmodel: {path: m.keras}\ncalibration: {path: cal.npz, samples: 200}\n"
                          "targets: [arm-neon]\n")
    assert run["report"]["parity"]["data"] == "calibration"
    # 'head' gives logits, not probabilities, and there are no labels: a regression output, gated on SQNR.
    assert run["report"]["parity"]["kinds"] == {"head": "regression"}
    assert_fails_everywhere(run, "agreement.sqnr_db.head", "output 'head': SQNR ")
    assert "(on the calibration samples)" in run["stdout"]
    # The per-op error is measured on the same samples: the ranking, and the view's SQNR overlay.
    culprits = run["report"]["culprits"]
    assert culprits and any("wide" in layer for c in culprits[:2] for layer in c["source_layers"]), culprits
    assert "explorer/quantization-sqnr.json" in [a["path"] for a in run["report"]["artifacts"]["explorer"]]


def test_an_unrolled_lstm_on_the_edge_tpu_fails_by_default(tmp_path: Path) -> None:
    """Almost nothing of an unrolled LSTM maps to the Edge TPU: said the way the compiler says it, and
    the build fails on the accelerator's share of MACs."""
    import keras

    keras.utils.set_random_seed(0)
    inp = keras.Input((7, 5), batch_size=1, name="seq")
    out = keras.layers.Dense(3, name="head")(keras.layers.LSTM(6, unroll=True, name="lstm")(inp))
    keras.Model(inp, out).save(tmp_path / "m.keras")
    t = np.linspace(0, 6, 7 * 5 * 200).reshape(200, 7, 5)
    np.savez(tmp_path / "cal.npz", seq=np.sin(t + np.arange(5)).astype(np.float32))
    run = build(tmp_path, "version: 1\nmodel: {path: m.keras}\ncalibration: {path: cal.npz, samples: 200}\n"
                          "targets: [edgetpu]\n")
    sentence = assert_fails_everywhere(run, "accelerator.edgetpu", "edgetpu: ")
    ops = len(run["report"]["targets"][0]["ops"])
    assert f" of {ops} ops (" in sentence and "% of MACs) on the Edge TPU; first " in sentence
    assert sentence.endswith("less than the 50% of MACs the gate requires (gates.min_supported_mac_share.edgetpu)")
    share = run["report"]["targets"][0]["shares"]["macs"]
    assert share < 0.5


@pytest.mark.parametrize(("gates", "line"), [
    ("gates: {disable: [accuracy, calibration]}",
     "loosened: default gate 'accuracy' disabled in pipeline.yaml line 2 (gates.disable)"),
    ("gates: {min_sqnr_db: 5}",
     "loosened: gates.min_sqnr_db = 5 is looser than the default 20 (pipeline.yaml line 2)"),
])
def test_a_loosened_default_gate_is_never_silent(tmp_path: Path, gates: str, line: str) -> None:
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    pipeline = (REPO / "pipeline.yaml").read_text().replace("version: 1\n", f"version: 1\n{gates}\n", 1)
    pipeline = "\n".join(ln for ln in pipeline.splitlines() if not ln.startswith("#"))  # line numbers as shown
    run = build(tmp_path, pipeline)
    assert run["code"] == 0, run["stdout"]
    assert line in run["stdout"].splitlines()
    note = line.removeprefix("loosened: ")
    assert note in run["report"]["gate"]["disabled"] and f"- **loosened**: {note}" in run["md"].splitlines()
    assert note in {s.get("message") for s in run["junit"].iter("skipped")}
    assert any(ln.startswith("::notice") and ln.endswith(note) for ln in run["stdout"].splitlines())
