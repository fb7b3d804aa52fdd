"""Ethos-U targets run the real Arm Vela compiler; without it they refuse to answer."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from edgeconv.converters.tflite_reader import read_tflite
from edgeconv.targets import load_target
from edgeconv.targets.checker import check_model

from ..conftest import REPO

OPS = REPO / "tests" / "data" / "ops"


def placement(name: str, target: str) -> list[tuple[str, str, str]]:
    result = check_model(read_tflite(OPS / f"{name}.int8.tflite"), load_target(target))
    return [(r.op.type, r.status.value, "; ".join(v.detail for v in r.violations)) for r in result.ops]


@pytest.mark.parametrize(("model", "target", "expected"), [
    ("conv2d", "ethos-u55-128", [("CONV_2D", "supported", "")]),
    ("gather", "ethos-u55-128", [("GATHER", "cpu_fallback", "Unsupported opType")]),
    ("gather", "ethos-u85-256", [("GATHER", "cpu_fallback", "axis: 3 != batch_dims: 0; axis must be equal to "
                                                            "batch_dims")]),
    ("div", "ethos-u55-128", [("ABS", "supported", ""), ("ADD", "supported", ""),
                              ("DIV", "cpu_fallback", "Unsupported opType")]),
    ("div", "ethos-u85-256", [("ABS", "supported", ""), ("ADD", "supported", ""), ("DIV", "supported", "")]),
    ("mean_c", "ethos-u55-128", [("MEAN", "cpu_fallback", "Unsupported depth-reduction.  IFM: 1, 6, 5, 4; "
                                                           "Reduction over depth is only supported if any of h,w,c "
                                                           "== 1")]),
])
def test_vela_decides_the_placement(model: str, target: str, expected: list[tuple[str, str, str]]) -> None:
    assert placement(model, target) == expected


def test_vela_estimates_land_in_the_report() -> None:
    result = subprocess.run([sys.executable, "-m", "edgeconv", "check", str(OPS / "conv2d.int8.tflite"), "--target",
                             "ethos-u55-128", "--format", "json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (target,) = json.loads(result.stdout)
    estimates = target["estimates"]
    assert estimates["macs"] == target["macs"]["supported"] == 6 * 5 * 7 * 3 * 3 * 4
    assert estimates["cycles_total"] > 0 and estimates["inference_time_s"] > 0
    assert estimates["sram_kib"] > 0


BLOCK_VELA = """
import sys
sys.modules["ethosu"] = None  # as if ethos-u-vela were not installed
from edgeconv.cli import main
sys.exit(main(sys.argv[1:]))
"""


def test_without_vela_the_target_refuses(tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", BLOCK_VELA, "check", str(OPS / "conv2d.int8.tflite"),
                             "--target", "ethos-u85-256"], capture_output=True, text=True)
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: target ethos-u85-256 is checked by the Arm Vela compiler, "
                                     "which is not installed: pip install 'edgeconv[vela]'")
    (tmp_path / "m.keras").write_bytes(b"PK")
    (tmp_path / "c.npz").write_bytes(b"PK")
    (tmp_path / "p.yaml").write_text("version: 1\nmodel: {path: m.keras}\ncalibration: {path: c.npz}\n"
                                     "targets: [generic-int8, ethos-u55-128]\n")
    result = subprocess.run([sys.executable, "-c", BLOCK_VELA, "validate", "p.yaml"], capture_output=True, text=True,
                            cwd=tmp_path)
    assert result.returncode == 2
    assert result.stderr.strip() == ("edgeconv: error: p.yaml:4: targets[1]: target 'ethos-u55-128' is checked by "
                                     "the Arm Vela compiler, which is not installed: pip install 'edgeconv[vela]'")


def test_vela_failure_is_an_error_verdict_and_other_targets_still_report(capsys: pytest.CaptureFixture[str]) -> None:
    """Vela 5.2 cannot compile a bool -> int8 CAST; that target has no verdict (exit 1, its reason), the
    generic-int8 verdict is still given. (In the fast subset: a target whose own tool failed must fail.)"""
    import json

    from edgeconv.cli import main

    pytest.importorskip("ethosu.vela")
    model = REPO / "tests" / "data" / "probes" / "tflm-cast_bool_i8.tflite"
    assert main(["check", str(model), "--target", "ethos-u55-128", "--target", "generic-int8", "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert [t["verdict"] for t in data] == ["error", "pass"]
    assert data[0]["error"].startswith("Vela failed on the model (exit code 1): ")
    assert main(["check", str(model), "--target", "ethos-u55-128"]) == 1
    out = capsys.readouterr().out
    assert "ethos-u55-128: ERROR: Vela failed on the model" in out


def test_an_estimate_vela_cannot_give_is_left_out(tmp_path: Path) -> None:
    """A model with nothing on the NPU: Vela's summary says 0 cycles and NaN inferences per second. The JSON
    stays strict JSON (no NaN), the console line says no rate, and a build writes its report (it crashed:
    "Out of range float values are not JSON compliant")."""
    model = OPS / "ceil.int8.tflite"
    result = subprocess.run([sys.executable, "-m", "edgeconv", "check", str(model), "--target", "ethos-u55-128",
                             "--format", "json"], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    (target,) = json.loads(result.stdout, parse_constant=lambda c: pytest.fail(f"not JSON: {c}"))
    assert target["estimates"]["cycles_total"] == 0 and "inferences_per_second" not in target["estimates"]
    text = subprocess.run([sys.executable, "-m", "edgeconv", "check", str(model), "--target", "ethos-u55-128"],
                          capture_output=True, text=True).stdout
    assert "0 cycles; 0.0 µs per inference\n" in text and "nan" not in text
    shutil.copy(model, tmp_path / model.name)  # a pipeline reads only inside its project
    (tmp_path / "p.yaml").write_text(f"version: 1\nmodel: {{path: {model.name}}}\ntargets: [ethos-u55-128]\n"
                                     f"output: {{dir: {tmp_path / 'out'}}}\n")
    built = subprocess.run([sys.executable, "-m", "edgeconv", "build", str(tmp_path / "p.yaml")],
                           capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    report = json.loads((tmp_path / "out" / "report.json").read_text(), parse_constant=pytest.fail)
    assert "inferences_per_second" not in report["targets"][0]["estimates"]
