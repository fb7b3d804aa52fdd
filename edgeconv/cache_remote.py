"""The build cache in object storage (``--cache-dir s3://bucket/prefix``, ``gs://...``: any fsspec URL),
shared by the jobs of a CI matrix the way Bazel and sccache teams share a remote cache.

Layout under the URL:

- ``data/<key>/<upload>.pack``: an entry's files end to end in the order of their names, uploaded first
  under a writer's own random name (one object: a hit is two GETs, not one per file);
- ``entries/<key>.json``: the manifest, written last and in one request, so a reader sees a whole entry or
  none: the key, the upload, and every file's sha256 and size (its place in the pack follows). An entry
  of at most :data:`INLINE_LIMIT` bytes travels inside its manifest instead (``INLINE_MAGIC``, the manifest
  as one line of JSON, a newline, then the pack): one object, one PUT to store it and one GET to serve it;
- ``used/<key>``: an empty object rewritten when the entry is served (its time is the last use, for
  ``edgeconv cache prune``), unless the entry was stored less than :data:`USE_GRANULARITY_S` before (as
  the server's answer dates it, where the client reads the dates: edgeconv's S3 client): prune counts
  every entry as used at least that long after it was stored, so a zoo's hits of the day write nothing.

Every rule of the local cache holds: a file is served only when its bytes have the sha256 and size the
manifest records (the pack is read up to one byte past its recorded size: a longer one is not read whole), and
the served report must name its .tflite (``pipeline._from_cache``). Anything else is a miss and a build.
Two writers of one key each upload to their own folder, then write the manifest; whichever manifest is
last names a complete upload. Served entries are copied to the local cache (a read-through copy: one
fetch per entry per runner).

The cache is best effort: a server that is down or a bucket these credentials cannot write never fails a
build. The probe (:meth:`RemoteCache.probe`, once per ``edgeconv build``) says so in one line, and the
builds then run uncached, or serve hits without storing (a read-only consumer, such as a fork's pull
request). Trust: whoever can write the bucket can plant an entry whose report says anything (as with a
shared cache folder); the target checks are redone from the served .tflite, not read from its report.
Give pull requests from forks read-only credentials, or none.

The remote calls run in an event loop of their own that ends with each operation (no thread outlives
it: the build forks its converter worker only while no other thread runs). On S3 they go through
edgeconv's own client (:mod:`edgeconv.cache_s3`: four object calls, no s3fs import) when the environment
names the credentials and the endpoint or region, as a CI job's does; otherwise, for other stores, and for
listing a bucket (stats, prune), through fsspec.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import functools
import hashlib
import inspect
import json
import os
import re
import threading
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from ._lazy import lazy_import
from ._log import get_logger
from ._record import record
from .cache import STAGING_AGE_S, BuildCache, _inside, default_dir, location
from .errors import EdgeconvError

if TYPE_CHECKING:
    import asyncio
else:  # a local cache (most builds) opens through here too
    asyncio = lazy_import("asyncio")

log = get_logger(__name__)
T = TypeVar("T")

FORMAT = 2  # 2: the files in one pack
INLINE_FORMAT = 3  # 3: the pack inside the manifest's object
INLINE_MAGIC = b"edgeconv-cache-entry\n"
INLINE_LIMIT = 1 << 20  # bytes of files an entry may carry inside its manifest
MANIFEST_LIMIT = 1 << 20  # bytes read of a manifest; a longer one is not an entry
ENTRY_LIMIT = 2 << 30  # bytes an entry may hold (the sum of its files' recorded sizes)
FILES_LIMIT = 10_000
USE_GRANULARITY_S = 86_400.0  # a hit of an entry younger than this records no use (prune counts it as used)
OPERATION_TIMEOUT_S = 300.0  # one load, store, probe, listing or prune, whole
_KEY = re.compile(r"[0-9a-f]{64}")
_UPLOAD = re.compile(r"[0-9a-f]{32}")
_SHA = re.compile(r"[0-9a-f]{64}")
# s3: fail fast on a server that is down (2 attempts, 5 s to connect), not botocore's 60 s x 5.
_S3 = {"config_kwargs": {"connect_timeout": 5, "read_timeout": 60,
                             "retries": {"max_attempts": 2, "mode": "standard"}}}
_OPTIONS: dict[str, dict[str, Any]] = {"s3": _S3, "s3a": _S3}


def open_cache(where: str | Path | None, access: str | None = None) -> BuildCache:
    """The build cache at ``where`` (see :func:`edgeconv.cache.location`): a local folder, or a remote one read
    through a local copy (``access`` as its probe found it, when known)."""
    found = location(where)
    if isinstance(found, Path):
        return BuildCache(found)
    local = default_dir()
    held = _REMOTES.get((found, local))
    if held is None or held.pid != os.getpid():
        held = _REMOTES[(found, local)] = RemoteCache(found, local, access)
    elif access is not None:
        held.access = access
    return held


_REMOTES: dict[tuple[str, Path], RemoteCache] = {}  # one per process: what it learnt (access, absent keys) lasts


class RemoteCache(BuildCache):
    """A remote cache (``url``) read through a local one (``local``). ``access``: ``read-write``,
    ``read-only`` or ``down``, as :meth:`probe` found it (probed at first use when not given)."""

    def __init__(self, url: str, local: Path, access: str | None = None) -> None:
        super().__init__(local)
        self.url = url.rstrip("/")
        self.pid = os.getpid()
        self.protocol, _, rest = self.url.partition("://")
        self.prefix = rest
        self.access = access
        self.note: str | None = None  # the probe's line when the cache is not read-write
        self.absent: set[str] = set()  # keys found missing or bad remotely in this process: not asked again
        self._ready: dict[str, threading.Event] = {}  # keys a fetching() thread is fetching: set when done

    # -- the operations -------------------------------------------------------------------------------

    def probe(self, say: bool = True) -> str:
        """Whether the cache can be read and written: ``read-write``; ``read-only`` (a write is refused);
        ``down`` (unreachable, no such bucket, no access). Otherwise than read-write, :attr:`note` says what
        that means for the builds (logged as a warning with ``say``)."""
        token = uuid.uuid4().hex

        async def work(fs: Any) -> str:
            probe = f"{self.prefix}/probe/{token}"
            try:
                await fs._pipe_file(probe, b"")
            except PermissionError:
                return "read-only"  # a read refused too shows at the first load (then: down)
            with contextlib.suppress(Exception):  # a store that lets us write but not delete is still usable
                await fs._rm_file(probe)
            return "read-write"

        try:
            self.access = self._run(work)
        except EdgeconvError:
            raise
        except Exception as exc:
            self.access = "down"
            self.note = (f"cache: {self.url} is unreachable ({_words(exc)}); building without it (only the local "
                         "copy serves)")
        else:
            if self.access == "read-only":
                self.note = (f"cache: {self.url} is read-only for these credentials: hits are served, builds are "
                             "not stored")
        if say and self.note is not None:
            log.warning("%s", self.note)
        return self.access

    def prefetch(self, keys: list[str]) -> int:
        """Fetch the entries of ``keys`` this runner holds no copy of into its local copy, up to 16 at a time
        (a zoo's hits cost one round of requests, not one per pipeline); how many were fetched."""
        wanted = self._wanted(keys)
        with self.fetching(wanted, log.warning):
            pass
        return sum((self._entry(k) / "entry.json").is_file() for k in wanted)

    def _wanted(self, keys: list[str]) -> list[str]:
        return [k for k in dict.fromkeys(keys)
                if k not in self.absent and not (self._entry(k) / "entry.json").is_file()]

    @contextlib.contextmanager
    def fetching(self, keys: list[str], say: Callable[..., None]) -> Iterator[None]:
        """:meth:`prefetch` in a thread of its own while the block serves the entries: :meth:`load` of one of
        ``keys`` waits for that entry only (the first is served while the others are still on their way).
        The thread is joined when the block ends (a build forks its worker only while no other thread runs);
        its warnings go to ``say`` (called from that thread), not to the logger the block's builds set."""
        wanted = self._wanted(keys)
        if not wanted or (self.access or self.probe()) == "down":
            yield
            return
        ready = {key: threading.Event() for key in wanted}
        limit = asyncio.Semaphore(16)

        async def one(fs: Any, key: str) -> None:
            try:
                async with limit:
                    files = await self._fetch(fs, key, say)
                if files is None:
                    self.absent.add(key)
                else:
                    BuildCache.store_files(self, key, files)
            except Exception as exc:  # this entry only: load() asks for it again, and says what happens then
                log.debug("cache: prefetching %s failed (%s)", key[:12], _words(exc))
            finally:
                ready[key].set()

        async def work(fs: Any) -> None:
            await asyncio.gather(*(one(fs, k) for k in wanted))

        used: list[Any] = []

        def run() -> None:
            try:
                used.append(_connection(self.protocol, self.url).fs)
                self._run(work)
            except Exception as exc:
                self.access = "down"
                say("cache: %s failed while reading %d entries (%s); building without it", self.url, len(wanted),
                    _words(exc))
            finally:
                for event in ready.values():
                    event.set()

        thread = threading.Thread(target=run, name="edgeconv-cache-fetch", daemon=True)
        self._ready = ready
        thread.start()
        try:
            yield
        except BaseException:  # Ctrl-C, SIGTERM, a bug: the requests still running end now (edgeconv's client)
            for fs in used:
                if hasattr(fs, "abort"):
                    fs.abort()
            raise
        finally:
            thread.join()
            self._ready = {}

    def load(self, key: str) -> dict[str, bytes] | None:
        waiting = self._ready.get(key)
        if waiting is not None:  # being fetched (:meth:`fetching`): this entry's turn, not the others'
            waiting.wait()
        files = super().load(key)
        if files is not None or key in self.absent or (self.access or self.probe()) == "down":
            return files
        start = time.perf_counter()
        try:
            fetched = self._run(lambda fs: self._fetch(fs, key))
        except Exception as exc:
            self.access = "down"
            log.warning("cache: %s failed while reading entry %s (%s); building without it", self.url, key[:12],
                        _words(exc))
            return None
        if fetched is None:
            self.absent.add(key)
            return None
        log.info("cache: entry %s fetched from %s (%d files, %d bytes, %.2f s)", key[:12], self.url,
                 len(fetched), sum(len(d) for d in fetched.values()), time.perf_counter() - start)
        super().store_files(key, fetched)
        return fetched

    def store(self, key: str, out_dir: Path) -> None:
        super().store(key, out_dir)
        if (self.access or self.probe()) != "read-write":
            return
        files = super().load(key)  # the local copy just written, verified
        if files is None:
            return
        try:
            self._run(lambda fs: self._publish(fs, key, files, replace=key in self.absent))
        except PermissionError as exc:
            self.access = "read-only"
            log.warning("cache: %s refused the entry (%s): hits are served, builds are not stored", self.url,
                        _words(exc))
        except Exception as exc:
            self.access = "down"
            log.warning("cache: %s failed while storing entry %s (%s); the build is not cached remotely", self.url,
                        key[:12], _words(exc))

    # -- one entry ------------------------------------------------------------------------------------

    async def _fetch(self, fs: Any, key: str, say: Callable[..., None] | None = None) -> dict[str, bytes] | None:
        say = say or log.warning
        try:  # an empty one too: refused below, a miss
            raw, age = await _read_dated(fs, self._manifest(key), len(INLINE_MAGIC) + MANIFEST_LIMIT + 1 + INLINE_LIMIT)
        except FileNotFoundError:
            return None
        try:
            upload, recorded, inline = _entry_object(raw, key)
        except ValueError as exc:
            say("cache: remote entry %s is unreadable (%s); building", key[:12], exc)
            return None
        names = sorted(recorded)
        total = sum(recorded[name][1] for name in names)
        # The use is recorded (for prune) while the pack is read: best effort, and harmless for a bad entry.
        # Not for an entry stored within USE_GRANULARITY_S: prune counts it as used until then anyway.
        fresh = age is not None and 0 <= age < USE_GRANULARITY_S
        used = self._record_use(fs, key) if self.access == "read-write" and not fresh else asyncio.sleep(0)
        if upload is None:
            await used
            pack: bytes | None = inline
        else:
            read, _ = await asyncio.gather(_read(fs, self._pack(key, upload), total), used, return_exceptions=True)
            if isinstance(read, BaseException) and not isinstance(read, FileNotFoundError):
                raise read
            pack = read if isinstance(read, bytes) else None
        if pack is None or len(pack) != total:
            say("cache: remote entry %s is corrupt (its pack is %s, not %d bytes as recorded); building",
                key[:12], "missing" if pack is None else f"{len(pack)} bytes", total)
            return None
        got, start = [], 0
        for name in names:
            got.append(pack[start:start + recorded[name][1]])
            start += recorded[name][1]
        bad = [name for name, data in zip(names, got, strict=True)
               if hashlib.sha256(data).hexdigest() != recorded[name][0]]
        if bad:
            say("cache: remote entry %s is corrupt (%s not as recorded); building", key[:12], ", ".join(bad))
            return None
        return dict(zip(names, got, strict=True))

    async def _record_use(self, fs: Any, key: str) -> None:
        try:
            await fs._pipe_file(f"{self.prefix}/used/{key}", b"")
        except Exception as exc:  # its last use, for prune: best effort
            log.debug("cache: cannot record the use of %s (%s)", key[:12], _words(exc))

    async def _publish(self, fs: Any, key: str, files: dict[str, bytes], replace: bool = False) -> None:
        """Store an entry, unless another job stored it first; ``replace``: this process found the key missing
        or bad remotely (a corrupt entry is replaced by the build it made, not kept for every later runner)."""
        if not replace and await fs._exists(self._manifest(key)):
            return  # another job stored it first
        pack = b"".join(files[name] for name in sorted(files))
        listed = {name: {"sha256": hashlib.sha256(data).hexdigest(), "bytes": len(data)}
                  for name, data in sorted(files.items())}
        if len(pack) <= INLINE_LIMIT:  # one object: the manifest, its pack after it
            header = json.dumps({"format": INLINE_FORMAT, "key": key, "files": listed}, separators=(",", ":"))
            await fs._pipe_file(self._manifest(key), INLINE_MAGIC + header.encode() + b"\n" + pack)
        else:
            upload = uuid.uuid4().hex
            await fs._pipe_file(self._pack(key, upload), pack)
            manifest = {"format": FORMAT, "key": key, "upload": upload, "files": listed}
            await fs._pipe_file(self._manifest(key), json.dumps(manifest, indent=1).encode())
        log.info("cache: entry %s stored in %s", key[:12], self.url)

    def _pack(self, key: str, upload: str) -> str:
        return f"{self.prefix}/data/{key}/{upload}.pack"

    def _manifest(self, key: str) -> str:
        return f"{self.prefix}/entries/{key}.json"

    # -- running them -----------------------------------------------------------------------------------

    def _run(self, work: Callable[[Any], Awaitable[T]], *, listing: bool = False) -> T:
        """``work(fs)`` on this process's connection to the store (an event loop and a client kept between
        operations, run only during one, with no thread left after it); ``listing``: work that lists or
        removes folders (fsspec's client)."""
        connection = _connection(self.protocol, self.url, listing=listing)
        return connection.run(work)


class _Connection:
    """An event loop and a filesystem client for one store, kept for the process: a client costs 20-40 ms to
    make, more than a hit's requests. The loop runs only inside :meth:`run`, in the calling thread; the
    threads it may start (name resolution) are joined before :meth:`run` returns, so a build can still fork
    its converter worker. A forked child makes its own (the parent's sockets are not its to use)."""

    def __init__(self, cls: Any, options: dict[str, Any], client: Any = None) -> None:
        self.pid = os.getpid()
        self.loop = asyncio.new_event_loop()
        if client is not None:  # edgeconv's own S3 client (cache_s3)
            self.fs = client
        elif cls.async_impl:
            self.fs = cls(asynchronous=True, skip_instance_cache=True, loop=self.loop, **options)
        else:
            from fsspec.implementations.asyn_wrapper import AsyncFileSystemWrapper

            self.fs = AsyncFileSystemWrapper(cls(skip_instance_cache=True, **options))
        self.session: Any = None

    def run(self, work: Callable[[Any], Awaitable[T]]) -> T:
        from concurrent.futures import ThreadPoolExecutor

        executor = ThreadPoolExecutor(max_workers=4)
        self.loop.set_default_executor(executor)
        try:
            if self.session is None and hasattr(self.fs, "set_session"):
                self.session = self.loop.run_until_complete(self.fs.set_session())
            return self.loop.run_until_complete(asyncio.wait_for(work(self.fs), OPERATION_TIMEOUT_S))
        finally:
            stop = getattr(self.fs, "abort", None)  # edgeconv's S3 client: its requests still running end now
            if stop is not None:
                stop()
            executor.shutdown(wait=True)
            if stop is not None:
                self.fs.resume()

    def close(self) -> None:
        if self.pid != os.getpid() or self.loop.is_closed():
            return
        with contextlib.suppress(Exception):
            if hasattr(self.fs, "close") and not hasattr(self.fs, "set_session"):
                self.fs.close()  # edgeconv's S3 client: its idle connections
        closing = getattr(self.session, "close", None)
        with contextlib.suppress(Exception):
            if closing is not None:
                closed = closing()
                if inspect.isawaitable(closed):
                    self.loop.run_until_complete(closed)
        self.loop.close()


_CONNECTIONS: dict[tuple[str, tuple[tuple[str, str], ...], int, bool], _Connection] = {}
_INHERITED: list[_Connection] = []  # a forked child's copies of its parent's: kept, never used or closed


def _connection(protocol: str, url: str, *, listing: bool = False) -> _Connection:
    """This process's (and thread's: a loop runs in one thread at a time) connection for ``protocol`` and the
    ``AWS_*`` variables as they are now. An S3 URL whose environment says everything goes through edgeconv's
    own client (:mod:`edgeconv.cache_s3`) unless ``listing`` (stats and prune list through s3fs)."""
    from . import cache_s3

    aws = tuple(sorted((k, v) for k, v in os.environ.items()
                       if k.startswith("AWS_") or k == cache_s3.CLIENT_VARIABLE))
    own = None if listing or protocol not in ("s3", "s3a") else cache_s3.settings(os.environ)
    ident = (protocol, aws, threading.get_ident(), own is not None)
    held = _CONNECTIONS.get(ident)
    if held is not None and held.pid == os.getpid():
        return held
    if held is not None:
        _INHERITED.append(held)
    if own is not None:
        if not _CONNECTIONS:
            atexit.register(_close_connections)
        made = _CONNECTIONS[ident] = _Connection(None, {}, cache_s3.S3Client(own))
        return made
    import fsspec

    try:
        cls = fsspec.get_filesystem_class(protocol)
    except (ImportError, ValueError) as exc:
        raise EdgeconvError(f"cache {url}: {exc} (pip install 'edgeconv[remote-cache]' for s3:// and gs://)") from exc
    options = dict(_OPTIONS.get(protocol, {}))
    if protocol in ("s3", "s3a"):
        options["session"] = _aio_session(aws)
    if not _CONNECTIONS:
        atexit.register(_close_connections)
    made = _CONNECTIONS[ident] = _Connection(cls, options)
    return made


def _close_connections() -> None:
    for connection in _CONNECTIONS.values():
        connection.close()


async def _read_dated(fs: Any, path: str, size: int) -> tuple[bytes, float | None]:
    """:func:`_read`, and the object's age in seconds as the server dates it (None: the client does not
    say, or the object is empty)."""
    dated = getattr(fs, "_cat_file_dated", None)
    if dated is None or size == 0:
        return await _read(fs, path, size), None
    try:
        got: tuple[bytes, float | None] = await dated(path, start=0, end=size + 1)
        return got
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
        return await _read(fs, path, size), None


async def _read(fs: Any, path: str, size: int) -> bytes:
    """An object, read up to one byte past its recorded ``size``: one longer than its record shows as too
    long without being read whole (FileNotFoundError when it is missing)."""
    if size == 0:  # a range of an empty object is refused (HTTP 416): ask its size
        info = await fs._info(path)
        return b"" if int(info.get("size") or 0) == 0 else b"?"
    try:
        return bytes(await fs._cat_file(path, start=0, end=size + 1))
    except OSError as exc:
        if exc.errno != errno.EINVAL:  # s3fs's answer to HTTP 416: the object is empty
            raise
        info = await fs._info(path)
        if int(info.get("size") or 0) != 0:
            raise
        return b""


@functools.cache
def _aio_session(aws_env: tuple[tuple[str, str], ...]) -> Any:
    """One botocore session per process (and set of ``AWS_*`` variables: it keeps the credentials it found)
    for every operation: it reads S3's API description (a 0.25 s JSON parse) once, not per operation (each
    makes its own client, in its own event loop)."""
    from aiobotocore.session import AioSession

    return AioSession()


def _entry_object(raw: bytes, key: str) -> tuple[str | None, dict[str, tuple[str, int]], bytes | None]:
    """A manifest object's upload folder (None: the pack is inline), files (name: (sha256, size)) and inline
    pack (unchecked: the caller checks its size and digests); ValueError when it is not one."""
    if not raw.startswith(INLINE_MAGIC):
        return (*_manifest(raw, key), None)
    header, newline, pack = raw[len(INLINE_MAGIC):].partition(b"\n")
    if not newline:
        raise ValueError("its manifest has no end" if len(header) <= MANIFEST_LIMIT
                         else f"its manifest is over {MANIFEST_LIMIT} bytes")
    _, recorded = _manifest(header, key, INLINE_FORMAT)
    if sum(size for _, size in recorded.values()) > INLINE_LIMIT:
        raise ValueError(f"its inline files add up to over {INLINE_LIMIT} bytes")
    return None, recorded, pack


def _manifest(raw: bytes, key: str, form: int = FORMAT) -> tuple[str, dict[str, tuple[str, int]]]:
    """A manifest's upload folder ("" for an inline one, ``form`` 3) and files (name: (sha256, size));
    ValueError when it is not one."""
    if len(raw) > MANIFEST_LIMIT:
        raise ValueError(f"its manifest is over {MANIFEST_LIMIT} bytes")
    try:
        meta = json.loads(raw)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"its manifest is not JSON: {exc}") from exc
    if not isinstance(meta, dict) or meta.get("format") != form or meta.get("key") != key:
        raise ValueError("its manifest names another key or format")
    upload, files = meta.get("upload", ""), meta.get("files")
    if (not isinstance(upload, str) or not (_UPLOAD.fullmatch(upload) if form == FORMAT else upload == "")
            or not isinstance(files, dict)):
        raise ValueError("its manifest has no upload folder or file list")
    if not files or len(files) > FILES_LIMIT:
        raise ValueError(f"its manifest lists {len(files)} files")
    recorded = {}
    for name, listed in files.items():
        if not _inside(name):
            raise ValueError(f"a file name leaves the entry: {name!r}")
        sha, size = (listed.get("sha256"), listed.get("bytes")) if isinstance(listed, dict) else (None, None)
        if not isinstance(sha, str) or not _SHA.fullmatch(sha) or type(size) is not int or size < 0:
            raise ValueError(f"{name!r} has no sha256 and size")
        recorded[name] = (sha, size)
    if sum(size for _, size in recorded.values()) > ENTRY_LIMIT:
        raise ValueError(f"its files add up to over {ENTRY_LIMIT} bytes")
    return upload, recorded


def _words(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


# -- what the remote cache holds, and pruning it -------------------------------------------------------

@record
class RemoteEntry:
    key: str
    upload: str | None  # None: the manifest is unreadable; "": the files are inside it
    bytes: int
    last_used: float  # the manifest's or the use marker's time, whichever is newer
    stored: float = 0.0  # the manifest's time

    def idle_since(self) -> float:
        """Since when the entry has certainly not been served: its last recorded use, or, for one stored
        within USE_GRANULARITY_S of a hit (which records none), that long after it was stored."""
        return max(self.last_used, self.stored + USE_GRANULARITY_S)


@record
class Listing:
    entries: list[RemoteEntry]  # oldest use first
    orphans: dict[tuple[str, str], tuple[int, float]]  # (key, upload) no manifest names: (bytes, newest file)


def _stamp(info: dict[str, Any]) -> float:
    found = info.get("LastModified") or info.get("mtime") or info.get("updated") or info.get("created")
    if found is not None and hasattr(found, "timestamp"):
        return float(found.timestamp())
    if isinstance(found, (int, float)):
        return float(found)
    return time.time()  # unknown: never pruned as old


async def _list(cache: RemoteCache, fs: Any) -> Listing:
    async def find(sub: str) -> dict[str, dict[str, Any]]:
        try:
            found = await fs._find(f"{cache.prefix}/{sub}", detail=True)
        except FileNotFoundError:
            return {}
        return dict(found)

    manifests, used, data = await find("entries"), await find("used"), await find("data")
    keys = {Path(p).name.removesuffix(".json"): info for p, info in manifests.items()
            if _KEY.fullmatch(Path(p).name.removesuffix(".json")) and p.endswith(".json")}
    ordered = sorted(keys)
    # Each manifest up to the end of its header (an inline entry's files are not read to list it).
    head = len(INLINE_MAGIC) + MANIFEST_LIMIT + 1
    raws = (await fs._cat_ranges([cache._manifest(k) for k in ordered], [0] * len(ordered), [head] * len(ordered),
                                 on_error="return") if ordered else [])
    uploads: dict[str, str | None] = {}
    inline: dict[str, int] = {}
    for key, raw in zip(ordered, raws, strict=True):
        uploads[key] = None  # unreadable (or missing) until shown otherwise
        if not isinstance(raw, bytes):
            continue
        try:
            upload, recorded, _ = _entry_object(raw, key)
        except ValueError:
            continue
        uploads[key] = "" if upload is None else upload
        if upload is None:
            inline[key] = sum(size for _, size in recorded.values())
    sizes: dict[tuple[str, str], tuple[int, float]] = {}
    for path, info in data.items():
        parts = path[len(cache.prefix) + 1:].split("/")
        if len(parts) == 3 and parts[0] == "data" and parts[2].endswith(".pack"):
            upload = parts[2].removesuffix(".pack")
            size, newest = sizes.get((parts[1], upload), (0, 0.0))
            sizes[(parts[1], upload)] = (size + int(info.get("size") or 0), max(newest, _stamp(info)))
    marks = {Path(p).name: _stamp(info) for p, info in used.items()}
    held = [RemoteEntry(k, uploads[k], inline[k] if k in inline else sizes.get((k, uploads[k] or ""), (0, 0.0))[0],
                        max(_stamp(keys[k]), marks.get(k, 0.0)), _stamp(keys[k])) for k in keys]
    orphans = {ku: v for ku, v in sizes.items() if uploads.get(ku[0]) != ku[1]}
    return Listing(sorted(held, key=lambda e: (e.last_used, e.key)), orphans)


def remote_entries(url: str) -> Listing:
    """Every entry of the remote cache at ``url``, and the uploads no manifest names."""
    cache = RemoteCache(url, Path("."))
    try:
        return cache._run(lambda fs: _list(cache, fs), listing=True)
    except EdgeconvError:
        raise
    except Exception as exc:
        raise EdgeconvError(f"cache {url}: cannot list it ({_words(exc)})") from exc


@record
class RemotePruned:
    removed: int
    removed_bytes: int
    kept: int
    kept_bytes: int
    staging: int  # uploads no manifest names (writers that died or lost a race), older than a day


def remote_prune(url: str, older_than_s: float, now: float | None = None) -> RemotePruned:
    """Remove the entries not stored or served for ``older_than_s`` seconds (the manifest first: a reader
    then misses, never sees a partial entry), and uploads no manifest names older than a day. An entry is
    kept USE_GRANULARITY_S longer than its store when no use was recorded (:meth:`RemoteEntry.idle_since`)."""
    now = time.time() if now is None else now
    cache = RemoteCache(url, Path("."))

    async def work(fs: Any) -> RemotePruned:
        listing = await _list(cache, fs)
        old = [e for e in listing.entries if now - e.idle_since() > older_than_s]
        kept = [e for e in listing.entries if now - e.idle_since() <= older_than_s]
        stale = [ku for ku, (_, newest) in listing.orphans.items() if now - newest > STAGING_AGE_S]
        manifests = [cache._manifest(e.key) for e in old]
        if manifests:
            await fs._rm(manifests)
        marks = [f"{cache.prefix}/used/{e.key}" for e in old]
        for path in [*marks, *(f"{cache.prefix}/data/{e.key}" for e in old),
                     *(cache._pack(k, u) for k, u in stale)]:
            try:
                await fs._rm(path, recursive=True)
            except FileNotFoundError:
                continue
        return RemotePruned(len(old), sum(e.bytes for e in old), len(kept), sum(e.bytes for e in kept), len(stale))

    try:
        return cache._run(work, listing=True)
    except EdgeconvError:
        raise
    except Exception as exc:
        raise EdgeconvError(f"cache {url}: not pruned ({_words(exc)})") from exc
