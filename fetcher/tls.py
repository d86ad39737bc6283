"""Server-side TLS of the read faces: a PEM certificate + key, optional client certificates (mTLS),
reloaded without a restart when the files change or on SIGHUP.

Why the listener's context is never loaded again: ``load_cert_chain`` on a live context is two
steps (the certificate, then its key), and OpenSSL drops the key as soon as a certificate that
does not match it is set. A rotation that writes the certificate before the key, or a
half-written file, would leave the listener with a certificate and no key, and every new
handshake would fail. So each (re)load builds a scratch :class:`ssl.SSLContext`, and only a
context that loaded whole (certificate, matching key, truststore) becomes :attr:`current`.

How the swap reaches the listener: an asyncio server (the Kafka endpoint, uvicorn for the HTTP
API) holds the one :attr:`ReloadingServerContext.context` it was started with. That context's
``sni_callback`` (called by OpenSSL for every ClientHello, with or without SNI) hands the
connection to :attr:`current` before the server's certificate is chosen, so every handshake after
a good reload uses the new certificate, connections already open keep theirs (as Kafka's dynamic
keystore update behaves), and a failed reload changes nothing: one error naming the files, the
old certificate served, the files tried again when they next change.
"""

from __future__ import annotations

import ssl
import threading
from pathlib import Path

import structlog

from rlm.config import ListenerSecurity
from rlm.errors import ConfigError

log = structlog.get_logger(__name__)

_CLIENT_AUTH = {"required": ssl.CERT_REQUIRED, "requested": ssl.CERT_OPTIONAL, "none": ssl.CERT_NONE}


class ReloadingServerContext:
    """The ``ssl.SSLContext`` a server face listens with (:attr:`context`) plus
    :meth:`maybe_reload` / :meth:`reload`, which never leave it half-loaded."""

    def __init__(self, sec: ListenerSecurity, what: str = "kafka endpoint") -> None:
        if sec.ssl_keystore_location is None:
            raise ConfigError(f"{what}: TLS needs ssl.keystore.location (a PEM certificate chain + key)")
        self.what = what
        self._cert = sec.ssl_keystore_location
        self._key = sec.ssl_key_location
        self._password = sec.ssl_key_password.get_secret_value() if sec.ssl_key_password else None
        self._ca = sec.ssl_truststore_location
        self._verify_mode = _CLIENT_AUTH[sec.ssl_client_auth]
        self._lock = threading.Lock()
        self._stamp = self._mtimes()
        try:
            self.context = self._build()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"{what}: cannot load the TLS certificate/key/truststore: {e}") from e
        #: the wholly loaded context new handshakes use; replaced only by a reload that succeeded
        self.current = self.context
        self.context.sni_callback = self._hand_over
        self.reloads = 0
        self.failed_reloads = 0

    def _files(self) -> list[Path]:
        return [p for p in (self._cert, self._key, self._ca) if p is not None]

    def _mtimes(self) -> tuple[tuple[int, int, int] | None, ...]:
        """What tells a changed file: modification time, size and inode (a rename-into-place is a
        new inode even within one tick of the file system's clock); None for a missing file."""
        out: list[tuple[int, int, int] | None] = []
        for p in self._files():
            try:
                st = p.stat()
                out.append((st.st_mtime_ns, st.st_size, st.st_ino))
            except OSError:
                out.append(None)
        return tuple(out)

    def _build(self) -> ssl.SSLContext:
        """A new context with the files loaded; raises if any of them does not load."""
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.verify_mode = self._verify_mode
        ctx.load_cert_chain(self._cert, self._key, password=self._password)
        if self._ca is not None:
            ctx.load_verify_locations(cafile=self._ca)
        return ctx

    def _hand_over(self, conn: ssl.SSLObject | ssl.SSLSocket, _server_name: str | None,
                   ctx: ssl.SSLContext) -> None:
        """The listener's ClientHello callback: the handshake continues on :attr:`current`."""
        current = self.current
        if current is not ctx:
            conn.context = current

    def maybe_reload(self) -> bool:
        """Reload when a file changed since the last attempt; True when a new certificate is in use.
        A failed attempt is not repeated until a file changes again (one error per bad state)."""
        if self._mtimes() == self._stamp:
            return False
        return self.reload()

    def watch(self, interval_s: float) -> threading.Event:
        """Check the files every ``interval_s`` on a daemon thread (for servers that run their own
        event loop, e.g. uvicorn); set the returned event to stop."""
        stop = threading.Event()

        def run() -> None:
            while not stop.wait(interval_s):
                self.maybe_reload()

        if interval_s > 0:
            threading.Thread(target=run, name=f"tls-reload-{self.what}", daemon=True).start()
        return stop

    def reload(self) -> bool:
        """Load the files into a scratch context and use it for new handshakes (SIGHUP); on a
        failure one error is logged and the old certificate stays in use."""
        with self._lock:
            stamp = self._mtimes()
            try:
                fresh = self._build()
            except (OSError, ssl.SSLError) as e:
                self._stamp = stamp  # retried when a file changes (e.g. the key written after its cert)
                self.failed_reloads += 1
                log.error("tls_reload_failed", face=self.what, files=[str(p) for p in self._files()],
                          error=str(e), kept="the previous certificate")
                return False
            self._stamp = stamp
            self.current = fresh
            self.reloads += 1
            log.info("tls_reloaded", face=self.what, reloads=self.reloads)
            return True
