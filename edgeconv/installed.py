"""Installed distributions' versions, read as ``importlib.metadata.version`` reads them, without importing
it (26 ms: ``email``, ``zipfile``, ``csv``...; a cache key and a report ask for about twenty versions, and a
fresh CI runner asks on every run).

A distribution is found as importlib.metadata finds it, on the installation's path (:func:`installation_path`:
``sys.path`` without the folder a command runs in): the first folder holding a
``<name>-<version>.dist-info`` or ``<name>[-...].egg-info`` entry whose name normalises to the one asked
(PEP 503: runs of ``-``, ``_``, ``.`` alike, any case); its version is the first ``Version:`` header of its
``METADATA`` (``PKG-INFO`` for an egg). Anything this cannot read as importlib.metadata would (a
``sys.path`` entry that is a zip file, a metadata file without a version) is asked of importlib.metadata
itself.
"""

from __future__ import annotations

import functools
import os
import re
import sys

_SEPARATORS = re.compile(r"[-_.]+")
_HEADER_LIMIT = 1 << 16  # bytes of a METADATA file read for its headers


def normalized(name: str) -> str:
    return _SEPARATORS.sub("-", name).lower()


def installation_path() -> tuple[str, ...]:
    """``sys.path`` without the folder a command runs in, which ``python -m`` and ``-c`` put first: a project
    folder (in CI a pull request's checkout), not an installation. A ``numpy-0.0.1.dist-info`` planted there
    must not stand for the installed NumPy in a cache key or a report, and every file written there would
    otherwise change the installation's fingerprint (:func:`edgeconv.cache.install_fingerprint`)."""
    try:
        here = os.getcwd()
    except OSError:  # the working folder was removed
        here = ""
    return tuple(entry for entry in sys.path if entry not in ("", here))


def version(name: str) -> str | None:
    """The installed version of distribution ``name`` (None: not installed)."""
    path = installation_path()
    index, complete = _index(path)
    found = index.get(normalized(name), [])
    for file in found:
        read, regular = _metadata_version(file)
        if read is not None:
            return read
        if regular:
            break  # importlib.metadata's answer for this one (it reads what this leaves)
    else:
        if complete:
            return None  # none installed, or only metadata that is not a file (a FIFO, a device): not read
    import importlib.metadata as md  # what this module cannot read: importlib.metadata's own answer

    found_dist = next(iter(md.distributions(name=name, path=list(path))), None)
    return None if found_dist is None else found_dist.version


@functools.cache
def _index(path: tuple[str, ...]) -> tuple[dict[str, list[str]], bool]:
    """Normalised name: its metadata files, in the order found on ``path``; and whether every entry of
    ``path`` was a folder this could list (else a miss is not the final word)."""
    found: dict[str, list[str]] = {}
    complete = True
    for folder in path:
        try:
            with os.scandir(folder) as listed:
                names = sorted(item.name for item in listed)
        except NotADirectoryError:
            complete = complete and not os.path.isfile(folder)  # a zip on the path: importlib.metadata reads it
            continue
        except OSError:
            continue  # a missing or unreadable folder: importlib.metadata skips it too
        for item in names:
            low = item.lower()
            if low.endswith((".dist-info", ".egg-info")):
                metadata = "METADATA" if low.endswith(".dist-info") else "PKG-INFO"
                name = normalized(low.rpartition(".")[0].partition("-")[0])
                found.setdefault(name, []).append(os.path.join(folder, item, metadata))
    return found, complete


def _metadata_version(file: str) -> tuple[str | None, bool]:
    """The ``Version:`` header of a METADATA/PKG-INFO file (None: no such header, or not read), and whether the
    file is a regular one. Only a regular file is opened: the working folder is on ``sys.path`` under
    ``python -m``, and a pull request's ``x.dist-info/METADATA`` that is a FIFO would block the build forever
    (importlib.metadata opens it as it is)."""
    import stat

    try:
        fd = os.open(file, os.O_RDONLY | os.O_NONBLOCK)
    except OSError:
        return None, False
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None, False
        os.set_blocking(fd, True)
        with os.fdopen(fd, "rb", closefd=False) as f:
            head = f.read(_HEADER_LIMIT)
    except OSError:
        return None, True
    finally:
        os.close(fd)
    for line in head.split(b"\n"):
        line = line.rstrip(b"\r")
        if not line:
            break  # the headers end at the first empty line
        if line[:8].lower() == b"version:":
            return line[8:].strip().decode("utf-8", "replace") or None, True
    return None, True
