"""Same pipeline, model, data and toolchain: the same bytes, in fresh processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from ..conftest import REPO, tree

EVERY_OUTPUT = ("output:\n  dir: build/digits\n  c_array: {name: digits_model}\n  op_resolver: true\n"
                "  golden: {samples: 2, intermediates: true}\n  onnx: {}")


def build_in_fresh_process(root: Path) -> dict[str, bytes]:
    shutil.copytree(REPO / "examples", root / "examples")
    text = (REPO / "pipeline.yaml").read_text().replace("output:\n  dir: build/digits", EVERY_OUTPUT)
    assert EVERY_OUTPUT in text
    (root / "pipeline.yaml").write_text(text)
    done = subprocess.run([sys.executable, "-m", "edgeconv", "build", "pipeline.yaml", "-q"], cwd=root,
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return tree(root / "build" / "digits")


def test_two_builds_in_fresh_processes_give_identical_bytes(tmp_path: Path) -> None:
    first = build_in_fresh_process(tmp_path / "one")
    second = build_in_fresh_process(tmp_path / "two")
    assert sorted(first) == [".edgeconv-output", "digits.int8.onnx", "digits.onnx", "digits.tflite", "digits_model.c",
                             "digits_model.h", "digits_model_golden.h", "digits_model_op_resolver.h",
                             "explorer/arm-neon.status.json", "explorer/arm-neon.why.json",
                             "explorer/edgetpu.status.json", "explorer/generic-int8.status.json",
                             "explorer/quantization-sqnr.json", "explorer/tflm-cmsis-nn.status.json",
                             "explorer/tflm-cmsis-nn.why.json", "golden.npz", "pipeline.resolved.yaml",
                             "report.json", "report.md"]
    differ = [name for name in first if first[name] != second[name]]
    # The marker lists every file's sha256: it differs in report.json's, and nothing else.
    markers = [json.loads(files[".edgeconv-output"])["files"] for files in (first, second)]
    assert markers[0].pop("report.json") != markers[1].pop("report.json") and markers[0] == markers[1]
    assert set(differ) <= {"report.json", ".edgeconv-output"}  # its timestamp and stage times, and nothing else:
    one, two = (json.loads(files["report.json"]) for files in (first, second))
    for report in (one, two):
        report.pop("created")
        assert set(report.pop("timings")["stages_s"]) == {"load", "data", "passes", "convert", "check", "invoke",
                                                          "verify", "onnx"}
    assert one == two
    assert {"python", "edgeconv", "tensorflow", "keras", "ai-edge-litert", "numpy", "onnx", "onnxruntime",
            "tf2onnx"} <= one["toolchain"].keys()
