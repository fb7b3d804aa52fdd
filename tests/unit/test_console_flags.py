"""-q and -v on every command (issue 18): -q prints only the result, -v adds debug lines."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from edgeconv.arguments import parser as _parser
from edgeconv.cli import main

from ..conftest import REPO, run_edgeconv

DATA = REPO / "tests" / "data"


def _leaves() -> list[list[str]]:
    """Every command as argv prefixes: build, check, ..., targets list, targets show, passes list."""
    import argparse

    def walk(parser: argparse.ArgumentParser, prefix: list[str]) -> list[list[str]]:
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            return [prefix]
        return [leaf for name, child in subs[0].choices.items() for leaf in walk(child, [*prefix, name])]

    return walk(_parser(), [])


@pytest.mark.parametrize("command", _leaves(), ids=" ".join)
def test_every_command_takes_q_and_v_and_refuses_both(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser()
    for flag in ("-q", "--quiet", "-v", "--verbose"):
        with pytest.raises(SystemExit) as done:
            parser.parse_args([*command, flag, "--help"])
        assert done.value.code == 0
    help_text = capsys.readouterr().out
    assert "-q, --quiet" in help_text and "-v, --verbose" in help_text
    with pytest.raises(SystemExit) as done:
        parser.parse_args([*command, "-q", "-v"])
    assert done.value.code == 2
    assert "argument -v/--verbose: not allowed with argument -q/--quiet" in capsys.readouterr().err


@pytest.mark.parametrize("command", _leaves(), ids=" ".join)
def test_the_parser_built_for_one_command_is_the_whole_parsers_for_it(command: list[str],
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """The CLI builds only the command being run (argparse's help formatter for every argument of every
    command cost 12-16 ms a run): that command's help and what it parses are the whole parser's, and every
    other command is left out."""
    import argparse

    helps = []
    for parser in (_parser(), _parser(command[0])):
        with pytest.raises(SystemExit):
            parser.parse_args([*command, "--help"])
        helps.append(capsys.readouterr().out)
        with pytest.raises(SystemExit):
            parser.parse_args([*command, "-q", "--no-such-option"])
        helps.append(capsys.readouterr().err)
    assert helps[0] == helps[2] and helps[1] == helps[3]
    (commands,) = [a for a in _parser(command[0])._actions if isinstance(a, argparse._SubParsersAction)]
    assert list(commands.choices) == [command[0]]


def test_commands_names_every_command_in_the_order_of_help() -> None:
    import argparse

    from edgeconv.arguments import COMMANDS

    (commands,) = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    assert tuple(commands.choices) == COMMANDS


def test_an_unknown_command_is_refused_with_every_name(capsys: pytest.CaptureFixture[str]) -> None:
    said = []
    for parser in (_parser(), _parser("bild")):
        with pytest.raises(SystemExit):
            parser.parse_args(["bild", "pipeline.yaml"])
        said.append(capsys.readouterr().err)
    assert said[0] == said[1] and "invalid choice: 'bild' (choose from 'build', 'validate', 'check'" in said[0]


def test_validate_q_prints_nothing_for_valid_files_and_still_names_errors(tmp_path: Path,
                                                                          capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", "-q", str(REPO / "pipeline.yaml")]) == 0
    assert capsys.readouterr() == ("", "")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nmodel: {path: m.keras}\ntargets: [edgetpus]\n")
    assert main(["validate", "-q", str(bad)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and "did you mean 'edgetpu'?" in err


def test_check_q_prints_one_line_per_target_and_the_gate() -> None:
    done = run_edgeconv("check", "-q", DATA / "sin-island.int8.tflite", "--target", "generic-int8",
                        "--target", "arm-neon")
    assert done.returncode == 1
    assert done.stdout.splitlines() == [
        "generic-int8: FAIL (2 supported, 0 cpu_fallback, 3 unsupported; 100.0% of MACs supported)",
        "arm-neon: PASS (5 supported, 0 cpu_fallback, 0 unsupported; 100.0% of MACs supported)",
        "gate: target generic-int8: 3 unsupported op(s): DEQUANTIZE x1, QUANTIZE x1, SIN x1"]
    assert done.stderr == ""


def test_check_v_adds_debug_lines_on_stderr_and_leaves_stdout_as_it_was() -> None:
    plain = run_edgeconv("check", DATA / "conv2d-relu.int8.tflite")
    loud = run_edgeconv("check", "-v", DATA / "conv2d-relu.int8.tflite")
    assert loud.stdout == plain.stdout and plain.stderr == ""
    lines = loud.stderr.splitlines()
    assert lines[0].startswith("edgeconv: read tests/data/conv2d-relu.int8.tflite: 1 ops in 1 subgraph(s), ")
    assert lines[1].startswith("edgeconv: checked against generic-int8 in ")


def test_diff_q_prints_only_the_regressions(tmp_path: Path) -> None:
    from .test_diff_inputs import GOOD

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(GOOD))
    grown = GOOD["tflite"]["bytes"] * 13 // 10  # 30 % larger
    new.write_text(json.dumps({**GOOD, "tflite": {**GOOD["tflite"], "sha256": "b" * 64, "bytes": grown}}))
    loose = run_edgeconv("diff", "-q", old, new)
    assert (loose.returncode, loose.stdout, loose.stderr) == (0, "", "")
    strict = run_edgeconv("diff", "-q", old, new, "--max-size-growth", "0.1")
    assert strict.returncode == 1
    assert strict.stdout.splitlines() == [f"regression: {line}" for line in json.loads(
        run_edgeconv("diff", old, new, "--max-size-growth", "0.1", "--format", "json").stdout)["regressions"]]
    assert len(strict.stdout.splitlines()) == 1 and "30.0%" in strict.stdout


@pytest.mark.parametrize("columns", [None, "", "57", "1", "0", "-3", "wide", " 61 "])
@pytest.mark.parametrize("terminal", [None, 43, 0])
def test_the_help_width_is_shutil_s_without_importing_it(columns: str | None, terminal: int | None,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """The parser's formatter finds the console's width itself (argparse's imports shutil, and shutil the
    compression modules, on every run): $COLUMNS when a positive number, else the terminal's (a pty
    ``terminal`` columns wide; 0: a terminal that reports no width), else 80, as shutil.get_terminal_size."""
    import fcntl
    import os
    import pty
    import shutil
    import struct
    import termios

    from edgeconv.arguments import terminal_columns

    if columns is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", columns)
    if terminal is None:
        assert terminal_columns() == shutil.get_terminal_size().columns
        return
    leader, follower = pty.openpty()
    try:
        fcntl.ioctl(follower, termios.TIOCSWINSZ, struct.pack("HHHH", 24, terminal, 0, 0))
        with os.fdopen(os.dup(follower), "w") as stream:
            monkeypatch.setattr(sys, "__stdout__", stream)
            assert terminal_columns() == shutil.get_terminal_size().columns
            expected = int(columns) if columns and columns.strip().lstrip("-").isdigit() and int(columns) > 0 \
                else terminal or 80
            assert terminal_columns() == expected
    finally:
        os.close(leader)
        os.close(follower)


def test_help_is_wrapped_to_columns(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "52")
    with pytest.raises(SystemExit):
        _parser("check").parse_args(["check", "--help"])
    lines = capsys.readouterr().out.splitlines()
    assert max(map(len, lines)) <= 50 and len(lines) > 20


def test_sys_stdout_none_gives_80(monkeypatch: pytest.MonkeyPatch) -> None:
    from edgeconv.arguments import terminal_columns

    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setattr(sys, "__stdout__", None)
    assert terminal_columns() == 80


EVIL_OP = "CONV\x1b[2J\x1b]0;owned\x07\r\n::error file=x::pwned\u202eTXET"


def test_a_report_s_text_reaches_the_console_escaped(tmp_path: Path) -> None:
    """`edgeconv diff` reads two reports, a pull request's to write: an op type holding an escape sequence, a
    carriage return and a line break starting a GitHub workflow command (any line starting with "::") is
    shown escaped, on its own line, in the text and Markdown outputs (JSON escapes its own)."""
    from .test_diff_inputs import GOOD

    old, new = tmp_path / "old.json", tmp_path / "new.json"
    old.write_text(json.dumps(GOOD))
    target = GOOD["targets"][0]
    ops = [*target["ops"], {**target["ops"][0], "index": 99, "type": EVIL_OP, "status": "unsupported"}]
    new.write_text(json.dumps({**GOOD, "targets": [{**target, "ops": ops}, *GOOD["targets"][1:]]}))
    for args in (["-q"], [], ["--format", "md"]):
        result = run_edgeconv("diff", *args, old, new, "--no-new-fallback", target["name"])
        assert result.returncode == 1, result.stderr
        lines = result.stdout.splitlines()
        assert not any(line.lstrip().startswith("::") for line in lines), lines
        assert "\x1b" not in result.stdout and "\r" not in result.stdout and "\u202e" not in result.stdout
    quiet = run_edgeconv("diff", "-q", old, new, "--no-new-fallback", target["name"]).stdout.splitlines()
    assert quiet == [f"regression: {target['name']}: new unsupported op(s) since the baseline: "
                     "CONV\\x1b[2J\\x1b]0;owned\\x07\\r\\n::error file=x::pwned\\u202eTXET x1"]


@pytest.mark.parametrize(("text", "shown"), [
    ("plain tab\there é", "plain tab\there é"),  # a tab and non-ASCII letters are text
    ("a\x1b[31mb", "a\\x1b[31mb"), ("a\rb", "a\\rb"), ("a\nb", "a\\nb"), ("a\x7fb\x9bc", "a\\x7fb\\x9bc"),
    ("a\u202eb\u2066c", "a\\u202eb\\u2066c"), ("\x00", "\\x00"),
])
def test_printable_escapes_what_a_terminal_or_a_runner_reads(text: str, shown: str) -> None:
    from edgeconv.errors import printable

    assert printable(text) == shown


def test_every_terminal_control_is_unprintable_to_python() -> None:
    """printable, markdown and the target file check skip their pattern for a text str.isprintable passes
    (errors.controls): that is right only while each character of the class, and each line break, is one
    str.isprintable is false for, over all of Unicode. A tab is unprintable too, and stays text."""
    from edgeconv.errors import controls, printable

    everything = "".join(map(chr, range(0x110000)))
    matched = controls("\r\n").findall(everything)
    assert len(matched) == 32 - 1 + 33 + 5 + 4  # C0 but the tab, DEL and C1, five bidi controls, four isolates
    assert [c for c in matched if c.isprintable()] == []
    assert not "\t".isprintable() and printable("\t") == "\t"


def test_a_log_line_from_the_inputs_is_one_console_line_each() -> None:
    """A log message holding a line break (a converter's message quoting a layer name) prints each of its
    lines behind "edgeconv: ", so none starts with what the input wrote."""
    import logging

    from edgeconv.console_log import Formatter

    record = logging.LogRecord("edgeconv.x", logging.WARNING, "f", 1, "layer %r: %s", ("a", "b\n::error::x\x1b[2J"),
                               None)
    assert Formatter().format(record).splitlines() == ["edgeconv: warning: layer 'a': b",
                                                       "edgeconv: warning: ::error::x\\x1b[2J"]
