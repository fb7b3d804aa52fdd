"""Writing the output folder atomically.

Artifacts are written to a staging folder next to the output folder and swapped
in with renames, so a failed build leaves the previous output untouched and never
a half-written one. A folder edgeconv did not create is never overwritten.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .errors import OutputError, rel

MARKER = ".edgeconv-output"
CRASH_LOG = "edgeconv-crash.log"


def check_writable(path: Path) -> None:
    """Refuse, before any work, an output path that is a file or someone else's folder."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"output folder {rel(path)} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not (path / MARKER).exists():
        raise OutputError(f"output folder {rel(path)} exists, is not empty and was not created by edgeconv; "
                          "choose another folder (--out) or empty it")


def commit(path: Path, files: Mapping[str, bytes]) -> None:
    """Replace ``path`` by a folder holding exactly ``files`` (plus the edgeconv marker)."""
    check_writable(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.staging-", dir=parent))
    except OSError as exc:
        raise OutputError(f"cannot create the output folder {rel(path)}: {exc.strerror}") from None
    backup: Path | None = None
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; outputs are ordinary folders
        for name, data in files.items():
            (staging / name).write_bytes(data)
        (staging / MARKER).write_text("This folder is written by edgeconv and replaced on every build.\n")
        if path.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-", dir=parent))
            os.rmdir(backup)
            os.rename(path, backup)
        os.rename(staging, path)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        if backup is not None and backup.exists() and not path.exists():
            os.rename(backup, path)
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_crash_log(path: Path, text: str) -> Path | None:
    """Write a crash log into the output folder (created if needed); None when impossible."""
    try:
        if path.exists() and (not path.is_dir() or (any(path.iterdir()) and not (path / MARKER).exists())):
            return None  # never touch a folder edgeconv does not own
        path.mkdir(parents=True, exist_ok=True)
        (path / MARKER).touch()
        log = path / CRASH_LOG
        log.write_text(text)
        return log
    except OSError:
        return None
