"""Serving the HTTP API with uvicorn: in the foreground (``rlm serve``) or on a thread (``rlm run``
with ``read.serve_http``, and tests).

uvicorn is the ASGI server (h11, graceful shutdown on SIGTERM/SIGINT in the foreground); the
server owns its :class:`~fetcher.core.RemoteFetcher` when built from a config and closes it last.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable
from typing import Any

import structlog
import uvicorn

from fetcher.cluster_auth import LoginLimiter
from fetcher.core import RemoteFetcher
from fetcher.http.app import create_app
from fetcher.http.auth import load_token
from fetcher.http.security import secure_app
from fetcher.http.topic_auth import TopicGate
from rlm.config import DaemonConfig, ListenerSecurity
from rlm.errors import ConfigError

log = structlog.get_logger(__name__)

_STARTUP_TIMEOUT_S = 30.0
_GRACEFUL_S = 5


class _AnnouncingServer(uvicorn.Server):
    """uvicorn's server that calls ``on_listening`` once its sockets listen (``rlm serve`` prints
    every address then: uvicorn's own "running on" line goes to a logger, not to the operator)."""

    on_listening: Callable[[], None] | None = None

    async def startup(self, sockets: Any = None) -> None:
        await super().startup(sockets)
        if self.started and self.on_listening is not None:
            self.on_listening()


class HttpApiServer:
    """One uvicorn server over one fetcher; ``port`` is the bound port once started."""

    def __init__(self, fetcher: RemoteFetcher, host: str, port: int, *, token: str | None = None,
                 owns_fetcher: bool = False, security: ListenerSecurity | None = None) -> None:
        self.fetcher = fetcher
        self.host = host
        self._owns = owns_fetcher
        sec = security if security is not None else fetcher.read_config.http_security
        if token is not None and (sec.bearer_tokens or sec.bearer_tokens_file is not None):
            raise ConfigError("read.http_token_* (one token for everything) and read.http_security bearer "
                              "tokens (per principal) exclude each other: keep one")
        #: failed logins of this server, whichever authentication checked them (static token, Basic, bearer)
        self.login_limits = LoginLimiter.from_security(sec)
        #: the authenticating middleware of read.http_security (None: open, or the static token only)
        self.gate: TopicGate | None
        tls, app, self.gate, self._stop_watch = secure_app(
            create_app(fetcher, token=token, login_limits=self.login_limits), sec, fetcher, self.login_limits)
        self.tls = tls
        config = uvicorn.Config(app, host=host, port=port, log_config=None,
                                access_log=False, lifespan="off", server_header=False,
                                timeout_graceful_shutdown=_GRACEFUL_S,
                                ssl_context_factory=(lambda _c, _d: tls.context) if tls is not None else None)
        self._server = _AnnouncingServer(config)
        self._thread: threading.Thread | None = None
        self.port = port

    @classmethod
    def from_config(cls, config: DaemonConfig) -> HttpApiServer:
        token = load_token(config.read)  # before opening anything: a missing secret fails fast
        fetcher = RemoteFetcher.from_config(config)
        try:
            return cls(fetcher, config.read.http_host, config.read.http_port, token=token, owns_fetcher=True)
        except BaseException:
            fetcher.close()
            raise

    def addresses(self) -> list[str]:
        """Every URL the server listens on (one per socket: IPv4 and IPv6 of a wildcard host)."""
        scheme = "https" if self.tls is not None else "http"
        out = []
        for srv in self._server.servers:
            for sock in srv.sockets:
                host, port = sock.getsockname()[:2]
                out.append(f"{scheme}://{f'[{host}]' if ':' in host else host}:{port}/")
        return out

    def announce(self, show: Callable[[str], None]) -> None:
        """Call ``show`` with each address once the server listens (before :meth:`serve`)."""
        def listening() -> None:
            for url in self.addresses():
                show(url)

        self._server.on_listening = listening

    def _bound_port(self) -> int:
        for srv in self._server.servers:
            for sock in srv.sockets:
                return int(sock.getsockname()[1])
        return self.port

    def serve(self, on_stop: Callable[[], None] | None = None) -> None:
        """Serve in the calling (main) thread until SIGTERM/SIGINT; then run ``on_stop`` (other
        faces on the same fetcher, e.g. the Kafka listener, finish their requests) and close the
        fetcher last.

        uvicorn handles the signals (graceful shutdown; a second SIGINT forces it) and re-raises
        them afterwards to the previous handlers: ours only note it, so the process exits 0."""
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda signum, _frame: log.info("shutdown_requested", signal=signum))
        try:
            self._server.run()
            if not self._server.started:
                raise ConfigError(f"read.http_host/http_port: cannot serve on {self.host}:{self.port}")
        finally:
            try:
                if on_stop is not None:
                    on_stop()
            finally:
                self._close_fetcher()

    def start(self) -> HttpApiServer:
        """Serve on a background thread; returns once the socket is listening."""
        self._thread = threading.Thread(target=self._server.run, name="rlm-http-api", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + _STARTUP_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self._close_fetcher()
                raise ConfigError(f"read.http_host/http_port: cannot serve on {self.host}:{self.port}")
            time.sleep(0.01)
        self.port = self._bound_port()
        log.info("http_api_listening", host=self.host, port=self.port)
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop accepting, let running responses end (bounded), then close the fetcher."""
        self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout)
        self._close_fetcher()

    def _close_fetcher(self) -> None:
        self._stop_watch.set()
        if self.gate is not None:
            self.gate.close()
        if self._owns:
            self.fetcher.close()
