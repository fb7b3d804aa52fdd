"""The exit code is the verdict, whatever happens to the console: a reader that goes away (`| head -1`,
`| true`), a closed descriptor (`>&-`) or a full disk (`> /dev/full`) never turns a failing verdict into
exit 0 and is not an internal error. Real pipes through bash, with PIPESTATUS."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ..conftest import REPO

FAILS_EDGETPU = REPO / "tests" / "data" / "dense.float32.tflite"  # float ops: the Edge TPU maps none
PASSES = REPO / "tests" / "data" / "conv2d-relu.int8.tflite"
EDGECONV = f"{shlex.quote(sys.executable)} -m edgeconv"


def status(command: str, cwd: Path) -> tuple[int, str]:
    """Run ``command`` under ``bash -o pipefail`` and return edgeconv's own status (PIPESTATUS[0]) and stderr."""
    script = f"set -o pipefail; {command}; echo \"status=${{PIPESTATUS[0]}}\" >&3"
    proc = subprocess.run(["bash", "-c", f"exec 3>status; {script}"], cwd=cwd, capture_output=True, text=True,
                          timeout=120)
    line = (cwd / "status").read_text().strip()
    return int(line.removeprefix("status=")), proc.stderr


CHECK_FAIL = f"{EDGECONV} check {FAILS_EDGETPU} --target edgetpu"
CHECK_PASS = f"{EDGECONV} check {PASSES} --target generic-int8"


@pytest.mark.parametrize("sink", ["| head -1", "| true", ">&-", "> /dev/full", "| head -c 1", "2>&- >&-",
                                  "2>/dev/full >/dev/full"])
@pytest.mark.parametrize(("command", "code"), [
    (CHECK_FAIL, 1), (CHECK_FAIL + " --format json", 1), (CHECK_PASS, 0), (CHECK_PASS + " --format json", 0)])
def test_check_exits_with_its_verdict_whatever_the_console(tmp_path: Path, command: str, code: int,
                                                           sink: str) -> None:
    got, stderr = status(f"{command} {sink}", tmp_path)
    assert got == code, stderr
    assert "internal error" not in stderr and "Traceback" not in stderr


@pytest.mark.parametrize("attempt", range(4))  # | head -1 races the writer: repeat it
def test_a_failing_check_through_head_exits_1_every_time(tmp_path: Path, attempt: int) -> None:
    got, _ = status(f"{CHECK_FAIL} | head -1", tmp_path)
    assert got == 1


@pytest.mark.parametrize("sink", ["> /dev/full", ">&-", "| true", "2>/dev/full >/dev/full"])
def test_validate_exits_with_its_answer_whatever_the_console(tmp_path: Path, sink: str) -> None:
    (tmp_path / "bad.yaml").write_text("version: 1\nmodel: {path: m.keras}\nbogus: 1\n")
    assert status(f"{EDGECONV} validate {REPO / 'pipeline.yaml'} {sink}", tmp_path)[0] == 0
    assert status(f"{EDGECONV} validate bad.yaml {sink}", tmp_path)[0] == 2


@pytest.mark.parametrize("sink", ["> /dev/full", ">&-", "| head -c 1"])
def test_help_and_listings_are_not_an_internal_error(tmp_path: Path, sink: str) -> None:
    assert status(f"{EDGECONV} --help {sink}", tmp_path)[0] == 0
    assert status(f"{EDGECONV} targets list {sink}", tmp_path)[0] == 0


def test_a_closed_stdout_is_not_taken_by_the_first_file_opened(tmp_path: Path) -> None:
    """With descriptor 1 closed, the first file opened would become "stdout" and receive the result lines."""
    got, _ = status(f"{CHECK_FAIL} --format json >&-", tmp_path)
    assert got == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["status"]


@pytest.mark.parametrize("argv", [["--version"], ["check", str(PASSES), "--target", "edgetpu"],
                                  ["validate", str(REPO / "pipeline.yaml")]])
def test_python_m_edgeconv_imports_nothing_from_the_working_directory(tmp_path: Path, argv: list[str]) -> None:
    """A pull request's workspace with modules named as the standard library's and edgeconv's dependencies."""
    probe = tmp_path / "probe"
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    for name in ("json", "re", "shlex", "platform", "numpy", "yaml", "typing", "dataclasses", "logging",
                 "ai_edge_litert"):
        (workspace / f"{name}.py").write_text(f"open({str(probe)!r}, 'a').write(__name__ + '\\n')\n")
    proc = subprocess.run([sys.executable, "-m", "edgeconv", *argv], cwd=workspace, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert not probe.exists(), probe.read_text()
