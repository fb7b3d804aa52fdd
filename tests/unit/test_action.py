"""The GitHub Action, its install step, the example workflow and the pre-commit hook, without building."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from ..conftest import REPO

ACTION = yaml.safe_load((REPO / "action.yml").read_text())
WORKFLOW = yaml.safe_load((REPO / "examples" / "github-workflow.yml").read_text())
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")


def strings(node: Any) -> list[str]:
    if isinstance(node, dict):
        return [s for v in node.values() for s in strings(v)]
    if isinstance(node, list):
        return [s for v in node for s in strings(v)]
    return [node] if isinstance(node, str) else []


def test_action_metadata_follows_the_rules() -> None:
    assert {"name", "description", "runs"} <= ACTION.keys()
    assert set(ACTION) <= {"name", "author", "description", "inputs", "outputs", "runs", "branding"}
    assert ACTION["branding"]["icon"] and ACTION["branding"]["color"] in (
        "white", "black", "yellow", "blue", "green", "orange", "red", "purple", "gray-dark")
    for name, spec in ACTION["inputs"].items():
        assert re.fullmatch(r"[A-Za-z_][A-Za-z0-9_-]*", name), name
        assert spec["description"] and set(spec) <= {"description", "required", "default", "deprecationMessage"}
        assert isinstance(spec.get("default", ""), str), f"{name}: defaults are strings"
    runs = ACTION["runs"]
    assert runs["using"] == "composite"
    ids = {step["id"] for step in runs["steps"] if "id" in step}
    for step in runs["steps"]:
        assert ("run" in step) != ("uses" in step), step
        if "run" in step:
            assert step["shell"] == "bash", "a composite run step must name its shell"
            script = re.search(r'scripts/action/\w+\.sh', step["run"])
            assert script and (REPO / script.group(0)).is_file()
    used = {m.group(1) for s in strings(ACTION) for m in re.finditer(r"\binputs\.([A-Za-z0-9_-]+)", s)}
    assert used <= set(ACTION["inputs"]), used - set(ACTION["inputs"])
    assert used == set(ACTION["inputs"]), f"declared but never used: {set(ACTION['inputs']) - used}"
    for name, spec in ACTION["outputs"].items():
        match = re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])
        assert match and match.group(1) in ids, f"output {name}: {spec['value']}"
    written = set(re.findall(r'echo "([\w-]+)[=<]', (REPO / "scripts" / "action" / "build.sh").read_text()))
    assert {m.group(2) for spec in ACTION["outputs"].values()
            for m in [re.fullmatch(r"\$\{\{ steps\.([\w-]+)\.outputs\.([\w-]+) \}\}", spec["value"])] if m} <= written


def test_example_workflow_uses_the_action_as_declared() -> None:
    assert WORKFLOW[True]["pull_request"]["paths"]  # `on:` parses as True in YAML 1.1
    job = WORKFLOW["jobs"]["build"]
    assert job["strategy"]["matrix"]["pipeline"] and job["strategy"]["fail-fast"] is False
    step = next(s for s in job["steps"] if s.get("id") == "edgeconv")
    assert set(step["with"]) <= set(ACTION["inputs"])
    outputs = {m for s in strings(WORKFLOW) for m in re.findall(r"steps\.edgeconv\.outputs\.([\w-]+)", s)}
    assert outputs <= set(ACTION["outputs"])


def fake_python(tmp_path: Path) -> Path:
    log = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f"#!/usr/bin/env bash\nprintf '%s\\n' \"$*\" >> {log}\n")
    fake.chmod(0o755)
    return fake


@pytest.mark.parametrize(("extras", "tf", "expected"), [
    ("tf", "", ["-m pip install --upgrade pip", "-m pip install /src/edgeconv[tf]", "-m edgeconv --version"]),
    ("tf, onnx", "==2.21.*", ["-m pip install --upgrade pip", "-m pip install /src/edgeconv[tf,onnx]",
                              "-m pip install tensorflow-cpu==2.21.*", "-m edgeconv --version"]),
])
def test_install_step(tmp_path: Path, extras: str, tf: str, expected: list[str]) -> None:
    if os.uname().sysname != "Linux" or os.uname().machine != "x86_64":
        expected = [e.replace("tensorflow-cpu", "tensorflow") for e in expected]
    env = {**os.environ, "PYTHON": str(fake_python(tmp_path)), "EDGECONV_SOURCE": "/src/edgeconv",
           "INPUT_EXTRAS": extras, "INPUT_TENSORFLOW_VERSION": tf}
    subprocess.run(["bash", str(REPO / "scripts" / "action" / "install.sh")], env=env, check=True)
    assert (tmp_path / "calls.txt").read_text().splitlines() == expected


def test_pre_commit_hook_validates_every_changed_pipeline(tmp_path: Path) -> None:
    (hook,) = yaml.safe_load((REPO / ".pre-commit-hooks.yaml").read_text())
    files = re.compile(hook["files"])
    assert [bool(files.search(p)) for p in ("pipeline.yaml", "models/kws/pipeline-int8.yml", "kws.pipeline.yaml",
                                            "config.yaml", "pipeline.py")] == [True, True, True, False, False]
    bad = tmp_path / "pipeline-bad.yaml"
    bad.write_text("version: 1\nmodel: {path: m.keras}\n")
    entry = hook["entry"].split()
    assert entry[:2] == ["edgeconv", "validate"]
    done = subprocess.run([sys.executable, "-m", "edgeconv", *entry[1:], str(REPO / "pipeline.yaml"), str(bad)],
                          capture_output=True, text=True)
    assert done.returncode == 2
    assert done.stdout.startswith(f"{REPO / 'pipeline.yaml'}: valid") or "pipeline.yaml: valid" in done.stdout
    assert "pipeline-bad.yaml:2: model.path: file not found" in done.stderr
