"""Reading an input file a pull request may have planted: a regular file of bounded size, or a clear error.

A FIFO named as the model would block the read forever, a link to ``/dev/zero`` would be read until the
kernel ends the process, a socket or device is nothing edgeconv can read. Every input (the pipeline and
target files, the model, the data, reports) is opened without blocking, and its descriptor, not its name,
is checked: a regular file, at most ``limit`` bytes. Links are followed to what they name, and that is
what is checked.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import EdgeconvError, rel

MIB = 1 << 20
MAX_MODEL_BYTES = 2048 * MIB  # FlatBuffers and protobuf cap a .tflite and a GraphDef at 2 GiB
MAX_REPORT_BYTES = 64 * MIB  # a report of a model with 10,000 ops is a few MB
MAX_TEXT_BYTES = 4 * MIB  # a pipeline or target file (their YAML reader takes at most 1,000,000 characters)


def special_kind(mode: int) -> str | None:
    """What a file that is neither a regular file nor a folder is ("a FIFO", ...), or None."""
    for test, word in ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return word
    return None


def not_a_regular_file(path: Path) -> str | None:
    """Why ``path`` (a link followed) cannot be read as an input, or None: a FIFO, a device or a socket.
    A missing path, a folder or a regular file: None (the callers say what they expect)."""
    try:
        mode = os.stat(path).st_mode
    except (OSError, ValueError):
        return None
    kind = special_kind(mode)
    return f"is {kind}, not a regular file" if kind else None


def read_bytes(path: Path, limit: int, error: type[EdgeconvError] = EdgeconvError, what: str = "file") -> bytes:
    """The bytes of the regular file ``path``, at most ``limit`` of them; ``error`` otherwise, naming the file."""
    shown = rel(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise error(f"{shown}: file not found") from None
    except IsADirectoryError:
        raise error(f"{shown}: is a directory, expected a {what}") from None
    except OSError as exc:
        special = not_a_regular_file(path)  # a socket cannot even be opened (ENXIO)
        if special:
            raise error(f"{shown}: {special}; expected a {what}") from None
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise error(f"{shown}: is a directory, expected a {what}")
        if not stat.S_ISREG(st.st_mode):
            kind = special_kind(st.st_mode) or "not a regular file"
            raise error(f"{shown}: is {kind}, not a regular file; expected a {what}")
        if st.st_size > limit:
            raise error(f"{shown}: {st.st_size:,} bytes; a {what} may have at most {limit:,}")
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read(limit + 1)
    except OSError as exc:
        raise error(f"{shown}: cannot read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    if len(data) > limit:  # it grew while being read
        raise error(f"{shown}: more than {limit:,} bytes; a {what} may have at most {limit:,}")
    return data


# -- What a pipeline may read ------------------------------------------------------------------------------
#
# A pipeline names the files a build reads (the model, the data, target files), and a pipeline may come from a
# pull request: naming /proc/self/environ as CSV calibration data printed the runner's environment (its
# secrets) in the error that listed the "columns". So a pipeline reads only inside its project, links
# followed, and the folders the workflow grants, never the pipeline.

READ_ROOTS = "EDGECONV_READ_ROOTS"


def project_of(folder: Path) -> Path:
    """The project a pipeline in ``folder`` belongs to: the nearest folder at or above it that holds ``.git``
    (a clone; a worktree's or submodule's ``.git`` file counts); outside git, the working directory when
    ``folder`` lies in it, else ``folder`` itself. ``folder`` is taken as named, not through its links."""
    folder = Path(os.path.abspath(folder))
    for place in (folder, *folder.parents):
        if os.path.lexists(place / ".git"):
            return place
    try:
        cwd = Path(os.path.abspath(os.getcwd()))
    except OSError:  # the working directory was removed
        return folder
    return cwd if folder.is_relative_to(cwd) else folder


def granted_roots() -> list[Path]:
    """The folders outside a project that ``$EDGECONV_READ_ROOTS`` lets pipelines read (``os.pathsep``
    between them; relative ones are taken from the working directory), links followed."""
    roots = []
    for part in os.environ.get(READ_ROOTS, "").split(os.pathsep):
        if part.strip():
            try:
                roots.append(Path(part.strip()).resolve())
            except (OSError, ValueError):
                continue
    return roots


def _held(path: Path, project: Path) -> tuple[Path, Path] | None:
    """``path`` with its links followed, as a read would, and the folder that lets the pipeline read it (the
    project or a granted one); None when none does (a loop of links leads nowhere readable: None too)."""
    try:
        real = path.resolve()
    except (OSError, ValueError):
        return None
    return next(((real, root) for root in (project.resolve(), *granted_roots()) if real.is_relative_to(root)), None)


def leads_outside(path: Path, project: Path) -> bool:
    """Whether ``path``, its links followed, lies outside ``project`` and every granted folder."""
    return _held(path, project) is None


GRANT = (f"move it into the project, or grant its folder in ${READ_ROOTS} (set by the workflow, never by a pull "
         "request)")


def outside_project(path: Path, project: Path) -> str | None:
    """Why a pipeline of ``project`` may not read ``path``, or None: it lies outside the project and outside
    every granted folder, or in a ``.git`` folder below the one that holds it (the project itself may lie
    anywhere). For a folder, a link anywhere below it that leads out counts too (an image or array folder is
    read file by file)."""
    where = f"outside the pipeline's project ({project})"
    git = "a pipeline never reads git's own files (a clone's config holds its credentials)"
    held = _held(path, project)
    if held is None:
        return f"is {where}: a pipeline reads only files in its project; {GRANT}"
    if _in_git(*held):
        return f"is in a .git folder: {git}"
    if path.is_dir():
        for here, folders, files in os.walk(path):
            for name in sorted(folders + files):
                below = Path(here) / name
                if not below.is_symlink():
                    continue
                shown = repr(str(below.relative_to(path)))
                held = _held(below, project)
                if held is None:
                    return (f"holds {shown}, a link that leads {where}: a pipeline reads only files in its "
                            f"project; {GRANT}")
                if _in_git(*held):
                    return f"holds {shown}, a link into a .git folder: {git}"
    return None


def _in_git(real: Path, root: Path) -> bool:
    return ".git" in real.relative_to(root).parts
