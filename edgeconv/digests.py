"""SHA-256 of files and folders, as the cache key and the report's data section take them (no NumPy, no
calibration code: a cached build's key is computed before anything heavy is imported)."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path


def file_sha256(path: Path) -> str:
    """sha256 of a file's bytes; read once per process while its size, time and inode stay the same (a zoo's
    pipelines share their data files, and edgeconv's own sources are in every cache key)."""
    st = path.stat()
    return _file_sha256(os.path.abspath(path), st.st_size, st.st_mtime_ns, st.st_ino)


@functools.lru_cache(maxsize=4096)
def _file_sha256(path: str, size: int, mtime_ns: int, inode: int) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def path_sha256(path: Path) -> str:
    """sha256 of a file, or of a folder (every file's relative path and bytes, sorted; Python's
    __pycache__ left out)."""
    if path.is_file():
        return file_sha256(path)
    digest = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file() and "__pycache__" not in p.parts):
        digest.update(f.relative_to(path).as_posix().encode() + b"\0")
        digest.update(bytes.fromhex(file_sha256(f)))
    return digest.hexdigest()
