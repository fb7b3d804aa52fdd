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

import hashlib
import json
import os
import re
import shutil
import signal
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import cancel
from ._log import get_logger
from .errors import OutputError, rel

MARKER = ".edgeconv-output"
log = get_logger(__name__)
# Fault injection for the reliability tests: die (SIGKILL), or be asked to stop (SIGTERM), at this step.
_KILL_AT = "EDGECONV_TEST_KILL_AT"
_TERM_AT = "EDGECONV_TEST_TERM_AT"
_WORK = re.compile(r"^\.(?P<name>.+)\.(?P<kind>staging|old)-(?P<pid>\d+)-")


def _step(name: str) -> None:
    if os.environ.get(_KILL_AT) == name:
        os.kill(os.getpid(), signal.SIGKILL)
    if os.environ.get(_TERM_AT) == name:
        os.kill(os.getpid(), signal.SIGTERM)


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


def marker_text(files: Mapping[str, bytes]) -> str:
    """The marker lists every file edgeconv wrote into the folder, with its sha256: what it may replace."""
    return json.dumps({"written_by": "edgeconv", "note": "edgeconv replaces this folder on every build, as long as "
                       "it holds exactly the files listed here", "files": {name: hashlib.sha256(data).hexdigest()
                                                                             for name, data in sorted(files.items())}},
                      indent=1) + "\n"


def _listed(path: Path) -> dict[str, str] | None:
    """The files the folder's marker lists (name -> sha256), or None when there is no valid marker."""
    marker = path / MARKER
    try:
        if marker.is_symlink() or not marker.is_file() or marker.stat().st_size > 1_000_000:
            return None
        files = json.loads(marker.read_text(encoding="utf-8"))["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if not isinstance(files, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    return files


LEGACY_MARKER = "This folder is written by edgeconv and replaced on every build.\n"  # before the file list


def _legacy_marker(path: Path) -> bool:
    try:
        return (path / MARKER).read_text(encoding="utf-8") == LEGACY_MARKER
    except (OSError, ValueError):
        return False


def foreign_file(path: Path) -> str | None:
    """What in the existing folder ``path`` edgeconv did not write there ('' for "no valid marker"), or None
    when the folder holds only files its marker lists, unchanged (a file may be missing: removing it lost
    nothing). A symbolic link or a ``.git`` anywhere in it is foreign."""
    listed = _listed(path)
    if listed is None:
        return ""
    for top, dirs, names in os.walk(path):
        here = Path(top)
        for name in sorted(dirs):
            if name == ".git" or (here / name).is_symlink():
                return (here / name).relative_to(path).as_posix()
        for name in sorted(names):
            file = here / name
            shown = file.relative_to(path).as_posix()
            if shown == MARKER:
                continue
            if file.is_symlink() or not file.is_file() or shown not in listed:
                return shown
            with open(file, "rb") as f:
                if hashlib.file_digest(f, "sha256").hexdigest() != listed[shown]:
                    return shown
    return None


def check_holds_no_input(path: Path, inputs: Sequence[tuple[str, Path]]) -> None:
    """The output folder is replaced on every build: it must never be, or hold, one of the build's inputs
    (the pipeline file, the model, the data, target files, code it imports)."""
    for role, given in inputs:
        resolved = given.resolve()
        if resolved == path or path in resolved.parents:
            raise OutputError(f"output folder {rel(path)} holds the {role} {rel(resolved)}; every build replaces "
                              "that folder. Choose an output folder of its own (output.dir or --out)")


def check_not_a_link(given: Path) -> None:
    """Refuse an output path that is a symbolic link, or below one that points nowhere: the folder would be
    made wherever the link points (outside the repository)."""
    def shown(p: Path) -> str:  # as named: rel() would follow the link
        text = os.path.relpath(os.path.abspath(p))
        return text if not text.startswith("..") else os.path.abspath(p)

    for part in (given, *given.parents):
        if part.is_symlink() and (part == given or not part.exists()):
            what = "is a symbolic link" if part == given else f"is below {shown(part)}, a symbolic link to nothing"
            raise OutputError(f"output folder {shown(given)} {what} (-> {os.readlink(part)}); name a real folder "
                              "(output.dir or --out)")


def check_writable(path: Path) -> None:
    """Refuse, before any work, an output path that is a file or someone else's folder, or one that
    cannot be created or written (a read-only file system, a missing permission): found out after a
    long build, that would waste it. A folder edgeconv wrote is replaced only while it holds exactly what
    its marker lists; a ``.git`` folder, or a folder inside one, never."""
    if path.name == ".git" or ".git" in path.parts:
        raise OutputError(f"output folder {rel(path)} is inside a .git folder; every build replaces its output "
                          "folder. Choose an output folder of its own (output.dir or --out)")
    if path.is_symlink():
        check_not_a_link(path)
    if path.exists() and not path.is_dir():
        raise OutputError(f"output folder {rel(path)} exists and is not a folder")
    if path.is_dir() and any(path.iterdir()):
        foreign = foreign_file(path)
        if foreign == "" and _legacy_marker(path):
            raise OutputError(f"output folder {rel(path)} was written by an older edgeconv, whose marker does not "
                              "list the files it wrote, so nothing shows that only edgeconv's files are in it; look "
                              "at it, remove it, and build again")
        if foreign == "":
            raise OutputError(f"output folder {rel(path)} exists, is not empty and was not created by edgeconv; "
                              "choose another folder (--out) or empty it")
        if foreign is not None:
            raise OutputError(f"output folder {rel(path)} holds {foreign!r}, which edgeconv did not write there (or "
                              "it changed since); every build replaces that folder. Choose another folder (--out) "
                              "or move that file out")
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
    """Replace ``path`` by a folder holding exactly ``files`` (plus the edgeconv marker listing them).

    The new folder is staged beside ``path`` and swapped in with one ``renameat2(RENAME_EXCHANGE)`` (Linux;
    elsewhere two renames, which :func:`recover` completes if the process dies between them). A stop
    signal during the swap is raised after it, and never leaves the output folder absent."""
    check_writable(path)
    parent = path.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        recover(path)
        staging = Path(tempfile.mkdtemp(prefix=f".{path.name}.staging-{os.getpid()}-", dir=parent))
    except OSError as exc:
        raise OutputError(f"cannot create the output folder {rel(path)}: {exc.strerror}") from None
    old: Path | None = None
    swapped = False
    try:
        os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes it private; outputs are ordinary folders
        for name, data in files.items():
            (staging / name).parent.mkdir(parents=True, exist_ok=True)  # "explorer/edgetpu.status.json"
            (staging / name).write_bytes(data)
        (staging / MARKER).write_text(marker_text(files))
        _step("staged")
        cancel.check()  # the last moment a cancelled build can still leave the previous output untouched
        with cancel.defer():
            if path.exists() and _exchange(staging, path):
                old, swapped = staging, True  # the staging folder's name now holds the previous release
                _step("exchanged")
            else:
                if path.exists():
                    old = Path(tempfile.mkdtemp(prefix=f".{path.name}.old-{os.getpid()}-", dir=parent))
                    os.rmdir(old)
                    os.rename(path, old)
                    _step("old_moved")
                os.rename(staging, path)
                swapped = True
            cancel.committed().append(path)
            _step("new_moved")
    except BaseException as exc:
        if not swapped:
            shutil.rmtree(staging, ignore_errors=True)
            if old is not None and old.exists() and not path.exists():
                os.rename(old, path)
        if isinstance(exc, OSError) and not swapped:  # a full disk, a quota, a read-only file system
            raise OutputError(f"cannot write the output folder {rel(path)}: {exc.strerror or exc}; nothing was "
                              "changed (the previous output, if any, is as it was)") from None
        raise
    finally:
        if swapped and old is not None:
            shutil.rmtree(old, ignore_errors=True)


def _exchange(new: Path, current: Path) -> bool:
    """Swap two folders in one step (``renameat2`` with ``RENAME_EXCHANGE``); False where the system or
    the file system cannot (then the caller renames twice)."""
    import ctypes
    import errno
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        renameat2 = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):  # a C library without it (glibc before 2.28, musl before 1.2.?)
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(new), at_fdcwd, os.fsencode(current), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(current))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
