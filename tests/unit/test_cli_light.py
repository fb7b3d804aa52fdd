"""The light commands answer fast and never import TensorFlow."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

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


@pytest.mark.parametrize("argv", [["validate", "pipeline.yaml"], ["targets", "show", "edgetpu"], ["passes", "list"],
                                  ["schema", "pipeline"], ["schema", "report"]])
def test_validate_and_the_listings_do_not_import_numpy(argv: list[str]) -> None:
    """They read YAML and the target files; NumPy (and the TFLite schema, which imports it) waits for a model."""
    probe = (f"import sys\nfrom edgeconv.cli import main\ncode = main({argv!r})\n"
             "print(code, sorted(m for m in ('numpy', 'flatbuffers', 'tensorflow') if m in sys.modules), "
             "file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert result.stderr.strip().splitlines()[-1] == "0 []"


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


def test_progress_in_ci_is_a_plain_line_every_ten_percent(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeconv import console

    clock = iter(float(t) for t in range(100))
    monkeypatch.setattr(console.time, "monotonic", lambda: next(clock))
    ci = _Stream(tty=False)
    display = console.LineProgress(ci)
    for done in (1, 5, 10, 11, 20):
        display("calibrating", done, 20)
    display("loading the model", 0, 0)  # a stage without a count: its start is already a log line
    display("loading the model", 1, 0)
    display("reading evaluation data", 360, 360)  # instant: no rate, no time left
    assert ci.getvalue().splitlines() == [
        "edgeconv: calibrating: 1/20 samples (5%)",
        "edgeconv: calibrating: 5/20 samples (25%), 5.0 samples/s, ETA 3 s",
        "edgeconv: calibrating: 10/20 samples (50%), 5.0 samples/s, ETA 2 s",
        "edgeconv: calibrating: 20/20 samples (100%), 5.0 samples/s",
        "edgeconv: reading evaluation data: 360/360 samples (100%)"]


@pytest.mark.parametrize(("tty", "env", "expected"), [
    (True, {}, "LiveProgress"),
    (False, {}, "LineProgress"),
    (True, {"CI": "true"}, "LineProgress"),
    (True, {"CI": "0"}, "LiveProgress"),
    (True, {"TERM": "dumb"}, "LineProgress"),
], ids=["terminal", "pipe", "ci", "ci-off", "dumb-terminal"])
def test_a_terminal_gets_the_live_display_and_ci_logs_plain_lines(monkeypatch: pytest.MonkeyPatch, tty: bool,
                                                                   env: dict[str, str], expected: str) -> None:
    from edgeconv import console

    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("TERM", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    display = console.make_display(_Stream(tty=tty))
    try:
        assert type(display).__name__ == expected
    finally:
        display.stop()


def _live() -> tuple[Any, io.StringIO]:
    from rich.console import Console

    from edgeconv import console

    screen = io.StringIO()
    return console.LiveProgress(screen, Console(file=screen, force_terminal=True, width=100,
                                                color_system=None, _environ={})), screen


def test_the_live_display_spins_for_a_stage_without_a_count_and_draws_a_bar_with_the_count() -> None:
    pytest.importorskip("rich")
    display, screen = _live()
    display("loading the model", 0, 0)
    display("calibrating", 3, 8)
    display.progress.refresh()
    drawn = screen.getvalue().splitlines()[-2:]
    spinner, bar = (re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", line).strip() for line in drawn)
    assert re.fullmatch(r"\S edgeconv: loading the model +\S+ +0:00:0\d", spinner), spinner
    assert re.fullmatch(r"\S edgeconv: calibrating +\S+ +3/8 samples.* 0:00:0\d", bar), bar
    display("calibrating", 8, 8)  # a finished stage leaves the live lines
    display("loading the model", 1, 0)
    assert display.tasks == {} and not display.progress.tasks
    display.stop()
    assert not display.progress.live.is_started


def test_the_live_display_pauses_its_drawing_thread_and_keeps_its_stages() -> None:
    """The build forks its converter worker only where no other thread runs: the live display's
    drawing thread ends for the fork and comes back with the running stage."""
    import threading

    pytest.importorskip("rich")
    display, screen = _live()
    display("loading the model", 0, 0)
    drawing = display.progress.live._refresh_thread
    assert display.progress.live.is_started and drawing is not None and drawing.is_alive()
    with display.paused():
        assert not drawing.is_alive() and drawing not in threading.enumerate()
        assert not display.progress.live.is_started
    again = display.progress.live._refresh_thread
    assert display.progress.live.is_started and again is not None and again.is_alive() and again is not drawing
    assert list(display.tasks) == ["loading the model"]
    display.progress.refresh()
    assert "edgeconv: loading the model" in screen.getvalue().splitlines()[-1]
    display.stop()


def test_log_lines_print_above_the_live_display_warnings_in_yellow() -> None:
    import logging

    pytest.importorskip("rich")
    from rich.console import Console

    from edgeconv import console

    screen = io.StringIO()
    display = console.LiveProgress(screen, Console(file=screen, force_terminal=True, width=100,
                                                   color_system="standard", _environ={}))
    handler = display.handler()
    display("converting", 0, 0)
    handler.handle(logging.LogRecord("edgeconv", logging.INFO, __file__, 1, "pass strip-training: %d", (16,), None))
    handler.handle(logging.LogRecord("edgeconv", logging.WARNING, __file__, 1, "2 samples saturate", None, None))
    display("converting", 1, 0)
    handler.handle(logging.LogRecord("edgeconv", logging.INFO, __file__, 1, "checking 8 ops", None, None))
    display.stop()
    text = screen.getvalue()
    assert "edgeconv: pass strip-training: 16\n" in text
    assert "\x1b[33medgeconv: warning: 2 samples saturate\x1b[0m" in text  # yellow
    assert "converting" not in text.split("edgeconv: checking 8 ops")[1]  # an ended stage is not drawn again


def test_result_lines_are_plain_in_logs_and_coloured_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeconv import console

    lines = ["edgetpu: FAIL (64 supported, 8 cpu_fallback, 0 unsupported)", "  #71 ARG_MAX [cpu_fallback] x",
             "gate: PASS"]
    logged = _Stream(tty=False)
    console.print_lines(lines, logged)
    assert logged.getvalue() == "\n".join(lines) + "\n"
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    terminal = _Stream(tty=True)
    console.print_lines(lines, terminal)
    text = terminal.getvalue()
    assert "\x1b[1;31mFAIL\x1b[0m" in text and "\x1b[1;32mPASS\x1b[0m" in text
    assert re.sub(r"\x1b\[[0-9;]*m", "", text) == "\n".join(lines) + "\n"  # only colour added
    monkeypatch.setenv("NO_COLOR", "1")
    plain = _Stream(tty=True)
    console.print_lines(lines, plain)
    assert not re.search(r"\x1b\[[0-9;]*3[0-9]m", plain.getvalue())  # NO_COLOR: no colour (bold stays)


@pytest.mark.parametrize(("env", "tty", "coloured"), [
    ({"FORCE_COLOR": "1"}, False, True),  # GitHub Actions renders ANSI in its logs
    ({"FORCE_COLOR": "1", "CI": "true"}, False, True),
    ({"FORCE_COLOR": "0"}, False, False),
    ({"FORCE_COLOR": ""}, False, False),
    ({"FORCE_COLOR": "1", "NO_COLOR": "1"}, True, False),  # the explicit opt-out wins
    ({"NO_COLOR": ""}, True, True),  # an empty NO_COLOR is not set (no-color.org)
    ({}, True, True),
    ({}, False, False),
])
def test_force_color_and_no_color(monkeypatch: pytest.MonkeyPatch, env: dict[str, str], tty: bool,
                                  coloured: bool) -> None:
    from edgeconv import console

    for name in ("CI", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    stream = _Stream(tty=tty)
    console.print_lines(["gate: FAIL"], stream)
    assert ("\x1b[1;31mFAIL\x1b[0m" in stream.getvalue()) is coloured
    assert re.sub(r"\x1b\[[0-9;]*m", "", stream.getvalue()) == "gate: FAIL\n"


def test_the_summary_table_in_a_log_never_wraps_a_cell(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeconv import console

    for name in ("NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    long = "generic-int8 PASS, arm-neon PASS, edgetpu FAIL, tflm-cmsis-nn PASS, ethos-u55-128 PASS, " * 3
    logged = _Stream(tty=False)
    console.print_table("edgeconv: FAIL", ("pipeline", "result", "targets"),
                        [("a.yaml", "PASS", "edgetpu PASS"), ("models/b c.yaml", "FAIL", long.strip())],
                        [("Why", ["models/b c.yaml (b): target edgetpu: 1 unsupported op(s): GELU x1"])], logged)
    width = len(long.strip())
    assert logged.getvalue().splitlines() == [
        "edgeconv: FAIL",
        f"+-----------------+--------+-{'-' * width}-+",
        f"| pipeline        | result | {'targets'.ljust(width)} |",
        f"+-----------------+--------+-{'-' * width}-+",
        f"| a.yaml          | PASS   | {'edgetpu PASS'.ljust(width)} |",
        f"| models/b c.yaml | FAIL   | {long.strip()} |",
        f"+-----------------+--------+-{'-' * width}-+",
        "",
        "Why",
        "- models/b c.yaml (b): target edgetpu: 1 unsupported op(s): GELU x1",
    ]


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




def test_one_exit_code_table() -> None:
    """The CLI, the verdict and the CI outputs take their codes and words from edgeconv.exit_codes."""
    from edgeconv import ci, cli, verdict
    from edgeconv.exit_codes import WORDS, Exit, of_gate

    assert (cli.EXIT_OK, cli.EXIT_GATE, cli.EXIT_USER, cli.EXIT_INTERNAL) == (0, 1, 2, 3)
    assert (Exit.INTERRUPTED, Exit.TERMINATED) == (130, 143)
    assert ci.EXIT_WORDS is WORDS and WORDS == {0: "pass", 1: "fail", 2: "error", 3: "crash"}
    assert of_gate({"verdict": "pass"}) == 0 and of_gate({"verdict": "fail"}) == 1 and of_gate({}) == 1
    assert verdict.Verdict(()).exit_code == 0


@pytest.mark.parametrize("tty", [False, True])
def test_a_pipeline_path_is_never_rich_markup(monkeypatch: pytest.MonkeyPatch, tty: bool) -> None:
    """A pull request names its pipeline files: `[/]` or `[red]` in a path is text, on a terminal and in a
    log, in the table and in the live lines (rich would raise on a closing tag with nothing to close)."""
    from edgeconv import console

    for name in ("CI", "NO_COLOR", "FORCE_COLOR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")
    hostile = "models/[/][red]x[bold].yaml"
    stream = _Stream(tty=tty)
    console.print_table("edgeconv: FAIL", ("pipeline", "result"), [(hostile, "FAIL")], [("Why", [f"{hostile}: x"])],
                        stream)
    shown = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())
    assert f"| {hostile} | FAIL   |" in shown.replace("│", "|") and f"- {hostile}: x" in shown
    if tty:
        lines = console.PipelineLines(stream)
        lines.stage(hostile, "converting", 0, 0)
        lines.progress.refresh()
        lines.ended(hostile, [f"{hostile}: FAIL in 1.0 s"])
        lines.stop()
        assert f"{hostile}: FAIL in 1.0 s" in re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", stream.getvalue())


@pytest.mark.parametrize(("argv", "code", "also"), [
    (["check", "tests/data/conv2d-relu.int8.tflite", "--target", "edgetpu", "--target", "arm-neon", "--format",
      "json"], 0, ("edgeconv.report", "edgeconv.markdown")),
    (["check", "tests/data/sin-island.int8.tflite"], 1, ()),
])
def test_check_imports_no_build_stage(argv: list[str], code: int, also: tuple[str, ...]) -> None:
    """`check` is a CI step of its own: the pipeline, its schema, the calibration, the passes and the cache
    are not part of it (issue 38; `scripts/bench_check.py` measures it against reading the op list alone), nor
    are logging (nothing is logged without -v; edgeconv._log), shutil (argparse's help width;
    edgeconv.arguments.HelpFormatter) and threading (edgeconv.cancel's lock is _thread's). Its JSON is the
    report's targets section (edgeconv.report_targets), without the report's Markdown."""
    heavy = ("edgeconv.pipeline", "edgeconv.config", "edgeconv.calibration", "edgeconv.passes", "edgeconv.cache",
             "edgeconv.converters.tflite_export", "tensorflow", "logging", "shutil", "threading", *also)
    probe = (f"import sys\nfrom edgeconv.cli import main\ncode = main({argv!r})\n"
             f"print(code, sorted(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)")
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=REPO)
    assert result.stderr.strip().splitlines()[-1] == f"{code} []"


def test_main_in_another_thread_leaves_the_signals_to_the_host() -> None:
    """A host program may run the CLI in a worker thread: signals are the main thread's (the host's), so the
    command runs without installing handlers, and returns its verdict."""
    import signal
    import threading

    from edgeconv.cli import main

    before = signal.getsignal(signal.SIGTERM)
    codes: list[int] = []
    model = str(REPO / "tests/data/sin-island.int8.tflite")
    worker = threading.Thread(target=lambda: codes.append(main(["check", "-q", model])))
    worker.start()
    worker.join()
    assert codes == [1]
    assert signal.getsignal(signal.SIGTERM) is before


def _tables() -> list[tuple[str, tuple[str, ...], list[tuple[str, ...]], list[tuple[str, list[str]]]]]:
    """Seeded random summary tables: cells of printable ASCII (spaces, brackets, empty cells, leading and
    trailing blanks), some with a character rich handles itself (non-ASCII, wide, a tab, a control code),
    some wider than the log's console."""
    import random

    rng = random.Random(38)
    alphabet = "abcxyz -_./[]()|+:%,'\"\\0189"
    odd = ["é", "漢", "\t", "\x1b", "\x07", "\r", "😀", "\u200b"]
    made = []
    for i in range(120):
        columns = rng.randint(1, 6)
        header = tuple(rng.choice(["pipeline", "result", "size", "targets", "parity", "report"]) + str(c)
                       for c in range(columns))

        def cell(longest: int) -> str:
            text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, longest)))
            if rng.random() < 0.03:
                spot = rng.randint(0, len(text))
                text = text[:spot] + rng.choice(odd) + text[spot:]
            return text

        longest = 400 if i % 10 == 0 else 40  # a tenth are too wide to fit 1000 columns
        rows = [tuple(cell(longest) for _ in range(columns)) for _ in range(rng.randint(0, 5))]
        sections = [(rng.choice(["Why", "Regressions against the baseline"]), [cell(80) for _ in range(2)])
                    for _ in range(rng.randint(0, 2))]
        made.append((f"edgeconv: {rng.choice(['PASS', 'FAIL'])}", header, rows, sections))
    return made


@pytest.mark.parametrize("table", _tables(), ids=lambda t: f"{len(t[1])}x{len(t[2])}")
def test_a_table_drawn_without_rich_is_what_rich_draws(
        table: tuple[str, tuple[str, ...], list[tuple[str, ...]], list[tuple[str, list[str]]]]) -> None:
    from edgeconv import console

    title, header, rows, sections = table
    drawn = console._plain_table(title, header, rows, sections)
    by_rich = io.StringIO()
    console._rich_table(title, header, rows, sections, by_rich, coloured=False)
    texts = [title, *header, *(c for r in rows for c in r), *(h for h, _ in sections),
             *(line for _, lines in sections for line in lines)]
    plain = all(t.isascii() and t.isprintable() for t in texts)
    fits = sum(max(len(r[i]) for r in (header, *rows)) + 3 for i in range(len(header))) + 1 <= console.PLAIN_WIDTH
    assert (drawn is not None) == (plain and fits)
    if drawn is not None:
        assert drawn == by_rich.getvalue()


@pytest.mark.parametrize(("path", "shown"), [("models/\x1b]0;owned\x07x.yaml", "models/\\x1b]0;owned\\x07x.yaml"),
                                           ("models/\x1b[2J.yaml", "models/\\x1b[2J.yaml"),
                                           ("models/a\rb.yaml", "models/a\\rb.yaml"),
                                           ("models/a\n::error::x.yaml", "models/a\\n::error::x.yaml")])
def test_a_pipeline_path_with_control_characters_is_shown_escaped_in_the_table(path: str, shown: str) -> None:
    """A pull request names its pipeline files: a path with an escape sequence, a carriage return or a line
    break is shown escaped, as Python writes it (errors.printable), in the plain table (printable ASCII)."""
    from edgeconv import console

    rows = [(path, "FAIL")]
    assert console._plain_table("edgeconv: FAIL", ("pipeline", "result"), rows, []) is None
    logged = _Stream(tty=False)
    console.print_table("edgeconv: FAIL", ("pipeline", "result"), rows, [], logged)
    drawn = console._plain_table("edgeconv: FAIL", ("pipeline", "result"), [(shown, "FAIL")], [])
    assert drawn is not None and logged.getvalue() == drawn
    assert all(line.isprintable() for line in logged.getvalue().splitlines())


GC_PROBE = """
import atexit, gc, sys
from edgeconv.cli import main, program
atexit.register(int)  # an exit handler: a check then exits as the interpreter does (cli._end_check), after this
if sys.argv[1] == "main":
    code = main(sys.argv[2:])
else:
    sys.argv = ["edgeconv", *sys.argv[2:]]
    code = program()
print(code, gc.isenabled(), file=sys.stderr)
"""


@pytest.mark.parametrize(("entry", "argv", "after"), [
    ("program", ["check", "tests/data/conv2d-relu.int8.tflite"], "0 False"),
    ("program", ["check", "tests/data/dense.float32.tflite", "--format", "json"], "1 False"),
    ("program", ["validate", "pipeline.yaml"], "0 True"),
    ("program", ["targets", "list"], "0 True"),
    ("main", ["check", "tests/data/conv2d-relu.int8.tflite"], "0 True"),
])
def test_check_runs_without_the_collector_only_as_the_process(entry: str, argv: list[str], after: str) -> None:
    """The `edgeconv check` process leaves the collector off (cli._command: its passes over the parsed model
    were all its collections did); every other command keeps it, and main() in a host program never touches
    it."""
    result = subprocess.run([sys.executable, "-c", GC_PROBE, entry, *argv], capture_output=True, text=True,
                            cwd=REPO)
    assert result.stderr.strip().splitlines()[-1] == after, result.stderr


WORDS_PROBE = """
import argparse, atexit, gettext, sys
from edgeconv.cli import main, program
atexit.register(int)  # as in GC_PROBE
if sys.argv[1] == "main":
    try:
        code = main(sys.argv[2:])
    except SystemExit as exc:
        code = exc.code
else:
    sys.argv = ["edgeconv", *sys.argv[2:]]
    try:
        code = program()
    except SystemExit as exc:
        code = exc.code
print(code, "locale" in sys.modules, argparse._ is gettext.gettext, file=sys.stderr)
"""


@pytest.mark.parametrize(("entry", "after"), [("program", "0 False False"), ("main", "0 True True")])
def test_the_command_looks_up_no_translations_of_argparse(entry: str, after: str) -> None:
    """The edgeconv process takes argparse's words as written (arguments.untranslated): no locale module, no
    lookups, under a language that would be looked up; main() in a host program leaves its argparse alone."""
    result = subprocess.run([sys.executable, "-c", WORDS_PROBE, entry, "check", "tests/data/conv2d-relu.int8.tflite"],
                            capture_output=True, text=True, cwd=REPO, env={**os.environ, "LANGUAGE": "de_DE.UTF-8"})
    assert result.stderr.strip().splitlines()[-1] == after, result.stderr


@pytest.mark.parametrize("argv", [["chek"], ["check"], ["check", "m.tflite", "--target"], ["check", "-q", "-v", "m"],
                                  ["check", "m.tflite", "--format", "xml"], ["check", "--help"], ["--help"]])
def test_argparse_says_the_same_words_untranslated(argv: list[str]) -> None:
    """What argparse prints (usage, errors, help) is the same from the command as from main(), word for word."""
    said = [subprocess.run([sys.executable, "-c", WORDS_PROBE, entry, *argv], capture_output=True, text=True,
                           cwd=REPO, env={**os.environ, "COLUMNS": "100"}) for entry in ("program", "main")]
    assert said[0].stdout == said[1].stdout
    assert said[0].stderr.splitlines()[:-1] == said[1].stderr.splitlines()[:-1]
    assert said[0].stderr.splitlines()[-1].split()[0] == said[1].stderr.splitlines()[-1].split()[0]


END_PROBE = """
import atexit, os, sys, threading, time
from edgeconv.cli import program


class Last:
    def __del__(self) -> None:
        os.write(2, b"freed at exit\\n")


last = Last()
if "handler" in sys.argv[1]:
    atexit.register(lambda: os.write(2, b"exit handler ran\\n"))
if "thread" in sys.argv[1]:
    threading.Thread(target=lambda: (time.sleep(0.3), os.write(2, b"thread finished\\n"))).start()
sys.argv = ["edgeconv", *sys.argv[2:]]
sys.exit(program())
"""
PASSES = ["check", "tests/data/conv2d-relu.int8.tflite", "--target", "edgetpu", "--target", "arm-neon", "--format",
          "json"]


@pytest.mark.parametrize(("argv", "code"), [
    (PASSES, 0),
    (["check", "tests/data/sin-island.int8.tflite"], 1),
    (["check", "tests/data/sin-island.int8.tflite", "--format", "md"], 1),
    (["check", "tests/data/missing.tflite"], 2),
    (["check", "tests/data/conv2d-relu.int8.tflite", "--target", "npu"], 2),
])
def test_a_check_ends_with_its_verdict_once_its_console_is_flushed(argv: list[str], code: int) -> None:
    """`edgeconv check` ends as soon as its console is flushed (cli._end_check): its exit code is the verdict
    and its output whole, the same as when the interpreter's exit runs (an exit handler registered), and
    nothing is freed one by one."""
    fast, whole = (subprocess.run([sys.executable, "-c", END_PROBE, how, *argv], capture_output=True, text=True,
                                  cwd=REPO) for how in ("-", "handler"))
    assert (fast.returncode, whole.returncode) == (code, code), fast.stderr
    assert fast.stdout == whole.stdout and bool(fast.stdout.strip()) is (code != 2)
    assert fast.stderr == whole.stderr.replace("exit handler ran\n", "").replace("freed at exit\n", "")
    assert "freed at exit" not in fast.stderr
    assert whole.stderr.endswith("exit handler ran\nfreed at exit\n")


def test_a_check_leaves_the_exit_to_the_interpreter_while_a_thread_runs() -> None:
    """A host's thread still running (an embedding that starts one): the interpreter's exit waits for it."""
    result = subprocess.run([sys.executable, "-c", END_PROBE, "thread", *PASSES], capture_output=True, text=True,
                            cwd=REPO)
    assert result.returncode == 0 and json.loads(result.stdout)[0]["name"] == "edgetpu"
    assert result.stderr.endswith("thread finished\nfreed at exit\n"), result.stderr



def test_a_profiled_check_leaves_the_exit_to_the_interpreter() -> None:
    """`python -m cProfile -m edgeconv check` prints its profile after the command: the check does not end the
    process under a profiler (or a tracer)."""
    result = subprocess.run([sys.executable, "-m", "cProfile", "-s", "tottime", "-m", "edgeconv", *PASSES],
                            capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr
    assert "function calls" in result.stdout and "Ordered by: internal time" in result.stdout
