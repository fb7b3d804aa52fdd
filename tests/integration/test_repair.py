"""When INT8 fails the agreement gates, the repair search finds the cheapest change every target runs, and
proves it (issue 19). Real conversions of models built to quantize badly in known ways."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

import edgeconv
from edgeconv.cli import main

pytestmark = pytest.mark.tf

FEATURES, HIDDEN, CLASSES = 6, 12, 5
OUTLIER = 300.0  # one hidden unit this much larger than the rest: one int8 scale cannot hold both


def outlier_model(path: Path) -> Path:
    """features -> dense 'mix' (unit 0 scaled by OUTLIER) -> dense 'head' softmax that ignores unit 0.

    With int8 activations the 'mix' tensor's scale is set by unit 0, and the units the head reads
    round to a handful of levels: the classes it picks change. int16 activations (256x finer) or
    'mix' kept in float hold them."""
    import keras

    rng = np.random.default_rng(7)
    inp = keras.Input((FEATURES,), name="features")
    mix = keras.layers.Dense(HIDDEN, name="mix")
    head = keras.layers.Dense(CLASSES, activation="softmax", name="head")
    model = keras.Model(inp, head(mix(inp)))
    w = rng.normal(0, 1, (FEATURES, HIDDEN)).astype("float32")
    w[:, 0] *= OUTLIER
    mix.set_weights([w, np.zeros(HIDDEN, "float32")])
    h = rng.normal(0, 1.5, (HIDDEN, CLASSES)).astype("float32")
    h[0, :] = 0.0
    head.set_weights([h, np.zeros(CLASSES, "float32")])
    model.save(path)
    return path


# These fixes keep ops in float or go int16x8: both change the model's int8 interface, which the search tries only
# when the pipeline allows it.
ALLOW = "{enabled: true, allow_interface_change: true}"


def project(tmp_path: Path, *, targets: list[str], repair: str = ALLOW, samples: int = 100,
            available: int = 400) -> Path:
    outlier_model(tmp_path / "model.keras")
    rng = np.random.default_rng(11)
    np.savez(tmp_path / "calib.npz", features=rng.uniform(-1, 1, (available, FEATURES)).astype("float32"))
    np.savez(tmp_path / "eval.npz", features=rng.uniform(-1, 1, (300, FEATURES)).astype("float32"))
    (tmp_path / "pipeline.yaml").write_text(
        "version: 1\nname: outlier\nmodel: {path: model.keras}\n"
        f"calibration: {{path: calib.npz, samples: {samples}}}\nevaluation: {{path: eval.npz}}\n"
        f"targets: [{', '.join(targets)}]\nverify: {{culprits: 3}}\nrepair: {repair}\n")
    return tmp_path / "pipeline.yaml"


# A target that runs int16x8 but no float op in a quantized model: only int16 activations can save it.
INT16_ONLY = """schema_version: 1
name: int16-cpu
title: A CPU that runs int8 and int16x8 kernels, and no float op in a quantized model
sources: {ME: "this test"}
quantization: {modes: [int8, int16x8], float_fallback: false, source: ME}
ops:
  FULLY_CONNECTED: {source: ME}
  SOFTMAX: {source: ME}
  QUANTIZE: {source: ME}
  DEQUANTIZE: {source: ME}
"""

def _closing_lines(report: dict[str, Any]) -> list[str]:
    return [f"{t['trial']}: {t['change']} -> {'pass' if t['passes_gates'] else 'fail'}"
            for t in report["repair"]["trials"]]


def test_arm_neon_keeps_the_worst_op_in_float_and_the_snippet_rebuilds_the_same_bytes(tmp_path: Path) -> None:
    result = edgeconv.build(project(tmp_path, targets=["arm-neon"]))
    found = result.report["repair"]  # the search runs only when the build as configured fails a gate
    assert result.passed, result.report["gate"]["reasons"]
    # per-channel is already on; more samples first (the data holds 400); percentile ranges do not help (the
    # outlier unit is in every sample, not a rare value); then int16 and float for the worst ops, one more at a
    # time: 'mix' alone is not enough (the head's quantized input has the outlier again), 'mix' and 'head' are.
    # int16 for both and int16x8 pass too, but XNNPACK runs no int16 op: 0 % of the MACs stay on it.
    assert _closing_lines(result.report) == [
        "1: 200 calibration samples instead of 100 -> fail",
        "2: activation ranges at the 99.99th percentile of the calibration values (AI Edge Quantizer) -> fail",
        "3: activation ranges at the 99.9th percentile of the calibration values (AI Edge Quantizer) -> fail",
        "4: int16 activations for the 1 op(s) adding the most error (mix; AI Edge Quantizer) -> fail",
        "5: int16 activations for the 2 op(s) adding the most error (head, mix; AI Edge Quantizer) -> pass",
        "6: keep the 1 op(s) adding the most error in float (mix) -> fail",
        "7: keep the 2 op(s) adding the most error in float (head, mix) -> pass",
        "8: int16 activations, int8 weights (int16x8) -> pass"]
    assert found["skipped"] == ["per-channel weights: already on"]
    assert [t["mac_share"]["arm-neon"] for t in found["trials"][3:]] == [0.4545, 0.0, 1.0, 1.0, 0.0]
    assert found["chosen"] == 7 and found["stopped"] == "tried every candidate"
    kept = yaml.safe_load(found["snippet"])["quantization"]["keep_float"]
    assert [re.sub(r"^\^.*/(\w+)_1/MatMul1\$$", r"\1", k) for k in kept] == ["mix", "head"]
    # The output is the chosen trial's build: its resolved pipeline holds the change ...
    resolved = yaml.safe_load((result.output_dir / "pipeline.resolved.yaml").read_text())
    assert resolved["quantization"]["keep_float"] == yaml.safe_load(found["snippet"])["quantization"]["keep_float"]
    # ... and the snippet pasted into the pipeline (without repair) builds the same bytes.
    text = (tmp_path / "pipeline.yaml").read_text().replace(f"repair: {ALLOW}\n", "")
    data = yaml.safe_load(text)
    data["quantization"] = yaml.safe_load(found["snippet"])["quantization"]
    data["output"] = {"dir": "pasted"}
    (tmp_path / "pasted.yaml").write_text(yaml.safe_dump(data))
    pasted = edgeconv.build(tmp_path / "pasted.yaml")
    assert pasted.passed and pasted.report["repair"] is None
    assert pasted.tflite_path.read_bytes() == result.tflite_path.read_bytes()
    md = (result.output_dir / "report.md").read_text()
    assert "## Repair" in md and found["snippet"].strip().splitlines()[0] in md


def test_a_target_without_float_ops_gets_int16x8(tmp_path: Path) -> None:
    (tmp_path / "int16-cpu.yaml").write_text(INT16_ONLY)
    result = edgeconv.build(project(tmp_path, targets=["int16-cpu.yaml"]))
    found = result.report["repair"]
    # int16 for the two worst ops is the whole model here: it passes too, but the converter's int16x8 model is
    # smaller (AI Edge Quantizer adds a QUANTIZE between the int8 input and the first int16 op).
    assert _closing_lines(result.report)[3:] == [
        "4: int16 activations for the 1 op(s) adding the most error (mix; AI Edge Quantizer) -> fail",
        "5: int16 activations for the 2 op(s) adding the most error (head, mix; AI Edge Quantizer) -> pass",
        "6: int16 activations, int8 weights (int16x8) -> pass"]
    assert [t["bytes"] < found["trials"][4]["bytes"] for t in found["trials"][4:]] == [False, True]
    assert found["chosen"] == 6 and result.passed
    assert yaml.safe_load(found["snippet"]) == {"quantization": {"mode": "int16x8", "input_type": "auto",
                                                                 "output_type": "auto"}}
    assert result.report["quantization"]["mode"] == "int16x8"


def test_nothing_within_the_budget_fails_and_shows_the_closest(tmp_path: Path) -> None:
    result = edgeconv.build(project(tmp_path, targets=["arm-neon"], repair="{enabled: true, max_trials: 1}"))
    found = result.report["repair"]
    assert not result.passed
    assert found["chosen"] is None and found["closest"] == 1 and len(found["trials"]) == 1
    assert found["stopped"].startswith("stopped at repair.max_trials (1) with ")
    assert any(r.startswith("repair: no change among 1 trial(s) passes every gate (stopped at repair.max_trials")
               for r in result.report["gate"]["reasons"])
    assert result.report["quantization"]["keep_float"] == []  # the output is the build as configured


TAGS = 3  # a multi-label head: one sigmoid per tag, the scores do not sum to 1 (a regression output: SQNR gated)


def tagger_model(path: Path) -> Path:
    """An audio-tagger-like head whose small logits are the difference of two large features:
    features -> dense 'trunk' ([40a + b, 40a], a and b mixes of the features) -> dense 'logits' (the
    difference of the two units, per tag) -> sigmoid. The trunk's int8 scale is set by the 40a term;
    the logits' b part is a few of its levels, so the tag scores come out mostly noise."""
    import keras

    rng = np.random.default_rng(3)
    inp = keras.Input((FEATURES,), name="features")
    trunk = keras.layers.Dense(2 * TAGS, name="trunk")
    logits = keras.layers.Dense(TAGS, name="logits")
    model = keras.Model(inp, keras.layers.Activation("sigmoid", name="tags")(logits(trunk(inp))))
    a = rng.normal(0, 1, (FEATURES, TAGS)).astype("float32")
    b = rng.normal(0, 0.3, (FEATURES, TAGS)).astype("float32")
    trunk.set_weights([np.concatenate([40 * a + b, 40 * a], axis=1), np.zeros(2 * TAGS, "float32")])
    diff = np.concatenate([np.eye(TAGS), -np.eye(TAGS)]).astype("float32")
    logits.set_weights([diff, np.zeros(TAGS, "float32")])
    model.save(path)
    return path


def test_a_sensitive_multi_label_head_is_repaired_on_tflite_micro(tmp_path: Path) -> None:
    """The trunk's evaluation range (to 288) passes its calibrated one (190, from 100 samples: all the data
    holds): int8 and int16 clip it alike, and the difference the logits take is wrong for those samples.
    int16x8 gives the same 15.4 dB as the trunk alone in float (its int8 output feeds the logits clipped
    again), and percentile ranges clip more (13.4 dB); only the trunk and the logits in float pass, on TFLite
    Micro's float reference kernels (no MAC left on CMSIS-NN): a way forward the report shows with its price."""
    pipeline = project(tmp_path, targets=["tflm-cmsis-nn"], available=100)
    tagger_model(tmp_path / "model.keras")
    result = edgeconv.build(pipeline)
    found = result.report["repair"]
    assert found["skipped"] == ["per-channel weights: already on",
                                "more calibration samples: the data holds no more than the 100 used"]
    assert _closing_lines(result.report) == [
        "1: activation ranges at the 99.99th percentile of the calibration values (AI Edge Quantizer) -> fail",
        "2: activation ranges at the 99.9th percentile of the calibration values (AI Edge Quantizer) -> fail",
        "3: int16 activations for the 1 op(s) adding the most error (trunk; AI Edge Quantizer) -> fail",
        "4: int16 activations for the 2 op(s) adding the most error (logits, trunk; AI Edge Quantizer) -> fail",
        "5: keep the 1 op(s) adding the most error in float (trunk) -> fail",
        "6: keep the 2 op(s) adding the most error in float (logits, trunk) -> pass",
        "7: int16 activations, int8 weights (int16x8) -> fail"]
    trials = found["trials"]
    # On the 200 samples the trials are compared on (100 are held back for the winner).
    assert [round(t["sqnr_db"]["tags"], 1) for t in trials] == [13.6, 13.6, 13.7, 15.5, 15.7, 51.3, 15.5]
    assert found["samples"] == {"chosen_on": 200, "held_back": 100}
    assert round(trials[5]["held_back"]["sqnr_db"]["tags"], 1) == 51.9 and not trials[5]["held_back"]["failed"]
    assert [t["mac_share"]["tflm-cmsis-nn"] for t in trials] == [1.0, 1.0, 1.0, 1.0, 0.3333, 0.0, 1.0]
    assert found["chosen"] == 6 and result.passed
    assert result.report["quantization"]["keep_float"] == yaml.safe_load(found["snippet"])["quantization"][
        "keep_float"]
    sqnr = [c for c in result.report["gate"]["checks"] if c["id"].startswith("agreement.sqnr_db.")]
    assert [c["outcome"] for c in sqnr] == ["pass"]  # the rebuilt output meets the gate the first build failed
    # The cause stays next to the fix: the first build's failed gate and its finding that the trunk clips
    # (the rebuilt model keeps the trunk float: its own report has no such finding).
    cause = found["as_configured"]
    assert cause["failed"] == ["output 'tags': SQNR 13.4 dB < gates.min_sqnr_db 20 (on the evaluation samples)"]
    clips = [f["message"] for f in cause["findings"] if f["check"] == "activation_range"]
    assert "trunk_1/MatMul1' reaches [-278.4, 288.4] on 200 evaluation samples" in clips[0]
    assert not [c for c in result.report["gate"]["checks"] if c["id"].startswith("calibration.activation_range")]
    md = (result.output_dir / "report.md").read_text()
    assert "- failed: output 'tags': SQNR 13.4 dB < gates.min_sqnr_db 20 (on the evaluation samples)" in md
    # The first build and the search are the rebuilt build's "repair" stage, inside its total.
    timings = result.report["timings"]
    assert timings["stages_s"]["repair"] == found["seconds"] > sum(t["seconds"] for t in found["trials"])
    assert timings["total_s"] >= sum(timings["stages_s"].values()) - 0.05


GLITCH = 150.0  # a rare glitch: feature 0 of one sample in 200 jumps to this (a sensor spike, a click in audio)


def glitch_project(tmp_path: Path) -> Path:
    """features -> dense 'mix' (relu; feature 0 reaches unit 0 only) -> dense 'head' softmax, calibrated on
    200 samples of which one holds the glitch. Min/max ranges stretch the input's and unit 0's int8 scale
    150x for that one value, and every other value rounds to a few levels; ranges at the 99.9th percentile
    clip the glitch (1 of 1,200 input values) and keep the rest fine."""
    import keras

    rng = np.random.default_rng(5)
    inp = keras.Input((FEATURES,), name="features")
    mix = keras.layers.Dense(HIDDEN, activation="relu", name="mix")
    head = keras.layers.Dense(CLASSES, activation="softmax", name="head")
    model = keras.Model(inp, head(mix(inp)))
    w = rng.normal(0, 1, (FEATURES, HIDDEN)).astype("float32")
    w[0, :] = 0.0
    w[0, 0] = 1.0
    mix.set_weights([w, np.full(HIDDEN, 0.5, "float32")])
    h = rng.normal(0, 1.5, (HIDDEN, CLASSES)).astype("float32")
    h[0, :] *= 0.01
    head.set_weights([h, np.zeros(CLASSES, "float32")])
    model.save(tmp_path / "model.keras")

    def data(n: int) -> np.ndarray:
        x = rng.uniform(-1, 1, (n, FEATURES)).astype("float32")
        x[100::200, 0] = GLITCH
        return x

    np.savez(tmp_path / "calib.npz", features=data(400))
    np.savez(tmp_path / "eval.npz", features=data(300))
    (tmp_path / "pipeline.yaml").write_text(
        "version: 1\nname: glitch\nmodel: {path: model.keras}\ncalibration: {path: calib.npz, samples: 200}\n"
        f"evaluation: {{path: eval.npz}}\ntargets: [arm-neon]\nverify: {{culprits: 3}}\nrepair: {ALLOW}\n")
    return tmp_path / "pipeline.yaml"


def test_rare_outliers_get_percentile_ranges_and_the_snippet_rebuilds_the_same_bytes(tmp_path: Path) -> None:
    result = edgeconv.build(glitch_project(tmp_path))
    found = result.report["repair"]
    lines = _closing_lines(result.report)
    # Twice the samples hold twice the glitches; the 99.99th percentile of 1,200 values is still the glitch.
    assert lines[:3] == [
        "1: 400 calibration samples instead of 200 -> fail",
        "2: activation ranges at the 99.99th percentile of the calibration values (AI Edge Quantizer) -> fail",
        "3: activation ranges at the 99.9th percentile of the calibration values (AI Edge Quantizer) -> pass"]
    trials = found["trials"]
    assert [round(t["sqnr_db"]["head"], 1) for t in trials[:3]] == [7.8, 7.7, 22.8]
    # Keeping 'mix' and 'head' in float passes as well, on XNNPACK too, but the int8 model is smaller.
    assert lines[6] == "7: keep the 2 op(s) adding the most error in float (head, mix) -> pass"
    assert trials[2]["mac_share"] == trials[6]["mac_share"] == {"arm-neon": 1.0}
    assert trials[2]["bytes"] < trials[6]["bytes"]
    assert found["chosen"] == 3 and result.passed, result.report["gate"]["reasons"]
    snippet = yaml.safe_load(found["snippet"])
    assert snippet == {"quantization": {"engine": "ai-edge-quantizer", "range_percentile": 99.9}}
    q = result.report["quantization"]
    assert (q["engine"], q["range_percentile"], q["int16_ops"]) == ("ai-edge-quantizer", 99.9, [])
    # The built model's input range is judged at the same percentile: the clipped glitch is no finding.
    assert not [c for c in result.report["gate"]["checks"] if c["id"].startswith("calibration.input_quantization")]
    data = yaml.safe_load((tmp_path / "pipeline.yaml").read_text())
    del data["repair"]
    data["quantization"] = snippet["quantization"]
    data["output"] = {"dir": "pasted"}
    (tmp_path / "pasted.yaml").write_text(yaml.safe_dump(data))
    pasted = edgeconv.build(tmp_path / "pasted.yaml")  # a new converter worker: AI Edge Quantizer in a new process
    assert pasted.passed and pasted.report["repair"] is None
    assert pasted.tflite_path.read_bytes() == result.tflite_path.read_bytes()


def test_a_fix_that_needs_float_io_is_not_made_unless_the_interface_may_change(tmp_path: Path,
                                                                               capsys: pytest.CaptureFixture[str]
                                                                               ) -> None:
    """Wine's raw features under one int8 input scale (tests/integration/test_diagnosis.py): only keeping the
    normalization in float fixes it, which makes the input and output float32. By default the search does not
    try it and fails saying so; with repair.allow_interface_change the diagnosis' candidate is tried first,
    passes, and the change is said in the console, the trial table, the snippet and a warning."""
    from .test_diagnosis import _tabular

    _, _, n = _tabular(tmp_path, "wine")
    base = (f"version: 1\nmodel: {{path: wine.keras}}\ncalibration: {{path: cal.npz, samples: {n}}}\n"
            "evaluation: {path: eval.npz, labels: label}\ntargets: [arm-neon]\n")
    (tmp_path / "p.yaml").write_text(base + "repair: {enabled: true, max_trials: 1}\n")
    assert main(["build", str(tmp_path / "p.yaml"), "-q"]) == 1
    report = json.loads((tmp_path / "build" / "wine" / "report.json").read_text())
    found = report["repair"]
    assert found["chosen"] is None
    assert all(t["interface_change"] is None for t in found["trials"])
    assert ("keep the ops that read input 'x' in float (SUB, MUL): changes the model's interface (input int8 -> "
            "float32, output int8 -> float32); repair.allow_interface_change: true tries it") in found["skipped"]
    assert "repair.allow_interface_change: true tries them" in found["summary"]
    assert report["tflite"]["inputs"][0]["dtype"] == "int8"
    capsys.readouterr()
    (tmp_path / "p.yaml").write_text(base + "repair: {enabled: true, allow_interface_change: true, max_trials: 1}\n")
    assert main(["build", str(tmp_path / "p.yaml"), "-q"]) == 0
    report = json.loads((tmp_path / "build" / "wine" / "report.json").read_text())
    found = report["repair"]
    first = found["trials"][0]
    assert (first["change"], first["passes_gates"]) == ("keep the ops that read input 'x' in float (SUB, MUL)", True)
    chosen = found["trials"][found["chosen"] - 1]
    assert chosen["interface_change"] == "input int8 -> float32, output int8 -> float32"
    assert found["snippet"].startswith("# changes the model's interface: input int8 -> float32")
    assert report["tflite"]["inputs"][0]["dtype"] == "float32"
    (check,) = [c for c in report["gate"]["checks"] if c["id"] == "repair.search"]
    assert check["outcome"] == "warn" and "CHANGES THE MODEL'S INTERFACE" in check["sentence"]
    assert any("CHANGES THE MODEL'S INTERFACE (input int8 -> float32" in line
               for line in capsys.readouterr().out.splitlines())
    assert "(interface: input int8 -> float32, output int8 -> float32)" in (
        tmp_path / "build" / "wine" / "report.md").read_text()


def test_a_binary_head_collapsed_by_its_input_is_repaired_when_the_interface_may_change(tmp_path: Path) -> None:
    """Breast cancer's 30 raw features, one sigmoid unit: the INT8 model calls most rows one class; with the
    interface allowed to change the normalization kept in float passes every gate, accuracy included."""
    from .test_diagnosis import _tabular

    _, _, n = _tabular(tmp_path, "cancer")
    (tmp_path / "p.yaml").write_text(
        f"version: 1\nmodel: {{path: cancer.keras}}\ncalibration: {{path: cal.npz, samples: {n}}}\n"
        "evaluation: {path: eval.npz, labels: label}\ntargets: [arm-neon]\n"
        "repair: {enabled: true, allow_interface_change: true, max_trials: 1}\n")
    result = edgeconv.build(tmp_path / "p.yaml")
    found = result.report["repair"]
    before = found["as_configured"]["failed"]
    assert any(f.startswith("accuracy drop ") for f in before)
    assert result.passed and found["chosen"] == 1
    parity = result.report["parity"]
    assert parity["kinds"] == {"p": "binary"} and parity["accuracy"]["drop"]["built"] <= 0.03
