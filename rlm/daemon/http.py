"""``/metrics`` (Prometheus text format), ``/health`` and ``/ready`` over the standard library's HTTP server.

A stdlib server keeps the daemon free of web-framework dependencies; it runs in one named
daemon thread and binds 127.0.0.1 unless configured otherwise.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from rlm.daemon.metrics import DaemonMetrics

log = structlog.get_logger(__name__)

CONTENT_TYPE_LATEST = "text/plain; version=0.0.4; charset=utf-8"


Check = Callable[[], tuple[bool, dict[str, Any]]]


class MetricsServer:
    """Serves ``/metrics``, ``/health`` (liveness) and ``/ready`` (readiness); each check returns
    (ok, details). A ``status`` in the details (``degraded``) overrides the plain ok/unhealthy word."""

    def __init__(
        self, host: str, port: int, metrics: DaemonMetrics, health: Check, ready: Check | None = None
    ) -> None:
        self._metrics = metrics
        self._checks = {"/health": health, "/ready": ready or health}
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0]
                if path == "/metrics":
                    body = outer._metrics.render()
                    self._send(200, CONTENT_TYPE_LATEST, body)
                elif path in outer._checks:
                    ok, details = outer._checks[path]()
                    word = "ok" if ok else "unhealthy" if path == "/health" else "not ready"
                    body = json.dumps({"status": word, **details}).encode()
                    self._send(200 if ok else 503, "application/json", body)
                else:
                    self._send(404, "text/plain", b"not found\n")

            def _send(self, code: int, ctype: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="rlm-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("http_started", host=self._server.server_address[0], port=self.port)

    def stop(self, timeout: float = 5.0) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout)
