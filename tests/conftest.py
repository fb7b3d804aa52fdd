from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "examples" / "digits"
ORACLES = REPO / "tests" / "data" / "oracles" / "edgetpu"  # copied from ../shared/oracles (Apache-2.0)

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_ENABLE_ONEDNN_OPTS", "0")
# Every test builds fresh (a test of the cache turns it on with its own folder under tmp_path), and
# nothing is written to the user's ~/.cache.
os.environ["EDGECONV_NO_CACHE"] = "1"


# How an unknown-target error lists the choices (the registry of built-in targets, plus files).
TARGET_CHOICES = ("arm-neon, edgetpu, ethos-u55-128, ethos-u85-256, generic-int8, tflm-cmsis-nn, or a path to a "
                  "target .yaml file")


def run_edgeconv(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """Run the CLI in a fresh process, as a user would."""
    return subprocess.run([sys.executable, "-m", "edgeconv", *map(str, args)], capture_output=True, text=True,
                          cwd=cwd)


@pytest.fixture
def example_copy(tmp_path: Path) -> Path:
    """The shipped example (pipeline.yaml + examples/digits) copied under tmp_path."""
    shutil.copytree(EXAMPLE, tmp_path / "examples" / "digits")
    shutil.copy(REPO / "pipeline.yaml", tmp_path / "pipeline.yaml")
    return tmp_path


def tree(path: Path) -> dict[str, bytes]:
    """Every file under path with its bytes, to prove nothing changed."""
    return {str(p.relative_to(path)): p.read_bytes() for p in sorted(path.rglob("*")) if p.is_file()}
