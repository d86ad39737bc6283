"""HTTP credentials checked by the broker and topics authorized by its ACLs (the HTTP face of
the Kafka endpoint's relay: ``fetcher.kafka.sasl``/``authz``). Imported only when
``read.http_security`` uses SASL or bearer tokens with a broker, so the HTTP API runs without the
``kafka`` extra otherwise.

Two ways in, one authorization (:class:`fetcher.http.topic_auth.TopicGate`):

- ``Authorization: Basic`` (SASL protocols): the credentials log in to a broker as that user; the
  authenticated connection is the principal's session, on which the broker is asked what it may
  DESCRIBE and READ (KIP-430, :class:`~fetcher.cluster_auth.AuthzCache`).
- ``Authorization: Bearer`` (``bearer_tokens``): the token's SHA-256 names a principal, which has
  no broker login; its topics follow the cluster's ACL bindings, read with the sidecar's own
  login (:class:`~fetcher.cluster_auth.broker_acls.BrokerAcls`) and evaluated for that principal and the
  client's address.

Failed logins are limited per client address and per user (``login_failures_*`` of
``read.http_security``, :class:`fetcher.cluster_auth.login_limits.LoginLimiter`): over the limit, Basic
credentials are answered 429 before the login cache or the broker is consulted, so the sidecar
is no brute-force proxy for the cluster's passwords (and a guess matching a cached login is
refused like any other). A broker that cannot be reached is not the client's failure: not counted.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import os
import time

import structlog
from starlette.types import ASGIApp, Scope

from fetcher.cluster_auth import (
    AuthzCache,
    BearerTokens,
    BrokerAccess,
    BrokerAcls,
    BrokerLogin,
    BrokerSession,
    LoginLimiter,
    LoginRefusedError,
)
from fetcher.http.auth import authorization, client_address
from fetcher.http.topic_auth import TooManyLogins, TopicGate, TopicOps, Unavailable
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError, DependencyUnavailableError

log = structlog.get_logger(__name__)


class HttpBrokerAuth(TopicGate):
    """ASGI middleware: Basic credentials checked by the broker and bearer tokens mapped to
    principals; topics authorized by the broker's ACLs."""

    def __init__(
        self, app: ASGIApp, sec: ListenerSecurity, access: BrokerAccess, tokens: BearerTokens | None = None,
        limits: LoginLimiter | None = None,
    ) -> None:
        super().__init__(app, limits if limits is not None else LoginLimiter.from_security(sec))
        self.tokens = tokens if tokens else None
        if not sec.sasl and self.tokens is None:
            raise ConfigError(
                "read.http_security: broker authentication needs SASL_SSL or SASL_PLAINTEXT, or bearer_tokens"
            )
        self.basic = sec.sasl
        self.mechanism = sec.sasl_enabled_mechanisms[0]
        self.access = access
        self.ttl_s = sec.authz_cache_ms / 1000
        self.cache = AuthzCache(self.ttl_s)
        self.acls = BrokerAcls(access, self.ttl_s) if self.tokens is not None else None
        self.challenge = ", ".join(
            c for c, on in (('Basic realm="rlm"', self.basic), ('Bearer realm="rlm"', self.tokens)) if on
        )
        self._key = os.urandom(32)  # keys the credential cache; never leaves the process
        self._logins: dict[bytes, tuple[float, str, BrokerSession]] = {}
        self.broker_logins = 0  # logins relayed to the broker (what the failed-login limits save)

    async def identify(self, scope: Scope) -> tuple[str, TopicOps] | None:
        auth = authorization(scope)
        if self.tokens is not None and (not self.basic or (auth is not None and auth[0] == "bearer")):
            return self._bearer(scope)
        who = await self._authenticate(scope)
        if who is None:
            return None
        principal, session = who

        async def ops() -> dict[str, int]:
            try:
                return await self.cache.topic_ops(principal, session)
            except (ConnectionError, TimeoutError, OSError) as e:
                log.warning("http_authz_broker_lost", principal=principal, error=str(e))
                self._forget(session)
                raise Unavailable from e

        return principal, ops

    def _bearer(self, scope: Scope) -> tuple[str, TopicOps] | None:
        assert self.tokens is not None and self.acls is not None
        principal = self.bearer(scope, self.tokens)
        if principal is None:
            return None
        host = client_address(scope)
        acls = self.acls

        async def ops() -> dict[str, int]:
            try:
                return await acls.topic_ops(principal, host)
            except (ConnectionError, TimeoutError, OSError, DependencyUnavailableError) as e:
                log.warning("http_authz_broker_lost", principal=principal, error=str(e))
                raise Unavailable from e

        return principal, ops

    async def _authenticate(self, scope: Scope) -> tuple[str, BrokerSession] | None:
        auth = authorization(scope)
        address = client_address(scope)
        creds = _basic(auth)
        if creds is None:
            self.denied(None, None, "no Basic credentials")
            if auth is not None:  # something was sent: a failed attempt of this address
                if not self.limits.allowed(address):
                    raise TooManyLogins
                self.limits.failed(address)
            return None
        user, password = creds
        if not self.limits.allowed(address, user):  # before the cache: no oracle for cached passwords
            self.denied(f"User:{user}", None, "too many failed logins")
            raise TooManyLogins
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
        self.broker_logins += 1
        try:
            await login.authenticate(lambda req: conn.call(req, self.access.timeout_s), broker)
        except LoginRefusedError:
            conn.close()
            self.limits.failed(address, user)
            self.denied(f"User:{user}", None, "login refused by the broker")
            return None
        except (ConnectionError, TimeoutError, OSError) as e:
            conn.close()
            log.warning("http_auth_broker_lost", error=str(e))
            return None
        self.limits.succeeded(user)
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

    def close(self) -> None:
        for _, _, s in self._logins.values():
            s.close()
        self._logins.clear()
        if self.acls is not None:
            self.acls.close()


def _basic(auth: tuple[str, bytes] | None) -> tuple[str, str] | None:
    """(user, password) of ``Authorization: Basic`` credentials; None when absent or malformed."""
    if auth is None or auth[0] != "basic":
        return None
    try:
        user, sep, password = base64.b64decode(auth[1], validate=True).decode().partition(":")
    except (binascii.Error, UnicodeDecodeError):
        return None
    return (user, password) if sep and user else None
