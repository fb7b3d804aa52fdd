"""The remote cache's object calls on S3 without s3fs: put, ranged get, head and delete, signed with AWS
Signature Version 4, on ``http.client``.

A CI runner serving a zoo from the bucket pays for its S3 client before its first request: importing s3fs,
aiobotocore and aiohttp and loading botocore's description of the S3 API is 0.6-0.8 s, more than the
requests of 25 hits. These four calls are all a build makes (:class:`edgeconv.cache_remote.RemoteCache`),
so when the environment says everything the call needs, they go through this module instead:

- credentials: ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY`` (and ``AWS_SESSION_TOKEN``), as
  ``aws-actions/configure-aws-credentials`` and most CI secrets set them;
- where: ``AWS_ENDPOINT_URL_S3`` or ``AWS_ENDPOINT_URL`` (MinIO, Ceph, R2, a test server: path-style
  addresses), or a region (``AWS_REGION``, ``AWS_DEFAULT_REGION``) for AWS itself (virtual-hosted
  addresses; a bucket in another region is followed once, as S3's answer names it).

Otherwise (credentials from a profile, SSO or an instance role, FIPS or dual-stack endpoints) and for
``edgeconv cache stats|prune``, s3fs does it; ``EDGECONV_S3_CLIENT=s3fs`` always uses s3fs.

The calls keep fsspec's names and errors (a missing object is FileNotFoundError, a refused one
PermissionError, a range of an empty object OSError(EINVAL)), so the cache's trust rules are the same code
for both. A body is never read past what was asked for: a ranged GET reads at most the range's length
even from a server that ignores the range (the connection is then dropped, not reused). TLS is verified
(``AWS_CA_BUNDLE`` names the CA file to trust instead of the system's, as for botocore); connecting gives
up after 5 s, a read after 60 s; a request that fails to connect, is cut, or gets a 5xx is tried once more
on a new connection; an operation whose time runs out cuts the requests it still has in flight.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import hashlib
import hmac
import re
import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

from ._record import record

if TYPE_CHECKING:
    import http.client

CLIENT_VARIABLE = "EDGECONV_S3_CLIENT"  # "s3fs": never this module
CONNECT_TIMEOUT_S = 5.0
READ_TIMEOUT_S = 60.0
ERROR_BODY_LIMIT = 64 << 10  # bytes of an error answer read for its code and message
_TRUE = ("1", "true", "yes", "on")
# What this module does not do; s3fs (botocore) does.
_S3FS_ONLY = ("AWS_USE_FIPS_ENDPOINT", "AWS_USE_DUALSTACK_ENDPOINT", "AWS_IGNORE_CONFIGURED_ENDPOINT_URLS")
_REGION = re.compile(r"[a-z]{2}(-[a-z0-9]+){1,4}")  # us-east-1, ap-southeast-2, us-gov-west-1, eu-isoe-west-1
_DNS_BUCKET = re.compile(r"[a-z0-9][a-z0-9-]{1,61}[a-z0-9]")  # a bucket name usable as a host name label


@record
class Settings:
    key_id: str
    secret: str = dataclasses.field(repr=False)
    token: str | None = dataclasses.field(repr=False)
    region: str
    endpoint: str | None  # scheme://host[:port][/path]; None: AWS's own, for the region
    ca_bundle: str | None


def settings(env: Mapping[str, str]) -> Settings | None:
    """What the environment says for this client, or None when s3fs must do it (see the module's text)."""
    if env.get(CLIENT_VARIABLE, "").strip().lower() == "s3fs":
        return None
    key, secret = env.get("AWS_ACCESS_KEY_ID", ""), env.get("AWS_SECRET_ACCESS_KEY", "")
    if not key or not secret or any(env.get(v, "").strip().lower() in _TRUE for v in _S3FS_ONLY):
        return None
    endpoint = env.get("AWS_ENDPOINT_URL_S3") or env.get("AWS_ENDPOINT_URL") or None
    region = env.get("AWS_REGION") or env.get("AWS_DEFAULT_REGION") or None
    if endpoint is None and region is None:
        return None  # AWS's endpoint for a region nobody named: s3fs finds it
    if endpoint is not None:
        parts = urlsplit(endpoint)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            return None
    return Settings(key, secret, env.get("AWS_SESSION_TOKEN") or None, region or "us-east-1", endpoint,
                    env.get("AWS_CA_BUNDLE") or None)


def signed_headers(method: str, host: str, path: str, payload_sha256: str, *, key_id: str, secret: str,
                   token: str | None, region: str, when: float) -> dict[str, str]:
    """The headers that sign an S3 request (AWS Signature Version 4; no query string): ``path`` is the
    request's path as sent (each segment percent-encoded once, as S3 wants it)."""
    amz_date = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(when))
    day = amz_date[:8]
    headers = {"host": host, "x-amz-content-sha256": payload_sha256, "x-amz-date": amz_date}
    if token is not None:
        headers["x-amz-security-token"] = token
    names = sorted(headers)
    canonical = "\n".join([method, path, "", *(f"{n}:{headers[n].strip()}" for n in names), "",
                           ";".join(names), payload_sha256])
    scope = f"{day}/{region}/s3/aws4_request"
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amz_date, scope, hashlib.sha256(canonical.encode()).hexdigest()])
    signing = ("AWS4" + secret).encode()
    for part in (day, region, "s3", "aws4_request"):
        signing = hmac.new(signing, part.encode(), hashlib.sha256).digest()
    signature = hmac.new(signing, to_sign.encode(), hashlib.sha256).hexdigest()
    return {**headers, "authorization": f"AWS4-HMAC-SHA256 Credential={key_id}/{scope}, "
                                        f"SignedHeaders={';'.join(names)}, Signature={signature}"}


class _Answer:
    __slots__ = ("body", "headers", "status")

    def __init__(self, status: int, headers: dict[str, str], body: bytes) -> None:
        self.status, self.headers, self.body = status, headers, body


class S3Client:
    """The object calls :class:`~edgeconv.cache_remote.RemoteCache` makes, under fsspec's async names, on
    paths ``bucket/key``. Each call runs in the event loop's default executor (a thread, joined when the
    operation ends); idle connections are kept between calls, one per thread at most in use."""

    def __init__(self, found: Settings) -> None:
        self.settings = found
        self._idle: dict[tuple[str, str, int], list[http.client.HTTPConnection]] = {}
        self._active: set[http.client.HTTPConnection] = set()
        self._stopped = False  # the operation's time ran out: no request starts, the running ones are cut
        self._lock = threading.Lock()
        self._regions: dict[str, str] = {}  # bucket: its region, as a redirect named it

    # -- fsspec's names ------------------------------------------------------------------------------

    async def _pipe_file(self, path: str, data: bytes, **_: Any) -> None:
        await self._call("PUT", path, body=bytes(data))

    async def _rm_file(self, path: str, **_: Any) -> None:
        await self._call("DELETE", path)

    async def _cat_file(self, path: str, start: int | None = None, end: int | None = None, **_: Any) -> bytes:
        if end is None:
            raise ValueError("this client reads ranges only (the cache bounds every read)")
        return (await self._cat_file_dated(path, start or 0, end))[0]

    async def _cat_file_dated(self, path: str, start: int, end: int) -> tuple[bytes, float | None]:
        """:meth:`_cat_file`, and the object's age in seconds: the answer's ``Date`` less its
        ``Last-Modified`` (both the server's clock; None when either is missing or unreadable)."""
        if end <= start:
            raise ValueError(f"bad range {start}..{end}")
        answer = await self._call("GET", path, extra={"range": f"bytes={start}-{end - 1}"}, limit=end - start)
        now, then = _http_date(answer.headers.get("date")), _http_date(answer.headers.get("last-modified"))
        return answer.body, (now - then if now is not None and then is not None else None)

    async def _info(self, path: str, **_: Any) -> dict[str, Any]:
        answer = await self._call("HEAD", path)
        return {"name": path, "type": "file", "size": int(answer.headers.get("content-length", "0") or 0)}

    async def _exists(self, path: str, **_: Any) -> bool:
        try:
            await self._call("HEAD", path)
        except FileNotFoundError:
            return False
        return True

    # -- one request -----------------------------------------------------------------------------------

    async def _call(self, method: str, path: str, *, body: bytes = b"", extra: dict[str, str] | None = None,
                    limit: int | None = None) -> _Answer:
        bucket, _, key = path.partition("/")
        if not bucket or not key:
            raise ValueError(f"not an object path: {path!r}")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, self._request, method, bucket, key, body, extra or {}, limit)

    def _address(self, bucket: str, key: str) -> tuple[str, str, int, str, str]:
        """(scheme, host, port, Host header, path) of an object."""
        found = self.settings
        quoted = "/" + "/".join(quote(part, safe="-_.~") for part in key.split("/"))
        if found.endpoint is not None:  # path-style, as MinIO, Ceph and test servers want
            parts = urlsplit(found.endpoint)
            scheme, host = parts.scheme, parts.hostname or ""
            port = parts.port or (443 if scheme == "https" else 80)
            base = parts.path.rstrip("/")
            path = f"{base}/{quote(bucket, safe='-_.~')}{quoted}"
        else:
            region = self._regions.get(bucket, found.region)
            scheme, port = "https", 443
            if _DNS_BUCKET.fullmatch(bucket):
                host, path = f"{bucket}.s3.{region}.amazonaws.com", quoted
            else:
                host, path = f"s3.{region}.amazonaws.com", f"/{quote(bucket, safe='-_.~')}{quoted}"
        default = (scheme, port) in (("http", 80), ("https", 443))
        shown = host if ":" not in host else f"[{host}]"
        return scheme, host, port, shown if default else f"{shown}:{port}", path

    def _request(self, method: str, bucket: str, key: str, body: bytes, extra: dict[str, str],
                 limit: int | None) -> _Answer:
        import http.client

        payload = hashlib.sha256(body).hexdigest()
        followed = False
        attempt = 0
        while True:
            attempt += 1
            scheme, host, port, host_header, path = self._address(bucket, key)
            region = self._regions.get(bucket, self.settings.region)
            headers = signed_headers(method, host_header, path, payload, key_id=self.settings.key_id,
                                     secret=self.settings.secret, token=self.settings.token, region=region,
                                     when=time.time())
            headers.update(extra)
            if method in ("PUT", "POST"):
                headers["content-length"] = str(len(body))
            conn = self._take(scheme, host, port)
            try:
                if conn.sock is None:
                    conn.connect()
                with self._lock:  # from here on, abort() can cut it
                    if self._stopped:
                        raise TimeoutError("the operation's time ran out")
                    self._active.add(conn)
                conn.request(method, path, body=body if method == "PUT" else None, headers=headers)
                response = conn.getresponse()
                ok = 200 <= response.status < 300
                if method == "HEAD":
                    data = b""
                else:  # never more than asked for (a range's length), or than an answer needs
                    data = response.read(limit if ok and limit is not None else ERROR_BODY_LIMIT)
                answer = _Answer(response.status, {k.lower(): v for k, v in response.getheaders()}, data)
                reusable = method == "HEAD" or response.isclosed() or response.length == 0
            except (OSError, http.client.HTTPException) as exc:
                conn.close()
                if attempt >= 2 or self._stopped:
                    raise ConnectionError(f"{method} {host}:{port}: {_said(exc)}") from exc
                continue
            finally:
                with self._lock:
                    self._active.discard(conn)
            if reusable and not response.will_close:
                self._give(scheme, host, port, conn)
            else:
                conn.close()
            moved = answer.headers.get("x-amz-bucket-region", "")
            if (answer.status in (301, 307, 400) and _REGION.fullmatch(moved) and moved != region
                    and not followed):  # a region's name only: it becomes part of AWS's host name
                self._regions[bucket] = moved  # the bucket is in another region: once, signed for it
                followed = True
                continue
            if answer.status >= 500 and attempt < 2:
                continue
            if 200 <= answer.status < 300:
                return answer
            raise _error(method, bucket, key, answer)

    def _take(self, scheme: str, host: str, port: int) -> http.client.HTTPConnection:
        with self._lock:
            idle = self._idle.get((scheme, host, port))
            if idle:
                return idle.pop()
        import http.client

        if scheme == "https":
            import ssl

            context = ssl.create_default_context(cafile=self.settings.ca_bundle)
            return _timed(http.client.HTTPSConnection(host, port, timeout=CONNECT_TIMEOUT_S, context=context))
        return _timed(http.client.HTTPConnection(host, port, timeout=CONNECT_TIMEOUT_S))

    def _give(self, scheme: str, host: str, port: int, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._idle.setdefault((scheme, host, port), []).append(conn)

    def abort(self) -> None:
        """End the requests in flight now (their operation's time ran out: the event loop stopped waiting,
        but a thread blocked on a socket would keep the operation's end waiting for it): their sockets are
        shut, and no request starts until :meth:`resume`."""
        import socket

        with self._lock:
            self._stopped = True
            active = list(self._active)
        for conn in active:
            if conn.sock is not None:
                with contextlib.suppress(OSError):
                    conn.sock.shutdown(socket.SHUT_RDWR)

    def resume(self) -> None:
        with self._lock:
            self._stopped = False

    def close(self) -> None:
        with self._lock:
            held = [c for idle in self._idle.values() for c in idle]
            self._idle.clear()
        for conn in held:
            conn.close()


def _timed(conn: http.client.HTTPConnection) -> http.client.HTTPConnection:
    """``conn`` connecting within CONNECT_TIMEOUT_S, then waiting up to READ_TIMEOUT_S for each read."""
    connect = conn.connect

    def timed_connect() -> None:
        connect()
        if conn.sock is not None:
            conn.sock.settimeout(READ_TIMEOUT_S)

    conn.connect = timed_connect  # type: ignore[method-assign]
    return conn


_MONTHS = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")


def _http_date(text: str | None) -> float | None:
    """Seconds since the epoch of an HTTP date (RFC 9110's IMF-fixdate, "Sun, 06 Nov 1994 08:49:37 GMT"),
    None for anything else."""
    import calendar

    parts = (text or "").split()
    if len(parts) != 6 or parts[5] != "GMT" or parts[2] not in _MONTHS:
        return None
    try:
        hours, minutes, seconds = (int(x) for x in parts[4].split(":"))
        return float(calendar.timegm((int(parts[3]), _MONTHS.index(parts[2]) + 1, int(parts[1]), hours, minutes,
                                      seconds, 0, 0, 0)))
    except ValueError:
        return None


def _said(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


_CODE = re.compile(rb"<Code>([^<]{1,200})</Code>")
_MESSAGE = re.compile(rb"<Message>([^<]{1,500})</Message>")


def _error(method: str, bucket: str, key: str, answer: _Answer) -> OSError:
    """S3's refusal as fsspec says it."""
    code_found, message_found = _CODE.search(answer.body), _MESSAGE.search(answer.body)
    code = code_found.group(1).decode("utf-8", "replace") if code_found else f"HTTP {answer.status}"
    said = f"{code}: {message_found.group(1).decode('utf-8', 'replace')}" if message_found else code
    where = f"{bucket}/{key}"
    if answer.status == 404:
        return FileNotFoundError(errno.ENOENT, said, where)
    if answer.status == 403:
        return PermissionError(errno.EACCES, said, where)
    if answer.status == 416:
        return OSError(errno.EINVAL, said, where)
    return OSError(errno.EIO, f"{method} answered {answer.status} ({said})", where)
