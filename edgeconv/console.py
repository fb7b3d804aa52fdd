"""What a person sees while edgeconv works: progress and log lines, and the result in colour.

Two displays take the same calls (``progress(stage, done, total)``, as the build reports its stages):

- on a terminal, :class:`LiveProgress`, built on rich: a live line per running stage with a spinner and
  the elapsed time, a bar with the count, rate and time left where the count is known; log lines print
  above it; nothing of it stays on the screen when the build ends (the result lines follow, with the
  time of each stage);
- in CI logs and pipes (``CI`` set, or not a terminal), :class:`LineProgress`: plain lines, a counted stage
  every 10 %, no carriage returns, no colour.

A stage without a count is reported with ``total == 0``: ``done`` 0 when it starts, 1 when it ends.
rich is imported only for a terminal.
"""

from __future__ import annotations

import contextlib
import os
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from .errors import printable

if TYPE_CHECKING:
    import logging


class Display(Protocol):
    def __call__(self, stage: str, done: int, total: int) -> None: ...

    def handler(self) -> logging.Handler:
        """Where log lines go while the display runs."""

    def stop(self) -> None:
        """The work is over (done or failed): nothing may draw after this."""


def live(stream: Any) -> bool:
    """A person watches ``stream``: a terminal, not CI, not TERM=dumb."""
    if os.environ.get("CI", "").lower() not in ("", "0", "false") or os.environ.get("TERM") == "dumb":
        return False
    return bool(getattr(stream, "isatty", lambda: False)())


def make_display(stream: Any) -> Display:
    return LiveProgress(stream) if live(stream) else LineProgress(stream)


class LineProgress:
    """CI logs: a counted stage prints a line every 10 %; a stage without a count prints nothing (its start
    is already a log line)."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream
        self.started: dict[str, float] = {}
        self.shown: dict[str, int] = {}

    def __call__(self, stage: str, done: int, total: int) -> None:
        if total == 0:
            return
        now = time.monotonic()
        start = self.started.setdefault(stage, now)
        rate = done / (now - start) if now > start else 0.0
        step = done * 10 // max(total, 1)
        if step > self.shown.get(stage, -1):
            self.shown[stage] = step
            # A rate and a time left only once there is one (an instant stage says neither).
            speed = f", {rate:.1f} samples/s" if rate > 0 else ""
            left = f", ETA {(total - done) / rate:.0f} s" if rate > 0 and done < total else ""
            self.stream.write(f"edgeconv: {stage}: {done}/{total} samples ({done * 100 // max(total, 1)}%)"
                              f"{speed}{left}\n")
            self.stream.flush()

    def handler(self) -> logging.Handler:
        from .console_log import stream_handler

        return stream_handler(self.stream)

    def stop(self) -> None:
        pass


class LiveProgress:
    """A terminal: rich's live progress, one line per running stage."""

    def __init__(self, stream: Any, console: Any = None) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = console or Console(file=stream, highlight=False)
        self.progress = Progress(SpinnerColumn(), TextColumn("edgeconv: {task.description}"), BarColumn(),
                                 _count_column()(), TimeElapsedColumn(), console=self.console, transient=True)
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def __call__(self, stage: str, done: int, total: int) -> None:
        task = self.tasks.get(stage)
        if (total == 0 and done > 0) or (total > 0 and done >= total):
            if task is not None:
                self.progress.remove_task(self.tasks.pop(stage))
                self.progress.refresh()  # now, not at the next tick: a log line printed meanwhile redraws it
            return
        if task is None:
            task = self.tasks[stage] = self.progress.add_task(stage, total=total or None)
        if total:
            self.progress.update(task, completed=done)

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """No drawing thread for a while: the build forks its converter worker (a fork copies the locks a
        running thread holds). The running stages stay; their spinners stop for the few milliseconds."""
        return _paused(self.progress)

    def handler(self) -> logging.Handler:
        from .console_log import ConsoleHandler

        return ConsoleHandler(self.console)

    def stop(self) -> None:
        for task in self.tasks.values():
            self.progress.remove_task(task)
        self.tasks.clear()
        self.progress.stop()


@contextlib.contextmanager
def _paused(progress: Any) -> Iterator[None]:
    """A rich Progress without its drawing thread while the block runs."""
    drawing = getattr(progress.live, "_refresh_thread", None)
    progress.stop()  # tells the drawing thread to end; it ends at once (an event it waits on)
    if drawing is not None:
        drawing.join()
    try:
        yield
    finally:
        progress.start()


def _count_column() -> Any:
    from rich.progress import ProgressColumn
    from rich.text import Text

    class CountColumn(ProgressColumn):
        """``3/8 samples, 2.5/s, 2 s left`` for a counted stage; nothing for a stage without a count."""

        def render(self, task: Any) -> Text:
            if not task.total:
                return Text("")
            speed = f", {task.speed:.1f}/s" if task.speed else ""
            left = f", {task.time_remaining:.0f} s left" if task.time_remaining is not None and speed else ""
            return Text(f"{task.completed:.0f}/{task.total:.0f} samples{speed}{left}")

    return CountColumn


# -- several pipelines ----------------------------------------------------------------------------

class StageFeed:
    """The display of one build among several: each progress call becomes ``send((pipeline, stage, done,
    total))`` (to the parent's :class:`PipelineLines`, through a queue from a pool process); log lines are
    the report's to keep (several builds' lines interleaved help nobody)."""

    def __init__(self, pipeline: str, send: Any, pause: Any = None) -> None:
        self.pipeline, self.send, self.pause = pipeline, send, pause

    @contextlib.contextmanager
    def paused(self) -> Iterator[None]:
        """The build forks its converter worker: the display's drawing thread (in this process) stops."""
        with self.pause() if self.pause is not None else contextlib.nullcontext():
            yield

    def __call__(self, stage: str, done: int, total: int) -> None:
        with contextlib.suppress(Exception):  # the display must never end a build (a parent that stopped)
            self.send((self.pipeline, stage, done, total))

    def handler(self) -> logging.Handler:
        import logging

        return logging.NullHandler()

    def stop(self) -> None:
        pass


class PipelineLines:
    """Several pipelines on a terminal: a live line per running pipeline (spinner, pipeline, its current
    stage, its elapsed time) at the bottom; each result line prints above them as its build ends."""

    def __init__(self, stream: Any) -> None:
        from rich.console import Console
        from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

        self.console = Console(file=stream, highlight=False)
        # markup=False: a pipeline's path is the user's (a pull request's) text, never rich markup.
        self.progress = Progress(SpinnerColumn(), TextColumn("{task.description}", markup=False), TimeElapsedColumn(),
                                 console=self.console, transient=True)
        self.tasks: dict[str, Any] = {}
        self.progress.start()

    def stage(self, pipeline: str, stage: str, done: int, total: int) -> None:
        count = f" {done}/{total}" if total and done < total else ""
        state = "" if (total == 0 and done > 0) or (total and done >= total) else f": {stage}{count}"
        description = f"{pipeline}{state}"
        task = self.tasks.get(pipeline)
        if task is None:
            self.tasks[pipeline] = self.progress.add_task(description, total=None)
        else:
            self.progress.update(task, description=description)

    def paused(self) -> contextlib.AbstractContextManager[None]:
        """No drawing thread while a build in this process forks its converter worker (see LiveProgress)."""
        return _paused(self.progress)

    def ended(self, pipeline: str, lines: Iterable[str]) -> None:
        task = self.tasks.pop(pipeline, None)
        if task is not None:
            self.progress.remove_task(task)
        for line in lines:
            self.console.print(_styled(printable(line)))

    def stop(self) -> None:
        for task in self.tasks.values():
            self.progress.remove_task(task)
        self.tasks.clear()
        self.progress.stop()


# -- the result, coloured on a terminal ---------------------------------------------------------

# re's own cache compiles it on first use: only a coloured console needs it
_WORDS = r"\b(PASS|FAIL|ERROR|CACHED)\b|\[(supported|uncertain|cpu_fallback|unsupported)\]"
_STYLES = {"PASS": "bold green", "FAIL": "bold red", "ERROR": "bold red", "CACHED": "cyan",
           "supported": "green", "uncertain": "yellow", "cpu_fallback": "dark_orange", "unsupported": "red"}


def colour(stream: Any) -> bool:
    """Colour on ``stream``: never with NO_COLOR (no-color.org), always with FORCE_COLOR (force-color.org: CI
    logs that render ANSI, as GitHub Actions' do), else where a person watches."""
    if os.environ.get("NO_COLOR", ""):
        return False
    if os.environ.get("FORCE_COLOR", "").lower() not in ("", "0", "false"):
        return True
    return live(stream)


def _rich_console(stream: Any, **kwargs: Any) -> Any:
    from rich.console import Console

    # force_terminal: FORCE_COLOR on a pipe; no_color off: colour() already said yes.
    return Console(file=stream, highlight=False, force_terminal=True, no_color=False, **kwargs)


def _styled(line: str) -> Any:
    from rich.text import Text

    text = Text(line)
    for match in re.finditer(_WORDS, line):
        word = match.group(1) or match.group(2)
        start = match.start(1) if match.group(1) else match.start(2)
        text.stylize(_STYLES[word], start, start + len(word))
    return text


def print_lines(lines: Iterable[str], stream: Any) -> None:
    """The result: plain where it is logged, verdict words in colour on a terminal or with FORCE_COLOR
    (NO_COLOR turns it off)."""
    if not colour(stream):
        for line in lines:
            stream.write(printable(line) + "\n")
        stream.flush()
        return
    console = _rich_console(stream, soft_wrap=True)
    for line in lines:
        console.print(_styled(printable(line)))


def print_table(title: str, header: Sequence[str], rows: Iterable[Sequence[str]],
                sections: Iterable[tuple[str, Iterable[str]]], stream: Any) -> None:
    """A summary table for people: drawn by rich on a terminal (verdict words in colour), plain aligned
    columns in logs (never wrapped mid-cell: a log has no width); then each section's title and lines."""
    coloured = colour(stream)
    title = printable(title)
    table_rows = [tuple(printable(cell) for cell in row) for row in rows]
    table_sections = [(printable(heading), [printable(line) for line in lines]) for heading, lines in sections]
    drawn = None if coloured else _plain_table(title, header, table_rows, table_sections)
    if drawn is not None:  # what rich would write, without importing it (a zoo's shard prints one table)
        stream.write(drawn)
        stream.flush()
        return
    _rich_table(title, header, table_rows, table_sections, stream, coloured)


def _rich_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
                sections: Sequence[tuple[str, Sequence[str]]], stream: Any, coloured: bool) -> None:
    from rich.box import ASCII2, ROUNDED
    from rich.table import Table
    from rich.text import Text

    table = Table(box=ROUNDED if coloured else ASCII2, highlight=False)
    for name in header:
        table.add_column(name, overflow="fold")
    for row in rows:  # Text, never markup: a pipeline's path is the user's (a pull request's) text
        table.add_row(*(_styled(cell) if coloured else Text(cell) for cell in row))
    console = _rich_console(stream) if coloured else _plain_console(stream)
    console.print(_styled(title) if coloured else title, markup=False)
    console.print(table)
    for heading, lines in sections:
        console.print()
        console.print(heading, style="bold" if coloured else "", markup=False)
        for line in lines:
            console.print(_styled(f"- {line}") if coloured else f"- {line}", markup=False, soft_wrap=True)


PLAIN_WIDTH = 1000  # a log's console: wide enough that no cell wraps


def _plain_table(title: str, header: Sequence[str], rows: Sequence[Sequence[str]],
                 sections: Sequence[tuple[str, Sequence[str]]]) -> str | None:
    """The plain console's output for this table (rich's ASCII2 box, one space of padding, columns as wide
    as their widest cell), written directly: every character is printable ASCII (one cell wide, nothing rich
    would strip) and the table fits the console's width. None otherwise: rich draws it."""
    texts = [title, *header, *(cell for row in rows for cell in row),
             *(heading for heading, _ in sections), *(line for _, lines in sections for line in lines)]
    if not all(text.isascii() and text.isprintable() for text in texts):
        return None
    if len(title) > PLAIN_WIDTH or any(len(heading) > PLAIN_WIDTH for heading, _ in sections):
        return None  # rich wraps a title or heading at the console's width
    widths = [max(len(row[i]) for row in (header, *rows)) for i in range(len(header))]
    if sum(widths) + 3 * len(widths) + 1 > PLAIN_WIDTH or any(len(row) != len(header) for row in rows):
        return None
    rule = "+" + "+".join("-" * (w + 2) for w in widths) + "+"

    def line(row: Sequence[str]) -> str:
        return "|" + "|".join(f" {cell.ljust(w)} " for cell, w in zip(row, widths, strict=True)) + "|"

    out = [title, rule, line(header), rule, *(line(row) for row in rows), rule]
    for heading, lines in sections:
        out += ["", heading, *(f"- {text}" for text in lines)]
    return "\n".join(out) + "\n"


def _plain_console(stream: Any) -> Any:
    from rich.console import Console

    # A log has no width: wide enough that no cell wraps; no colour, no control codes.
    return Console(file=stream, highlight=False, width=PLAIN_WIDTH, no_color=True, force_terminal=False,
                   color_system=None, emoji=False)


class SafeStream:
    """A console stream whose writes cannot change the outcome: a closed pipe (``| head -1``, ``| true``),
    a full disk (``> /dev/full``), a closed descriptor (``>&-``) or a stream that is ``None`` drop what is
    written from then on instead of raising. The exit code is the verdict, whatever the console does;
    everything else (``isatty``, ``fileno``, ``encoding``) is the wrapped stream's."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self.broken = stream is None

    def write(self, text: str) -> int:
        if not self.broken:
            try:
                self._stream.write(text)
            except (OSError, ValueError):  # EPIPE, ENOSPC, EBADF, EIO; ValueError: a closed file
                self.broken = True
        return len(text)

    def flush(self) -> None:
        if not self.broken:
            try:
                self._stream.flush()
            except (OSError, ValueError):
                self.broken = True

    def isatty(self) -> bool:
        if self.broken:
            return False
        try:
            return bool(self._stream.isatty())
        except (OSError, ValueError):
            return False

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


@contextlib.contextmanager
def safe_console() -> Iterator[None]:
    """``sys.stdout`` and ``sys.stderr`` as :class:`SafeStream` for the duration (restored after, for a
    host program that calls :func:`edgeconv.cli.main`)."""
    import sys

    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = SafeStream(saved[0]), SafeStream(saved[1])
    try:
        yield
    finally:
        for wrapped in (sys.stdout, sys.stderr):
            wrapped.flush()
        sys.stdout, sys.stderr = saved


def standard_descriptors() -> None:
    """Descriptors 0-2 that a parent closed (``>&-``) are opened on /dev/null before anything else opens a
    file: otherwise the first file edgeconv opens becomes "stdout", and a print lands in it."""
    for fd in (0, 1, 2):
        try:
            os.fstat(fd)
        except OSError:
            null = os.open(os.devnull, os.O_RDWR)
            if null != fd:
                os.dup2(null, fd)
                os.close(null)


def quiet_exit_streams() -> None:
    """The interpreter flushes stdout and stderr as it exits and turns a failed flush into exit 120: the
    streams are flushed here, and one that fails is pointed at /dev/null so the exit code stays ours."""
    import sys

    for stream, fd in ((sys.stdout, 1), (sys.stderr, 2)):
        if stream is None:
            continue
        try:
            stream.flush()
        except (OSError, ValueError):
            with contextlib.suppress(OSError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
