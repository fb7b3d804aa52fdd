"""Crash logs: a bug, or the toolchain failing, writes its traceback to a log outside every output folder
(``$EDGECONV_LOG_DIR``, else ``logs`` in the build cache folder; the newest 20 kept), never into an output
folder: a crash must not touch the last good release."""

from __future__ import annotations

import os
import sys
import tempfile
import traceback
from pathlib import Path

from .cache import default_dir
from .errors import InternalError


def crash_log_dir() -> Path:
    """Where crash logs go: ``$EDGECONV_LOG_DIR``, else ``logs`` in the build cache folder. Never an output
    folder: a crash must not touch the last good release."""
    return Path(os.environ["EDGECONV_LOG_DIR"]) if os.environ.get("EDGECONV_LOG_DIR") else default_dir() / "logs"


KEEP_CRASH_LOGS = 20


def write_crash_log(folder: Path, text: str) -> Path | None:
    """Write a crash log into ``folder`` (created if needed), keeping the newest KEEP_CRASH_LOGS; None when
    impossible (the caller falls back to the temporary folder)."""
    import datetime

    try:
        folder.mkdir(parents=True, exist_ok=True)
        stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%S")
        handle, name = tempfile.mkstemp(prefix=f"edgeconv-crash-{stamp}-", suffix=".log", dir=folder)
        with os.fdopen(handle, "w") as f:
            f.write(text)
        log_path = Path(name)
        old = sorted(folder.glob("edgeconv-crash-*.log"), key=lambda p: p.stat().st_mtime)[:-KEEP_CRASH_LOGS]
        for p in old:
            p.unlink(missing_ok=True)
        return log_path
    except OSError:
        return None


def crash_log(exc: BaseException) -> Path:
    """A bug, or the toolchain failing: the traceback (and the failing stage's output) in a log outside
    every output folder. Returns its path."""
    import platform

    from ._version import __version__

    text = (f"edgeconv {__version__}, Python {platform.python_version()}, {platform.platform()}\n"
            f"argv: {sys.argv}\n\n" + "".join(traceback.format_exception(exc)))
    if isinstance(exc, InternalError) and exc.log:
        text += f"\n--- output of the failing stage ---\n{exc.log}\n"
    path = write_crash_log(crash_log_dir(), text)
    if path is None:
        with tempfile.NamedTemporaryFile("w", prefix="edgeconv-crash-", suffix=".log", delete=False) as handle:
            handle.write(text)
        path = Path(handle.name)
    return path


def crash_words(exc: BaseException) -> str:
    return str(exc) if isinstance(exc, InternalError) else f"{type(exc).__name__}: {exc}"
