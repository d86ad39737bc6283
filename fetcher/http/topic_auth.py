"""Per-topic authorization of the HTTP API, whoever decides it (the broker's ACLs or allow rules).

:class:`TopicGate` is the ASGI middleware both modes share: a subclass says who the request is
(:meth:`TopicGate.identify`: a principal and how to learn its topic operations), the gate answers
as the Kafka endpoint does: no or wrong credentials -> 401, a topic without READ -> 403 (JSON,
no detail that would help an attacker), ``/v1/topics`` lists only topics with DESCRIBE,
``/health`` stays open. Each denial is logged once a minute with principal, topic and reason,
never the credentials.

:class:`LocalTokenAuth` is standalone mode (no broker): bearer tokens mapped to principals
(:class:`fetcher.acl.BearerTokens`) and the allow rules of ``read.http_security.allow``.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fetcher.acl import DESCRIBE, READ, AllowRules, BearerTokens

log = structlog.get_logger(__name__)

OPEN_PATHS = frozenset({"/health"})
_TOPIC_PATH = re.compile(r"^/v1/topics/([^/]+)(/|$)")

#: the topic -> operation bits of one principal
TopicOps = Callable[[], Awaitable[dict[str, int]]]


class Unavailable(Exception):
    """The authority (the broker) could not be asked: 503, the client may retry."""


class TopicGate:
    """ASGI middleware: authenticate (:meth:`identify`), then authorize per topic."""

    challenge = 'Bearer realm="rlm"'

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self._denials: dict[tuple[Any, ...], float] = {}

    async def identify(self, scope: Scope) -> tuple[str, TopicOps] | None:
        """(principal, its topic operations) or None when the request is not authenticated."""
        raise NotImplementedError

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        path = str(scope.get("path", ""))
        try:
            who = await self.identify(scope)
            if who is None:
                resp = JSONResponse({"error": "unauthorized", "message": "authentication required"}, 401)
                resp.headers["WWW-Authenticate"] = self.challenge
                await resp(scope, receive, send)
                return
            principal, topic_ops = who
            ops = await topic_ops()
        except Unavailable:
            await JSONResponse({"error": "unavailable", "message": "try again"}, 503)(scope, receive, send)
            return
        except Exception as e:  # no traceback: its frames hold the credentials
            log.error("http_auth_failed", error_type=type(e).__name__)
            await JSONResponse({"error": "unavailable", "message": "try again"}, 503)(scope, receive, send)
            return
        m = _TOPIC_PATH.match(path)
        if m is not None and not ops.get(m.group(1), 0) & READ:
            self.denied(principal, m.group(1), "no READ on topic")
            await JSONResponse({"error": "forbidden", "message": "forbidden"}, 403)(scope, receive, send)
            return
        if path == "/v1/topics":
            await self.app(scope, receive, _only_described(send, ops))
            return
        await self.app(scope, receive, send)

    def denied(self, principal: str | None, topic: str | None, reason: str) -> None:
        """Log a denial once a minute per (principal, topic, reason): a client retrying in a loop
        repeats the same request, one line says all there is (bounded memory)."""
        key = (principal, topic, reason)
        now = time.monotonic()
        if now - self._denials.get(key, -1e18) < 60.0:
            return
        if len(self._denials) > 10_000:
            self._denials.clear()
        self._denials[key] = now
        log.warning("http_request_denied", principal=principal, topic=topic, reason=reason)

    def close(self) -> None:
        """Release what the gate holds (broker connections); nothing here."""


def authorization(scope: Scope) -> tuple[str, bytes] | None:
    """(scheme in lowercase, credentials) of the Authorization header, if any."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, given = value.partition(b" ")
            return scheme.decode("latin-1").lower(), given.strip()
    return None


def bearer_principal(scope: Scope, tokens: BearerTokens) -> tuple[bool, str | None]:
    """(whether a bearer token was sent, the principal it maps to or None)."""
    auth = authorization(scope)
    if auth is None or auth[0] != "bearer":
        return False, None
    try:
        token = auth[1].decode("ascii")
    except UnicodeDecodeError:
        return True, None
    return True, tokens.principal(token)


class LocalTokenAuth(TopicGate):
    """Standalone mode: bearer tokens -> principals, topics by the allow rules."""

    def __init__(
        self, app: ASGIApp, tokens: BearerTokens, rules: AllowRules, topics: Callable[[], Any]
    ) -> None:
        super().__init__(app)
        self.tokens = tokens
        self.rules = rules
        self._topics = topics  # the read core's topic names (fetcher.topics)

    async def identify(self, scope: Scope) -> tuple[str, TopicOps] | None:
        sent, principal = bearer_principal(scope, self.tokens)
        if principal is None:
            self.denied(None, None, "unknown bearer token" if sent else "no credentials")
            return None

        async def ops() -> dict[str, int]:
            names = await asyncio.to_thread(lambda: list(self._topics()))  # lists the metadata store
            return self.rules.topic_ops(principal, names)

        return principal, ops


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
