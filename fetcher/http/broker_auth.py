"""HTTP Basic credentials checked by the broker and topics authorized by its ACLs (the HTTP face of
the Kafka endpoint's relay: ``fetcher.kafka.sasl``/``authz``). Imported only when
``read.http_security`` uses SASL, so the HTTP API runs without the ``kafka`` extra otherwise."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import time
from typing import Any

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fetcher.kafka.authz import DESCRIBE, READ, AuthzCache
from fetcher.kafka.broker_login import BrokerLogin, LoginRefusedError
from fetcher.kafka.sasl import BrokerAccess, BrokerSession
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError

log = structlog.get_logger(__name__)

OPEN_PATHS = frozenset({"/health"})
_TOPIC_PATH = re.compile(r"^/v1/topics/([^/]+)(/|$)")


class HttpBrokerAuth:
    """ASGI middleware: Basic credentials checked by the broker, topics authorized by its ACLs."""

    def __init__(self, app: ASGIApp, sec: ListenerSecurity, access: BrokerAccess) -> None:
        if not sec.sasl:
            raise ConfigError("read.http_security: broker authentication needs SASL_SSL or SASL_PLAINTEXT")
        self.app = app
        self.mechanism = sec.sasl_enabled_mechanisms[0]
        self.access = access
        self.ttl_s = sec.authz_cache_ms / 1000
        self.cache = AuthzCache(self.ttl_s)
        self._key = os.urandom(32)  # keys the credential cache; never leaves the process
        self._logins: dict[bytes, tuple[float, str, BrokerSession]] = {}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        try:
            who = await self._authenticate(scope)
        except Exception as e:  # no traceback: its frames hold the credentials
            log.error("http_auth_failed", error_type=type(e).__name__)
            await JSONResponse({"error": "unavailable", "message": "try again"}, 503)(scope, receive, send)
            return
        if who is None:
            resp = JSONResponse({"error": "unauthorized", "message": "authentication required"}, 401)
            resp.headers["WWW-Authenticate"] = 'Basic realm="rlm"'
            await resp(scope, receive, send)
            return
        principal, session = who
        try:
            ops = await self.cache.topic_ops(principal, session)
        except (ConnectionError, TimeoutError, OSError) as e:
            log.warning("http_authz_broker_lost", principal=principal, error=str(e))
            self._forget(session)
            await JSONResponse({"error": "unavailable", "message": "try again"}, 503)(scope, receive, send)
            return
        m = _TOPIC_PATH.match(path)
        if m is not None and not ops.get(m.group(1), 0) & READ:
            self._denied(principal, m.group(1), "no READ on topic")
            await JSONResponse({"error": "forbidden", "message": "forbidden"}, 403)(scope, receive, send)
            return
        if path == "/v1/topics":
            await self.app(scope, receive, _only_described(send, ops))
            return
        await self.app(scope, receive, send)

    async def _authenticate(self, scope: Scope) -> tuple[str, BrokerSession] | None:
        creds = _basic(scope)
        if creds is None:
            self._denied(None, None, "no Basic credentials")
            return None
        user, password = creds
        key = hmac.digest(self._key, user.encode() + b"\0" + password.encode(), hashlib.sha256)
        hit = self._logins.get(key)
        if hit is not None and time.monotonic() < hit[0] and hit[2].conn.reusable(3600):
            return hit[1], hit[2]
        if hit is not None:
            hit[2].close()
            self._logins.pop(key, None)
        try:
            conn, broker = await self.access.connect()
        except ConnectionError as e:
            log.warning("http_auth_broker_unreachable", error=str(e))
            return None
        login = BrokerLogin("SASL_SSL", self.mechanism, user, password)
        try:
            await login.authenticate(lambda req: conn.call(req, self.access.timeout_s), broker)
        except (LoginRefusedError, ConnectionError, TimeoutError, OSError):
            conn.close()
            self._denied(f"User:{user}", None, "login refused by the broker")
            return None
        session = BrokerSession(conn, broker, self.access)
        if len(self._logins) > 10_000:
            for _, _, s in self._logins.values():
                s.close()
            self._logins.clear()
        self._logins[key] = (time.monotonic() + self.ttl_s, f"User:{user}", session)
        return f"User:{user}", session

    def _forget(self, session: BrokerSession) -> None:
        session.close()
        for k, v in list(self._logins.items()):
            if v[2] is session:
                del self._logins[k]

    def _denied(self, principal: str | None, topic: str | None, reason: str) -> None:
        if self.cache.first_denial(("http", principal, topic, reason)):
            log.warning("http_request_denied", principal=principal, topic=topic, reason=reason)

    def close(self) -> None:
        for _, _, s in self._logins.values():
            s.close()
        self._logins.clear()


def _basic(scope: Scope) -> tuple[str, str] | None:
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, given = value.partition(b" ")
            if scheme.lower() != b"basic":
                return None
            try:
                user, sep, password = base64.b64decode(given.strip(), validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            return (user, password) if sep and user else None
    return None


def _only_described(send: Send, ops: dict[str, int]) -> Send:
    """Drop topics without DESCRIBE from the ``/v1/topics`` JSON body (buffered: it is small)."""
    start: dict[str, Any] = {}
    body = bytearray()

    async def wrapped(message: Message) -> None:
        if message["type"] == "http.response.start":
            start.update(message)
            return
        if message["type"] != "http.response.body":
            await send(message)
            return
        body.extend(message.get("body", b""))
        if message.get("more_body", False):
            return
        data = bytes(body)
        if start.get("status") == 200:
            doc = json.loads(data)
            doc["topics"] = [t for t in doc.get("topics", []) if ops.get(str(t.get("topic")), 0) & DESCRIBE]
            data = json.dumps(doc).encode()
        headers = [(k, v) for k, v in start.get("headers", []) if k.lower() != b"content-length"]
        headers.append((b"content-length", str(len(data)).encode()))
        await send({**start, "headers": headers})
        await send({"type": "http.response.body", "body": data, "more_body": False})

    return wrapped
