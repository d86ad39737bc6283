"""A TLS reload never leaves the listener without a usable certificate (issue 38, item 6).

A rotation that writes the new certificate before its key (or a half-written file) used to load
the certificate into the live context and then fail on the key: OpenSSL had already dropped the
old key, so every new handshake failed. Here the listener is a real asyncio TLS server (what the
Kafka endpoint and uvicorn both are) holding :attr:`ReloadingServerContext.context`; every
assertion is a real handshake, and the certificate it served is compared by serial number.
"""

from __future__ import annotations

import asyncio
import socket
import ssl
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import structlog
from cryptography import x509

from fetcher.tls import ReloadingServerContext
from rlm.config import ListenerSecurity
from tests.daemon.helpers import wait_for
from tests.security.certs import Ca, issue, make_ca

pytestmark = [pytest.mark.security]

_BEGIN_CERT = b"-----BEGIN CERTIFICATE-----"


def _put(path: Path, data: bytes) -> None:
    """Replace one file atomically, as a rotation tool renames each file into place."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


@dataclass(frozen=True)
class Pair:
    key: bytes
    cert: bytes
    serial: int


def _pair(ca: Ca, tmp: Path, cn: str) -> Pair:
    """A server certificate and its key as separate PEM texts."""
    both = issue(ca, tmp / f"{cn}.both.pem", cn).read_bytes()
    at = both.index(_BEGIN_CERT)
    cert = both[at:]
    return Pair(both[:at], cert, x509.load_pem_x509_certificate(cert).serial_number)


class Listener:
    """An asyncio TLS server on its own loop thread that greets with one byte; the handshake is the test."""

    def __init__(self, ctx: ssl.SSLContext) -> None:
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.AbstractServer | None = None
        ready = threading.Event()

        async def start() -> None:
            async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
                writer.write(b"k")
                await writer.drain()
                await reader.read()  # until the client closes
                writer.close()

            self._server = await asyncio.start_server(on_conn, "127.0.0.1", 0, ssl=ctx)

        def run() -> None:
            self._loop.run_until_complete(start())
            ready.set()
            self._loop.run_forever()

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        assert ready.wait(30)
        assert self._server is not None
        self.port: int = int(self._server.sockets[0].getsockname()[1])

    def close(self) -> None:
        async def stop() -> None:
            assert self._server is not None
            self._server.close()

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)


def served_serial(port: int, ca: Ca, client: Path | None = None) -> int:
    """The serial number of the certificate a fresh handshake with 127.0.0.1:``port`` shows
    (no SNI: Kafka clients dialling an address send none)."""
    ctx = ssl.create_default_context(cafile=str(ca.path))
    ctx.check_hostname = False
    if client is not None:
        ctx.load_cert_chain(client)
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
        der = tls.getpeercert(binary_form=True)
        # the server's greeting: under TLS 1.3 its verdict on a client certificate arrives first
        assert tls.recv(1) == b"k"
    assert der is not None
    return x509.load_der_x509_certificate(der).serial_number


def refused_without_client_certificate(port: int, ca: Ca) -> bool:
    """Whether a client without a certificate is turned away (an alert, or closed unanswered)."""
    ctx = ssl.create_default_context(cafile=str(ca.path))
    ctx.check_hostname = False
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=10) as raw, ctx.wrap_socket(raw) as tls:
            return tls.recv(1) == b""
    except (ssl.SSLError, ConnectionError):
        return True


@dataclass
class Setup:
    ca: Ca
    tmp: Path
    cert: Path
    key: Path
    old: Pair
    tls: ReloadingServerContext
    listener: Listener


def _setup(tmp: Path, *, mtls: bool = False) -> Setup:
    ca = make_ca(tmp / "ca")
    sec = {"ssl_client_auth": "required", "ssl_truststore_location": ca.path} if mtls else {}
    old = _pair(ca, tmp, "endpoint-old")
    cert, key = tmp / "server.crt", tmp / "server.key"
    cert.write_bytes(old.cert)
    key.write_bytes(old.key)
    tls = ReloadingServerContext(ListenerSecurity.model_validate({
        "security_protocol": "SSL", "ssl_keystore_location": cert, "ssl_key_location": key,
        "ssl_reload_interval_ms": 0, **sec}))
    return Setup(ca, tmp, cert, key, old, tls, Listener(tls.context))


@pytest.fixture()
def setup(tmp_path: Path) -> Iterator[Setup]:
    s = _setup(tmp_path)
    yield s
    s.listener.close()


def test_certificate_swapped_before_its_key_keeps_the_old_certificate(setup: Setup) -> None:
    s = setup
    assert served_serial(s.listener.port, s.ca) == s.old.serial
    new = _pair(s.ca, s.tmp, "endpoint-new")
    _put(s.cert, new.cert)  # the rotation's first write: the key on disk is still the old one
    with structlog.testing.capture_logs() as logs:
        assert not s.tls.maybe_reload()
        assert not s.tls.maybe_reload()  # nothing changed since: not tried (and not logged) again
    errors = [e for e in logs if e["log_level"] == "error"]
    assert len(errors) == 1 and errors[0]["event"] == "tls_reload_failed"
    assert str(s.cert) in errors[0]["files"] and str(s.key) in errors[0]["files"]
    for _ in range(3):  # every new handshake still succeeds, with the old certificate
        assert served_serial(s.listener.port, s.ca) == s.old.serial
    _put(s.key, new.key)  # the second write: retried because the key file changed
    assert s.tls.maybe_reload()
    assert served_serial(s.listener.port, s.ca) == new.serial
    assert (s.tls.reloads, s.tls.failed_reloads) == (1, 1)


def test_half_written_certificate_keeps_the_old_one(setup: Setup) -> None:
    s = setup
    new = _pair(s.ca, s.tmp, "endpoint-new")
    s.key.write_bytes(new.key)
    s.cert.write_bytes(new.cert[: len(new.cert) // 2])  # a writer caught mid-way
    assert not s.tls.reload()  # the SIGHUP path
    assert served_serial(s.listener.port, s.ca) == s.old.serial
    s.cert.write_bytes(new.cert)
    assert s.tls.reload()
    assert served_serial(s.listener.port, s.ca) == new.serial


def test_watcher_retries_on_the_next_change(setup: Setup) -> None:
    s = setup
    stop = s.tls.watch(0.05)
    try:
        new = _pair(s.ca, s.tmp, "endpoint-new")
        _put(s.cert, new.cert)
        wait_for("the failed reload", lambda: s.tls.failed_reloads == 1, timeout=30)
        assert served_serial(s.listener.port, s.ca) == s.old.serial
        _put(s.key, new.key)
        wait_for("the new certificate served", lambda: served_serial(s.listener.port, s.ca) == new.serial,
                 timeout=30)
        assert s.tls.failed_reloads == 1
    finally:
        stop.set()


def test_client_certificates_still_checked_after_a_reload(tmp_path: Path) -> None:
    s = _setup(tmp_path, mtls=True)
    try:
        client = issue(s.ca, tmp_path / "client.pem", "client", server=False)
        new = _pair(s.ca, s.tmp, "endpoint-new")
        s.cert.write_bytes(new.cert)
        s.key.write_bytes(new.key)
        assert s.tls.reload()
        assert served_serial(s.listener.port, s.ca, client) == new.serial
        assert refused_without_client_certificate(s.listener.port, s.ca)
    finally:
        s.listener.close()
