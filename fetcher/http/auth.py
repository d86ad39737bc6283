"""Optional bearer-token authentication of the HTTP API, and the request parts every
authentication of it reads (the ``Authorization`` header, the client's address, the answer to a
client over its failed-login limit).

The token is read once at startup from the environment variable named by
``read.http_token_env`` or from the first line of ``read.http_token_file``; configured but
missing or empty is a startup error (fail closed, not open). Requests are compared in constant
time; the token is never logged nor echoed. ``/health`` stays open so probes need no secret.

Failed logins are limited per client address (:class:`fetcher.cluster_auth.login_limits.LoginLimiter`, the
``login_failures_*`` keys of ``read.http_security``): a request that sent credentials which did
not authenticate counts; once an address is over its limit every request of it that carries
credentials gets 429 with ``Retry-After`` (the window) before its credentials are looked at, so
guessing costs the guesser the window, not the server a check. A request without credentials is
no login attempt: 401, not counted.
"""

from __future__ import annotations

import hmac
import math
import os

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from fetcher.cluster_auth import LoginLimiter
from fetcher.http.errors import error_body
from rlm.config import ReadConfig
from rlm.errors import ConfigError

OPEN_PATHS = frozenset({"/health"})


def authorization(scope: Scope) -> tuple[str, bytes] | None:
    """(scheme in lowercase, credentials) of the request's Authorization header, if any."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            scheme, _, given = value.partition(b" ")
            return scheme.decode("latin-1").lower(), given.strip()
    return None


def client_address(scope: Scope) -> str:
    """The peer's IP address, what failed logins are counted by ("" when the server has none)."""
    client = scope.get("client")
    return str(client[0]) if client else ""


def too_many_logins(limits: LoginLimiter) -> JSONResponse:
    """429 for a client over its failed-login limit; ``Retry-After`` is the window, the longest
    the refusal can last (refused attempts are not counted)."""
    resp = error_body(429, "too_many_failed_logins", "too many failed logins; try again later")
    resp.headers["Retry-After"] = str(max(1, math.ceil(limits.window_s)))
    return resp


def load_token(read: ReadConfig) -> str | None:
    """The configured token, or ``None`` when the API is open."""
    if read.http_token_env:
        value = os.environ.get(read.http_token_env, "").strip()
        if not value:
            raise ConfigError(f"read.http_token_env: environment variable {read.http_token_env} is unset or "
                              "empty (the HTTP API would be open)")
        return value
    if read.http_token_file is not None:
        try:
            lines = read.http_token_file.read_text().splitlines()
        except OSError as e:
            raise ConfigError(
                f"read.http_token_file: cannot read {read.http_token_file}: {e.strerror}") from e
        value = lines[0].strip() if lines else ""
        if not value:
            raise ConfigError(f"read.http_token_file: {read.http_token_file} is empty")
        return value
    return None


class BearerAuth:
    """ASGI middleware: ``Authorization: Bearer <token>`` on every path but :data:`OPEN_PATHS`,
    with failed attempts limited per client address by ``limits``."""

    def __init__(self, app: ASGIApp, token: str, limits: LoginLimiter | None = None) -> None:
        self.app = app
        self._token = token.encode()
        self.limits = limits if limits is not None else LoginLimiter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        auth = authorization(scope)
        if auth is not None:
            address = client_address(scope)
            if not self.limits.allowed(address):
                await too_many_logins(self.limits)(scope, receive, send)
                return
            if auth[0] == "bearer" and hmac.compare_digest(auth[1], self._token):
                await self.app(scope, receive, send)
                return
            self.limits.failed(address)
        resp = error_body(401, "unauthorized", "a valid 'Authorization: Bearer <token>' header is required")
        resp.headers["WWW-Authenticate"] = 'Bearer realm="rlm"'
        await resp(scope, receive, send)
