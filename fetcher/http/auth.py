"""Optional bearer-token authentication of the HTTP API.

The token is read once at startup from the environment variable named by
``read.http_token_env`` or from the first line of ``read.http_token_file``; configured but
missing or empty is a startup error (fail closed, not open). Requests are compared in constant
time; the token is never logged nor echoed. ``/health`` stays open so probes need no secret.
"""

from __future__ import annotations

import hmac
import os

from starlette.types import ASGIApp, Receive, Scope, Send

from fetcher.http.errors import error_body
from rlm.config import ReadConfig
from rlm.errors import ConfigError

OPEN_PATHS = frozenset({"/health"})


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
    """ASGI middleware: ``Authorization: Bearer <token>`` on every path but :data:`OPEN_PATHS`."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._token = token.encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in OPEN_PATHS or self._authorized(scope):
            await self.app(scope, receive, send)
            return
        resp = error_body(401, "unauthorized", "a valid 'Authorization: Bearer <token>' header is required")
        resp.headers["WWW-Authenticate"] = 'Bearer realm="rlm"'
        await resp(scope, receive, send)

    def _authorized(self, scope: Scope) -> bool:
        for name, value in scope.get("headers", ()):
            if name == b"authorization":
                scheme, _, given = value.partition(b" ")
                return scheme.lower() == b"bearer" and hmac.compare_digest(given.strip(), self._token)
        return False
