"""Shell completion (argcomplete), asked the way bash asks after `eval "$(register-python-argcomplete edgeconv)"`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO


def complete(line: str, cwd: Path) -> list[str]:
    out = cwd / ".completions"
    env = {**os.environ, "_ARGCOMPLETE": "1", "COMP_LINE": line, "COMP_POINT": str(len(line)),
           "_ARGCOMPLETE_STDOUT_FILENAME": str(out), "_ARGCOMPLETE_IFS": "\n"}
    subprocess.run([sys.executable, "-m", "edgeconv"], env=env, cwd=cwd, check=True, capture_output=True)
    # argcomplete also offers the options (--help, ...) where a word may start: ours are the values.
    return sorted(w.strip() for w in out.read_text().split("\n") if w.strip() and not w.startswith("-"))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "kws.yaml").write_text("version: 1\n")
    (tmp_path / "pipeline.yaml").write_text("version: 1\n")
    (tmp_path / "model.tflite").write_bytes(b"")
    (tmp_path / "notes.txt").write_text("")
    return tmp_path


@pytest.mark.parametrize(("line", "expected"), [
    ("edgeconv va", ["validate"]),
    ("edgeconv targets show ed", ["edgetpu"]),
    ("edgeconv check model.tflite --target arm", ["arm-neon"]),
    ("edgeconv targets show edgetpu --op DEPTHWISE", ["DEPTHWISE_CONV_2D"]),
    ("edgeconv build ", ["pipeline.yaml", "pipelines/"]),  # folders and pipeline files, not notes.txt
    ("edgeconv validate pipelines/", ["pipelines/kws.yaml"]),
    ("edgeconv check ", ["model.tflite", "pipelines/"]),
    ("edgeconv diff a b --no-new-fallback tflm", ["tflm-cmsis-nn"]),
])
def test_completion(project: Path, line: str, expected: list[str]) -> None:
    assert complete(line, project) == expected


def test_help_does_not_import_argcomplete() -> None:
    code = "import sys\nfrom edgeconv.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n    pass\n" \
           "print('argcomplete' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip().splitlines()[-1] == "False"
