"""edgeconv's loggers: :mod:`logging`'s, with that module imported only when a line may be printed.

``import logging`` brings threading, traceback, linecache, tokenize, string and textwrap with it: about
5 ms of the 90 an ``edgeconv check`` costs, which prints no log line unless asked to (-v). A process in
which nothing imported :mod:`logging` has configured no handler, so logging would print only WARNING and
above (its last-resort handler); below that, a line is dropped here without importing it. The command
line's console (-q/-v) waits here, with its level, until a line at that level or above is logged or
edgeconv's logger is asked for (:func:`edgeconv_logger`); once logging is imported, every line is
logging's to filter and print, as a host program configured it.

Every module logs through :func:`get_logger`; code that sets handlers on the ``edgeconv`` logger takes it
from :func:`edgeconv_logger`, so that a console still waiting is installed first, not over its handlers.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import logging

DEBUG, INFO, WARNING, ERROR = 10, 20, 30, 40  # logging's levels

# The command's console not installed yet: what makes its handler, and its level.
_console: tuple[Callable[[], logging.Handler], int] | None = None


class Logger:
    """The logging.Logger named ``name``, imported when a line is logged that something may print."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def debug(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log(DEBUG, msg, args, exc_info)

    def info(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log(INFO, msg, args, exc_info)

    def warning(self, msg: str, *args: object, exc_info: bool = False) -> None:
        self._log(WARNING, msg, args, exc_info)

    def _log(self, level: int, msg: str, args: tuple[object, ...], exc_info: bool) -> None:
        if "logging" not in sys.modules and level < (WARNING if _console is None else _console[1]):
            return  # no handler exists that would print it
        edgeconv_logger()  # the console, if it waits
        import logging

        # stacklevel: the record names the line that called debug/info/warning, as logging's own would
        logging.getLogger(self.name).log(level, msg, *args, exc_info=exc_info, stacklevel=3)


def get_logger(name: str) -> Logger:
    return Logger(name)


def edgeconv_logger() -> logging.Logger:
    """The ``edgeconv`` logger (every module's parent), with the command's console on it if it waits."""
    global _console
    import logging

    logger = logging.getLogger("edgeconv")
    if _console is not None:
        handler, level = _console
        _console = None
        logger.propagate = False
        logger.handlers = [handler()]
        logger.setLevel(level)
    return logger


def console(handler: Callable[[], logging.Handler], level: int) -> None:
    """This command's console on the ``edgeconv`` logger (not the root logger: a host program's configuration
    is not ours to change): ``handler()``'s, from ``level`` up, and no propagation. Installed now when
    logging is imported, else when a line at ``level`` or above is logged or the logger is asked for."""
    global _console
    _console = (handler, level)
    if "logging" in sys.modules:
        edgeconv_logger()


@contextlib.contextmanager
def kept() -> Iterator[None]:
    """The ``edgeconv`` logger and the waiting console as they were before the block, after it (a command's
    console is undone when it returns: a host program, or a test calling the CLI, keeps its own)."""
    global _console
    waiting = _console
    before = None
    if "logging" in sys.modules:
        import logging

        logger = logging.getLogger("edgeconv")
        before = (logger.handlers[:], logger.level, logger.propagate)
    try:
        yield
    finally:
        _console = waiting
        if "logging" in sys.modules:
            import logging

            logger = logging.getLogger("edgeconv")
            logger.handlers, level, logger.propagate = before or ([], logging.NOTSET, True)
            logger.setLevel(level)
