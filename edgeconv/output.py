"""Writing the output folder atomically, and recovering from a commit that was killed.

Artifacts are written to a staging folder next to the output folder and swapped
in with renames, so a failed build leaves the previous output untouched and never
a half-written one. A folder edgeconv did not create is never overwritten.

Whatever instant the process dies at (SIGKILL included), the output folder afterwards
holds the complete old release or the complete new one: the only window without an
output folder is between the two renames, and :func:`recover` (run before every build
and commit) puts the old release back and removes the staging and backup folders of
builds that are no longer running (their process id is in the folder name).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping
from pathlib import Path

from . import cancel
from .errors import OutputError, rel

MARKER = ".edgeconv-output"
log = logging.getLogger("edgeconv")
# Fault injection for the reliability tests: die (SIGKILL) at this step of the commit.
_KILL_AT = "EDGECONV_TEST_KILL_AT"
_WORK = re.compile(r"^\.(?P<name>.+)\.(?P<kind>staging|old)-(?P<pid>\d+)-")


def _step(name: str) -> None:
    if os.environ.get(_KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def recover(path: Path) -> None:
    """Finish what an interrupted commit left beside ``path``: put the previous release back when the
    output folder is missing, and remove staging and backup folders whose build is no longer running."""
    parent = path.parent
    if not parent.is_dir():
        return
    stale: list[tuple[str, Path]] = []
    for p in parent.iterdir():
        found = _WORK.match(p.name)
        if found and found["name"] == path.name and p.is_dir() and not _alive(int(found["pid"])):
            stale.append((found["kind"], p))
    olds = sorted((p for kind, p in stale if kind == "old" and (p / MARKER).exists()), key=lambda p: p.stat().st_mtime)
    if not path.exists() and olds:
        os.rename(olds[-1], path)
        log.warning("output: restored the previous release of %s (a build was killed while replacing it)", rel(path))
    for _, p in stale:
        if p.exists():
            shutil.rmtree(p, ignore_errors=True)


WORK_PREFIX = "edgeconv-work-"  # a build's work folder in TMPDIR: edgeconv-work-<pid>-<random>
_WORK_FOLDER = re.compile(rf"^{WORK_PREFIX}(?P<pid>\d+)-")


def remove_stale_work_folders(tmp: Path) -> None:
    """Remove the work folders of builds that were killed (SIGKILL leaves them behind): folders of this
    user in ``tmp`` named after a process that no longer runs."""
    if not tmp.is_dir():
        return
    for p in tmp.iterdir():
        found = _WORK_FOLDER.match(p.name)
        try:
            mine = p.is_dir() and not p.is_symlink() and p.stat().st_uid == os.getuid()
        except OSError:
            continue
        if found and mine and not _alive(int(found["pid"])):
            shutil.rmtree(p, ignore_errors=True)


def existing_ancestor(path: Path) -> Path | None:
    """The closest folder above ``path`` that exists: where creating ``path`` would start."""
    return next((p for p in (path.parent, *path.parent.parents) if p.exists()), None)


def write_atomically(path: Path, text: str) -> None:
    """Replace the file ``path`` by ``text`` whole, or leave the previous one: a job cancelled while writing
    leaves nothing half-written."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as f:
            f.write(text)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes it private; the file is an ordinary one
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def check_writable(path: Path) -> None:
    """Refuse, before any work, an output path that is a file or someone else's folder, or one that
    cannot be created or written (a read-only file system, a missing permission): found out after a
    long build, that would waste it."""
    if path.exists() and not path.is_dir():
        raise OutputError(f"output folder {rel(path)} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()) and not (path / MARKER).exists():
        raise OutputError(f"output folder {rel(path)} exists, is not empty and was not created by edgeconv; "
                          "choose another folder (--out) or empty it")
    existing = existing_ancestor(path)
    if existing is None:
        return
    if not existing.is_dir():
        raise OutputError(f"cannot create the output folder {rel(path)}: {rel(existing)} is a file")
    try:  # a real write: os.access says yes to root on a read-only mount
        probe = tempfile.NamedTemporaryFile(prefix=f".{path.name}.probe-", dir=existing)  # noqa: SIM115
        probe.close()
    except OSError as exc:
        raise OutputError(f"cannot write the output folder {rel(path)}: {rel(existing)}: "
                          f"{exc.strerror or exc}") from None


def commit(path: Path, files: Mapping[str, bytes]) -> None:
    """Replace ``path`` by a folder holding exactly ``files`` (plus the edgeconv marker)."""
    check_writable(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        recover(path)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.staging-{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise OutputError(f"cannot create the output folder {rel(path)}: {exc.strerror}") from None
    backup: Path | None = None
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; outputs are ordinary folders
        for name, data in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)  # "explorer/edgetpu.status.json"
            (staging / name).write_bytes(data)
        (staging / MARKER).write_text("This folder is written by edgeconv and replaced on every build.\n")
        _step("staged")
        cancel.check()  # the last moment a cancelled build can still leave the previous output untouched
        if path.exists():
            backup = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-{os.getpid()}-", dir=parent))
            os.rmdir(backup)
            os.rename(path, backup)
            _step("old_moved")
        os.rename(staging, path)
        _step("new_moved")
    except BaseException as exc:
        shutil.rmtree(staging, ignore_errors=True)
        if backup is not None and backup.exists() and not path.exists():
            os.rename(backup, path)
        if isinstance(exc, OSError):  # a full disk, a quota, a file system gone read-only: the user's to fix
            raise OutputError(f"cannot write the output folder {rel(path)}: {exc.strerror or exc}; nothing was "
                              "changed (the previous output, if any, is as it was)") from None
        raise
    if backup is not None:
        shutil.rmtree(backup, ignore_errors=True)


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def crash_log_dir() -> Path:
    """Where crash logs go: ``$EDGECONV_LOG_DIR``, else ``logs`` in the build cache folder. Never an output
    folder: a crash must not touch the last good release."""
    from .cache import default_dir

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
