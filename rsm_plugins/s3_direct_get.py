"""Ranged GETs of bounded byte ranges with one copy: presigned by botocore, read by ``http.client``.

Why: the read core asks for 8 MiB chunks of ``.log`` objects, and through botocore each chunk is
copied four times in Python (``http.client`` into a ``bytearray``, into ``bytes``, by urllib3's
``readinto`` into the caller's buffer, then into the chunk) plus botocore's per-request event
machinery. Measured against SeaweedFS on this project's machine: 0.116 s of CPU per 64 MiB that
way, 0.036 s with ``http.client``'s ``read()`` of a known ``Content-Length``, which fills one
``bytes`` straight from the socket. On the Kafka endpoint that CPU is the difference between
the local plugin and S3 (docs/kafka-endpoint.md).

What stays botocore's: the URL (addressing style, endpoint, credentials, SigV4 query signing, by
``generate_presigned_url`` of a client configured like the plugin's), and every answer that is
not a complete ``206 Partial Content`` of exactly the range asked: :meth:`DirectRangeGetter.get`
then returns ``None`` and the caller repeats the GET through boto3, which retries, maps errors to
typed ones (missing object, range past the end, throttling) and names the object. So this path
can only make a read cheaper, never change what a read answers. A redirect or an authorization
error that every request would hit (wrong region, a store that refuses query signing) turns the
direct path off for the plugin instance, with one log line.

Not used (the plugin falls back to boto3 for every GET) when a proxy applies to the endpoint:
urllib's proxy handling is not botocore's.
"""

from __future__ import annotations

import http.client
import re
import ssl
import threading
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import structlog

log = structlog.get_logger(__name__)

_CONTENT_RANGE = re.compile(r"bytes (\d+)-(\d+)/(\d+|\*)")
# answers every later request would get too: the direct path is switched off
_DISABLING_STATUSES = frozenset({301, 302, 307, 308, 400, 403})
# a kept-alive connection the server closed while idle fails like this on reuse: retried once
_STALE_CONNECTION = (http.client.RemoteDisconnected, BrokenPipeError, ConnectionResetError,
                     http.client.CannotSendRequest, http.client.BadStatusLine)
PRESIGN_SECONDS = 900


class DirectRangeGetter:
    """One-copy ranged GETs for one S3 plugin instance (thread-safe: a connection per thread)."""

    def __init__(self, presign: Callable[[str, str], str], *, connect_timeout: float,
                 read_timeout: float, ca_bundle: str | bool | None = None) -> None:
        """``presign(bucket, key)`` returns a presigned GET URL; ``ca_bundle`` is botocore's
        ``verify`` (a CA file, ``False`` for no verification, ``None``/``True`` for the default)."""
        self._presign = presign
        self._connect_timeout = connect_timeout
        self._read_timeout = read_timeout
        self._ca_bundle = ca_bundle
        self._local = threading.local()
        self._ssl: ssl.SSLContext | None = None
        self.enabled = True
        self.fallbacks = 0  # answers handed back to boto3 (tests and logs read it)

    def get(self, bucket: str, key: str, start: int, end: int) -> tuple[bytes, int] | None:
        """Bytes ``start..end`` (inclusive, clamped to the object) and the object's size, or
        ``None``: the caller then GETs through boto3 (see the module docstring)."""
        opened = self._open(bucket, key, start, end)
        if opened is None:
            return None
        resp, url, length, size = opened
        try:
            data = resp.read()  # one bytes of Content-Length, filled from the socket
        except (OSError, http.client.HTTPException) as e:  # incl. IncompleteRead, timeouts
            self._body_failed(url, bucket, key, e)
            return None
        if len(data) != length:
            self._body_failed(url, bucket, key, None)
            return None
        if resp.will_close:
            self._drop(url)
        return data, size

    def get_into(self, bucket: str, key: str, start: int, out: memoryview) -> tuple[int, int] | None:
        """Receive bytes from ``start`` straight into ``out`` (``len(out)`` bytes, fewer only at
        the object's end): how many, and the object's size; or ``None`` as for :meth:`get`. A
        connection that ends before the answer's length is ``None`` (boto3 then retries), never
        a short count."""
        if not len(out):
            return None
        opened = self._open(bucket, key, start, start + len(out) - 1)
        if opened is None:
            return None
        resp, url, length, size = opened
        got = 0
        try:
            while got < length:
                n = resp.readinto(out[got:length])
                if not n:  # the server closed early: never a short answer
                    self._body_failed(url, bucket, key, None)
                    return None
                got += n
        except (OSError, http.client.HTTPException) as e:
            self._body_failed(url, bucket, key, e)
            return None
        if resp.will_close:
            self._drop(url)
        return got, size

    def _open(self, bucket: str, key: str, start: int,
              end: int) -> tuple[http.client.HTTPResponse, urllib.parse.SplitResult, int, int] | None:
        """The response to a presigned ranged GET, its body not read yet, if it is exactly the range
        asked: (response, url, body length, object size); else ``None`` (see :meth:`get`)."""
        if not self.enabled:
            return None
        try:
            url = urllib.parse.urlsplit(self._presign(bucket, key))
        except Exception as e:  # credentials missing, bad endpoint: boto3 says it properly
            log.debug("s3_direct_get_presign_failed", bucket=bucket, key=key, error=str(e))
            self._fallback()
            return None
        if _proxied(url):
            self._disable("a proxy applies to the endpoint", url.netloc)
            return None
        target = f"{url.path}?{url.query}" if url.query else url.path
        headers = {"Range": f"bytes={start}-{end}"}
        for attempt in (0, 1):
            try:
                conn = self._connection(url)
            except (OSError, http.client.HTTPException) as e:  # refused, reset or timed out at connect
                log.debug("s3_direct_get_connect_failed", bucket=bucket, key=key, error=str(e))
                self._fallback()
                return None
            try:
                conn.request("GET", target, headers=headers)
                resp = conn.getresponse()
            except _STALE_CONNECTION:
                self._drop(url)
                if attempt == 0:
                    continue
                self._fallback()
                return None
            except (OSError, http.client.HTTPException) as e:
                self._drop(url)
                log.debug("s3_direct_get_failed", bucket=bucket, key=key, error=str(e))
                self._fallback()
                return None
            return self._answer(resp, url, bucket, key, start, end)
        self._fallback()
        return None

    def close(self) -> None:
        conns: dict[str, http.client.HTTPConnection] = getattr(self._local, "conns", {})
        for conn in conns.values():
            conn.close()
        conns.clear()

    # ---- one answer -----------------------------------------------------------------------
    def _answer(self, resp: http.client.HTTPResponse, url: urllib.parse.SplitResult, bucket: str,
                key: str, start: int,
                end: int) -> tuple[http.client.HTTPResponse, urllib.parse.SplitResult, int, int] | None:
        try:
            if resp.status != 206:
                self._discard(resp, url)
                if resp.status in _DISABLING_STATUSES:
                    self._disable(f"HTTP {resp.status} for a presigned GET", url.netloc)
                    return None
                self._fallback()
                return None
            parsed = _CONTENT_RANGE.fullmatch(resp.getheader("Content-Range", "").strip())
            length = resp.length
            if parsed is None or parsed.group(3) == "*" or length is None:
                self._discard(resp, url)
                self._fallback()
                return None
            first, last, size = int(parsed.group(1)), int(parsed.group(2)), int(parsed.group(3))
            if first != start or last != min(end, size - 1) or length != last - first + 1:
                self._discard(resp, url)
                self._fallback()
                return None
        except (OSError, http.client.HTTPException) as e:
            self._body_failed(url, bucket, key, e)
            return None
        return resp, url, length, size

    def _body_failed(self, url: urllib.parse.SplitResult, bucket: str, key: str,
                     error: BaseException | None) -> None:
        """A body cut short or failing: the connection is dropped and boto3 repeats the GET."""
        self._drop(url)
        if error is not None:
            log.debug("s3_direct_get_body_failed", bucket=bucket, key=key, error=str(error))
        self._fallback()

    def _discard(self, resp: http.client.HTTPResponse, url: urllib.parse.SplitResult) -> None:
        """Drain a small answer (an error document) to keep the connection; close on a big one."""
        if resp.length is not None and resp.length <= 64 << 10:
            resp.read()
        else:
            self._drop(url)

    def _fallback(self) -> None:
        self.fallbacks += 1
        return None

    def _disable(self, why: str, netloc: str) -> None:
        if self.enabled:
            self.enabled = False
            log.info("s3_direct_get_off", reason=why, endpoint=netloc,
                     effect="every GET goes through boto3")

    # ---- connections ----------------------------------------------------------------------
    def _connection(self, url: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        conns: dict[str, http.client.HTTPConnection] | None = getattr(self._local, "conns", None)
        if conns is None:
            conns = self._local.conns = {}
        name = f"{url.scheme}://{url.netloc}"
        conn = conns.get(name)
        if conn is None:
            conn = conns[name] = self._connect(url)
        return conn

    def _connect(self, url: urllib.parse.SplitResult) -> http.client.HTTPConnection:
        host = url.hostname or ""
        conn: http.client.HTTPConnection
        if url.scheme == "https":
            conn = http.client.HTTPSConnection(host, url.port, timeout=self._connect_timeout,
                                               context=self._ssl_context())
        else:
            conn = http.client.HTTPConnection(host, url.port, timeout=self._connect_timeout)
        conn.connect()
        if conn.sock is not None:
            conn.sock.settimeout(self._read_timeout)
        return conn

    def _drop(self, url: urllib.parse.SplitResult) -> None:
        conns: dict[str, http.client.HTTPConnection] = getattr(self._local, "conns", {})
        conn = conns.pop(f"{url.scheme}://{url.netloc}", None)
        if conn is not None:
            conn.close()

    def _ssl_context(self) -> ssl.SSLContext:
        if self._ssl is None:
            if self._ca_bundle is False:
                ctx = ssl.create_default_context()
                ctx.check_hostname = False
                ctx.verify_mode = ssl.CERT_NONE
            else:
                cafile = self._ca_bundle if isinstance(self._ca_bundle, str) else _default_ca_bundle()
                ctx = ssl.create_default_context(cafile=cafile)
            self._ssl = ctx
        return self._ssl


def _proxied(url: urllib.parse.SplitResult) -> bool:
    """Whether the environment's proxy settings (what botocore honours too) apply to ``url``."""
    proxies = urllib.request.getproxies()
    if url.scheme not in proxies:
        return False
    return not urllib.request.proxy_bypass(url.hostname or "")


def _default_ca_bundle() -> str | None:
    """botocore's default CA bundle (certifi's when installed), so both paths trust the same CAs."""
    try:
        from botocore.httpsession import get_cert_path

        path: Any = get_cert_path(True)
        return path if isinstance(path, str) else None
    except Exception:
        return None
