"""Errors that mean "the user gave edgeconv something wrong".

Every subclass of :class:`EdgeconvError` is a user mistake: the CLI prints its
message (one line per problem) and exits 2. Anything else that escapes is a bug:
the CLI writes a traceback to a log file and exits 3.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable, Sequence
from pathlib import Path


class EdgeconvError(Exception):
    """A user mistake: bad config, model, data or file. Exit code 2."""

    exit_code = 2


class ConfigError(EdgeconvError):
    """The pipeline file (or a target file) is invalid.

    Carries every problem found, so that one run reports all of them.
    """

    def __init__(self, problems: Sequence[str]) -> None:
        self.problems = tuple(problems)
        super().__init__("\n".join(self.problems))


class ModelError(EdgeconvError):
    """The model cannot be loaded, traced or frozen as configured."""


class DataError(EdgeconvError):
    """The calibration data does not fit the model or is unusable."""


class ModelFileError(EdgeconvError):
    """A .tflite file is missing, truncated or not a TFLite flatbuffer."""


class OutputError(EdgeconvError):
    """The output folder cannot be written safely."""


class InternalError(Exception):
    """A stage failed in a way that is edgeconv's (or its toolchain's) fault.

    Not an :class:`EdgeconvError`: the CLI treats it as a bug (exit 3), but the
    message names the stage so the user knows where it happened.
    """

    def __init__(self, stage: str, message: str, log: str = "") -> None:
        self.stage = stage
        self.log = log
        super().__init__(f"stage '{stage}': {message}")


def did_you_mean(value: str, allowed: Iterable[str]) -> str:
    """Return "; did you mean 'x'?" for the closest allowed name, or ""."""
    matches = difflib.get_close_matches(value, list(allowed), n=1, cutoff=0.6)
    return f"; did you mean '{matches[0]}'?" if matches else ""


def allowed_list(allowed: Iterable[str]) -> str:
    return ", ".join(sorted(allowed)) or "none"


def rel(path: Path) -> str:
    """A path as the user most likely typed it: relative to cwd when inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


# Characters that control a terminal or reorder what it shows: C0 controls but tab and the line breaks, DEL,
# C1 controls, bidirectional embeddings, overrides and isolates (a regular expression's character class).
# Text from the inputs never reaches a console, a log or a rendered page with one in it: printable escapes
# them, markdown shows them as U+FFFD, and a target file holding one is refused.
TERMINAL_CONTROLS = "\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069"


@functools.cache
def controls(extra: str = "") -> re.Pattern[str]:
    """The character class :data:`TERMINAL_CONTROLS` and ``extra``, compiled on first use. The class reaches
    past Latin-1, and compiling it takes 0.5 ms, three times over in every ``edgeconv check`` when each module
    compiled its own on import (scripts/bench_check.py); a text without a control character never needs it:
    every character of the class is one ``str.isprintable`` is false for (a unit test holds it to that), so a
    printable text has none."""
    return re.compile(f"[{TERMINAL_CONTROLS}{extra}]")


def printable(text: str) -> str:
    """``text`` as one console line: its control characters escaped (``\\x1b``, ``\\n``, ``\\u202e``).

    What no console line may hold from the inputs (a model's names, a data file's header, a report's text):
    the terminal controls, and the line breaks (a line of its own: a CI runner reads a line starting with
    "::" as a workflow command; a carriage return overwrites the line). Each is shown escaped, as Python
    writes it. A tab is text."""
    if text.isprintable():  # the common case: nothing to escape (controls)
        return text
    return controls("\r\n").sub(_escaped, text)


def printable_lines(text: str) -> list[str]:
    """``text`` as console lines: each of its lines :func:`printable` (so a line break in a value from the
    inputs starts a line behind whatever the caller puts before each, never with the input's own text)."""
    return [printable(line) for line in text.splitlines()]


def _escaped(found: re.Match[str]) -> str:
    code = ord(found.group())
    return {10: "\\n", 13: "\\r"}.get(code) or (f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
