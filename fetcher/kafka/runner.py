"""Run a :class:`KafkaEndpoint` on its own event-loop thread beside synchronous code.

``rlm kafka-serve`` uses it, and so can ``rlm serve --kafka-listener`` or ``rlm run``: the
caller keeps its own main loop (HTTP server, daemon) and gets a handle to stop the listener.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import Future
from pathlib import Path

from fetcher.core import RemoteFetcher
from fetcher.kafka.context import ListenerSettings
from fetcher.kafka.server import KafkaEndpoint
from rlm.errors import ConfigError


def new_event_loop(kind: str) -> asyncio.AbstractEventLoop:
    """The endpoint's loop: uvloop when asked for (or, for ``auto``, when installed).

    Why: every response byte passes through the loop thread; uvloop's transports (and its TLS
    layer) are compiled, the standard library's SSL transport is Python, which is what made TLS
    reads slower than the broker's (docs/kafka-endpoint.md, "Performance").
    """
    if kind in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if kind == "uvloop":
                raise ConfigError("read.kafka_event_loop is 'uvloop' but uvloop is not installed "
                                  "(pip install 'rlm[kafka]')") from None
        else:
            return uvloop.new_event_loop()
    return asyncio.new_event_loop()


class EndpointThread:
    """A started listener; ``port`` is the bound port, ``close()`` stops it (idempotent)."""

    def __init__(self, fetcher: RemoteFetcher, settings: ListenerSettings, state_dir: Path) -> None:
        self._loop = new_event_loop(settings.event_loop)
        self.endpoint = KafkaEndpoint(fetcher, settings, state_dir)
        started: Future[None] = Future()
        self._thread = threading.Thread(target=self._run, args=(started,), name="kafka-endpoint", daemon=True)
        self._thread.start()
        started.result()
        self.port = self.endpoint.port
        self.host = settings.host
        self._closed = False

    def _run(self, started: Future[None]) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self.endpoint.start())
        except BaseException as e:
            self.endpoint.ctx.close()  # cleaned up before the caller hears of the failure
            self._loop.close()
            started.set_exception(e)
            return
        started.set_result(None)
        self._loop.run_forever()
        self._loop.run_until_complete(self.endpoint.stop())
        self._loop.close()

    @property
    def bootstrap(self) -> str:
        return f"{self.endpoint.ctx.advertised_host}:{self.port}"

    def reload_tls(self) -> bool:
        """Load the TLS certificate files again (SIGHUP); False when TLS is off or loading failed."""
        tls = self.endpoint.security.tls
        return tls.reload() if tls is not None else False

    def close(self, timeout: float = 10.0) -> None:
        if self._closed:
            return
        self._closed = True
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout)

    def __enter__(self) -> EndpointThread:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
