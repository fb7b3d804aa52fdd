"""A failing build says why: each cause of edgeconv/verify/diagnosis.py shown first on a small real model that
has it (real conversions, real data where scikit-learn ships it), in report.json, report.md, the console and
the GitHub annotations."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from edgeconv.cli import main


def _build(folder: Path, name: str, *, labels: bool = False, samples: int = 200, extra: str = "") -> dict[str, Any]:
    """Build folder/name.keras with folder/cal.npz and eval.npz against arm-neon (the gates fail); the report."""
    evaluation = "{path: eval.npz, labels: label}" if labels else "{path: eval.npz}"
    (folder / "p.yaml").write_text(f"version: 1\nmodel: {{path: {name}.keras}}\n"
                                   f"calibration: {{path: cal.npz, samples: {samples}}}\n"
                                   f"evaluation: {evaluation}\ntargets: [arm-neon]\n{extra}")
    assert main(["build", str(folder / "p.yaml"), "-q"]) == 1
    report: dict[str, Any] = json.loads((folder / "build" / name / "report.json").read_text())
    return report


_TRAINED: dict[str, Path] = {}  # which -> the folder it was first trained in (tests share the trained model)


def _tabular(folder: Path, which: str) -> tuple[np.ndarray, np.ndarray, int]:
    """A scikit-learn table (raw features, normalized inside the model) and an MLP trained on it; the build's
    calibration is the first 60 %, the evaluation the rest with labels. Trained once per session (seeded),
    copied into ``folder`` after that."""
    import shutil

    from sklearn.datasets import load_breast_cancer, load_wine

    x, y = (load_wine if which == "wine" else load_breast_cancer)(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(x))
    x, y = x[order].astype(np.float32), y[order]
    n = int(len(x) * 0.6)
    if which in _TRAINED and (_TRAINED[which] / f"{which}.keras").exists():
        for name in (f"{which}.keras", "cal.npz", "eval.npz"):
            shutil.copy(_TRAINED[which] / name, folder / name)
        return x, y, n
    _TRAINED[which] = folder
    import keras

    keras.utils.set_random_seed(0)
    norm = keras.layers.Normalization(name="norm")
    norm.adapt(x[:n])
    inp = keras.Input((x.shape[1],), name="x")
    hidden = keras.layers.Dense(16, activation="relu", name="hidden")(norm(inp))
    if which == "wine":
        out = keras.layers.Dense(3, activation="softmax", name="probs")(hidden)
        loss = "sparse_categorical_crossentropy"
    else:
        out = keras.layers.Dense(1, activation="sigmoid", name="p")(hidden)
        loss = "binary_crossentropy"
    model = keras.Model(inp, out)
    model.compile(keras.optimizers.Adam(0.01), loss)
    model.fit(x[:n], y[:n], epochs=40, batch_size=32, verbose=0)
    model.save(folder / f"{which}.keras")
    np.savez(folder / "cal.npz", x=x[:n])
    np.savez(folder / "eval.npz", x=x[n:], label=y[n:])
    return x, y, n


@pytest.mark.parametrize(("which", "output", "features"), [("cancer", "p", 30)])
def test_raw_tabular_features_under_one_input_scale_are_named_first(
        tmp_path: Path, which: str, output: str, features: int) -> None:
    """Wine (13 features from 0.13 to 1,680) and breast cancer (30, some whose whole range is 0.03): the int8
    input's one scale rounds most features away. The input is the first cause, confirmed by replaying its
    quantization alone in the float model, with the features that span fewer than 16 levels."""
    x, _, n = _tabular(tmp_path, which)
    report = _build(tmp_path, which, labels=True, samples=n)
    (scale,) = [t["scale"] for t in report["tflite"]["inputs"]]
    first = report["diagnosis"]["causes"][0]
    assert (first["id"], first["confirmed"], first["subject"], first["rank"]) == ("input_resolution", True, "x", 1)
    ev = x[n:].astype(np.float64)
    levels = (ev.max(0) - ev.min(0)) / scale
    assert first["evidence"]["coarse_features"] == [int(i) for i in np.flatnonzero(levels < 16)]
    assert len(first["evidence"]["coarse_features"]) > features // 2
    assert first["evidence"]["explained"] >= 0.5
    worst = int(np.argmin(levels))
    assert f"feature {worst}: {levels[worst]:.3g} levels" in first["sentence"]
    assert first["sentence"].startswith(f"input 'x': one int8 scale ({scale:.4g}) for features whose ranges differ ")
    assert "the float model with only this input rounded to its int8 levels gives " in first["sentence"]
    assert report["parity"]["kinds"] == {output: "classification" if which == "wine" else "binary"}
    assert set(report["diagnosis"]["failed"]) >= {"accuracy.drop", f"agreement.top1.{output}"}


def test_the_cause_reaches_the_console_the_report_and_the_annotations(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """Wine: 13 raw features from 0.13 to 1,680, one int8 input scale. The input is the first cause (confirmed:
    its quantization alone gives most of the error), with the features that span fewer than 16 levels; said
    under the FAIL reasons, in report.md's table and as an annotation."""
    x, _, n = _tabular(tmp_path, "wine")
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: wine.keras}\ncalibration: {path: cal.npz, samples: "
                                     "106}\nevaluation: {path: eval.npz, labels: label}\ntargets: [arm-neon]\n")
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.chdir(tmp_path)
    assert main(["build", "p.yaml"]) == 1
    out = capsys.readouterr().out.splitlines()
    report = json.loads((tmp_path / "build" / "wine" / "report.json").read_text())
    first = report["diagnosis"]["causes"][0]
    more = len(report["diagnosis"]["causes"]) - 1
    line = f"cause (input_resolution): {first['sentence']}; fix: {first['fix']} ({more} more in report.md)"
    gate = out.index("gate: FAIL")
    assert out[gate + 1 + len(report["gate"]["reasons"])] == f"  {line}"
    assert any(o.startswith("::error file=p.yaml,title=edgeconv diagnosis (wine)::cause (input_resolution): input 'x'")
               for o in out)
    (scale,) = [t["scale"] for t in report["tflite"]["inputs"]]
    assert (first["id"], first["confirmed"], first["subject"], first["rank"]) == ("input_resolution", True, "x", 1)
    levels = (x[n:].astype(np.float64).max(0) - x[n:].astype(np.float64).min(0)) / scale
    assert first["evidence"]["coarse_features"] == [int(i) for i in np.flatnonzero(levels < 16)]
    assert len(first["evidence"]["coarse_features"]) > 13 // 2 and first["evidence"]["explained"] >= 0.5
    assert report["parity"]["kinds"] == {"probs": "classification"}
    md = (tmp_path / "build" / "wine" / "report.md").read_text()
    assert "## Why the gates fail" in md
    assert md.index("## Why the gates fail") < md.index("## Where the quantization error comes from")
    assert "| 1 | `input_resolution` | yes | input 'x': one int8 scale" in md


def test_ids_fed_as_a_float_input_are_named_with_the_ids_that_survive(tmp_path: Path) -> None:
    """Character ids in a float input reach an Embedding (DEQUANTIZE -> CAST -> GATHER): the int8 round trip
    keeps only some of the 171 ids. The cause is index_input, with the count the test computes itself."""
    import keras

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 171, size=(400, 11)).astype(np.float32)
    keras.utils.set_random_seed(0)
    inp = keras.Input((11,), name="ids")
    out = keras.layers.Dense(5, activation="softmax", name="tags")(
        keras.layers.Flatten()(keras.layers.Embedding(171, 6, name="emb")(inp)))
    model = keras.Model(inp, out)
    model.get_layer("emb").set_weights([rng.normal(size=(171, 6)).astype(np.float32)])
    model.save(tmp_path / "ids.keras")
    np.savez(tmp_path / "cal.npz", ids=ids[:200])
    np.savez(tmp_path / "eval.npz", ids=ids[200:])
    report = _build(tmp_path, "ids")
    (view,) = report["tflite"]["inputs"]
    first = report["diagnosis"]["causes"][0]
    assert (first["id"], first["confirmed"], first["subject"]) == ("index_input", True, "ids")
    distinct = np.unique(ids[200:])
    scale, zero = np.float32(view["scale"]), np.float32(view["zero_point"])  # float32, as the runtime computes
    back = (np.clip(np.round(distinct / scale + zero), -128, 127) - zero) * scale
    kept = int(np.count_nonzero(np.trunc(back) == distinct))
    assert 0 < kept < distinct.size
    assert first["evidence"]["reaches"] == ["CAST", "GATHER"]
    assert (first["evidence"]["distinct_ids"], first["evidence"]["ids_kept"]) == (distinct.size, kept)
    assert f"only {kept} of the {distinct.size} distinct ids in the evaluation data survive" in first["sentence"]
    assert "keras.Input(dtype='int32')" in first["fix"]


def test_the_index_input_fix_builds_the_ids_as_an_int32_input(tmp_path: Path) -> None:
    """What index_input's fix says (keras.Input(dtype='int32')) builds: the .tflite keeps the ids int32 (no
    quantization reaches them), every id reaches the GATHER, the verdict stands on the embedding's output. It
    was refused: "the converter kept model input 'ids' int32 ... Fix: set quantization.input_type: int32", a
    value the pipeline does not allow."""
    import keras

    rng = np.random.default_rng(0)
    ids = rng.integers(0, 171, size=(400, 11)).astype(np.int32)
    keras.utils.set_random_seed(0)
    inp = keras.Input((11,), name="ids", dtype="int32")
    out = keras.layers.Dense(5, name="tags")(keras.layers.Flatten()(keras.layers.Embedding(171, 6, name="emb")(inp)))
    model = keras.Model(inp, out)
    model.get_layer("emb").set_weights([rng.normal(size=(171, 6)).astype(np.float32)])
    model.save(tmp_path / "ids.keras")
    np.savez(tmp_path / "cal.npz", ids=ids[:200])
    np.savez(tmp_path / "eval.npz", ids=ids[200:])
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: ids.keras}\ncalibration: {path: cal.npz, samples: "
                                     "200}\nevaluation: {path: eval.npz}\ntargets: [arm-neon]\n")
    assert main(["build", str(tmp_path / "p.yaml"), "-q"]) == 0
    report = json.loads((tmp_path / "build" / "ids" / "report.json").read_text())
    (view,) = report["tflite"]["inputs"]
    assert (view["signature_name"], view["dtype"], view["shape"]) == ("ids", "int32", [1, 11])
    assert report["parity"]["outputs"]["tags"]["built"]["sqnr_db"] > 30
    assert "index_input" not in json.dumps(report["diagnosis"])


def test_a_range_imposed_through_concatenation_and_maximum_is_named_with_the_tensor_that_imposes_it(
        tmp_path: Path) -> None:
    """A small branch (a few units) joined by CONCATENATION and MAXIMUM with a branch of a few hundred: the
    converter gives both one scale, and the head reads only the small branch. The cause is imposed_range (not
    calibration coverage: more data cannot help), naming the big branch's tensor; no coverage finding."""
    import keras

    rng = np.random.default_rng(0)
    x = rng.normal(size=(400, 6)).astype(np.float32)
    keras.utils.set_random_seed(0)
    inp = keras.Input((6,), name="x")
    big = keras.layers.Rescaling(300.0, name="big")(keras.layers.Dense(7, name="wide")(inp))
    small = keras.layers.Dense(7, name="narrow")(inp)
    joined = keras.layers.Concatenate(name="cat")([keras.layers.Concatenate(name="pair")([small, big]),
                                                   keras.layers.Maximum(name="mx")([big, small])])
    model = keras.Model(inp, keras.layers.Dense(4, name="head")(joined))
    kernel = np.zeros((21, 4), np.float32)
    kernel[:7] = rng.normal(size=(7, 4))  # the head reads the narrow branch only
    model.get_layer("head").set_weights([kernel, np.zeros(4, np.float32)])
    model.save(tmp_path / "imp.keras")
    np.savez(tmp_path / "cal.npz", x=x)  # the evaluation samples are among them: no range is exceeded
    np.savez(tmp_path / "eval.npz", x=x[200:])
    report = _build(tmp_path, "imp", samples=400)
    first = report["diagnosis"]["causes"][0]
    assert (first["id"], first["confirmed"], first["source_layers"]) == ("imposed_range", True, ["narrow"])
    assert "the converter gave it the range of '" in first["sentence"]
    assert "big_1/mul' " in first["sentence"] and "through CONCATENATION, MAXIMUM" in first["sentence"]
    assert {c["id"] for c in report["diagnosis"]["causes"]} <= {"imposed_range", "op_error"}
    findings = report["quantization"]["calibration"]["warnings"]
    assert {f["check"] for f in findings} == {"imposed_range"}


def test_evaluation_data_beyond_the_calibrated_range_is_calibration_coverage(tmp_path: Path) -> None:
    """Calibration inputs whose two features cancel in a layer (x2 = -x1), evaluation inputs where they add up
    (x2 = x1): the inputs' ranges agree, the layer's calibrated range is 40x too narrow. calibration_coverage,
    confirmed by the per-op ranking; the input is not blamed."""
    import keras

    rng = np.random.default_rng(1)
    a, b = rng.uniform(-1, 1, (400, 1)), rng.uniform(-1, 1, (400, 1))
    keras.utils.set_random_seed(0)
    inp = keras.Input((2,), name="x")
    model = keras.Model(inp, keras.layers.Dense(4, name="head")(keras.layers.Dense(3, name="mix")(inp)))
    model.get_layer("mix").set_weights([np.array([[1.0, 0.5, -1.0]] * 2, np.float32), np.zeros(3, np.float32)])
    model.save(tmp_path / "cov.keras")
    np.savez(tmp_path / "cal.npz", x=np.concatenate([a[:200], -a[:200] + 0.05 * b[:200]], 1).astype(np.float32))
    np.savez(tmp_path / "eval.npz", x=np.concatenate([a[200:], a[200:]], 1).astype(np.float32))
    report = _build(tmp_path, "cov")
    causes = report["diagnosis"]["causes"]
    assert [(c["id"], c["confirmed"]) for c in causes] == [("calibration_coverage", True), ("op_error", True)]
    assert causes[0]["source_layers"] == ["mix"]
    assert causes[1]["sentence"].startswith("FULLY_CONNECTED (")  # the next op: the first is named above
    assert causes[0]["sentence"].endswith("of its values clip (in int8 and int16 alike) (layer mix; its op ranks #1 "
                                          "of the ops that add the most error)")
    assert "input_resolution" not in {c["id"] for c in causes}


def _wide_softmax(folder: Path, evaluation: int) -> None:
    """folder/wide.keras: 12 features -> 24 ReLU units -> a 1,000-class softmax with small weights (every
    probability near 1/1,000); 120 calibration and ``evaluation`` evaluation samples of normal noise."""
    import keras

    keras.utils.set_random_seed(5)
    inp = keras.Input((12,), name="x")
    hidden = keras.layers.Dense(24, activation="relu", name="hidden")(inp)
    out = keras.layers.Dense(1000, activation="softmax", name="probs",
                             kernel_initializer=keras.initializers.RandomNormal(0.0, 0.01))(hidden)
    keras.Model(inp, out).save(folder / "wide.keras")
    rng = np.random.default_rng(6)
    np.savez(folder / "cal.npz", x=rng.normal(0, 1, (120, 12)).astype(np.float32))
    np.savez(folder / "eval.npz", x=rng.normal(0, 1, (evaluation, 12)).astype(np.float32))


def test_a_softmax_over_a_thousand_near_equal_classes_is_an_output_resolution_cause(tmp_path: Path) -> None:
    """A 1,000-class softmax whose probabilities all sit near 1/1,000: TFLite fixes an int8 softmax's output
    scale at 1/256, so every probability rounds to 0 and the INT8 model agrees with the float one on nothing.
    The first cause is the output's levels, confirmed by rounding the float model's recorded outputs alone
    (all of the error), with the softmax's fix; the op that adds the most error on its own comes after it."""
    _wide_softmax(tmp_path, evaluation=80)
    report = _build(tmp_path, "wide", samples=120)
    causes = report["diagnosis"]["causes"]
    first = causes[0]
    assert (first["id"], first["confirmed"], first["rank"]) == ("output_resolution", True, 1)
    assert first["evidence"]["output"] == "probs" and first["evidence"]["scale"] == pytest.approx(1 / 256)
    assert first["evidence"]["rounded_to_zero"] == 1.0 and first["evidence"]["largest"] < 0.5 / 256
    assert first["evidence"]["explained"] == 1.0
    assert first["sentence"].startswith("output 'probs': its int8 levels (scale 0.003906) are too coarse for the "
                                        "float model's values (the largest ")
    assert first["fix"].startswith("TFLite fixes an int8 SOFTMAX's output scale at 1/256: keep the SOFTMAX in float")
    assert first["source_layers"] == ["probs"]
    assert [c["id"] for c in causes[1:]] == ["op_error"] and causes[1]["subject"] != first["subject"]


def test_the_repair_search_tries_the_softmax_in_float_first_when_its_levels_are_the_cause(tmp_path: Path) -> None:
    """The 1,000-class softmax above with the repair search on (interface changes allowed: a float op makes the
    model's input and output float32): its first trial is the diagnosis's pointer, the SOFTMAX kept in float,
    and it passes the gates that failed (SQNR, top-1 agreement)."""
    _wide_softmax(tmp_path, evaluation=90)
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: wide.keras}\n"
                                     "calibration: {path: cal.npz, samples: 120}\nevaluation: {path: eval.npz}\n"
                                     "targets: [arm-neon]\n"
                                     "repair: {enabled: true, max_trials: 2, allow_interface_change: true}\n")
    assert main(["build", str(tmp_path / "p.yaml"), "-q"]) == 0
    report = json.loads((tmp_path / "build" / "wide" / "report.json").read_text())
    first = report["repair"]["trials"][0]
    assert first["change"] == "keep the SOFTMAX producing output 'probs' in float"
    assert first["passes_gates"] and report["repair"]["chosen"] == 1
