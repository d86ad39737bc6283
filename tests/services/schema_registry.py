"""A small in-process stand-in for a Confluent-compatible Schema Registry (tests only).

No real registry starts on this machine: Apicurio Registry is published on Maven Central only as
its Quarkus application jar, whose own modules (``apicurio-registry-schema-util-*``,
``-contracts-rules``, ``-config-*``) are not there, so it cannot be built from Central; Karapace
and Confluent's registry are not in the reachable package registries. This server answers the
part of Confluent's REST API that producers and ``rlm iceberg`` use, with Confluent's status
codes and error bodies:

* ``POST /subjects/{subject}/versions`` ``{"schema": "...", "schemaType"?: "AVRO", "references"?:
  [{"name", "subject", "version"}]}`` -> ``{"id": N}`` (the same schema text and references under
  any subject get the same id, as in Confluent's registry; a reference to a version that does
  not exist is 422 ``{"error_code": 42201}``);
* ``POST /subjects/{subject}`` (the same body) -> ``{"subject", "id", "version", "schema"}``: is
  this schema registered under the subject (Confluent's lookup; 404 40403 when not);
* ``GET /schemas/ids/{id}`` -> ``{"schema": "..."}`` (``schemaType`` when not AVRO,
  ``references`` when it has some), or 404 ``{"error_code": 40403, "message": "Schema not found"}``;
* ``GET /subjects/{subject}/versions/{version}`` (a number or ``latest``) ->
  ``{"subject", "version", "id", "schema"}`` (``schemaType``, ``references`` as above), or 404
  ``{"error_code": 40401, "message": "Subject ... not found."}`` / 40402 for a missing version.

``schemaType`` is ``AVRO``, ``JSON`` (a JSON Schema document) or ``PROTOBUF``, as in Confluent's.
A schema's text is served as it was registered: Confluent's registry turns a Protobuf schema
registered as a base64 ``FileDescriptorProto`` (what confluent-kafka's Python serializer sends)
into ``.proto`` text; this one serves the base64 back (``rlm iceberg`` reads both).

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
        self.ids: dict[tuple[str, str, str], int] = {}
        self.schemas: dict[int, tuple[str, str]] = {}
        self.references: dict[int, list[dict[str, Any]]] = {}
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
        path = self.path.split("?")[0]  # a subject is URL-quoted (it may hold a `/`)
        version = re.fullmatch(r"/subjects/([^/]+)/versions/(latest|\d+)", path)
        if version is not None:
            self._version(urllib.parse.unquote(version.group(1)), version.group(2))
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
        self._send(200, self._body(int(m.group(1)), {}))

    def _body(self, sid: int, head: dict[str, Any]) -> dict[str, Any]:
        text, kind = self.registry.schemas[sid]
        body: dict[str, Any] = {**head, "schema": text}
        if kind != "AVRO":
            body["schemaType"] = kind
        if self.registry.references.get(sid):
            body["references"] = self.registry.references[sid]
        return body

    def _version(self, subject: str, version: str) -> None:
        reg = self.registry
        with reg.lock:
            versions = reg.subjects.get(subject)
            if not versions:
                self._send(404, {"error_code": 40401, "message": f"Subject '{subject}' not found."})
                return
            v = len(versions) if version == "latest" else int(version)
            if not 1 <= v <= len(versions):
                self._send(404, {"error_code": 40402, "message": f"Version {version} not found."})
                return
            sid = versions[v - 1]
            self._send(200, self._body(sid, {"subject": subject, "version": v, "id": sid}))

    def do_POST(self) -> None:
        m = re.fullmatch(r"/subjects/([^/]+)(/versions)?", self.path.split("?")[0])
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", "0"))) or b"{}")
        if m is None or "schema" not in body:
            self._send(422, {"error_code": 42201, "message": "Invalid schema"})
            return
        reg, kind = self.registry, str(body.get("schemaType") or "AVRO")
        subject = urllib.parse.unquote(m.group(1))
        refs = [{"name": str(r["name"]), "subject": str(r["subject"]), "version": int(r["version"])}
                for r in body.get("references") or []]
        key = (str(body["schema"]), kind, json.dumps(refs, sort_keys=True))
        with reg.lock:
            if m.group(2) is None:  # lookup
                sid = reg.ids.get(key)
                versions = reg.subjects.get(subject, [])
                if sid is None or sid not in versions:
                    self._send(404, {"error_code": 40403, "message": "Schema not found"})
                    return
                self._send(200, self._body(sid, {"subject": subject, "id": sid,
                                                 "version": versions.index(sid) + 1}))
                return
            for r in refs:
                if not 1 <= r["version"] <= len(reg.subjects.get(r["subject"], [])):
                    self._send(422, {"error_code": 42201, "message": f"Invalid schema: no reference {r}"})
                    return
            sid = reg.ids.setdefault(key, len(reg.ids) + 1)
            reg.schemas[sid] = key[:2]
            reg.references[sid] = refs
            versions = reg.subjects.setdefault(subject, [])
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
