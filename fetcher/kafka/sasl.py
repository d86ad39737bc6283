"""SASL on the Kafka endpoint, checked by the cluster itself: every login is relayed to a broker.

Why a relay: the sidecar must not keep a second user database. A client's SaslHandshake opens a
fresh connection to a broker (TLS as ``kafka_client`` says, but *no* login of the sidecar's own)
and each SaslAuthenticate token is passed to it unchanged and its answer passed back, message
for message. PLAIN is one message; SCRAM-SHA-256/512 (RFC 5802/7677) is two, and Kafka's SCRAM
has no channel binding (``c=biws``), so the exchange is valid whichever TCP connection carries
it: the broker checks the proof, the client checks the broker's signature, and the sidecar never
sees a password for SCRAM (for PLAIN it passes through, as it does through any TLS terminator).
The broker's error (``SASL_AUTHENTICATION_FAILED`` with its message) is what the client gets.

After a successful login that broker connection *is* the principal's session: the authorizer
(:mod:`fetcher.kafka.authz`) asks the broker, as that principal, what it may describe and read,
so the cluster's ACLs decide. Cost per client connection: one extra TCP (+TLS) connection to a
broker and one broker round trip per SASL message; it stays open as long as the client's.

Before authentication only ApiVersions, SaslHandshake and SaslAuthenticate are answered;
anything else closes the connection, as a Kafka broker does. KIP-368 re-authentication: the
broker's ``session_lifetime_ms`` is passed to the client; a client re-authenticating sends a new
SaslHandshake on the same connection, which is relayed on a new broker connection that replaces
the old one (the principal must not change, or the connection is closed, as in Kafka); a
session past its lifetime that was not renewed is closed at its next request.

Failed logins are counted per client address and user (:mod:`fetcher.cluster_auth.login_limits`); over a
limit a login is refused before a broker connection is opened or a password hashed.
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

import structlog
from kio.schema.errors import ErrorCode
from kio.schema.sasl_authenticate.v2 import request as auth_req
from kio.schema.sasl_handshake.v1 import request as hs_req

from fetcher.cluster_auth.broker_access import BrokerAccess, BrokerSession
from fetcher.cluster_auth.login_limits import LoginLimiter
from fetcher.cluster_auth.principal import principal_of
from fetcher.kafka.codec import make, response_class

log = structlog.get_logger(__name__)

SASL_HANDSHAKE_KEY = 17
SASL_AUTHENTICATE_KEY = 36
#: what a client may send before it has authenticated (anything else closes the connection)
PRE_AUTH_KEYS = frozenset({18, SASL_HANDSHAKE_KEY, SASL_AUTHENTICATE_KEY})
#: versions of the SASL APIs, advertised in ApiVersions only by a SASL listener. SaslHandshake v0
#: (unframed tokens afterwards) was removed by Kafka 4.0 (KIP-896); SaslAuthenticate v1+ carries
#: the KIP-368 session lifetime.
SASL_VERSIONS = {SASL_HANDSHAKE_KEY: (1, 1), SASL_AUTHENTICATE_KEY: (0, 2)}
_SCRAM = ("SCRAM-SHA-256", "SCRAM-SHA-512")
_STEPS = {"PLAIN": 1, "SCRAM-SHA-256": 2, "SCRAM-SHA-512": 2}
_ZERO = datetime.timedelta(0)


class LocalExchange(Protocol):
    """One login against static users (standalone mode, :mod:`fetcher.kafka.local_auth`)."""

    user: str | None

    async def step(self, token: bytes) -> tuple[str | None, bytes, bool]:
        """(error message or None, server bytes, done); password hashing runs off the event loop."""
        ...


class CloseConnection(Exception):
    """Close the client connection now (no response): Kafka's answer to a request out of order."""


class _State(Enum):
    NEW = "new"
    HANDSHAKEN = "handshaken"
    AUTHENTICATED = "authenticated"
    FAILED = "failed"


@dataclass
class _Exchange:
    """One login in progress: what its handshake chose and what its messages established so far.
    Kept whole per exchange (never shared fields on the session), so the principal that completes
    is the one this exchange's own first message named."""

    mechanism: str
    relay: BrokerSession | None = None  # relay mode: the broker connection this login runs on
    local: LocalExchange | None = None  # standalone mode
    refused: str | None = None  # rate-limited at the handshake: refuse the first message unchecked
    step: int = 0
    user: str | None = None


class SaslSession:
    """The SASL state of one client connection.

    One SASL request at a time: the listener reads nothing more from a connection while one of
    its SASL requests (or any request before authentication) is being handled (the broker mutes
    the channel likewise); a SASL request that nevertheless overlaps another is refused with
    ILLEGAL_SASL_STATE and the connection closed. Every broker connection opened for a relay is
    tracked until closed, so a failed, abandoned, cancelled or replaced login never leaves one
    open (:meth:`close` closes all, also those of handlers still running).
    """

    def __init__(
        self,
        access: BrokerAccess | None,
        mechanisms: tuple[str, ...],
        peer: str,
        local: Callable[[str], LocalExchange] | None = None,
        max_reauth_ms: int = 0,
        limits: LoginLimiter | None = None,
        address: str = "",
    ) -> None:
        self.access = access
        self.max_reauth_ms = max_reauth_ms  # connections.max.reauth.ms: the endpoint's own cap
        self.local = local  # standalone mode: static users instead of the relay
        self.limits = limits
        self.address = address  # the client's host, the key of its failed-login count
        self.mechanisms = mechanisms
        self.peer = peer
        self.state = _State.NEW
        self.principal: str | None = None
        self.session: BrokerSession | None = None
        self._exchange: _Exchange | None = None
        self._busy = False
        self._closed = False
        self._opened: set[BrokerSession] = set()  # relay connections not closed yet
        self._mechanism = ""
        self._expires: float | None = None
        self._reauth_ok = False

    @property
    def authenticated(self) -> bool:
        return self.state is _State.AUTHENTICATED

    @property
    def failed(self) -> bool:
        """A SASL request was refused: its answer goes out, then the connection is closed."""
        return self.state is _State.FAILED

    @property
    def relay_connections(self) -> int:
        """Broker connections this client connection holds open (its session, a login in progress)."""
        return len(self._opened)

    def admits(self, key: int) -> bool:
        """Whether a request of API ``key`` may be answered now (False: close the connection)."""
        if self.state is _State.FAILED:
            return False
        if key in PRE_AUTH_KEYS:
            return True
        if self.state is not _State.AUTHENTICATED:
            return False
        if self._expires is not None and time.monotonic() > self._expires:
            log.info("kafka_sasl_session_expired", peer=self.peer, principal=self.principal)
            return False
        return True

    async def handshake(self, req: Any, version: int) -> Any:
        cls = response_class(SASL_HANDSHAKE_KEY, version)
        mechanism = str(req.mechanism)
        if (
            self._busy
            or self._closed
            or self.state is _State.HANDSHAKEN
            or (self.state is _State.AUTHENTICATED and not self._reauth_ok)
        ):
            self._fail("handshake_out_of_order")
            return make(cls, error_code=ErrorCode.illegal_sasl_state, mechanisms=self.mechanisms)
        if mechanism not in self.mechanisms:
            self._fail("unsupported_mechanism", mechanism=mechanism[:64])
            return make(cls, error_code=ErrorCode.unsupported_sasl_mechanism, mechanisms=self.mechanisms)
        self._busy = True
        try:
            return await self._handshake(cls, mechanism)
        finally:
            self._busy = False

    async def _handshake(self, cls: Any, mechanism: str) -> Any:
        ok = make(cls, error_code=ErrorCode.none, mechanisms=self.mechanisms)
        if self.limits is not None and not self.limits.allowed(self.address):
            # refused at its first message, without a broker connection or a password hashed
            self._begin(_Exchange(mechanism, refused="address"))
            return ok
        if self.local is not None:
            self._begin(_Exchange(mechanism, local=self.local(mechanism)))
            return ok
        assert self.access is not None
        try:
            conn, broker = await self.access.connect()
        except ConnectionError as e:
            log.warning("kafka_sasl_broker_unreachable", peer=self.peer, error=str(e))
            raise CloseConnection from e
        relay = self._track(BrokerSession(conn, broker, self.access))
        try:
            resp = await relay.call(make(hs_req.SaslHandshakeRequest, mechanism=mechanism))
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as e:
            self._drop(relay)
            log.warning("kafka_sasl_broker_failed", peer=self.peer, broker=broker, error=str(e))
            raise CloseConnection from e
        except BaseException:  # cancelled (the client left): the broker connection goes too
            self._drop(relay)
            raise
        if self._closed:  # the client connection closed while the broker answered
            self._drop(relay)
            raise CloseConnection
        if resp.error_code != ErrorCode.none:
            self._drop(relay)
            self._fail("broker_refused_mechanism", mechanism=mechanism)
            offered = tuple(m for m in self.mechanisms if m in resp.mechanisms)
            return make(cls, error_code=resp.error_code, mechanisms=offered)
        self._begin(_Exchange(mechanism, relay=relay))
        return ok

    def _begin(self, exchange: _Exchange) -> None:
        self._exchange, self._mechanism = exchange, exchange.mechanism
        self.state = _State.HANDSHAKEN

    async def authenticate(self, req: Any, version: int) -> Any:
        cls = response_class(SASL_AUTHENTICATE_KEY, version)

        def answer(code: ErrorCode, message: str | None, data: bytes = b"", life: Any = _ZERO) -> Any:
            return make(cls, error_code=code, error_message=message, auth_bytes=data, session_lifetime=life)

        ex = self._exchange
        if self._busy or self.state is not _State.HANDSHAKEN or ex is None:
            self._fail("authenticate_out_of_order")
            return answer(ErrorCode.illegal_sasl_state, "SaslAuthenticate before SaslHandshake")
        self._busy = True
        try:
            return await self._authenticate(ex, bytes(req.auth_bytes), version, answer)
        finally:
            self._busy = False

    async def _authenticate(self, ex: _Exchange, token: bytes, version: int, answer: Any) -> Any:
        if ex.step == 0:
            if ex.refused is not None:
                self._fail("too_many_failed_logins", address=self.address)
                return answer(ErrorCode.sasl_authentication_failed, _TOO_MANY)
            user = principal_of(ex.mechanism, token)
            if user is None:
                self._count_failure(None)
                self._fail("malformed_token", mechanism=ex.mechanism, size=len(token))
                return answer(
                    ErrorCode.sasl_authentication_failed,
                    f"Authentication failed: invalid {ex.mechanism} client message",
                )
            if self.limits is not None and not self.limits.allowed(self.address, user):
                self._fail("too_many_failed_logins", address=self.address, principal=f"User:{user}")
                return answer(ErrorCode.sasl_authentication_failed, _TOO_MANY)
            ex.user = user
        if ex.local is not None:
            err, data, done = await ex.local.step(token)
            if err is not None:
                self._count_failure(ex.user)
                self._fail("login_refused", mechanism=ex.mechanism)
                return answer(ErrorCode.sasl_authentication_failed, err)
            ex.step += 1
            if not done:
                return answer(ErrorCode.none, None, data)
            user = ex.local.user
            assert user is not None and user == ex.user
            self._exchange = None
            return self._finish(user, None, data, _ZERO, version, answer)
        relay = ex.relay
        assert relay is not None and ex.user is not None
        try:
            resp = await relay.call(make(auth_req.SaslAuthenticateRequest, auth_bytes=token))
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError) as e:
            log.warning("kafka_sasl_broker_failed", peer=self.peer, broker=relay.broker, error=str(e))
            self._fail("broker_connection_lost")
            raise CloseConnection from e
        except BaseException:
            self._fail("cancelled")
            raise
        if resp.error_code != ErrorCode.none:
            self._count_failure(ex.user)
            self._fail("broker_refused_login", principal=f"User:{ex.user}", mechanism=ex.mechanism)
            return answer(resp.error_code, resp.error_message)
        ex.step += 1
        if ex.step < _STEPS[ex.mechanism]:
            return answer(ErrorCode.none, None, bytes(resp.auth_bytes))
        self._exchange = None
        return self._finish(ex.user, relay, bytes(resp.auth_bytes), resp.session_lifetime, version, answer)

    def _count_failure(self, user: str | None) -> None:
        if self.limits is not None:
            self.limits.failed(self.address, user)

    def _finish(
        self, user: str, session: BrokerSession | None, data: bytes, life: Any, version: int, answer: Any
    ) -> Any:
        principal = f"User:{user}"
        if self._closed:
            self._drop(session)
            raise CloseConnection
        if self.principal is not None and principal != self.principal:
            log.warning(
                "kafka_sasl_reauth_principal_changed", peer=self.peer, old=self.principal, new=principal
            )
            self._drop(session)
            self._fail("principal_changed")
            raise CloseConnection
        reauth = self.principal is not None
        if self.session is not None and self.session is not session:
            self._drop(self.session)
        self.session = session
        self.principal = principal
        self.state = _State.AUTHENTICATED
        if self.limits is not None:
            self.limits.succeeded(user)
        life_ms = int(life.total_seconds() * 1000)
        if self.max_reauth_ms > 0 and (life_ms <= 0 or self.max_reauth_ms < life_ms):
            # as a broker with connections.max.reauth.ms: the shorter of it and the credential's
            life_ms = self.max_reauth_ms
            life = datetime.timedelta(milliseconds=life_ms)
        self._expires = time.monotonic() + life_ms / 1000 if life_ms > 0 else None
        self._reauth_ok = version >= 1  # KIP-368: only clients that can read the lifetime re-auth
        log.info(
            "kafka_sasl_authenticated",
            peer=self.peer,
            principal=principal,
            mechanism=self._mechanism,
            reauthentication=reauth,
            session_lifetime_ms=life_ms,
        )
        return answer(ErrorCode.none, None, data, life)

    def _fail(self, reason: str, **kw: Any) -> None:
        """Refuse: the error response goes out, then the connection is closed."""
        log.warning("kafka_sasl_refused", peer=self.peer, reason=reason, **kw)
        self.state = _State.FAILED
        ex, self._exchange = self._exchange, None
        if ex is not None:
            self._drop(ex.relay)

    def _track(self, session: BrokerSession) -> BrokerSession:
        self._opened.add(session)
        if self._closed:  # opened after the client connection closed: not kept a moment
            self._drop(session)
            raise CloseConnection
        return session

    def _drop(self, session: BrokerSession | None) -> None:
        if session is not None:
            self._opened.discard(session)
            session.close()

    def close(self) -> None:
        """The client connection is gone: close every broker connection it opened, including one
        a login still running is using (that handler then fails and opens no other)."""
        self._closed = True
        for s in list(self._opened):
            self._drop(s)
        self.session = self._exchange = None


_TOO_MANY = "Authentication failed: too many failed logins, try again later"
