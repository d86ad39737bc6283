"""Server-side TLS of the read faces: a PEM certificate + key, optional client certificates (mTLS),
reloaded without a restart when the files change or on SIGHUP.

Why one :class:`ssl.SSLContext` that is reloaded in place rather than a new one per change: the
listening socket keeps the context it was started with, and ``load_cert_chain`` /
``load_verify_locations`` on that same context apply to every handshake after the call, while
connections already open keep the certificate they were set up with (as Kafka's own dynamic
keystore update behaves). A file that fails to load (half-written during a rotation) leaves the
previous certificate in place and is retried at the next check.
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
    """An ``ssl.SSLContext`` for a server face plus :meth:`maybe_reload` / :meth:`reload`."""

    def __init__(self, sec: ListenerSecurity, what: str = "kafka endpoint") -> None:
        if sec.ssl_keystore_location is None:
            raise ConfigError(f"{what}: TLS needs ssl.keystore.location (a PEM certificate chain + key)")
        self.what = what
        self._cert = sec.ssl_keystore_location
        self._key = sec.ssl_key_location
        self._password = sec.ssl_key_password.get_secret_value() if sec.ssl_key_password else None
        self._ca = sec.ssl_truststore_location
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self.context.verify_mode = _CLIENT_AUTH[sec.ssl_client_auth]
        self._lock = threading.Lock()
        self._stamp: tuple[float, ...] = ()
        try:
            self._load()
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"{what}: cannot load the TLS certificate/key/truststore: {e}") from e
        self.reloads = 0

    def _files(self) -> list[Path]:
        return [p for p in (self._cert, self._key, self._ca) if p is not None]

    def _mtimes(self) -> tuple[float, ...]:
        out = []
        for p in self._files():
            try:
                st = p.stat()
                out.append(st.st_mtime_ns + st.st_size / 1e12)
            except OSError:
                out.append(-1.0)
        return tuple(out)

    def _load(self) -> None:
        stamp = self._mtimes()
        self.context.load_cert_chain(self._cert, self._key, password=self._password)
        if self._ca is not None:
            self.context.load_verify_locations(cafile=self._ca)
        self._stamp = stamp

    def maybe_reload(self) -> bool:
        """Reload when a file changed since the last load; True when a new certificate is in use."""
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
        """Load the files again (SIGHUP); a failure is logged and the old certificate kept."""
        with self._lock:
            try:
                self._load()
            except (OSError, ssl.SSLError) as e:
                log.warning("tls_reload_failed", face=self.what, error=str(e))
                return False
            self.reloads += 1
            log.info("tls_reloaded", face=self.what, reloads=self.reloads)
            return True
