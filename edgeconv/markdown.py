"""Text from the inputs, shown literally in the Markdown edgeconv writes.

report.md, ``check --format md``, the step summary (the Action's ``summary`` output, "suitable for a
pull-request comment"), ``diff`` and ``targets show`` put text from the inputs into Markdown: a model's
tensor, op and layer names (a ``.tflite`` or ``.keras`` is a pull request's to write), a pipeline's name and
paths, a target file's titles, rules and fixes, and the sentences made of them. GitHub renders that
Markdown, so such text could hide the rest of a summary (``<!--``), close the ``<details>`` it is in,
show an image, a link or a bold **PASS**, split a table row, or mention a person. Each function here makes
a value show as its characters, in one context:

- :func:`text` in running text and table cells;
- :func:`code` in a code span (paths, names, ids: shown in monospace);
- :func:`html` inside raw HTML (a ``<summary>``).

Non-printable characters are already replaced where names are read (the ``.tflite`` reader); a newline
becomes a space here all the same, so one value is one line.
"""

from __future__ import annotations

import re

from .errors import controls

# What CommonMark and GitHub give a meaning in running text, escaped with a backslash (GitHub shows the
# character itself): \ ` * ~ | anywhere; _ unless it is inside a word (where it cannot start or end emphasis:
# tensor names keep their underscores); the ] of a link or image "](", and what begins a heading, list,
# quote or link definition at the start (a value can be a list item's text). A "<" that could open a tag, a
# comment or an autolink (a letter, /, ! or ? after it) becomes an entity; "a < b", "->", "[1, 5]" elsewhere
# mean nothing, and stay as they read.
_PUNCTUATION = re.compile(r"[\\`*~|]|(?<![^\W_])_|_(?![^\W_])|\](?=\()|^(?:[#+-](?=\s|$)|[>\[])")
_ENTITIES = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}
_HTML = re.compile("[&<>]")
_ORDERED = re.compile(r"^(\d{1,9})([.)])(?=\s|$)")  # "1. item": an ordered list at the start
_TAG = re.compile(r"<(?=[A-Za-z/!?])")
_ENTITY = re.compile(r"&(?=#?[A-Za-z0-9]+;)")  # "&lt;" in a name shows as "&lt;", not as "<"
_MENTION = re.compile(r"@(?=[A-Za-z0-9])")  # @user or @org/team: a word joiner after the @ pings no one
_LINES = re.compile(r"[\r\n]+")
_TICKS = re.compile("`+")


def _line(value: object) -> str:
    """``value`` as one line: line breaks as a space, other controls (an escape sequence, DEL, C1, a
    bidirectional override) as U+FFFD, as the .tflite reader shows them, wherever this Markdown is read (a
    file, a terminal, a PR comment)."""
    line = str(value)
    if line.isprintable():  # neither a line break nor a control (errors.controls)
        return line
    return controls().sub("\ufffd", _LINES.sub(" ", line))


def html(value: object) -> str:
    """``value`` inside raw HTML: the three characters HTML reads as markup as entities."""
    return _MENTION.sub("@\u2060", _HTML.sub(lambda m: _ENTITIES[m.group()], _line(value)))


def text(value: object) -> str:
    """``value`` in running text or a table cell: no emphasis, link, image, heading, HTML or cell border of
    its own; every character shows as itself."""
    escaped = _PUNCTUATION.sub(lambda m: "\\" + m.group(), _line(value))
    escaped = _TAG.sub("&lt;", _ENTITY.sub("&amp;", _ORDERED.sub(r"\1\\\2", escaped)))
    return _MENTION.sub("@\u2060", escaped)


def code(value: object, *, cell: bool = False) -> str:
    """``value`` as a code span, which holds no Markdown: a fence of more backticks than any run in it; in a
    table ``cell``, ``|`` escaped (GitHub splits a row into cells before it reads code spans)."""
    inner = _line(value).replace("|", "\\|") if cell else _line(value)
    fence = "`" * (max((len(run) for run in _TICKS.findall(inner)), default=0) + 1)
    pad = " " if inner.startswith("`") or inner.endswith("`") or not inner.strip() else ""
    return f"{fence}{pad}{inner}{pad}{fence}"


def fenced(body: str, info: str = "") -> list[str]:
    """``body`` as a fenced code block's lines: a fence of more backticks than any run of three or more in
    it, so no line of it can close the block."""
    fence = "`" * max(3, max((len(run) + 1 for run in _TICKS.findall(body) if len(run) >= 3), default=3))
    return [fence + info, *body.rstrip("\n").split("\n"), fence]
