"""Many pipelines in one command, and what CI systems read: JUnit XML (validated against the Jenkins
JUnit schema), the Markdown summary, GitHub's step summary and annotations."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from edgeconv.cli import main

from ..conftest import REPO
from .test_diff import gelu_variant

JUNIT_XSD = REPO / "tests" / "data" / "junit" / "junit-10.xsd"


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("ci")
    shutil.copytree(REPO / "examples", root / "examples")
    shutil.copy(REPO / "pipeline.yaml", root / "good.yaml")
    gelu_variant(root / "examples" / "digits" / "model.keras", root / "model_v2.keras")
    text = (REPO / "pipeline.yaml").read_text().replace("path: examples/digits/model.keras", "path: model_v2.keras")
    (root / "gelu.yaml").write_text(text.replace("dir: build/digits", "dir: build/gelu"))
    (root / "broken.yaml").write_text("version: 1\nmodel: {path: examples/digits/model.keras}\n"
                                      "calibration: {path: examples/digits/calibration.npz}\ntargets: [edge-tpu]\n")
    step_summary = root / "step_summary.md"
    step_summary.write_text("# earlier step\n")
    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.chdir(root)
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(step_summary))
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["build", "*.yaml", "-j", "2", "--junit", "ci/junit.xml", "--summary", "ci/summary.md"])
    monkeypatch.undo()
    return {"root": root, "code": code, "out": out.getvalue(), "step_summary": step_summary.read_text()}


def test_the_exit_code_is_the_worst_and_every_pipeline_ran(run: dict[str, object]) -> None:
    root = run["root"]
    assert isinstance(root, Path)
    assert run["code"] == 2  # broken.yaml: a config error; the other two still built
    assert (root / "build" / "digits" / "report.json").exists() and (root / "build" / "gelu" / "report.json").exists()
    lines = str(run["out"]).splitlines()
    assert any(line.startswith("good.yaml: PASS in ") for line in lines)
    assert any(line.startswith("gelu.yaml: FAIL in ") for line in lines)
    assert any(line.startswith("broken.yaml: ERROR in ") for line in lines)


def test_junit_xml_is_valid_and_carries_rule_ids_and_ops(run: dict[str, object]) -> None:
    import xmlschema

    root = run["root"]
    assert isinstance(root, Path)
    path = root / "ci" / "junit.xml"
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(str(path))
    tree = ET.parse(path).getroot()
    # A test case per check of each verdict (warnings are not tests), one for the pipeline that failed to load.
    gates = {name: json.loads((root / "build" / name / "report.json").read_text())["gate"]
             for name in ("digits", "gelu")}
    cases = sum(1 for g in gates.values() for c in g["checks"] if c["outcome"] != "warn") + 1
    failed = sum(1 for g in gates.values() for c in g["checks"] if c["outcome"] in ("fail", "error"))
    assert (tree.get("tests"), tree.get("failures"), tree.get("errors")) == (str(cases), str(failed), "1")
    assert failed == len(gates["gelu"]["reasons"]) >= 1 and not gates["digits"]["reasons"]
    suites = {s.get("name"): s for s in tree}
    assert sorted(suites) == ["broken.yaml", "gelu.yaml", "good.yaml"]
    edgetpu = suites["gelu.yaml"].find("testcase[@name='target edgetpu']/failure")
    assert edgetpu is not None and edgetpu.get("message") == "target edgetpu: 1 unsupported op(s): GELU x1"
    assert "#6 GELU [unsupported] edgetpu.GELU.op_version_runtime" in (edgetpu.text or "")
    assert "(layers fc1_gelu)" in (edgetpu.text or "")
    error = suites["broken.yaml"].find("testcase[@name='build']/error")
    assert error is not None and "targets[0]: unknown target 'edge-tpu'" in (error.get("message") or "")
    assert suites["good.yaml"].find(".//failure") is None


def test_markdown_summary_and_github_outputs(run: dict[str, object]) -> None:
    root = run["root"]
    assert isinstance(root, Path)
    summary = (root / "ci" / "summary.md").read_text()
    assert summary.startswith("## edgeconv: ERROR\n")
    assert ("| `good.yaml` | **pass** | 36,528 B | generic-int8 ✅, arm-neon ✅, edgetpu ✅, tflm-cmsis-nn ✅ | "
            "accuracy 98.89% (drop 0.00 points) | `build/digits/report.md` |") in summary
    assert "- `gelu.yaml` (digits): target edgetpu: 1 unsupported op(s): GELU x1" in summary
    # Appended, not replaced; then the JUnit's test cases as a table per pipeline, open where one failed.
    step_summary = str(run["step_summary"])
    assert step_summary.startswith("# earlier step\n" + summary + "\n")
    assert "<details open><summary>gelu.yaml (digits): 11 checks, 2 failed (JUnit)</summary>" in step_summary
    assert "| `target edgetpu` | ❌ fail | target edgetpu: 1 unsupported op(s): GELU x1 |" in step_summary
    assert "<details><summary>good.yaml (digits): " in step_summary
    out = str(run["out"]).splitlines()
    assert "::error file=gelu.yaml,title=edgeconv target (digits)::target edgetpu: 1 unsupported op(s): GELU x1" in out
    broken = [line for line in out if line.startswith("::error file=broken.yaml,line=4,")]
    assert len(broken) == 1 and "targets[0]: unknown target 'edge-tpu'" in broken[0]


def run_action_build(cwd: Path, tmp: Path, pipelines: str) -> tuple[subprocess.CompletedProcess[str], dict[str, str]]:
    """The Action's build step as GitHub runs it: a script with GITHUB_* and INPUT_* in the environment."""
    output, summary = tmp / "github_output", tmp / "step_summary"
    env = {**os.environ, "GITHUB_ACTIONS": "true", "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary),
           "RUNNER_TEMP": str(tmp / "runner"), "INPUT_PIPELINES": pipelines, "INPUT_JOBS": "1", "INPUT_BASELINE": "",
           "INPUT_ARGS": "-q", "EDGECONV": f"{sys.executable} -m edgeconv"}
    done = subprocess.run(["bash", str(REPO / "scripts" / "action" / "build.sh")], cwd=cwd, env=env,
                          capture_output=True, text=True)
    text = output.read_text()
    values = dict(re.findall(r"^([\w-]+)=(.*)$", text, re.M))
    delimiter = re.search(r"^reports<<(EDGECONV_[0-9a-f]{32})$", text, re.M)  # random each run
    assert delimiter is not None, text
    values["reports"] = text.split(f"reports<<{delimiter[1]}\n")[1].split(delimiter[1])[0].strip()
    return done, values


def test_action_build_step_passes_and_hands_over_its_outputs(run: dict[str, object], tmp_path: Path) -> None:
    import xmlschema

    root = run["root"]
    assert isinstance(root, Path)
    done, values = run_action_build(root, tmp_path, "good.yaml")
    assert done.returncode == 0, done.stderr
    assert values["verdict"] == "pass" and values["exit-code"] == "0"
    assert values["reports"] == str(root / "build" / "digits" / "report.json")
    xmlschema.XMLSchema(str(JUNIT_XSD)).validate(values["junit"])
    assert Path(values["summary"]).read_text().startswith("## edgeconv: PASS")
    assert (tmp_path / "step_summary").read_text().startswith("## edgeconv: PASS")


def test_action_build_step_fails_with_the_pipelines_exit_code(run: dict[str, object], tmp_path: Path) -> None:
    root = run["root"]
    assert isinstance(root, Path)
    done, values = run_action_build(root, tmp_path, "broken.yaml")
    assert done.returncode == 2
    assert values["verdict"] == "error" and values["reports"] == ""
    assert "::error file=broken.yaml,line=4,title=edgeconv config::targets[0]: unknown target 'edge-tpu'" \
        in done.stdout
