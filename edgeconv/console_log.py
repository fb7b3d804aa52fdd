"""The console's log handlers: edgeconv's lines on a stream, or above rich's live display.

Its own module because it imports :mod:`logging` (see :mod:`edgeconv._log`): a command imports it when
its console is installed, that is when a line is first printed.
"""

from __future__ import annotations

import logging
from typing import Any


class Formatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        """``edgeconv: [warning: ]`` before each line of the message (one from the inputs may hold several),
        each line :func:`~edgeconv.errors.printable`."""
        from .errors import printable_lines

        level = "warning: " if record.levelno >= logging.WARNING else ""
        return "\n".join(f"edgeconv: {level}{line}" for line in printable_lines(record.getMessage()) or [""])


def stream_handler(stream: Any) -> logging.Handler:
    """Lines on ``stream`` (a CI log, a pipe, a terminal without the live display)."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(Formatter())
    return handler


class ConsoleHandler(logging.Handler):
    """Log lines above the live display (rich keeps the live lines below them); warnings in yellow."""

    def __init__(self, console: Any) -> None:
        super().__init__()
        self.console = console
        self.setFormatter(Formatter())

    def emit(self, record: logging.LogRecord) -> None:
        try:
            style = "yellow" if record.levelno >= logging.WARNING else None
            self.console.print(self.format(record), style=style, markup=False, highlight=False, soft_wrap=True)
        except Exception:  # a log line must never end the build
            self.handleError(record)
