"""Proving the INT8 model: parity with gates, the layer that ruins a model and the float set that
fixes it, and the firmware artifacts (C array, op resolver, golden vectors, memory)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import edgeconv
from edgeconv.cli import main
from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.verify.memory import estimate
from edgeconv.verify.runner import TFLiteRunner

from ..conftest import REPO
from . import models

ANY_MODE_TARGET = """
schema_version: 1
name: cpu-with-float
title: A CPU that runs float ops left in a quantized model (a user's target file)
sources: {ME: "the firmware team's LiteRT build"}
quantization: {modes: [int8], float_fallback: true, source: ME}
unlisted: {source: ME}
ops:
  FULLY_CONNECTED: {source: ME}
  QUANTIZE: {source: ME}
  DEQUANTIZE: {source: ME}
"""


@pytest.fixture(scope="module")
def example(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """The shipped example, built once with every firmware output."""
    root = tmp_path_factory.mktemp("example")
    shutil.copytree(REPO / "examples", root / "examples")
    text = (REPO / "pipeline.yaml").read_text().replace(
        "output:\n  dir: build/digits",
        "output:\n  dir: build/digits\n  c_array: {name: digits_model}\n  op_resolver: true\n"
        "  golden: {samples: 3, intermediates: true}")
    (root / "pipeline.yaml").write_text(text.replace("passes:\n", "verify:\n  runtime_drift: 3\npasses:\n", 1))
    result = edgeconv.build(root / "pipeline.yaml")
    return {"root": root, "out": result.output_dir, "report": result.report, "tflite": result.tflite_path}


def test_example_report_shows_parity_and_the_accuracy_drop(example: dict[str, Any]) -> None:
    parity = example["report"]["parity"]
    assert parity["samples"] == 360
    digit = parity["outputs"]["digit"]
    assert digit["tflite_float"]["max_abs_error"] <= 1e-5  # the float conversion computes what Keras computes
    assert digit["built"]["sqnr_db"] > 30 and digit["built"]["top1_agreement"] > 0.99
    accuracy = parity["accuracy"]
    assert accuracy["output"] == "digit" and accuracy["source"] == pytest.approx(0.98889, abs=1e-4)
    assert accuracy["drop"]["built"] <= 0.01
    text = (example["out"] / "report.md").read_text()
    assert "## Parity: source model vs float .tflite vs built .tflite" in text
    assert "| digit | built |" in text and "**drop 0.00%**" in text
    culprits = example["report"]["culprits"]
    assert len(culprits) == 5 and culprits[0]["rank"] == 1
    assert {layer for c in culprits for layer in c["source_layers"]} >= {"conv1", "conv2"}
    # Every op alone adds less error than the whole model does at its output (43 dB): with intermediate
    # tensors not kept, the debugger read overwritten buffers and reported the logits op at 7.1 dB.
    assert min(c["sqnr_db"] for c in culprits) > 35, culprits


def test_a_gate_tighter_than_the_measured_parity_fails_with_exit_1(example: dict[str, Any],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    sqnr = example["report"]["parity"]["outputs"]["digit"]["built"]["sqnr_db"]
    tight = round(sqnr + 5)
    path = example["root"] / "tight.yaml"
    path.write_text((example["root"] / "pipeline.yaml").read_text().replace("build/digits", "build/tight")
                    + f"gates: {{min_sqnr_db: {tight}, min_top1_agreement: 0.9}}\n")
    assert main(["build", str(path), "-q"]) == 1
    out = capsys.readouterr().out
    assert (f"  - output 'digit': SQNR {sqnr:.1f} dB < gates.min_sqnr_db {tight} (on the evaluation samples)"
            in out.splitlines())
    assert not [line for line in out.splitlines() if line.startswith("  - output 'digit': top-1")]  # that one passes


# -- a quantization-hostile layer ---------------------------------------------------------------------

@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """models.hostile with labels: the model that quantizes badly and the layers that fix it."""
    root = tmp_path_factory.mktemp("hostile")
    model = models.hostile(root / "hostile.keras")
    x = np.random.default_rng(0).normal(size=(400, 12)).astype(np.float32)
    labels = model.predict(x, verbose=0).argmax(1)
    np.savez(root / "cal.npz", x=x[:200])
    np.savez(root / "eval.npz", x=x[200:], label=labels[200:])
    (root / "cpu.yaml").write_text(ANY_MODE_TARGET)
    (root / "pipeline.yaml").write_text(
        "version: 1\nmodel: {path: hostile.keras}\ncalibration: {path: cal.npz, samples: 200}\n"
        "evaluation: {path: eval.npz, labels: label}\ntargets: [cpu.yaml]\n"
        "gates: {min_top1_agreement: 0.95}\n")
    return root


def test_culprit_ranking_names_the_hostile_layer_and_the_search_fixes_it(hostile: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", str(hostile / "pipeline.yaml"), "-q", "--suggest-keep-float"]) == 1
    assert "top-1 agreement" in capsys.readouterr().out
    report = json.loads((hostile / "build" / "hostile" / "report.json").read_text())
    assert report["parity"]["outputs"]["head"]["built"]["top1_agreement"] < 0.9
    first = report["culprits"][0]
    assert first["source_layers"] == ["wide"] and first["erased"] > 0.9
    suggestion = report["keep_float_suggestion"]
    assert suggestion["found"] and suggestion["layers"] == ["mix", "wide"]  # minimal: embed was not needed
    assert [s["passes_gates"] for s in suggestion["steps"]] == [False, False, True, False, True]
    text = (hostile / "build" / "hostile" / "report.md").read_text()
    assert "Keeping **mix, wide** in float meets the gates." in text
    # Applying the suggestion builds a model that passes.
    patterns = ", ".join(f"'{p}'" for p in suggestion["keep_float"])
    (hostile / "fixed.yaml").write_text((hostile / "pipeline.yaml").read_text()
                                        + f"quantization: {{keep_float: [{patterns}]}}\noutput: {{dir: fixed}}\n")
    assert main(["build", str(hostile / "fixed.yaml"), "-q"]) == 0


def test_suggest_keep_float_needs_a_gate_and_targets_that_run_float(example: dict[str, Any],
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["build", str(example["root"] / "pipeline.yaml"), "-q", "--suggest-keep-float"]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1  # the default gates are there to meet
    assert err[0].startswith("edgeconv: error: --suggest-keep-float: target 'generic-int8' runs no float ops")
    path = example["root"] / "no_gates.yaml"
    path.write_text((example["root"] / "pipeline.yaml").read_text().replace("  - generic-int8\n", "")
                    + "gates: {disable: [accuracy, agreement]}\n")
    assert main(["build", str(path), "-q", "--suggest-keep-float"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "edgeconv: error: --suggest-keep-float needs an evaluation section and a parity gate to meet "
        "(gates.max_accuracy_drop, min_top1_agreement, min_sqnr_db or min_cosine)"]


# -- firmware artifacts ----------------------------------------------------------------------------------

GCC = shutil.which("gcc")
GXX = shutil.which("g++")


@pytest.mark.skipif(GCC is None or GXX is None, reason="no C compiler on this machine")
def test_c_array_compiles_warning_free_and_holds_the_model(example: dict[str, Any], tmp_path: Path) -> None:
    out = example["out"]
    assert (out / "digits_model.c").exists() and (out / "digits_model.h").exists()
    main_c = tmp_path / "use.c"
    main_c.write_text(textwrap.dedent("""
        #include <stdio.h>
        #include <stdint.h>
        #include "digits_model.h"
        int main(void) {
          if (((uintptr_t)digits_model) % 16 != 0) return 2;
          fwrite(digits_model, 1, digits_model_len, stdout);
          return 0;
        }
    """))
    exe = tmp_path / "use"
    for cmd in ([GCC, "-std=c11", "-c", "-Wall", "-Wextra", "-Werror", str(out / "digits_model.c"), "-o",
                 str(tmp_path / "m.o")],
                [GCC, "-std=c11", "-Wall", "-Werror", f"-I{out}", str(main_c), str(tmp_path / "m.o"), "-o", str(exe)]):
        subprocess.run(cmd, check=True, capture_output=True, text=True)
    dumped = subprocess.run([str(exe)], check=True, capture_output=True).stdout
    assert dumped == example["tflite"].read_bytes()


@pytest.mark.skipif(GXX is None, reason="no C++ compiler on this machine")
def test_cc_array_compiles(example: dict[str, Any], tmp_path: Path) -> None:
    from edgeconv.verify.firmware import c_array

    files = c_array(example["tflite"].read_bytes(), "kws_model", source="x.tflite", sha256="0" * 64, cplusplus=True)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    subprocess.run([GXX, "-std=c++11", "-c", "-Wall", "-Wextra", "-Werror", str(tmp_path / "kws_model.cc"), "-o",
                    str(tmp_path / "k.o")], check=True, capture_output=True, text=True)


def test_op_resolver_registers_exactly_the_models_ops(example: dict[str, Any]) -> None:
    text = (example["out"] / "digits_model_op_resolver.h").read_text()
    ops = sorted({op.type for op in read_tflite(example["tflite"]).ops})
    assert ops == ["CONV_2D", "FULLY_CONNECTED", "MAX_POOL_2D", "RESHAPE", "SOFTMAX"]
    assert re.findall(r"resolver\.(Add\w+)\(\)", text) == ["AddConv2D", "AddFullyConnected", "AddMaxPool2D",
                                                            "AddReshape", "AddSoftmax"]
    assert "constexpr unsigned int kDigitsModelOpCount = 5;" in text
    assert "tflite::MicroMutableOpResolver<kDigitsModelOpCount>" in text


@pytest.mark.skipif(GCC is None, reason="no C compiler on this machine")
def test_golden_vectors_replay_exactly_with_reference_kernels(example: dict[str, Any], tmp_path: Path) -> None:
    golden = np.load(example["out"] / "golden.npz")
    runner = TFLiteRunner(example["tflite"].read_bytes(), reference=True)
    inputs = sorted(k for k in golden.files if "/input/" in k)
    assert len(inputs) == 3
    for key in inputs:
        sample = key.split("/")[0]
        got = runner.run_raw({"image": golden[key]})
        np.testing.assert_array_equal(got["digit"], golden[f"{sample}/output/digit"])
        assert golden[key].dtype == np.int8
    assert sum(1 for k in golden.files if k.startswith("sample0/tensor/")) >= 6  # intermediates kept
    # Cross-checked with edgeconv's NumPy reference: every op output of every golden sample, bit for bit.
    report = json.loads((example["out"] / "report.json").read_text())
    assert report["firmware"]["golden"]["reference"] == {"verdict": "bit-exact", "tensors_compared": 8,
                                                         "first_difference": None}
    assert ("Golden vectors against edgeconv's NumPy reference (`edgeconv reference`): bit-exact (8 tensor(s) "
            "compared).") in (example["out"] / "report.md").read_text()
    header = example["out"] / "digits_model_golden.h"
    (tmp_path / "g.c").write_text(f'#include "{header}"\nint main(void) {{ return digits_model_golden_0_output_digit[0]'
                                  " == 0 ? 0 : 0; }\n")
    subprocess.run([GCC, "-std=c11", "-Wall", "-Werror", "-Wno-unused-const-variable", str(tmp_path / "g.c"),
                    "-o", str(tmp_path / "g")], check=True, capture_output=True, text=True)


def test_each_target_runtime_is_compared_with_the_reference(example: dict[str, Any]) -> None:
    """verify.runtime_drift: 3 on the example: LiteRT's optimized kernels and TFLite Micro show every op output
    (8), XNNPACK only the model's output; all bit-exact. Without gates.max_runtime_drift_lsb it gates nothing
    (the gate at its limits: tests/unit/test_gate_boundaries.py and test_check_cli.py)."""
    drift = example["report"]["runtime_drift"]
    assert (drift["samples"], drift["data"]) == (3, "evaluation")
    runtimes = drift["runtimes"]
    assert {k: (r["target"], r["tensors_compared"], r["max_lsb"], r["ops"]) for k, r in runtimes.items()} == {
        "builtin": ("generic-int8", 8, 0, []), "xnnpack": ("arm-neon", 1, 0, []), "tflm": ("tflm-cmsis-nn", 8, 0, [])}
    assert not [c for c in example["report"]["gate"]["checks"] if c["id"].startswith("drift.")]
    md = (example["out"] / "report.md").read_text()
    assert ("- xnnpack (arm-neon): at most 0 LSB from the reference, bit-exact on 1 op output(s) (3 evaluation "
            "samples)") in md


def tflm_arena(path: Path) -> int:
    """The tensor arena TFLite Micro actually allocates for the model (its RecordingMicroAllocator)."""
    probe = textwrap.dedent("""
        import sys, numpy as np
        from tflite_micro.python.tflite_micro import runtime
        it = runtime.Interpreter.from_bytes(open(sys.argv[1], 'rb').read(), arena_size=1 << 24)
        it.print_allocations()
    """)
    out = subprocess.run([sys.executable, "-c", probe, str(path)], capture_output=True, text=True)
    match = re.search(r"Arena allocation total (\d+) bytes", out.stdout + out.stderr)
    assert match, out.stdout + out.stderr
    return int(match.group(1))


@pytest.mark.parametrize("model", ["example", "conv2d-relu.int8", "softmax-dense.int8", "add-uint8io.int8"])
def test_arena_estimate_covers_what_tflm_allocates(example: dict[str, Any], model: str) -> None:
    path = example["tflite"] if model == "example" else REPO / "tests" / "data" / f"{model}.tflite"
    actual = tflm_arena(path)
    estimated = estimate(read_tflite(path))["arena_bytes"]
    assert actual <= estimated <= 2 * actual, (actual, estimated)


def test_memory_gates(example: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    memory = example["report"]["memory"]
    assert memory["flash_bytes"] == example["tflite"].stat().st_size
    path = example["root"] / "small.yaml"
    path.write_text((example["root"] / "pipeline.yaml").read_text().replace("build/digits", "build/small")
                    + "gates: {max_arena_bytes: 4096, max_flash_bytes: 30000}\n")
    assert main(["build", str(path), "-q"]) == 1
    out = capsys.readouterr().out
    assert f"  - estimated tensor arena {memory['arena_bytes']:,} bytes > gates.max_arena_bytes 4,096" in out
    assert f"  - model size {memory['flash_bytes']:,} bytes > gates.max_flash_bytes 30,000" in out


def test_a_segmentation_map_is_gated_on_the_share_of_pixels_that_keep_their_class(tmp_path: Path) -> None:
    """A per-pixel softmax (random weights: near-even classes, which the int8 softmax's fixed 1/256 step
    reorders): parity compares each pixel's top class, and that share is what the report and the gate say (it
    was a regression gated by SQNR alone, which passed). The share is computed here from both models."""
    import keras

    keras.utils.set_random_seed(8)
    inp = keras.Input((14, 12, 3), name="image")
    x = keras.layers.Conv2D(6, 3, padding="same", activation="relu", name="enc")(inp)
    model = keras.Model(inp, keras.layers.Conv2D(4, 1, activation="softmax", name="mask")(x))
    kernel, bias = model.get_layer("mask").get_weights()
    model.get_layer("mask").set_weights([kernel * 0.1, bias])  # near-even classes, as an untrained head gives
    model.save(tmp_path / "seg.keras")
    images = models.photos(40, 14, 12, seed=8)
    np.savez(tmp_path / "cal.npz", image=images[:32])
    np.savez(tmp_path / "eval.npz", image=images[32:])
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: seg.keras}\ncalibration: {path: cal.npz, samples: 32}\n"
                                     "evaluation: {path: eval.npz}\ntargets: [generic-int8]\n")
    code = main(["build", str(tmp_path / "p.yaml"), "-q"])
    report = json.loads((tmp_path / "build" / "seg" / "report.json").read_text())
    built = np.concatenate([next(iter(models.run_tflite(tmp_path / "build" / "seg" / "seg.tflite",
                                                        {"image": images[i:i + 1]}).values())) for i in range(32, 40)])
    share = float(np.mean(built.argmax(-1) == model(images[32:], training=False).numpy().argmax(-1)))
    m = report["parity"]["outputs"]["mask"]["built"]
    assert report["parity"]["kinds"] == {"mask": "classification"}
    assert m["top1_agreement"] == pytest.approx(share)
    (check,) = [c for c in report["gate"]["checks"] if c["id"] == "agreement.top1.mask"]
    assert (check["outcome"] == "pass") is (share >= 0.9) and code == (0 if share >= 0.9 else 1)
    assert share < 0.9 and m["sqnr_db"] > 20  # what this model shows: the SQNR gate alone passed it


def test_the_labels_score_a_model_that_outputs_its_class(tmp_path: Path) -> None:
    """An argmax inside the model (its output is the class, int32): the evaluation labels score it, so the
    report has its accuracy and the accuracy gate applies (they were left unused: a warning, no accuracy).
    Both accuracies are computed here from the two models."""
    import keras

    layers = models.write_custom_layers(tmp_path, "class_out")
    keras.utils.set_random_seed(9)
    inp = keras.Input((6,), name="feat")
    model = keras.Model(inp, layers.ClassOf(name="cls")(keras.layers.Dense(4, name="logits")(inp)))
    model.save(tmp_path / "cls.keras")
    rng = np.random.default_rng(9)
    x = rng.normal(size=(60, 6)).astype(np.float32)
    truth = np.asarray(model(x, training=False))
    labels = np.where(rng.random(60) < 0.8, truth, (truth + 1) % 4).astype(np.int64)  # the float model: ~80 %
    np.savez(tmp_path / "cal.npz", feat=x[:40])
    np.savez(tmp_path / "eval.npz", feat=x[40:], label=labels[40:])
    (tmp_path / "p.yaml").write_text(
        "version: 1\nmodel: {path: cls.keras, custom_modules: [class_out], trust_code: true}\n"
        "calibration: {path: cal.npz, samples: 40}\nevaluation: {path: eval.npz, labels: label}\n"
        "targets: [arm-neon]\n")
    main(["build", str(tmp_path / "p.yaml"), "-q"])
    report = json.loads((tmp_path / "build" / "cls" / "report.json").read_text())
    built = np.array([models.run_tflite(tmp_path / "build" / "cls" / "cls.tflite", {"feat": x[i:i + 1]})["cls"][0]
                      for i in range(40, 60)])
    accuracy = report["parity"]["accuracy"]
    assert report["parity"]["kinds"] == {"cls": "index"}
    assert (accuracy["output"], accuracy["source"], accuracy["built"]) == (
        "cls", pytest.approx(float(np.mean(truth[40:] == labels[40:]))), pytest.approx(float(np.mean(built ==
                                                                                                     labels[40:]))))
    assert "accuracy.drop" in {c["id"] for c in report["gate"]["checks"]}
    assert "accuracy.labels_unused" not in {c["id"] for c in report["gate"]["checks"]}
