"""Raw Kafka frames over TLS for the security tests: what a client sends, byte for byte, to the
endpoint or to the broker, so both answers can be compared."""

from __future__ import annotations

import io
import socket
import ssl
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.errors import ErrorCode
from kio.serial import entity_reader, entity_writer

from tests.security.conftest import Secured

WAIT_S = 30  # socket timeout: only so a broken server fails the test instead of hanging it


def frame(key: int, version: int, corr: int, body: Any) -> bytes:
    cls = load_request_schema(key, version)
    buf = io.BytesIO()
    hdr = cls.__header_schema__
    entity_writer(hdr)(
        buf, hdr(request_api_key=key, request_api_version=version, correlation_id=corr, client_id="sec-test")
    )
    entity_writer(cls)(buf, body)
    return struct.pack(">i", len(buf.getvalue())) + buf.getvalue()


def recv_exact(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = s.recv(n - len(out))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
    return out


def response(s: socket.socket, key: int, version: int) -> Any:
    (size,) = struct.unpack(">i", recv_exact(s, 4))
    data = recv_exact(s, size)
    cls = load_response_schema(key, version)
    _, n = entity_reader(cls.__header_schema__)(data, 0)
    body, _ = entity_reader(cls)(data, n)
    return body


def closed(s: socket.socket) -> bool:
    try:
        return s.recv(1) == b""
    except (ConnectionError, ssl.SSLError):
        return True


def tls(secured: Secured, cert: tuple[str, str] | None = None, port: int | None = None) -> socket.socket:
    """A TLS connection to the endpoint (or to ``port``, e.g. the broker's), trusting the test CA."""
    ctx = ssl.create_default_context(cafile=str(secured.ca.path))
    if cert is not None:
        ctx.load_cert_chain(*cert)
    raw = socket.create_connection(("127.0.0.1", port or secured.endpoint.port), timeout=WAIT_S)
    return ctx.wrap_socket(raw, server_hostname="127.0.0.1")


def api_versions() -> Any:
    return load_request_schema(18, 3)(client_software_name="sec-test", client_software_version="1")


def metadata(topics: list[str] | None = None) -> Any:
    cls = load_request_schema(3, 12)
    tcls = __import__(cls.__module__, fromlist=["MetadataRequestTopic"]).MetadataRequestTopic
    return cls(
        topics=None if topics is None else tuple(tcls(topic_id=None, name=t) for t in topics),
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )


def handshake(s: socket.socket, mechanism: str, corr: int = 2) -> Any:
    s.sendall(frame(17, 1, corr, load_request_schema(17, 1)(mechanism=mechanism)))
    return response(s, 17, 1)


def authenticate(s: socket.socket, token: bytes, corr: int = 3) -> Any:
    s.sendall(frame(36, 2, corr, load_request_schema(36, 2)(auth_bytes=token)))
    return response(s, 36, 2)


def plain_login(s: socket.socket, user: str, password: str) -> Any:
    assert handshake(s, "PLAIN").error_code == ErrorCode.none
    return authenticate(s, b"\0" + user.encode() + b"\0" + password.encode())
