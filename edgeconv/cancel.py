"""Cancelling a build: a signal (SIGTERM when CI cancels a job, Ctrl-C) or another thread.

A signal handler's exception is not enough on its own: it is raised wherever the main thread
happens to be, and third-party code there may swallow it (Keras's model loader wraps its weight
extraction in a bare ``except:`` and falls back). So the request is also kept here, and the build
checks it between stages, before each conversion job and before it replaces the output folder: a
build asked to stop never goes on to replace the last good release.
"""

from __future__ import annotations

import _thread
import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

_lock = _thread.allocate_lock()  # threading's Lock, without importing threading (1.2 ms of `check`)
_requested: type[BaseException] | None = None
_deferred = 0


class Cancelled(BaseException):
    """The build was cancelled by :func:`request` from another thread. A ``BaseException``, like
    ``KeyboardInterrupt``: it unwinds through every ``except Exception``, removing work and staging
    folders on the way, and leaves the output folder as it was."""


def request(kind: type[BaseException] = Cancelled) -> None:
    """Ask the running build to stop; it raises ``kind`` at its next check."""
    global _requested
    with _lock:
        if _requested is None:
            _requested = kind


def requested() -> type[BaseException] | None:
    return _requested


def check() -> None:
    """Raise the requested exception, if a stop was requested."""
    if _requested is not None:
        raise _requested()


def deferred() -> bool:
    """A signal handler asks this before it raises: inside :func:`defer` it only records the request."""
    return _deferred > 0


@contextlib.contextmanager
def defer() -> Iterator[None]:
    """A step that must not be cut in two (the output folder's swap): a signal's stop request is recorded
    and raised by the next :func:`check` after the step, never in the middle of it."""
    global _deferred
    _deferred += 1
    try:
        yield
    finally:
        _deferred -= 1


def clear() -> None:
    global _requested
    with _lock:
        _requested = None


class Terminated(BaseException):
    """SIGTERM (what CI sends when it cancels a job): unwinds like Ctrl-C, so every temporary and
    staging folder is removed and the converter worker killed, then exit 143."""


def on_sigterm(signum: int, frame: object) -> None:
    """The SIGTERM handler of a build's process: the request is kept (third-party code may swallow the
    exception), and raised at once unless the output folder's swap is running (then right after it)."""
    request(Terminated)
    if not deferred():
        raise Terminated()


def on_sigint(signum: int, frame: object) -> None:
    """Ctrl-C, as Python's own handler, kept like SIGTERM's."""
    request(KeyboardInterrupt)
    if not deferred():
        raise KeyboardInterrupt()


_COMMITTED: list[Path] = []


def committed() -> list[Path]:
    """The output folders this process replaced (for what a stopped command says it left); kept here, not
    with the writing of them (:mod:`edgeconv.output`), so that a command that writes none imports no more."""
    return _COMMITTED
