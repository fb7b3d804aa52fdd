"""`edgeconv build` exits with its verdict whatever happens to its console (issue 32): a failing build
through `| true` exited 0, through `| head -1` 0 or 1 at random, and 3 with stdout closed. Real pipes
through bash with pipefail (GitHub's `shell: bash`), PIPESTATUS each time; the first build of each
verdict converts for real, the others come from the cache (the same console path)."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import EXAMPLE, REPO

pytestmark = pytest.mark.tf

SINKS = ["| true", "| head -1", ">&- 2>&-", "> /dev/full 2> /dev/full"]


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    import shutil

    root = tmp_path_factory.mktemp("console")
    shutil.copytree(EXAMPLE, root / "examples" / "digits")
    text = (REPO / "pipeline.yaml").read_text()
    (root / "pass.yaml").write_text(text.replace("dir: build/digits", "dir: build/pass"))
    # The digits model's SOFTMAX runs on TFLite's builtin kernel on arm-neon: a cpu_fallback this refuses.
    (root / "fail.yaml").write_text(text.replace("dir: build/digits", "dir: build/fail")
                                    + "gates:\n  max_cpu_fallback_ops: {arm-neon: 0}\n")
    return root


def _status(project: Path, pipeline: str, sink: str) -> int:
    env = {**os.environ, "EDGECONV_CACHE_DIR": str(project / "cache")}
    script = (f"set -o pipefail; {shlex.quote(sys.executable)} -m edgeconv build {pipeline} {sink}; "
              'echo "${PIPESTATUS[0]}" >&3')
    done = subprocess.run(["bash", "-c", f"exec 3>{shlex.quote(str(project / 'status'))}; {script}"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)
    assert "internal error" not in done.stderr, done.stderr
    return int((project / "status").read_text())


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize(("pipeline", "code"), [("fail.yaml", 1), ("pass.yaml", 0)])
def test_build_exits_with_its_verdict_whatever_the_console(project: Path, pipeline: str, code: int,
                                                           sink: str) -> None:
    assert _status(project, pipeline, sink) == code
    name = pipeline.removesuffix(".yaml")
    assert (project / "build" / name / "digits.tflite").is_file()  # the build finished and wrote its output


@pytest.mark.parametrize("attempt", range(2))  # head -1 races the writer: repeat it
def test_a_failing_build_through_head_exits_1_every_time(project: Path, attempt: int) -> None:
    assert _status(project, "fail.yaml", "2>&1 | head -1") == 1
