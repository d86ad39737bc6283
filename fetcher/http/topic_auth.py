"""Per-topic authorization of the HTTP API, whoever decides it (the broker's ACLs or allow rules).

:class:`TopicGate` is the ASGI middleware both modes share: a subclass says who the request is
(:meth:`TopicGate.identify`: a principal and how to learn its topic operations), the gate answers
as the Kafka endpoint does: no or wrong credentials -> 401, a topic without READ -> 403 (JSON,
no detail that would help an attacker), ``/v1/topics`` lists only topics with DESCRIBE,
``/health`` stays open. Each denial is logged once a minute with principal, topic and reason,
never the credentials. Failed logins are limited per client address (and, for Basic, per user:
:class:`fetcher.cluster_auth.login_limits.LoginLimiter`); a client over its limit gets 429 with
``Retry-After`` before its credentials are checked (:func:`fetcher.http.auth.too_many_logins`).

:class:`LocalTokenAuth` is standalone mode (no broker): bearer tokens mapped to principals
(:class:`fetcher.cluster_auth.acl.BearerTokens`) and the allow rules of ``read.http_security.allow``.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

import structlog
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fetcher.cluster_auth import DESCRIBE, READ, AllowRules, BearerTokens, LoginLimiter
from fetcher.http.auth import OPEN_PATHS, authorization, client_address, too_many_logins
from fetcher.log_once import first_in_window

log = structlog.get_logger(__name__)

_TOPIC_PATH = re.compile(r"^/v1/topics/([^/]+)(/|$)")

#: the topic -> operation bits of one principal
TopicOps = Callable[[], Awaitable[dict[str, int]]]


class Unavailable(Exception):
    """The authority (the broker) could not be asked: 503, the client may retry."""


class TooManyLogins(Exception):
    """The client (its address, or the user it logs in as) is over its failed-login limit: 429,
    the credentials were not checked."""


class TopicGate:
    """ASGI middleware: authenticate (:meth:`identify`), then authorize per topic."""

    challenge = 'Bearer realm="rlm"'

    def __init__(self, app: ASGIApp, limits: LoginLimiter | None = None) -> None:
        self.app = app
        self.limits = limits if limits is not None else LoginLimiter()
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
        except TooManyLogins:
            await too_many_logins(self.limits)(scope, receive, send)
            return
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
        if first_in_window(self._denials, (principal, topic, reason)):
            log.warning("http_request_denied", principal=principal, topic=topic, reason=reason)

    def bearer(self, scope: Scope, tokens: BearerTokens) -> str | None:
        """The principal of the request's credentials as a bearer token, or None (logged, and
        counted against the client's address when credentials were sent). Raises
        :class:`TooManyLogins` for an address over its limit, before the token is looked up."""
        auth = authorization(scope)
        if auth is None:
            self.denied(None, None, "no credentials")
            return None
        address = client_address(scope)
        if not self.limits.allowed(address):
            self.denied(None, None, "too many failed logins from the address")
            raise TooManyLogins
        principal = _token_principal(auth, tokens)
        if principal is None:
            self.limits.failed(address)
            self.denied(None, None, "unknown bearer token" if auth[0] == "bearer" else "not a bearer token")
        return principal

    def close(self) -> None:
        """Release what the gate holds (broker connections); nothing here."""


def _token_principal(auth: tuple[str, bytes], tokens: BearerTokens) -> str | None:
    if auth[0] != "bearer":
        return None
    try:
        token = auth[1].decode("ascii")
    except UnicodeDecodeError:
        return None
    return tokens.principal(token)


class LocalTokenAuth(TopicGate):
    """Standalone mode: bearer tokens -> principals, topics by the allow rules."""

    def __init__(
        self, app: ASGIApp, tokens: BearerTokens, rules: AllowRules, topics: Callable[[], Any],
        limits: LoginLimiter | None = None,
    ) -> None:
        super().__init__(app, limits)
        self.tokens = tokens
        self.rules = rules
        self._topics = topics  # the read core's topic names (fetcher.topics)

    async def identify(self, scope: Scope) -> tuple[str, TopicOps] | None:
        principal = self.bearer(scope, self.tokens)
        if principal is None:
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
