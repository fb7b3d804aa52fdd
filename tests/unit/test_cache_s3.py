"""edgeconv's own S3 client for the remote cache (edgeconv/cache_s3.py): when it is used, its signatures
against botocore's, its answers against a real S3 server (moto's, IAM enforced), and its reads against a
server that misbehaves (a range ignored, a bucket in another region, a connection cut). No TensorFlow."""

from __future__ import annotations

import asyncio
import datetime
import hashlib
import http.server
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

from edgeconv.cache_remote import _connection
from edgeconv.cache_s3 import S3Client, Settings, _http_date, settings, signed_headers

from ..conftest import S3Server

pytestmark = pytest.mark.usefixtures("no_thread_left")


WHEN = datetime.datetime(2026, 12, 7, 5, 30, 15, tzinfo=datetime.UTC)
KEYS = {"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"}


@pytest.mark.parametrize(("env", "found"), [
    ({**KEYS, "AWS_ENDPOINT_URL": "http://127.0.0.1:9000"}, ("us-east-1", "http://127.0.0.1:9000")),
    ({**KEYS, "AWS_ENDPOINT_URL": "http://a:1", "AWS_ENDPOINT_URL_S3": "https://b:2"}, ("us-east-1", "https://b:2")),
    ({**KEYS, "AWS_DEFAULT_REGION": "eu-west-1"}, ("eu-west-1", None)),
    ({**KEYS, "AWS_DEFAULT_REGION": "eu-west-1", "AWS_REGION": "ap-south-1"}, ("ap-south-1", None)),
    ({**KEYS, "AWS_REGION": "eu-west-1", "EDGECONV_S3_CLIENT": "auto"}, ("eu-west-1", None)),
    # s3fs's: no credentials in the environment (a profile, SSO, an instance role), no region and no
    # endpoint (found by asking AWS), what this client does not do, or asked for.
    ({"AWS_REGION": "eu-west-1"}, None),
    ({"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_REGION": "eu-west-1"}, None),
    (KEYS, None),
    ({**KEYS, "AWS_REGION": "eu-west-1", "AWS_USE_FIPS_ENDPOINT": "true"}, None),
    ({**KEYS, "AWS_REGION": "eu-west-1", "AWS_USE_DUALSTACK_ENDPOINT": "TRUE"}, None),
    ({**KEYS, "AWS_ENDPOINT_URL": "http://a:1", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS": "1"}, None),
    ({**KEYS, "AWS_ENDPOINT_URL": "ftp://a:1"}, None),
    ({**KEYS, "AWS_REGION": "eu-west-1", "EDGECONV_S3_CLIENT": "s3fs"}, None),
])
def test_which_client_an_environment_gets(env: dict[str, str], found: tuple[str, str | None] | None) -> None:
    got = settings(env)
    assert (None if got is None else (got.region, got.endpoint)) == found
    if got is not None:
        assert "wJalr" not in repr(got)  # the secret is not in a log or traceback line


@pytest.mark.parametrize(("method", "url", "body", "token"), [
    ("PUT", "http://127.0.0.1:9000/zoo/cache/entries/ab.json", b'{"a": 1}', None),
    ("GET", "http://127.0.0.1:9000/zoo/cache/data/ab/cd.pack", b"", "session-token/+="),
    ("HEAD", "http://minio.local/zoo/a%20b/%C3%A9t%C3%A9/x~y_z-1.2", b"", None),
    ("DELETE", "http://zoo.s3.eu-west-1.amazonaws.com/cache/probe/0123", b"", None),
])
def test_the_signature_is_botocores(monkeypatch: pytest.MonkeyPatch, method: str, url: str, body: bytes,
                                    token: str | None) -> None:
    import botocore.auth
    from botocore.awsrequest import AWSRequest
    from botocore.credentials import Credentials

    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda: WHEN.replace(tzinfo=None))
    request = AWSRequest(method=method, url=url, data=body)
    region = "eu-west-1" if "eu-west-1" in url else "us-east-1"
    botocore.auth.S3SigV4Auth(Credentials(KEYS["AWS_ACCESS_KEY_ID"], KEYS["AWS_SECRET_ACCESS_KEY"], token), "s3",
                              region).add_auth(request)
    host, _, path = url.removeprefix("http://").partition("/")
    ours = signed_headers(method, host, "/" + path, hashlib.sha256(body).hexdigest(),
                          key_id=KEYS["AWS_ACCESS_KEY_ID"], secret=KEYS["AWS_SECRET_ACCESS_KEY"], token=token,
                          region=region, when=WHEN.timestamp())
    assert ours["authorization"] == request.headers["Authorization"]
    assert ours["x-amz-date"] == request.headers["X-Amz-Date"]


@pytest.mark.parametrize(("text", "found"), [
    ("Sun, 06 Nov 1994 08:49:37 GMT", 784111777.0),
    ("Mon, 07 Dec 2026 05:30:15 GMT", WHEN.timestamp()),
    ("Sunday, 06-Nov-94 08:49:37 GMT", None),  # RFC 850's form: not an IMF-fixdate
    ("Sun, 06 Nov 1994 08:49:37 UTC", None),
    ("Sun, 06 Foo 1994 08:49:37 GMT", None),
    ("Sun, 06 Nov 1994 8:49 GMT", None),
    ("", None),
    (None, None),
])
def test_an_http_date_is_read_or_refused(text: str | None, found: float | None) -> None:
    assert _http_date(text) == found


def test_an_object_key_is_quoted_as_s3_signs_it() -> None:
    client = S3Client(Settings("k", "s", None, "us-east-1", "http://127.0.0.1:9000/base/", None))
    assert client._address("zoo", "a b/é/x~y") == ("http", "127.0.0.1", 9000, "127.0.0.1:9000",
                                                   "/base/zoo/a%20b/%C3%A9/x~y")
    aws = S3Client(Settings("k", "s", None, "eu-west-1", None, None))
    assert aws._address("zoo-1", "k") == ("https", "zoo-1.s3.eu-west-1.amazonaws.com", 443,
                                          "zoo-1.s3.eu-west-1.amazonaws.com", "/k")
    assert aws._address("my.dotted.bucket", "k") == ("https", "s3.eu-west-1.amazonaws.com", 443,
                                                     "s3.eu-west-1.amazonaws.com", "/my.dotted.bucket/k")


def _run(client: S3Client, call: Callable[[S3Client], Any]) -> Any:
    async def work() -> Any:
        return await call(client)

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(work())
    finally:
        loop.close()


@pytest.fixture
def server_client(s3_server: S3Server) -> Iterator[tuple[S3Client, str]]:
    """This client, signed as the test server's writer, and a fresh bucket."""
    name = s3_server.bucket(f"own-{uuid.uuid4().hex[:12]}")
    found = settings(s3_server.env("writer"))
    assert found is not None
    client = S3Client(found)
    yield client, name
    client.close()


def test_the_calls_against_a_real_server(server_client: tuple[S3Client, str]) -> None:
    client, bucket = server_client
    path = f"{bucket}/p q/obj"
    assert _run(client, lambda c: c._exists(path)) is False
    with pytest.raises(FileNotFoundError, match="NoSuchKey"):
        _run(client, lambda c: c._cat_file(path, 0, 5))
    _run(client, lambda c: c._pipe_file(path, b"0123456789"))
    assert _run(client, lambda c: c._exists(path)) is True
    assert _run(client, lambda c: c._info(path))["size"] == 10
    assert _run(client, lambda c: c._cat_file(path, 0, 11)) == b"0123456789"  # one byte past: the whole
    assert _run(client, lambda c: c._cat_file(path, 0, 4)) == b"0123"
    assert _run(client, lambda c: c._cat_file(path, 3, 6)) == b"345"
    data, age = _run(client, lambda c: c._cat_file_dated(path, 0, 11))
    assert data == b"0123456789" and age is not None and 0 <= age < 60  # the server's Date less Last-Modified
    _run(client, lambda c: c._pipe_file(f"{bucket}/empty", b""))
    with pytest.raises(OSError) as empty:  # a range of an empty object: as s3fs says it (the cache asks its size)
        _run(client, lambda c: c._cat_file(f"{bucket}/empty", 0, 1))
    assert empty.value.errno == 22
    _run(client, lambda c: c._rm_file(path))
    assert _run(client, lambda c: c._exists(path)) is False


@pytest.mark.parametrize(("user", "secret", "error", "said"), [
    ("reader", None, PermissionError, "AccessDenied"),
    ("writer", "not-the-secret", PermissionError, "SignatureDoesNotMatch"),
])
def test_the_server_refuses_a_write_it_does_not_allow(s3_server: S3Server, user: str, secret: str | None,
                                                       error: type[Exception], said: str) -> None:
    name = s3_server.bucket(f"own-{uuid.uuid4().hex[:12]}")
    env = s3_server.env(user)
    if secret is not None:
        env["AWS_SECRET_ACCESS_KEY"] = secret
    found = settings(env)
    assert found is not None
    client = S3Client(found)
    with pytest.raises(error, match=said):
        _run(client, lambda c: c._pipe_file(f"{name}/x", b"data"))


def test_a_build_environment_gets_this_client_and_one_that_says_s3fs_gets_s3fs(
        s3_server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    for var, value in s3_server.env("writer").items():
        monkeypatch.setenv(var, value)
    assert isinstance(_connection("s3", "s3://b/p").fs, S3Client)
    assert not isinstance(_connection("s3", "s3://b/p", listing=True).fs, S3Client)  # stats and prune
    monkeypatch.setenv("EDGECONV_S3_CLIENT", "s3fs")
    assert not isinstance(_connection("s3", "s3://b/p").fs, S3Client)


class _Misbehaving(http.server.BaseHTTPRequestHandler):
    """Answers as the test sets ``plan``: a list of (status, headers, body) for each request in turn; keeps
    what each request was."""

    protocol_version = "HTTP/1.1"
    plan: ClassVar[list[tuple[int, dict[str, str], bytes]]] = []
    seen: ClassVar[list[tuple[str, dict[str, str], int]]] = []  # method, headers, client port (the connection)

    def _answer(self) -> None:
        type(self).seen.append((self.command, {k.lower(): v for k, v in self.headers.items()},
                                self.client_address[1]))
        status, headers, body = type(self).plan.pop(0)
        self.send_response(status)
        for k, v in headers.items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    do_GET = do_PUT = do_HEAD = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture
def misbehaving() -> Iterator[tuple[S3Client, type[_Misbehaving]]]:
    handler = type("Handler", (_Misbehaving,), {"plan": [], "seen": []})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = False  # server_close() joins every request's thread: none is left to a later test
    server.handle_error = lambda request, address: None  # type: ignore[method-assign]  # a client that hung up
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    client = S3Client(Settings("AKID", "secret", None, "us-east-1", f"http://127.0.0.1:{server.server_port}",
                               None))
    yield client, handler
    client.close()  # its kept connections: their threads see the end and return
    server.shutdown()
    server.server_close()
    thread.join()


def test_a_server_that_ignores_the_range_is_read_no_further(
        misbehaving: tuple[S3Client, type[_Misbehaving]]) -> None:
    client, server = misbehaving
    server.plan += [(200, {}, b"x" * (1 << 20)), (200, {}, b"y" * 4)]
    assert _run(client, lambda c: c._cat_file("zoo/big", 0, 11)) == b"x" * 11
    assert server.seen[0][1]["range"] == "bytes=0-10"
    assert _run(client, lambda c: c._cat_file("zoo/small", 0, 11)) == b"y" * 4
    assert server.seen[0][2] != server.seen[1][2]  # the half-read connection was dropped, not reused


def test_a_connection_is_reused_when_its_answer_was_read_whole(
        misbehaving: tuple[S3Client, type[_Misbehaving]]) -> None:
    client, server = misbehaving
    server.plan += [(200, {}, b"abc"), (200, {}, b"")]
    assert _run(client, lambda c: c._cat_file("zoo/a", 0, 4)) == b"abc"
    _run(client, lambda c: c._pipe_file("zoo/b", b"data"))
    assert server.seen[0][2] == server.seen[1][2]
    assert server.seen[1][1]["x-amz-content-sha256"] == hashlib.sha256(b"data").hexdigest()


def test_a_bucket_in_another_region_is_followed_once(misbehaving: tuple[S3Client, type[_Misbehaving]]) -> None:
    client, server = misbehaving
    error = b"<Error><Code>AuthorizationHeaderMalformed</Code><Message>wrong region</Message></Error>"
    server.plan += [(400, {"x-amz-bucket-region": "eu-west-1"}, error), (200, {}, b"ok"),
                    (400, {"x-amz-bucket-region": "ap-south-1"}, error), (400, {"x-amz-bucket-region": "x"}, error),
                    (301, {"x-amz-bucket-region": "evil.example/x"}, error)]
    assert _run(client, lambda c: c._cat_file("zoo/a", 0, 3)) == b"ok"
    assert "/us-east-1/s3/" in server.seen[0][1]["authorization"]
    assert "/eu-west-1/s3/" in server.seen[1][1]["authorization"]
    with pytest.raises(OSError, match=r"answered 400 \(AuthorizationHeaderMalformed: wrong region\)"):
        _run(client, lambda c: c._cat_file("zoo/a", 0, 3))  # followed once per request, not round and round
    with pytest.raises(OSError, match=r"answered 301"):  # not a region's name: not followed (it would be a host)
        _run(client, lambda c: c._cat_file("zoo/a", 0, 3))
    assert len(server.seen) == 5


@pytest.mark.parametrize(("plan", "outcome"), [
    ([(503, {}, b"<Error><Code>SlowDown</Code></Error>"), (200, {}, b"ok")], b"ok"),
    ([(500, {}, b""), (500, {}, b"")], "answered 500 (HTTP 500)"),
    ([(404, {}, b"<Error><Code>NoSuchKey</Code><Message>gone</Message></Error>")], "NoSuchKey: gone"),
    ([(403, {}, b"<Error><Code>AccessDenied</Code></Error>")], "AccessDenied"),
])
def test_a_5xx_is_tried_once_more_and_the_rest_are_fsspecs_errors(
        misbehaving: tuple[S3Client, type[_Misbehaving]], plan: list[tuple[int, dict[str, str], bytes]],
        outcome: bytes | str) -> None:
    client, server = misbehaving
    server.plan += plan
    if isinstance(outcome, bytes):
        assert _run(client, lambda c: c._cat_file("zoo/a", 0, 3)) == outcome
    else:
        kind = {"NoSuchKey": FileNotFoundError, "AccessDenied": PermissionError}.get(outcome.split(":")[0], OSError)
        with pytest.raises(kind, match=outcome.replace("(", r"\(").replace(")", r"\)")):
            _run(client, lambda c: c._cat_file("zoo/a", 0, 3))
    assert len(server.seen) == len(plan)


def test_a_closed_port_fails_as_a_connection_error() -> None:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = S3Client(Settings("AKID", "secret", None, "us-east-1", f"http://127.0.0.1:{port}", None))
    with pytest.raises(ConnectionError, match=f"PUT 127.0.0.1:{port}: ConnectionRefusedError"):
        _run(client, lambda c: c._pipe_file("zoo/a", b"x"))


@pytest.fixture
def dribbling() -> Iterator[str]:
    """A server that answers every request with a status line, then a header every 0.2 s (each read comes
    well within the read timeout, so only the operation's own time limit ends it); its address."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    listener.settimeout(0.05)  # accept() wakes to see `done` (closing the socket would not wake it)
    done = threading.Event()
    threads: list[threading.Thread] = []

    def answer(conn: socket.socket) -> None:
        with conn:
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            for i in range(150):
                if done.wait(0.2):
                    return
                try:
                    conn.sendall(f"X-Slow-{i}: y\r\n".encode())
                except OSError:
                    return

    def serve() -> None:
        while not done.is_set():
            try:
                conn, _ = listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            conn.settimeout(None)
            threads.append(threading.Thread(target=answer, args=(conn,), daemon=True, name="dribbling-answer"))
            threads[-1].start()

    server = threading.Thread(target=serve, daemon=True, name="dribbling-server")
    server.start()
    yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    done.set()
    server.join()
    for thread in threads:  # no thread of this test is left to a later one (a build forks only alone)
        thread.join()
    listener.close()


def test_a_server_that_dribbles_its_answer_is_cut_at_the_operations_time_limit(
        dribbling: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    """The event loop stops waiting at OPERATION_TIMEOUT_S; the thread blocked on the socket must end then too
    (the operation joins its threads before it returns), not when the server stops."""
    from edgeconv import cache_remote

    for var, value in {**KEYS, "AWS_ENDPOINT_URL": dribbling, "AWS_DEFAULT_REGION": "us-east-1"}.items():
        monkeypatch.setenv(var, value)
    monkeypatch.delenv("EDGECONV_S3_CLIENT", raising=False)
    monkeypatch.setattr(cache_remote, "OPERATION_TIMEOUT_S", 1.0)
    def ours() -> list[threading.Thread]:
        return [t for t in threading.enumerate() if not t.name.startswith("dribbling")]

    threads = ours()
    cache = cache_remote.RemoteCache(f"s3://zoo/c-{uuid.uuid4().hex[:6]}", tmp_path / "local")
    start = time.perf_counter()
    assert cache.load("a" * 64) is None
    assert time.perf_counter() - start < 5
    assert cache.access == "down"
    assert caplog.messages[0].startswith(f"cache: {cache.url} is unreachable (TimeoutError")
    assert ours() == threads  # no request thread left behind
    assert isinstance(_connection("s3", cache.url).fs, S3Client)  # and the next operation may run
