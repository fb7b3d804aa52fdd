"""The light commands answer fast and never import TensorFlow."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from edgeconv import __version__

from ..conftest import REPO

PROBE = """
import sys
from edgeconv.cli import main
try:
    code = main({argv!r})
finally:
    print("TF_IMPORTED" if "tensorflow" in sys.modules else "TF_NOT_IMPORTED", file=sys.stderr)
sys.exit(code)
"""


def run(argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE.format(argv=argv)], capture_output=True, text=True,
                          cwd=REPO)


@pytest.mark.parametrize(("argv", "code"), [
    (["--version"], 0),
    (["--help"], 0),
    (["validate", "pipeline.yaml"], 0),
    (["check", "tests/data/conv2d-relu.int8.tflite"], 0),
    (["check", "tests/data/dense.float32.tflite", "--format", "json"], 1),
    (["targets", "show", "generic-int8"], 0),
    (["passes", "list"], 0),
])
def test_light_commands_do_not_import_tensorflow(argv: list[str], code: int) -> None:
    result = run(argv)
    assert result.returncode == code, result.stderr
    assert result.stderr.strip().endswith("TF_NOT_IMPORTED")


def test_version() -> None:
    result = subprocess.run([sys.executable, "-m", "edgeconv", "--version"], capture_output=True, text=True)
    assert result.stdout.strip() == f"edgeconv {__version__}"


def test_help_is_fast() -> None:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "edgeconv", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0 and "build" in result.stdout
    assert elapsed < 1.0, f"--help took {elapsed:.2f} s"
