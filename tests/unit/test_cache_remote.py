"""The remote build cache (issue 35) against a real S3 server (moto's, started on 127.0.0.1 by the
``s3_server`` fixture, with IAM enforced): cold and warm, the read-through copy, tampered, truncated and
over-long objects, hostile manifests, a writer killed mid-upload, writers racing on one key, a read-only
consumer, a server that is down, and `edgeconv cache stats|prune` on a bucket. No TensorFlow."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from edgeconv import cache_remote
from edgeconv.cache import is_url, location
from edgeconv.cache_remote import (
    ENTRY_LIMIT,
    INLINE_LIMIT,
    INLINE_MAGIC,
    MANIFEST_LIMIT,
    RemoteCache,
    _entry_object,
    _manifest,
    open_cache,
    remote_entries,
    remote_prune,
)
from edgeconv.cli import main

from ..conftest import REPO, S3Server, tree

pytestmark = pytest.mark.usefixtures("no_thread_left")


KEY = hashlib.sha256(b"a build").hexdigest()
FILES = {"m.tflite": b"TFL3" + bytes(range(256)) * 3, "report.json": b'{"verdict": "pass"}',
         "explorer/overlay.json": b"{}"}
DAY = 86400.0


@pytest.fixture(params=["edgeconv", "s3fs"])
def bucket(s3_server: S3Server, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh bucket, and the writer's credentials in the environment; its URL. Each test runs with both S3
    clients: edgeconv's own (the environment names the credentials and the endpoint) and s3fs."""
    name = s3_server.bucket(f"zoo-{uuid.uuid4().hex[:12]}")
    for var, value in s3_server.env("writer").items():
        monkeypatch.setenv(var, value)
    monkeypatch.setenv("EDGECONV_S3_CLIENT", "s3fs" if request.param == "s3fs" else "auto")
    yield f"s3://{name}/cache"


@pytest.fixture(params=["inline", "pack"])
def layout(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """How entries are stored: inside their manifest (small ones, the default) or in a pack of their own
    (any over INLINE_LIMIT; forced here by a limit below zero)."""
    if request.param == "pack":
        monkeypatch.setattr(cache_remote, "INLINE_LIMIT", -1)
    return str(request.param)


def _s3(s3_server: S3Server) -> Any:
    import boto3

    env = s3_server.env("writer")
    return boto3.client("s3", endpoint_url=env["AWS_ENDPOINT_URL"], aws_access_key_id=env["AWS_ACCESS_KEY_ID"],
                        aws_secret_access_key=env["AWS_SECRET_ACCESS_KEY"], region_name="us-east-1")


def _objects(s3_server: S3Server, url: str) -> dict[str, bytes]:
    bucket, _, prefix = url.removeprefix("s3://").partition("/")
    client = _s3(s3_server)
    listed = client.list_objects_v2(Bucket=bucket, Prefix=prefix).get("Contents", [])
    return {o["Key"]: client.get_object(Bucket=bucket, Key=o["Key"])["Body"].read() for o in listed}


def _put(s3_server: S3Server, url: str, key: str, data: bytes) -> None:
    bucket, _, _ = url.removeprefix("s3://").partition("/")
    _s3(s3_server).put_object(Bucket=bucket, Key=key, Body=data)


def _stored(url: str, tmp_path: Path, files: dict[str, bytes] = FILES, key: str = KEY) -> RemoteCache:
    out = tmp_path / f"out-{uuid.uuid4().hex[:6]}"
    for name, data in files.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    cache = RemoteCache(url, tmp_path / f"writer-{uuid.uuid4().hex[:6]}")
    cache.store(key, out)
    return cache


def _pack_key(s3_server: S3Server, url: str, key: str = KEY) -> str:
    """The object key of the stored entry's pack (its files end to end, in the order of their names)."""
    prefix = url.removeprefix("s3://").partition("/")[2]
    (found,) = [k for k in _objects(s3_server, url) if k.startswith(f"{prefix}/data/{key}/") and k.endswith(".pack")]
    return found


def _change_pack(s3_server: S3Server, url: str, layout: str, change: Any, key: str = KEY) -> None:
    """Rewrite a stored entry's pack as ``change(pack)`` (None: remove it), where its layout keeps it."""
    prefix = url.removeprefix("s3://").partition("/")[2]
    if layout == "pack":
        where = _pack_key(s3_server, url, key)
        if change is None:
            _s3(s3_server).delete_object(Bucket=url.split("/")[2], Key=where)
        else:
            _put(s3_server, url, where, change(_objects(s3_server, url)[where]))
        return
    where = f"{prefix}/entries/{key}.json"
    raw = _objects(s3_server, url)[where]
    assert raw.startswith(INLINE_MAGIC)
    header, _, pack = raw[len(INLINE_MAGIC):].partition(b"\n")
    _put(s3_server, url, where, INLINE_MAGIC + header + b"\n" + (b"" if change is None else change(pack)))


ORDER = sorted(FILES)  # explorer/overlay.json (2 bytes), m.tflite (772), report.json (19)
PACK = b"".join(FILES[name] for name in ORDER)


def _flip(at: int) -> Any:
    return lambda pack: pack[:at] + bytes([pack[at] ^ 1]) + pack[at + 1:]


@pytest.mark.parametrize(("change", "said"), [
    (_flip(0), "explorer/overlay.json not as recorded"),
    (_flip(2 + 400), "m.tflite not as recorded"),
    (_flip(len(PACK) - 1), "report.json not as recorded"),
    (lambda pack: pack[: len(pack) // 2], f"its pack is {len(PACK) // 2} bytes, not {len(PACK)} bytes as recorded"),
    # A pack object is read one byte past its record; an inline one up to the manifest's limit.
    (lambda pack: pack + b"more", {"pack": f"its pack is {len(PACK) + 1} bytes, not {len(PACK)} bytes as recorded",
                                   "inline": f"its pack is {len(PACK) + 4} bytes, not {len(PACK)} bytes as recorded"}),
    (lambda pack: b"", f"its pack is 0 bytes, not {len(PACK)} bytes as recorded"),
    (None, {"pack": f"its pack is missing, not {len(PACK)} bytes as recorded",
            "inline": f"its pack is 0 bytes, not {len(PACK)} bytes as recorded"}),
])
def test_a_remote_pack_not_as_recorded_is_a_miss_and_nothing_is_copied(
        s3_server: S3Server, bucket: str, layout: str, tmp_path: Path, caplog: pytest.LogCaptureFixture,
        change: Any, said: str | dict[str, str]) -> None:
    _stored(bucket, tmp_path)
    prefix = bucket.removeprefix("s3://").partition("/")[2]
    held = _objects(s3_server, bucket)
    if layout == "pack":
        assert held[_pack_key(s3_server, bucket)] == PACK
    else:  # one object: the manifest, the pack after it
        assert list(held) == [f"{prefix}/entries/{KEY}.json"] and held[f"{prefix}/entries/{KEY}.json"].endswith(PACK)
    _change_pack(s3_server, bucket, layout, change)
    reader = RemoteCache(bucket, tmp_path / "fresh")
    assert reader.load(KEY) is None
    said = said[layout] if isinstance(said, dict) else said
    assert f"cache: remote entry {KEY[:12]} is corrupt ({said}); building" in caplog.messages
    assert not (tmp_path / "fresh").exists() or not any((tmp_path / "fresh").rglob("entry.json"))


def _manifest_bytes(**change: Any) -> bytes:
    meta: dict[str, Any] = {"format": 2, "key": KEY, "upload": "0" * 32,
                            "files": {"m.tflite": {"sha256": "a" * 64, "bytes": 3}}}
    meta.update(change)
    return json.dumps(meta).encode()


@pytest.mark.parametrize(("raw", "message"), [
    (b"\xff\xfe", "its manifest is not JSON"),
    (b"[]", "its manifest names another key or format"),
    (_manifest_bytes(key="b" * 64), "its manifest names another key or format"),
    (_manifest_bytes(format=1), "its manifest names another key or format"),
    (_manifest_bytes(upload="../../x"), "its manifest has no upload folder or file list"),
    (_manifest_bytes(files={}), "its manifest lists 0 files"),
    (_manifest_bytes(files={"../../etc/passwd": {"sha256": "a" * 64, "bytes": 1}}),
     "a file name leaves the entry: '../../etc/passwd'"),
    (_manifest_bytes(files={"/abs": {"sha256": "a" * 64, "bytes": 1}}), "a file name leaves the entry: '/abs'"),
    (_manifest_bytes(files={"m": {"sha256": "A" * 64, "bytes": 1}}), "'m' has no sha256 and size"),
    (_manifest_bytes(files={"m": {"sha256": "a" * 64, "bytes": -1}}), "'m' has no sha256 and size"),
    (_manifest_bytes(files={"m": {"sha256": "a" * 64, "bytes": 1.0}}), "'m' has no sha256 and size"),
    (_manifest_bytes(files={"m": {"sha256": "a" * 64, "bytes": True}}), "'m' has no sha256 and size"),
    (_manifest_bytes(files={"m": "a" * 64}), "'m' has no sha256 and size"),
])
def test_a_hostile_manifest_is_refused_with_its_reason(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError) as found:
        _manifest(raw, KEY)
    assert str(found.value).startswith(message)


def _inline(header: bytes, pack: bytes = b"abc") -> bytes:
    return INLINE_MAGIC + header + b"\n" + pack


def _inline_header(**change: Any) -> bytes:
    meta: dict[str, Any] = {"format": 3, "key": KEY, "files": {"m.tflite": {"sha256": "a" * 64, "bytes": 3}}}
    meta.update(change)
    return json.dumps(meta, separators=(",", ":")).encode()


@pytest.mark.parametrize(("raw", "message"), [
    (INLINE_MAGIC + _inline_header(), "its manifest has no end"),
    (INLINE_MAGIC + b" " * (MANIFEST_LIMIT + 1), f"its manifest is over {MANIFEST_LIMIT} bytes"),
    (_inline(_inline_header(format=2)), "its manifest names another key or format"),
    (_inline(_manifest_bytes()), "its manifest names another key or format"),  # a pack-layout manifest inline
    (_inline(_inline_header(key="b" * 64)), "its manifest names another key or format"),
    (_inline(_inline_header(upload="0" * 32)), "its manifest has no upload folder or file list"),
    (_inline(_inline_header(files={"../x": {"sha256": "a" * 64, "bytes": 3}})), "a file name leaves the entry: '../x'"),
    (_inline(_inline_header(files={"m": {"sha256": "a" * 64, "bytes": INLINE_LIMIT + 1}})),
     f"its inline files add up to over {INLINE_LIMIT} bytes"),
    (b"edgeconv-cache-entry" + _inline_header(), "its manifest is not JSON"),  # no newline after the magic
])
def test_a_hostile_inline_manifest_is_refused_with_its_reason(raw: bytes, message: str) -> None:
    with pytest.raises(ValueError) as found:
        _entry_object(raw, KEY)
    assert str(found.value).startswith(message)


def test_an_inline_manifest_gives_its_files_and_pack_unchecked() -> None:
    assert _entry_object(_inline(_inline_header(), b"abcdef"), KEY) == (None, {"m.tflite": ("a" * 64, 3)}, b"abcdef")


@pytest.mark.parametrize(("size", "inline"), [(INLINE_LIMIT, True), (INLINE_LIMIT + 1, False)])
def test_an_entry_up_to_the_inline_limit_is_one_object(s3_server: S3Server, bucket: str, tmp_path: Path, size: int,
                                                       inline: bool) -> None:
    files = {"a.bin": b"a" * (size - 100), "m.tflite": bytes(range(100))}
    _stored(bucket, tmp_path, files)
    prefix = bucket.removeprefix("s3://").partition("/")[2]
    held = _objects(s3_server, bucket)
    assert sorted(k.split("/")[1] for k in held) == (["entries"] if inline else ["data", "entries"])
    assert held[f"{prefix}/entries/{KEY}.json"].startswith(INLINE_MAGIC) == inline
    assert RemoteCache(bucket, tmp_path / "fresh").load(KEY) == files
    assert [e.bytes for e in remote_entries(bucket).entries] == [size]


@pytest.mark.parametrize(("sizes", "ok"), [([ENTRY_LIMIT - 1, 1], True), ([ENTRY_LIMIT, 1], False)])
def test_an_entry_may_hold_up_to_its_limit(sizes: list[int], ok: bool) -> None:
    raw = _manifest_bytes(files={f"f{i}": {"sha256": "a" * 64, "bytes": n} for i, n in enumerate(sizes)})
    if ok:
        assert _manifest(raw, KEY)[1]["f0"] == ("a" * 64, sizes[0])
    else:
        with pytest.raises(ValueError, match=f"its files add up to over {ENTRY_LIMIT} bytes"):
            _manifest(raw, KEY)


@pytest.mark.parametrize(("pad", "ok"), [(0, True), (1, False)])
def test_a_manifest_may_be_up_to_its_limit(pad: int, ok: bool) -> None:
    base = _manifest_bytes()
    raw = base[:-1] + b" " * (MANIFEST_LIMIT - len(base) + pad) + b"}"
    assert len(raw) == MANIFEST_LIMIT + pad
    if ok:
        assert _manifest(raw, KEY)[0] == "0" * 32
    else:
        with pytest.raises(ValueError, match="its manifest is over 1048576 bytes"):
            _manifest(raw, KEY)


@pytest.mark.parametrize(("raw", "why"), [
    (_manifest_bytes(files={"../../escape": {"sha256": "a" * 64, "bytes": 1}}),
     "a file name leaves the entry: '../../escape'"),
    (b"", "its manifest is not JSON: Expecting value: line 1 column 1 (char 0)"),
    (b" " * (MANIFEST_LIMIT + 10), f"its manifest is over {MANIFEST_LIMIT} bytes"),
])
def test_a_hostile_remote_manifest_is_a_miss_with_a_warning(
        s3_server: S3Server, bucket: str, tmp_path: Path, caplog: pytest.LogCaptureFixture, raw: bytes,
        why: str) -> None:
    prefix = bucket.removeprefix("s3://").partition("/")[2]
    _put(s3_server, bucket, f"{prefix}/entries/{KEY}.json", raw)
    reader = RemoteCache(bucket, tmp_path / "fresh")
    assert reader.load(KEY) is None
    assert caplog.messages == [f"cache: remote entry {KEY[:12]} is unreadable ({why}); building"]
    assert reader.access == "read-write"  # a bad entry is a miss, not a cache that is down
    assert not (tmp_path / "escape").exists() and not (tmp_path / "fresh").exists()


_KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import s3fs
from edgeconv import cache_remote
from edgeconv.cache_remote import RemoteCache
from edgeconv.cache_s3 import S3Client

cache_remote.INLINE_LIMIT = int(sys.argv[5])

def killed_before_the_manifest(real):
    async def pipe_file(self, path, data, **kwargs):
        if "/entries/" in path:
            os.kill(os.getpid(), signal.SIGKILL)
        return await real(self, path, data, **kwargs)
    return pipe_file
for client in (s3fs.S3FileSystem, S3Client):
    client._pipe_file = killed_before_the_manifest(client._pipe_file)
RemoteCache(sys.argv[1], Path(sys.argv[2])).store(sys.argv[3], Path(sys.argv[4]))
"""


def test_a_writer_killed_mid_upload_leaves_no_entry_and_prune_removes_its_upload(
        s3_server: S3Server, bucket: str, layout: str, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    for name, data in FILES.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    killed = subprocess.run([sys.executable, "-P", "-c", _KILLED_WRITER, bucket, str(tmp_path / "w"), KEY, str(out),
                             str(cache_remote.INLINE_LIMIT)], capture_output=True, text=True, cwd=REPO)
    assert killed.returncode == -9, killed.stderr
    prefix = bucket.removeprefix("s3://").partition("/")[2]
    held = _objects(s3_server, bucket)
    # A pack: the whole pack, and no manifest. Inline: nothing (the manifest is the entry's one object).
    assert sum(k.startswith(f"{prefix}/data/") for k in held) == (layout == "pack")
    assert not any(k.startswith(f"{prefix}/entries/") for k in held)
    assert RemoteCache(bucket, tmp_path / "fresh").load(KEY) is None
    listing = remote_entries(bucket)
    assert listing.entries == [] and len(listing.orphans) == (layout == "pack")
    # A writer after it stores the entry whole; the dead writer's upload goes when it is a day old.
    _stored(bucket, tmp_path)
    assert RemoteCache(bucket, tmp_path / "fresh2").load(KEY) == FILES
    assert remote_prune(bucket, 30 * DAY).staging == 0
    assert remote_prune(bucket, 30 * DAY, now=time.time() + DAY + 60).staging == (layout == "pack")
    assert RemoteCache(bucket, tmp_path / "fresh3").load(KEY) == FILES


def test_writers_racing_on_one_key_leave_one_whole_entry(s3_server: S3Server, bucket: str, layout: str,
                                                         tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    variants = [{name: data + f"-{i}".encode() for name, data in FILES.items()} for i in range(6)]
    with ThreadPoolExecutor(6) as pool:
        writers = list(pool.map(lambda files: _stored(bucket, tmp_path, files), variants))
    assert [w.access for w in writers] == ["read-write"] * 6
    served = RemoteCache(bucket, tmp_path / "fresh").load(KEY)
    assert served in variants  # every file from one writer, never a mix
    assert not [m for m in caplog.messages if "unreachable" in m or "failed" in m]


def test_a_read_only_consumer_is_served_hits_and_stores_nothing(
        s3_server: S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture) -> None:
    _stored(bucket, tmp_path)
    before = _objects(s3_server, bucket)
    for var, value in s3_server.env("reader").items():
        monkeypatch.setenv(var, value)
    reader = RemoteCache(bucket, tmp_path / "fresh")
    assert reader.load(KEY) == FILES
    assert reader.access == "read-only"
    assert caplog.messages == [f"cache: {bucket} is read-only for these credentials: hits are served, builds are "
                               "not stored"]
    other = hashlib.sha256(b"another build").hexdigest()
    out = tmp_path / "out2"
    out.mkdir()
    (out / "m.tflite").write_bytes(b"x")
    reader.store(other, out)
    assert reader.load(other) == {"m.tflite": b"x"}  # its own local copy
    assert _objects(s3_server, bucket) == before  # nothing written remotely: not even the use marker
    assert len(caplog.messages) == 1


@pytest.mark.parametrize("where", ["closed-port", "no-bucket"])
def test_a_cache_that_cannot_be_reached_builds_uncached_and_says_so_once(
        s3_server: S3Server, bucket: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        caplog: pytest.LogCaptureFixture, where: str) -> None:
    import socket

    if where == "closed-port":
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        monkeypatch.setenv("AWS_ENDPOINT_URL", f"http://127.0.0.1:{port}")
        url = bucket
    else:
        url = f"s3://no-such-bucket-{uuid.uuid4().hex[:8]}/cache"
    cache = RemoteCache(url, tmp_path / "local")
    start = time.perf_counter()
    assert cache.load(KEY) is None
    out = tmp_path / "out"
    out.mkdir()
    (out / "m.tflite").write_bytes(b"x")
    cache.store(KEY, out)
    assert time.perf_counter() - start < 15
    assert cache.access == "down"
    assert len(caplog.messages) == 1
    assert caplog.messages[0].startswith(f"cache: {url} is unreachable (")
    assert caplog.messages[0].endswith("); building without it (only the local copy serves)")
    assert cache.load(KEY) == {"m.tflite": b"x"}  # the local copy still works


def test_stats_and_prune_a_bucket(s3_server: S3Server, bucket: str, layout: str, tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    _stored(bucket, tmp_path)
    other = hashlib.sha256(b"b").hexdigest()
    _stored(bucket, tmp_path, {"m.tflite": b"y" * 10}, other)
    assert main(["cache", "stats", "--cache-dir", bucket]) == 0
    size = sum(map(len, FILES.values())) + 10
    assert capsys.readouterr().out == (f"cache {bucket}: 2 entries, {size / (1 << 20):,.1f} MiB; last used just now "
                                       "(newest) to just now (oldest)\n")
    listing = remote_entries(bucket)
    assert sorted(e.bytes for e in listing.entries) == [10, sum(map(len, FILES.values()))]
    # 31 days and a minute later (30 days, and the day after its store a hit records no use), only what was
    # used in between stays.
    later = time.time() + 31 * DAY + 60
    assert remote_prune(bucket, 30 * DAY, now=time.time()).removed == 0
    done = remote_prune(bucket, 30 * DAY, now=later)
    assert (done.removed, done.kept) == (2, 0)
    assert _objects(s3_server, bucket) == {}
    assert main(["cache", "prune", "--cache-dir", bucket, "--older-than", "30d"]) == 0
    assert capsys.readouterr().out == (f"cache {bucket}: removed 0 entries not used for 30d (0.0 MiB); kept 0 "
                                       "(0.0 MiB)\n")


def test_serving_an_entry_keeps_it_from_prune(s3_server: S3Server, bucket: str, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cache_remote, "USE_GRANULARITY_S", 0.0)  # every hit records its use
    _stored(bucket, tmp_path)
    stored = remote_entries(bucket).entries[0].last_used
    time.sleep(1.1)  # S3 times are to the second
    assert RemoteCache(bucket, tmp_path / "fresh").load(KEY) == FILES
    used = remote_entries(bucket).entries[0].last_used
    assert used > stored
    assert remote_prune(bucket, 10.0, now=used + 9).removed == 0
    assert remote_prune(bucket, 10.0, now=used + 11).removed == 1


def test_a_hit_the_day_its_entry_was_stored_records_nothing_and_prune_counts_the_day(
        s3_server: S3Server, bucket: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
    """A zoo's runs of one day serve its entries without a write; prune then counts each entry as used
    USE_GRANULARITY_S after its store. s3fs does not say an object's age: every hit writes its marker."""
    _stored(bucket, tmp_path)
    stored = remote_entries(bucket).entries[0].stored
    before = _objects(s3_server, bucket)
    assert RemoteCache(bucket, tmp_path / "fresh").load(KEY) == FILES
    prefix = bucket.removeprefix("s3://").partition("/")[2]
    marked = f"{prefix}/used/{KEY}" in _objects(s3_server, bucket)
    assert marked == (request.node.callspec.params["bucket"] == "s3fs")
    if not marked:
        assert _objects(s3_server, bucket) == before
    day = cache_remote.USE_GRANULARITY_S
    assert remote_prune(bucket, 10.0, now=stored + day + 9).removed == 0
    assert remote_prune(bucket, 10.0, now=stored + day + 11).removed == 1


@pytest.mark.parametrize(("given", "env", "found"), [
    ("s3://b/p", None, "s3://b/p"),
    ("gs://b", None, "gs://b"),
    ("file:///tmp/c", None, Path("/tmp/c")),
    ("relative/dir", None, Path("relative/dir")),
    (None, "s3://env/p", "s3://env/p"),
    (None, "/tmp/envdir", Path("/tmp/envdir")),
])
def test_where_the_cache_is(monkeypatch: pytest.MonkeyPatch, given: str | None, env: str | None,
                            found: str | Path) -> None:
    if env is None:
        monkeypatch.delenv("EDGECONV_CACHE_DIR", raising=False)
    else:
        monkeypatch.setenv("EDGECONV_CACHE_DIR", env)
    assert location(given) == found
    assert is_url(found) == isinstance(found, str)
    assert isinstance(open_cache(given), RemoteCache) == isinstance(found, str)


def test_a_remote_cache_url_keeps_crash_logs_and_its_copy_local(monkeypatch: pytest.MonkeyPatch,
                                                                  tmp_path: Path) -> None:
    from edgeconv.crash import crash_log_dir

    monkeypatch.setenv("EDGECONV_CACHE_DIR", "s3://bucket/prefix")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("EDGECONV_LOG_DIR", raising=False)
    monkeypatch.delenv("EDGECONV_CACHE_LOCAL", raising=False)
    assert crash_log_dir() == tmp_path / "edgeconv" / "logs"
    cache = open_cache(None)
    assert isinstance(cache, RemoteCache) and cache.root == tmp_path / "edgeconv"
    monkeypatch.setenv("EDGECONV_CACHE_LOCAL", str(tmp_path / "copy"))
    assert open_cache(None).root == tmp_path / "copy"


def test_an_unknown_protocol_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    before = tree(tmp_path)
    assert main(["cache", "stats", "--cache-dir", "nosuchproto://b/p"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("edgeconv: error: cache nosuchproto://b/p: Protocol not known: nosuchproto")
    assert tree(tmp_path) == before


def test_prefetch_fetches_every_entry_at_once_and_asks_once_for_a_bad_one(
        s3_server: S3Server, bucket: str, layout: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    keys = [hashlib.sha256(f"build {i}".encode()).hexdigest() for i in range(4)]
    for i, key in enumerate(keys[:3]):
        _stored(bucket, tmp_path, {"m.tflite": bytes([i]) * (10 + i)}, key)
    _change_pack(s3_server, bucket, layout, lambda pack: b"\x09" * 12, keys[2])
    reader = RemoteCache(bucket, tmp_path / "fresh")
    assert reader.prefetch([*keys, keys[0]]) == 2  # the two good ones; the bad one and the absent one are misses
    assert reader.absent == {keys[2], keys[3]}
    assert [len(list((tmp_path / "fresh").glob("*/*/entry.json")))] == [2]
    assert reader.load(keys[0]) == {"m.tflite": b"\x00" * 10}
    assert reader.load(keys[2]) is None and reader.load(keys[3]) is None
    corrupt = [m for m in caplog.messages if "corrupt" in m]
    assert corrupt == [f"cache: remote entry {keys[2][:12]} is corrupt (m.tflite not as recorded); building"]
    assert reader.prefetch(keys) == 0  # nothing left to fetch


def test_fetching_serves_each_entry_as_it_comes_and_leaves_no_thread(
        s3_server: S3Server, bucket: str, tmp_path: Path) -> None:
    """`build -j` serves while the rest is still on its way: load() of a key being fetched waits for that
    entry only; a corrupt or absent one is a miss said once (to the caller's `say`, from the fetching thread);
    the thread is gone when the block ends, whether it ends well or by Ctrl-C."""
    import threading

    keys = [hashlib.sha256(f"build {i}".encode()).hexdigest() for i in range(4)]
    for i, key in enumerate(keys[:3]):
        _stored(bucket, tmp_path, {"m.tflite": bytes([i]) * (10 + i)}, key)
    _change_pack(s3_server, bucket, "inline", _flip(0), keys[2])
    said: list[str] = []
    reader = RemoteCache(bucket, tmp_path / "fresh")
    with reader.fetching(keys, lambda text, *args: said.append(text % args)):
        assert reader.load(keys[1]) == {"m.tflite": b"\x01" * 11}
        assert reader.load(keys[0]) == {"m.tflite": b"\x00" * 10}
        assert reader.load(keys[2]) is None and reader.load(keys[3]) is None
    assert said == [f"cache: remote entry {keys[2][:12]} is corrupt (m.tflite not as recorded); building"]
    assert reader.absent == {keys[2], keys[3]}
    assert not [t for t in threading.enumerate() if t.name == "edgeconv-cache-fetch"]
    interrupted = RemoteCache(bucket, tmp_path / "fresh2")
    with pytest.raises(KeyboardInterrupt), interrupted.fetching(keys, lambda *args: None):
        raise KeyboardInterrupt
    assert not [t for t in threading.enumerate() if t.name == "edgeconv-cache-fetch"]
    assert interrupted.load(keys[0]) == {"m.tflite": b"\x00" * 10}  # fetched then, or now


def test_a_corrupt_remote_entry_is_replaced_by_the_build_that_found_it(
        s3_server: S3Server, bucket: str, layout: str, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    """A writer that found an entry corrupt stores its own build over it (an intact entry someone else stored
    is left alone): the next runner is served, instead of every later runner rebuilding."""
    _stored(bucket, tmp_path)
    _change_pack(s3_server, bucket, layout, _flip(5))
    runner = RemoteCache(bucket, tmp_path / "runner")
    assert runner.load(KEY) is None and KEY in runner.absent
    out = tmp_path / "rebuilt"
    for name, data in FILES.items():
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_bytes(data)
    runner.store(KEY, out)
    assert RemoteCache(bucket, tmp_path / "next").load(KEY) == FILES
    other = {name: data + b"!" for name, data in FILES.items()}
    _stored(bucket, tmp_path, other)  # a writer that found nothing wrong: the intact entry stays
    assert RemoteCache(bucket, tmp_path / "third").load(KEY) == FILES
    assert [m for m in caplog.messages if "corrupt" in m] == [
        f"cache: remote entry {KEY[:12]} is corrupt (m.tflite not as recorded); building"]
