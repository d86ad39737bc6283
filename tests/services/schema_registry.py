"""A small in-process stand-in for a Confluent-compatible Schema Registry (tests only).

No real registry starts on this machine: Apicurio Registry is published on Maven Central only as
its Quarkus application jar, whose own modules (``apicurio-registry-schema-util-*``,
``-contracts-rules``, ``-config-*``) are not there, so it cannot be built from Central; Karapace
and Confluent's registry are not in the reachable package registries. This server answers the
part of Confluent's REST API that producers and ``rlm iceberg`` use, with Confluent's status
codes and error bodies:

* ``POST /subjects/{subject}/versions`` ``{"schema": "...", "schemaType"?: "AVRO"}`` -> ``{"id": N}``
  (the same schema text under any subject gets the same id, as in Confluent's registry);
* ``GET /schemas/ids/{id}`` -> ``{"schema": "..."}`` (``schemaType`` when not AVRO), or 404
  ``{"error_code": 40403, "message": "Schema not found"}``;
* ``GET /subjects/{subject}/versions/latest`` -> ``{"subject", "version", "id", "schema"}``
  (``schemaType`` when not AVRO), or 404 ``{"error_code": 40401, "message": "Subject ... not found."}``.

``schemaType`` is ``AVRO``, ``JSON`` (a JSON Schema document) or ``PROTOBUF``, as in Confluent's.

It counts the by-id requests, so a test can check the client's cache.
"""

from __future__ import annotations

import json
import re
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class _Registry:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.ids: dict[tuple[str, str], int] = {}
        self.schemas: dict[int, tuple[str, str]] = {}
        self.subjects: dict[str, list[int]] = {}
        self.by_id_requests = 0


class _Handler(BaseHTTPRequestHandler):
    registry: _Registry

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        return

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        path = urllib.parse.unquote(self.path.split("?")[0])
        latest = re.fullmatch(r"/subjects/([^/]+)/versions/latest", path)
        if latest is not None:
            self._latest(latest.group(1))
            return
        m = re.fullmatch(r"/schemas/ids/(\d+)", path)
        if m is None:
            self._send(404, {"error_code": 404, "message": "HTTP 404 Not Found"})
            return
        reg = self.registry
        with reg.lock:
            reg.by_id_requests += 1
            found = reg.schemas.get(int(m.group(1)))
        if found is None:
            self._send(404, {"error_code": 40403, "message": "Schema not found"})
            return
        text, kind = found
        self._send(200, {"schema": text} if kind == "AVRO" else {"schema": text, "schemaType": kind})

    def _latest(self, subject: str) -> None:
        reg = self.registry
        with reg.lock:
            versions = reg.subjects.get(subject)
            if not versions:
                self._send(404, {"error_code": 40401, "message": f"Subject '{subject}' not found."})
                return
            sid = versions[-1]
            text, kind = reg.schemas[sid]
        body: dict[str, Any] = {"subject": subject, "version": len(versions), "id": sid, "schema": text}
        if kind != "AVRO":
            body["schemaType"] = kind
        self._send(200, body)

    def do_POST(self) -> None:
        m = re.fullmatch(r"/subjects/([^/]+)/versions", urllib.parse.unquote(self.path))
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if m is None or "schema" not in body:
            self._send(422, {"error_code": 42201, "message": "Invalid schema"})
            return
        reg, kind = self.registry, str(body.get("schemaType", "AVRO"))
        with reg.lock:
            key = (body["schema"], kind)
            sid = reg.ids.setdefault(key, len(reg.ids) + 1)
            reg.schemas[sid] = key
            versions = reg.subjects.setdefault(m.group(1), [])
            if sid not in versions:
                versions.append(sid)
        self._send(200, {"id": sid})


class SchemaRegistryServer:
    def __init__(self) -> None:
        self.registry = _Registry()
        handler = type("Handler", (_Handler,), {"registry": self.registry})
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, name="schema-registry", daemon=True)

    @property
    def by_id_requests(self) -> int:
        return self.registry.by_id_requests


@contextmanager
def schema_registry() -> Iterator[SchemaRegistryServer]:
    server = SchemaRegistryServer()
    server.thread.start()
    try:
        yield server
    finally:
        server.httpd.shutdown()
        server.httpd.server_close()
        server.thread.join(10)
