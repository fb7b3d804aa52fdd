"""The light commands answer fast and never import TensorFlow."""

from __future__ import annotations

import io
import subprocess
import sys
import time
from pathlib import Path

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


@pytest.mark.parametrize("argv", [["--help"], ["--version"], ["build", "--help"]])
def test_help_imports_neither_numpy_nor_yaml(argv: list[str]) -> None:
    """What --help costs is the interpreter and argparse (about 0.1 s on the CI machine, was 0.8 s)."""
    probe = (f"import sys\nfrom edgeconv.cli import main\ntry:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
             "print(sorted(m for m in ('numpy', 'yaml', 'tensorflow') if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert result.stderr.strip().splitlines()[-1] == "[]"


def test_the_public_api_is_there_on_first_use() -> None:
    import edgeconv

    assert callable(edgeconv.build) and issubclass(edgeconv.ConfigError, edgeconv.EdgeconvError)
    with pytest.raises(AttributeError, match="no attribute 'buidl'"):
        edgeconv.buidl  # noqa: B018


def test_version() -> None:
    result = subprocess.run([sys.executable, "-m", "edgeconv", "--version"], capture_output=True, text=True)
    assert result.stdout.strip() == f"edgeconv {__version__}"


def test_help_is_fast() -> None:
    start = time.perf_counter()
    result = subprocess.run([sys.executable, "-m", "edgeconv", "--help"], capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    assert result.returncode == 0 and "build" in result.stdout
    assert elapsed < 1.0, f"--help took {elapsed:.2f} s"


class _Stream(io.StringIO):
    def __init__(self, tty: bool) -> None:
        super().__init__()
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def test_progress_is_a_bar_on_a_terminal_and_lines_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeconv import cli

    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(cli.time, "monotonic", lambda: next(clock))
    ci = _Stream(tty=False)
    display = cli.ProgressDisplay(ci)
    for done in (1, 5, 10, 11, 20):
        display("calibrating", done, 20)
    assert ci.getvalue().splitlines() == [
        "edgeconv: calibrating: 1/20 samples (5%), -, ETA -",
        "edgeconv: calibrating: 5/20 samples (25%), 5.0 samples/s, ETA 3 s",
        "edgeconv: calibrating: 10/20 samples (50%), 5.0 samples/s, ETA 2 s",
        "edgeconv: calibrating: 20/20 samples (100%), 5.0 samples/s, ETA -"]
    terminal = _Stream(tty=True)
    display = cli.ProgressDisplay(terminal)
    display("calibrating", 0, 8)
    display("calibrating", 8, 8)
    text = terminal.getvalue()
    assert text.startswith("\redgeconv: calibrating [........................] 0/8 -, ETA -")
    assert "\redgeconv: calibrating [########################] 8/8 8.0 samples/s, ETA -" in text
    assert text.endswith("\n") and text.count("\n") == 1


@pytest.mark.parametrize(("argv", "expected"), [
    (["build", "pipeline.yaml", "tests/data/*.nothing"], "tests/data/*.nothing: no pipeline file matches"),
    (["build", "pipeline.yaml", "README.md", "--out", "x"],
     "--out applies to one pipeline; 2 were given (each writes its output.dir)"),
    (["build", "pipeline.yaml", "-j", "0"], "-j must be at least 1, got 0"),
])
def test_build_argument_mistakes_are_refused_before_anything_runs(argv: list[str], expected: str) -> None:
    done = run(argv)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [f"edgeconv: error: {expected}", "TF_NOT_IMPORTED"]


def test_worst_exit_code_wins() -> None:
    from pathlib import Path

    from edgeconv.ci import Outcome, worst

    outcomes = [Outcome(Path(f"{c}.yaml"), c, 0.0) for c in (0, 1, 2, 0)]
    assert worst(outcomes) == 2 and worst([]) == 0 and worst(outcomes[:2]) == 1


@pytest.mark.parametrize(("flag", "make", "expected"), [
    ("--junit", "folder", "--junit {p}: is a folder; give a file path"),
    ("--summary", "under_a_file", "--summary {p}: {f} is a file, not a folder"),
    ("--results-json", "under_a_file", "--results-json {p}: {f} is a file, not a folder"),
])
def test_a_ci_output_that_cannot_be_written_is_refused_before_any_build(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], flag: str, make: str, expected: str) -> None:
    from edgeconv.cli import main

    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    path = {"folder": tmp_path, "under_a_file": blocker / "out.xml"}[make]
    code = main(["build", str(REPO / "pipeline.yaml"), "--out", str(tmp_path / "out"), flag, str(path)])
    assert code == 2
    assert capsys.readouterr().err.strip() == "edgeconv: error: " + expected.format(p=path, f=blocker)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocker"]  # nothing built, nothing written


def test_a_stage_without_a_count_spins_on_a_terminal_and_is_quiet_in_ci(monkeypatch: pytest.MonkeyPatch) -> None:
    import logging

    from edgeconv import cli

    now = [100.0]
    monkeypatch.setattr(cli.time, "monotonic", lambda: now[0])
    terminal = _Stream(tty=True)
    display = cli.ProgressDisplay(terminal)
    display.ticker = object()  # type: ignore[assignment]  # frames are drawn by hand here, not by the thread
    display("loading the model", 0, 0)
    now[0] = 101.9
    display.draw_spinner(0)
    assert terminal.getvalue() == ""  # nothing for a stage shorter than SPIN_AFTER_S
    now[0] = 102.0
    display.draw_spinner(1)
    assert terminal.getvalue() == "\redgeconv: loading the model / 2 s  "
    handler = cli._ClearingHandler(terminal, display)
    handler.setFormatter(cli._Formatter())
    handler.emit(logging.LogRecord("edgeconv", logging.INFO, __file__, 1, "pass strip-training", None, None))
    assert terminal.getvalue().endswith("/ 2 s  \r\033[Kedgeconv: pass strip-training\n")  # the log line is whole
    display("calibrating", 3, 8)  # a counted bar wins over the spinner for a second
    now[0] = 102.5
    before = terminal.getvalue()
    display.draw_spinner(2)
    assert terminal.getvalue() == before
    display("loading the model", 1, 0)
    assert terminal.getvalue().endswith("\r\033[K") and display.spinning is None
    ci = _Stream(tty=False)
    quiet = cli.ProgressDisplay(ci)
    quiet("loading the model", 0, 0)
    quiet("loading the model", 1, 0)
    assert ci.getvalue() == "" and quiet.ticker is None  # CI logs have the stage's log line instead
