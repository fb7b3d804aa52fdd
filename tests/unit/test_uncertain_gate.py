"""`uncertain` does not pass quietly: on a target gated as an accelerator, an op the target cannot say runs
on it fails the build (gates.uncertain: fail, the default) in every output of the verdict, and counts off
the accelerator either way; gates.uncertain: warn is a loosened default, said with its line.

The model: the Edge TPU probe with a 1x144x40x40 TRANSPOSE (230,400 elements). The built-in edgetpu target
sends it to the CPU (compiler 16 did); a target file of one's own that only knows the 57,600 elements seen
mapped calls it `uncertain`."""

from __future__ import annotations

import json
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from edgeconv.cli import main
from edgeconv.targets import DATA_DIR

from ..conftest import REPO

MODEL = REPO / "tests" / "data" / "probes" / "etpu-transpose_large.int8.tflite"
WHY = ("target my-tpu: 1 op(s) uncertain: they may not run on the Edge TPU (counted off it); first #1 TRANSPOSE: "
       "output 'Identity' is 1x144x40x40 = 230,400 elements")


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    text = (DATA_DIR / "edgetpu.yaml").read_text().replace("name: edgetpu\n", "name: my-tpu\n").replace(
        "{check: output_elements_mapped, maximum: 57600,",
        "{check: output_elements_known, maximum: 57600, effect: uncertain,")
    (tmp_path / "my-tpu.yaml").write_text(text)
    shutil.copy(MODEL, tmp_path / "m.tflite")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_check_fails_on_an_uncertain_op(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "m.tflite", "--target", "my-tpu.yaml"]) == 1
    out = capsys.readouterr().out
    assert "my-tpu: FAIL (1 supported, 1 uncertain, 0 cpu_fallback, 0 unsupported;" in out
    assert f"gate: {WHY}; gates.uncertain: warn accepts them" in out.splitlines()


def test_the_built_in_edgetpu_target_is_not_uncertain_about_it(project: Path,
                                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "m.tflite", "--target", "edgetpu"]) == 0
    out = capsys.readouterr().out
    assert "edgetpu: PASS (1 supported, 0 cpu_fallback, 1 unsupported" not in out
    assert "#1 TRANSPOSE [cpu_fallback] edgetpu.TRANSPOSE.output_elements_mapped:" in out


def _build(project: Path, gates: str) -> int:
    (project / "p.yaml").write_text(f"version: 1\nmodel: {{path: m.tflite}}\ntargets: [my-tpu.yaml]\n"
                                    f"output: {{dir: out}}\n{gates}")
    return main(["build", "p.yaml", "--no-cache", "--junit", "junit.xml", "--summary", "summary.md",
                 "--results-json", "results.json"])


def test_build_fails_in_every_output(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(project, "") == 1
    out = capsys.readouterr().out
    assert "gate: FAIL" in out and f"  - {WHY}; gates.uncertain: warn accepts them" in out
    report = json.loads((project / "out" / "report.json").read_text())
    assert report["gate"]["verdict"] == "fail"
    (check,) = [c for c in report["gate"]["checks"] if c["id"] == "gate.uncertain.my-tpu"]
    assert (check["outcome"], check["measured"], check["limit"]) == ("fail", 1, 0)
    assert report["targets"][0]["counts"]["uncertain"] == 1 and report["targets"][0]["shares"]["ops"] == 0.5
    markdown = (project / "out" / "report.md").read_text()
    assert WHY in markdown and "| my-tpu | **FAIL** | 1 | 1 | 0 | 0 |" in markdown
    assert "my-tpu: 1 of 2 ops (100.0% of MACs) on the Edge TPU, 1 ops uncertain (counted off it)" in out
    failures = ET.parse(project / "junit.xml").getroot().iter("failure")
    assert [f.get("message") for f in failures] == [f"{WHY}; gates.uncertain: warn accepts them"]
    assert "| **fail** | 992 B | my-tpu ❌ |" in (project / "summary.md").read_text()
    (result,) = json.loads((project / "results.json").read_text())["results"]
    assert (result["exit_code"], result["verdict"]) == (1, "fail")


def test_warn_is_a_loosened_default_with_its_line(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(project, "gates:\n  uncertain: warn\n") == 0
    out = capsys.readouterr().out
    assert ("loosened: gates.uncertain = warn is looser than the default fail: an op an accelerator may not run "
            "passes (p.yaml line 6)") in out
    report = json.loads((project / "out" / "report.json").read_text())
    (check,) = [c for c in report["gate"]["checks"] if c["id"] == "gate.uncertain.my-tpu"]
    assert check["outcome"] == "warn" and check["sentence"] == WHY


def test_a_bad_value_names_the_allowed_ones(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _build(project, "gates:\n  uncertain: fial\n") == 2
    assert capsys.readouterr().err.strip() == (
        "edgeconv: error: p.yaml:6: gates.uncertain: unknown value 'fial' (allowed: fail, warn); did you mean 'fail'?")
