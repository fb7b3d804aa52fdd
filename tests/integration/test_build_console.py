"""`edgeconv build` exits with its verdict whatever happens to its console (issue 32): a failing build
through `| true` exited 0, through `| head -1` 0 or 1 at random, and 3 with stdout closed. Real pipes
through bash with pipefail (GitHub's `shell: bash`), PIPESTATUS each time; the first build of each
verdict converts for real, the others come from the cache (the same console path)."""

from __future__ import annotations

import os
import re
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
    # The test session turns the cache off (tests/conftest.py); these builds share one, as the docstring says.
    env = {**os.environ, "EDGECONV_CACHE_DIR": str(project / "cache"), "EDGECONV_NO_CACHE": "0"}
    script = (f"set -o pipefail; {shlex.quote(sys.executable)} -m edgeconv build {pipeline} {sink}; "
              'echo "${PIPESTATUS[0]}" >&3')
    done = subprocess.run(["bash", "-c", f"exec 3>{shlex.quote(str(project / 'status'))}; {script}"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)
    assert "internal error" not in done.stderr, done.stderr
    return int((project / "status").read_text())


@pytest.mark.parametrize("sink", SINKS)
@pytest.mark.parametrize(("pipeline", "code"), [("fail.yaml", 1), ("pass.yaml", 0), ("pass.yaml fail.yaml", 1)])
def test_build_exits_with_its_verdict_whatever_the_console(project: Path, pipeline: str, code: int,
                                                           sink: str) -> None:
    assert _status(project, pipeline, sink) == code
    for name in (p.removesuffix(".yaml") for p in pipeline.split()):
        assert (project / "build" / name / "digits.tflite").is_file()  # each build finished and wrote its output


@pytest.mark.parametrize("attempt", range(2))  # head -1 races the writer: repeat it
def test_a_failing_build_through_head_exits_1_every_time(project: Path, attempt: int) -> None:
    assert _status(project, "fail.yaml", "2>&1 | head -1") == 1


# -- several pipelines as a person and as CI see them (issue 37) ----------------------------------------------

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


def _on_a_terminal(project: Path, *args: str, extra_env: dict[str, str] | None = None) -> tuple[int, str]:
    """``edgeconv build ...`` on a pseudo-terminal (stdin, stdout and stderr), as a person runs it: its exit code
    and everything the screen received."""
    import pty
    import select
    import time

    env = {k: v for k, v in os.environ.items() if k not in ("CI", "NO_COLOR", "FORCE_COLOR")}
    env.update({"EDGECONV_CACHE_DIR": str(project / "cache"), "EDGECONV_NO_CACHE": "0", "TERM": "xterm-256color",
                "COLUMNS": "160",
                **(extra_env or {})})
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "edgeconv", "build", *args], cwd=project, env=env,
                            stdin=follower, stdout=follower, stderr=follower, close_fds=True)
    os.close(follower)
    screen, deadline = b"", time.monotonic() + 600
    while time.monotonic() < deadline:
        ready, _, _ = select.select([leader], [], [], 0.2)
        if ready:
            try:
                chunk = os.read(leader, 65536)
            except OSError:  # the other end closed: the command ended
                break
            if not chunk:
                break
            screen += chunk
        elif proc.poll() is not None:
            break
    os.close(leader)
    return proc.wait(timeout=60), screen.decode(errors="replace")


def test_several_pipelines_on_a_terminal_show_each_ones_stage_then_a_table(project: Path) -> None:
    code, screen = _on_a_terminal(project, "pass.yaml", "fail.yaml", "-j", "2", "--no-cache")
    assert code == 1  # fail.yaml's verdict, whatever the screen showed
    text = ANSI.sub("", screen).replace("\r", "")
    results = text.index("pass.yaml: PASS in ")
    # A live line per running pipeline, with its stage, before the results (the builds take seconds).
    assert re.search(r"(pass|fail)\.yaml: (loading the model|converting|measuring parity)", text[:results])
    assert "fail.yaml: FAIL in " in text
    table = text[text.index("edgeconv: FAIL\n"):]
    assert "╭" in table and "│ pass.yaml " in table and "edgetpu PASS" in table
    assert re.search(r"\n2 pipelines in \d+\.\d s, 2 at a time(; TensorFlow imported once, in \d+\.\d s, before "
                     r"the builds \(in no pipeline's time\))?\n", table)
    assert "\x1b[1;31mFAIL\x1b[0m" in screen and "| pipeline |" not in text  # colour; no Markdown on a screen


def test_cached_builds_say_so_instead_of_the_cached_builds_time(project: Path) -> None:
    for _ in range(2):  # the first may build (when this test runs alone); the second is served
        code, screen = _on_a_terminal(project, "pass.yaml")
    text = ANSI.sub("", screen).replace("\r", "")
    assert code == 0 and re.search(r"\ntime: served from the cache in \d+\.\d s \(the build it holds took "
                                   r"\d+\.\d s\)\n", text), text
    code, screen = _on_a_terminal(project, "pass.yaml", "fail.yaml")
    text = ANSI.sub("", screen).replace("\r", "")
    assert code == 1
    assert re.search(r"(^|\n)pass\.yaml: PASS, served from the cache in \d+\.\d s -> build/pass\n", text), text
    assert "PASS (cached)" in text  # the table's result column


def test_force_color_colours_a_ci_log_without_live_lines(project: Path) -> None:
    env = {**os.environ, "EDGECONV_CACHE_DIR": str(project / "cache"), "EDGECONV_NO_CACHE": "0", "CI": "true",
           "FORCE_COLOR": "1"}
    env.pop("NO_COLOR", None)
    done = subprocess.run([sys.executable, "-m", "edgeconv", "build", "pass.yaml", "fail.yaml"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 1
    assert "\x1b[1;32mPASS\x1b[0m" in done.stdout and "\x1b[1;31mFAIL\x1b[0m" in done.stdout
    assert "\r" not in done.stdout + done.stderr and "⠋" not in done.stderr  # a log: no live lines
    env.pop("FORCE_COLOR")
    plain = subprocess.run([sys.executable, "-m", "edgeconv", "build", "pass.yaml", "fail.yaml"], cwd=project,
                           env=env, capture_output=True, text=True, timeout=600)
    assert plain.returncode == 1 and "\x1b[" not in plain.stdout
    assert "+-----------" in plain.stdout and "| pass.yaml " in plain.stdout
