"""The Python API examples (docs/COMMANDS.md, linked from the README) run as written, on a copy of the example."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

pytestmark = pytest.mark.tf


def test_the_readme_python_example_runs(tmp_path: Path) -> None:
    doc = (REPO / "docs" / "COMMANDS.md").read_text()
    section = doc.split("## Python API", 1)[1].split("\n## ", 1)[0]
    code, many = re.findall(r"```python\n(.*?)```", section, re.S)
    shutil.copytree(REPO / "examples", tmp_path / "examples")
    shutil.copy(REPO / "pipeline.yaml", tmp_path / "pipeline.yaml")
    done = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "EDGECONV_NO_CACHE": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    lines = done.stdout.splitlines()
    assert lines[0] == f"PASS {tmp_path / 'build' / 'digits' / 'digits.tflite'}"
    assert lines[1:] == ["edgetpu pass {'supported': 8, 'uncertain': 0, 'cpu_fallback': 0, 'unsupported': 0}",
                         "tflm-cmsis-nn pass {'supported': 7, 'uncertain': 0, 'cpu_fallback': 1, 'unsupported': 0}"]
    # Several pipelines through the library (edgeconv.many), as `edgeconv build ... -j 2` builds them.
    done = subprocess.run([sys.executable, "-c", many], cwd=tmp_path, capture_output=True, text=True,
                          env={**os.environ, "EDGECONV_NO_CACHE": "1"}, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.splitlines() == ["pipeline.yaml 0"]
