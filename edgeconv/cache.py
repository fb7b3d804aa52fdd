"""A content-addressed cache of builds.

The key is the sha256 of everything a build's bytes depend on: the resolved pipeline (every
default filled in), where the output folder is relative to the pipeline (the report's paths are
relative to it), the bytes of the model, of the calibration and evaluation data files, of the
user's target files and custom modules, the sources of edgeconv itself (built-in targets
included), and the versions of the toolchain. An unchanged rebuild finds its entry and writes
the cached artifacts and report (TensorFlow is not even imported); any change misses. Computing
the key reads the inputs once; nothing else of the build runs.

Not cacheable (the build runs, and says why): a ``python`` calibration source (its output is
whatever the function returns today) and custom modules that are not files next to the pipeline.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._log import get_logger
from ._record import record
from .config import PipelineConfig, installed_toolchain, resolved_data
from .digests import path_sha256
from .output import MARKER

if TYPE_CHECKING:
    from . import report_model as rm

log = get_logger(__name__)

FORMAT = 3  # bump when what an entry holds or the key hashes changes (2: every file's sha256; 3: JSON pipeline)
# Libraries on the path from the data to the bytes that are not toolchain parts of their own (TOOLCHAIN is
# also what target files' `requires:` names): image decoding, .h5 reading, the protobuf and flatbuffers
# runtimes that read and write the models, Keras 2 for old SavedModels, ml_dtypes for float16/bfloat16.
LIBRARIES = ("pillow", "h5py", "protobuf", "flatbuffers", "tf-keras", "ml-dtypes", "scikit-image", "tensorflow-io")
_PACKAGE = Path(__file__).resolve().parent
_PACKAGE_INSTALLED = _PACKAGE


def default_dir() -> Path:
    """The local cache folder: ``$EDGECONV_CACHE_DIR`` (when it is a folder, not a URL), else
    ``$XDG_CACHE_HOME/edgeconv``, else ``~/.cache/edgeconv``. With a remote cache it holds the read-through
    copy (``$EDGECONV_CACHE_LOCAL`` moves it) and crash logs."""
    where = os.environ.get("EDGECONV_CACHE_DIR", "")
    if where and not is_url(where):
        return Path(where.removeprefix("file://"))
    if os.environ.get("EDGECONV_CACHE_LOCAL"):
        return Path(os.environ["EDGECONV_CACHE_LOCAL"])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "edgeconv"


def is_url(where: str | Path) -> bool:
    """A remote cache location (``s3://bucket/prefix``, ``gs://...``: any fsspec protocol but ``file``)."""
    return isinstance(where, str) and re.match(r"[a-z][a-z0-9+.-]*://", where) is not None \
        and not where.startswith("file://")


def location(where: str | Path | None) -> str | Path:
    """Where the build cache is: ``--cache-dir`` as given (a folder, ``file://`` folder or a URL), else
    ``$EDGECONV_CACHE_DIR``, else the local default."""
    where = where if where not in (None, "") else os.environ.get("EDGECONV_CACHE_DIR") or None
    if where is None:
        return default_dir()
    if isinstance(where, str):
        if where.startswith("file://"):
            return Path(where.removeprefix("file://"))
        return where if is_url(where) else Path(where)
    return where


def _foreign(path: Path) -> str | None:
    """Why a cache folder or file cannot be trusted: owned by another user, or writable by others (anyone
    could plant an entry); None when it is ours alone."""
    try:
        st = path.stat()
    except OSError:
        return None
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"{path} belongs to another user (uid {st.st_uid})"
    if st.st_mode & 0o022:
        return f"{path} is writable by other users (mode {st.st_mode & 0o777:o})"
    return None


class BuildCache:
    """Entries are trusted only when they are this user's alone and every file still has the sha256 the
    entry recorded; a served entry's report must name the .tflite it is served with. Anything else is a
    miss (a warning, then a build), never served. ``EDGECONV_CACHE_SHARED=1`` accepts a cache folder
    other users can write (a CI runner's shared cache), still verifying every file."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.shared = os.environ.get("EDGECONV_CACHE_SHARED", "") not in ("", "0")

    def key(self, config: PipelineConfig, out_dir: Path, suggest_keep_float: bool,
            baseline: rm.Report | None = None) -> tuple[str | None, str]:
        """The entry's key, or None and why the build cannot be cached."""
        base = config.source.parent
        inputs: dict[str, Any] = {
            "format": FORMAT,
            "pipeline": resolved_data(config, out_dir),
            "output_dir": os.path.relpath(out_dir, base),
            "suggest_keep_float": suggest_keep_float,
            **self.install_facts(),
            "model": path_sha256(config.model.path),
            "baseline": baseline,
        }
        for section in ("calibration", "evaluation"):
            data = getattr(config, section)
            if data is None:
                continue
            if data.path is None:
                return None, f"{section} data comes from a python function"
            inputs[section] = path_sha256(data.path)
        modules = [*config.model.custom_modules,
                   *(ref.partition(":")[0] for ref in config.model.custom_objects.values())]
        for name in dict.fromkeys(modules):
            file = _module_file(base, name)
            if file is None:
                return None, f"custom module {name!r} is not a file next to the pipeline"
            inputs[f"module:{name}"] = path_sha256(file)
        for target in config.targets:
            if Path(target).is_file():
                inputs[f"target:{target}"] = path_sha256(Path(target))
        text = json.dumps(inputs, sort_keys=True, default=str)
        return hashlib.sha256(text.encode()).hexdigest(), "cacheable"

    def install_facts(self) -> dict[str, Any]:
        """The key's facts about this installation (see :func:`install_facts`), kept in this cache folder
        while it can be used."""
        if _PACKAGE != _PACKAGE_INSTALLED:  # another folder's sources (tests): worked out every time
            return _computed_facts(_PACKAGE)
        return install_facts(self.root if self.usable() is None else None)

    def _entry(self, key: str) -> Path:
        return self.root / key[:2] / key

    def usable(self) -> str | None:
        """Why this cache folder cannot be used (None: it can)."""
        if self.shared:
            return None
        return _foreign(self.root) if self.root.exists() else None

    def load(self, key: str) -> dict[str, bytes] | None:
        """The entry's files, verified; None (a miss) for a missing, foreign, corrupt or tampered entry."""
        entry = self._entry(key)
        if not (entry / "entry.json").is_file():
            return None
        why = self.usable() or (None if self.shared else _foreign(entry) or _foreign(entry / "entry.json"))
        if why is not None:
            log.warning("cache: not using entry %s: %s; building", key[:12], why)
            return None
        try:
            meta = json.loads((entry / "entry.json").read_text())
            hashes = meta["files"]
            if meta.get("key") != key or not isinstance(hashes, dict):
                raise ValueError("the entry names another key")
            if any(not _inside(name) for name in hashes):
                raise ValueError("a file name leaves the entry")
            files = {name: (entry / "files" / name).read_bytes() for name in hashes}
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            log.warning("cache: entry %s is unreadable (%s); building", key[:12], exc)
            return None
        bad = sorted(name for name, data in files.items() if hashlib.sha256(data).hexdigest() != hashes[name])
        if bad:
            log.warning("cache: entry %s is corrupt (%s changed since it was stored); building", key[:12],
                        ", ".join(bad))
            return None
        with contextlib.suppress(OSError):  # its last use, for `edgeconv cache prune` (best effort)
            os.utime(entry / "entry.json")
        return files

    def store(self, key: str, out_dir: Path) -> None:
        """Copy a committed output folder into the cache. Best effort: a cache that cannot be written
        costs the next build time, never this build's result."""
        if self._entry(key).exists() or self.usable() is not None:
            return
        try:
            files = {p.relative_to(out_dir).as_posix(): p.read_bytes() for p in sorted(out_dir.rglob("*"))
                     if p.is_file() and p.name != MARKER}
        except OSError as exc:
            log.warning("cache: cannot read %s (%s); the build is not cached", out_dir, exc.strerror)
            return
        self.store_files(key, files)

    def store_files(self, key: str, files: dict[str, bytes]) -> None:
        """Write an entry holding ``files`` (name: bytes), staged in a folder renamed into place whole."""
        entry = self._entry(key)
        if entry.exists() or self.usable() is not None:
            return
        staging: Path | None = None
        try:
            entry.parent.mkdir(parents=True, exist_ok=True)
            staging = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=entry.parent))
            (staging / "files").mkdir()
            hashes = {}
            for name, data in sorted(files.items()):
                if not _inside(name):
                    raise OSError(0, f"{name!r} is not a path inside the entry")
                (staging / "files" / name).parent.mkdir(parents=True, exist_ok=True)
                (staging / "files" / name).write_bytes(data)
                hashes[name] = hashlib.sha256(data).hexdigest()
            (staging / "entry.json").write_text(json.dumps({"key": key, "files": hashes}, indent=1))
            os.rename(staging, entry)
        except OSError as exc:
            log.warning("cache: cannot write %s (%s); the build is not cached", self.root, exc.strerror)
            if staging is not None:
                shutil.rmtree(staging, ignore_errors=True)


_FACTS = ("toolchain", "libraries", "edgeconv_sources")
INSTALLS = "installs"  # <cache>/installs/<fingerprint>.json: each installation's facts
MEMO_LIMIT = 1 << 16  # bytes read of one (a few hundred are written)


def _computed_facts(package: Path) -> dict[str, Any]:
    return {"toolchain": installed_toolchain(), "libraries": library_versions(),
            "edgeconv_sources": sources_sha256(package)}


def install_fingerprint() -> str:
    """What changes when anything is installed, upgraded or removed, or a file of edgeconv's own is edited,
    from stat calls alone (no file read): the interpreter; each folder on ``sys.path`` with its modification
    time (installing, upgrading or removing a distribution adds or removes its ``.dist-info`` folder there),
    but for the working folder that ``python -m``/``-c`` put first (a project folder, whose time every file a
    CI step writes there changes); and every file of the edgeconv package with its size, modification time
    and inode."""
    from .installed import installation_path

    digest = hashlib.sha256("\0".join((sys.executable, sys.prefix, sys.version, str(_PACKAGE_INSTALLED))).encode())
    for entry in installation_path():  # not the folder a command runs in: a project's, changed by every build
        with contextlib.suppress(OSError):
            st = os.stat(entry)
            digest.update(f"\0{entry}\0{st.st_mtime_ns}\0{st.st_ino}".encode())
    files = []
    folders = [str(_PACKAGE_INSTALLED)]
    while folders:
        with os.scandir(folders.pop()) as found:
            for item in found:
                if item.is_dir():
                    if item.name != "__pycache__":
                        folders.append(item.path)
                elif item.is_file():
                    st = item.stat()
                    files.append(f"{item.path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}")
    for line in sorted(files):
        digest.update(b"\0" + line.encode())
    return digest.hexdigest()


def install_facts(root: Path | None) -> dict[str, Any]:
    """The versions of the toolchain and of :data:`LIBRARIES`, and the sha256 of edgeconv's sources: what a
    cache key holds of the installation. Reading them costs more than the rest of a cached rebuild (an
    installed-metadata lookup per distribution, every source file read), and they change only when something
    is installed or edited: so they are worked out once per installation (:func:`install_fingerprint`) and
    kept in ``root/installs/<fingerprint>.json`` (written whole; used, as every cache file is, only from a
    folder the cache may use). ``root`` None: worked out (once per process)."""
    if root is None:
        return _computed_facts(_PACKAGE_INSTALLED)
    return dict(_kept_facts(root))


@functools.cache
def _kept_facts(root: Path) -> dict[str, Any]:
    """Once per process and cache folder (nothing is installed under a running edgeconv: what it imported
    is loaded already)."""
    from .errors import EdgeconvError
    from .inputs import read_bytes

    fingerprint = install_fingerprint()
    memo = root / INSTALLS / f"{fingerprint}.json"
    with contextlib.suppress(OSError, ValueError, EdgeconvError):  # a link, a FIFO, a huge file: not read
        if not memo.parent.is_symlink() and not memo.is_symlink():
            doc = json.loads(read_bytes(memo, MEMO_LIMIT))
            if _facts_ok(doc, fingerprint):
                with contextlib.suppress(OSError):
                    os.utime(memo)  # its last use, for `edgeconv cache prune`
                return {k: doc[k] for k in _FACTS}
    facts = _computed_facts(_PACKAGE_INSTALLED)
    temp = None
    try:  # best effort: a memo that cannot be written costs the next build a few milliseconds
        memo.parent.mkdir(parents=True, exist_ok=True)
        if memo.parent.is_symlink():
            raise OSError(0, f"{memo.parent} is a link")
        fd, temp = tempfile.mkstemp(prefix=".memo-", dir=memo.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump({"fingerprint": fingerprint, **facts}, f, sort_keys=True)
        os.replace(temp, memo)
    except OSError as exc:
        log.debug("cache: cannot keep this installation's facts in %s (%s)", memo.parent, exc.strerror)
        if temp is not None:
            with contextlib.suppress(OSError):
                os.unlink(temp)
    return facts


def _facts_ok(doc: object, fingerprint: str) -> bool:
    if not isinstance(doc, dict) or doc.get("fingerprint") != fingerprint:
        return False
    versions = [doc.get("toolchain"), doc.get("libraries")]
    return (all(isinstance(v, dict) and all(isinstance(x, str) for x in (*v, *v.values())) for v in versions)
            and isinstance(doc.get("edgeconv_sources"), str) and _KEY.fullmatch(doc["edgeconv_sources"]) is not None)


def sources_sha256(package: Path) -> str:
    """sha256 of edgeconv's own sources (``path_sha256`` of the package folder): computed once per process
    for the installed package (its files do not change under a running edgeconv), every time for another
    folder."""
    return _installed_sources() if package == _PACKAGE_INSTALLED else path_sha256(package)


@functools.cache
def _installed_sources() -> str:
    return path_sha256(_PACKAGE_INSTALLED)


def library_versions() -> dict[str, str]:
    """The installed version of each of :data:`LIBRARIES` (absent ones left out); read once per process."""
    return dict(_library_versions())


@functools.cache
def _library_versions() -> dict[str, str]:
    from . import installed

    return {dist: found for dist in LIBRARIES if (found := installed.version(dist)) is not None}


def _module_file(base: Path, name: str) -> Path | None:
    """A module the pipeline imports (``pkg.layers``), as the file or package folder next to the pipeline
    it is imported from; None when it is not there (then it comes from somewhere the key cannot see)."""
    stem = base.joinpath(*name.split("."))
    return next((p for p in (stem.with_name(stem.name + ".py"), stem) if p.exists()), None)


def _inside(name: object) -> bool:
    """A cached file's name is a relative path below the entry ("report.json", "explorer/x.json")."""
    if not isinstance(name, str) or not name or name.startswith("/") or "\\" in name:
        return False
    return all(part not in ("", ".", "..") for part in name.split("/"))


# -- what the cache holds, and pruning it ------------------------------------------------------------

_KEY = re.compile(r"[0-9a-f]{64}")
STAGING_AGE_S = 24 * 3600.0  # a staging folder this old is a writer that died (a store takes seconds)


@record
class Entry:
    key: str
    path: Path
    bytes: int
    last_used: float  # when it was stored or last served (entry.json's modification time)


def entries(root: Path) -> list[Entry]:
    """Every entry under ``root`` (``<key[:2]>/<key>/entry.json``), oldest use first; nothing else there
    (no link followed, no other name taken for an entry)."""
    found = []
    for shard in sorted(root.iterdir()) if root.is_dir() and not root.is_symlink() else []:
        if len(shard.name) != 2 or shard.is_symlink() or not shard.is_dir():
            continue
        for entry in sorted(shard.iterdir()):
            meta = entry / "entry.json"
            if not (_KEY.fullmatch(entry.name) and entry.name[:2] == shard.name) or entry.is_symlink():
                continue
            try:
                used = meta.lstat().st_mtime
                size = sum(f.lstat().st_size for f in entry.rglob("*") if f.is_file() and not f.is_symlink())
            except OSError:
                continue
            found.append(Entry(entry.name, entry, size, used))
    return sorted(found, key=lambda e: (e.last_used, e.key))


@record
class Pruned:
    removed: int
    removed_bytes: int
    kept: int
    kept_bytes: int
    staging: int  # folders of writers that died, removed


def prune(root: Path, older_than_s: float, now: float | None = None) -> Pruned:
    """Remove the entries not stored or served for ``older_than_s`` seconds (and the installations' facts
    not used as long, ``installs/``), and staging folders a dead writer left (older than a day). A cache
    folder another user owns or others can write is refused (``EDGECONV_CACHE_SHARED=1`` accepts it, as
    for reading)."""
    from .errors import EdgeconvError

    now = time.time() if now is None else now
    cache = BuildCache(root)
    why = cache.usable()
    if why is not None:
        raise EdgeconvError(f"cache {root}: not pruned: {why} (EDGECONV_CACHE_SHARED=1 trusts a shared folder)")
    removed = removed_bytes = kept = kept_bytes = 0
    for entry in entries(root):
        if now - entry.last_used > older_than_s:
            shutil.rmtree(entry.path, ignore_errors=True)
            removed, removed_bytes = removed + 1, removed_bytes + entry.bytes
        else:
            kept, kept_bytes = kept + 1, kept_bytes + entry.bytes
    installs = root / INSTALLS
    for memo in installs.glob("*.json") if installs.is_dir() and not installs.is_symlink() else []:
        with contextlib.suppress(OSError):  # an installation's facts not used for as long: worked out again
            if now - memo.lstat().st_mtime > older_than_s and not memo.is_symlink():
                memo.unlink()
    staging = 0
    for folder in root.glob("??/.*-*") if root.is_dir() else []:
        try:
            old = now - folder.lstat().st_mtime > STAGING_AGE_S
        except OSError:
            continue
        if old and folder.is_dir() and not folder.is_symlink():
            shutil.rmtree(folder, ignore_errors=True)
            staging += 1
    return Pruned(removed, removed_bytes, kept, kept_bytes, staging)


_AGE = re.compile(r"(\d{1,6})([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_age(text: str) -> float:
    """``30d``, ``12h``, ``90m``, ``45s``: seconds."""
    from .errors import EdgeconvError

    found = _AGE.fullmatch(text.strip())
    if found is None:
        raise EdgeconvError(f"--older-than: expected a number and a unit (30d, 12h, 90m, 45s), got {text!r}")
    return float(int(found[1]) * _UNIT_S[found[2]])

