"""The endpoint's security settings made live: TLS context (reloading), SASL relay, ACL cache.

Built once per listener from ``read.kafka_security`` and the cluster connection settings
(``bootstrap_servers`` + ``kafka_client``): SASL needs a cluster to relay logins to and to ask
for ACL decisions, so SASL without ``bootstrap_servers`` is refused at start (a ConfigError)
rather than served without authentication.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import structlog

from fetcher.cluster_auth import AuthzCache, BrokerAccess, BrokerLogin, LoginLimiter
from fetcher.core import RemoteFetcher
from fetcher.kafka.authz import ConnectionGuard, PrincipalLimits
from fetcher.kafka.local_auth import LocalUsers
from fetcher.tls import ReloadingServerContext
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError

log = structlog.get_logger(__name__)


class EndpointSecurity:
    """What one listener enforces; :meth:`guard` gives each new connection its SASL state."""

    def __init__(self, sec: ListenerSecurity, access: BrokerAccess | None) -> None:
        self.settings = sec
        self.access = access
        self.cache = AuthzCache(sec.authz_cache_ms / 1000)
        self.limits = PrincipalLimits(sec.connections_per_principal, sec.read_bytes_per_second_per_principal)
        self.logins = LoginLimiter.from_security(sec)  # failed logins per client address and user
        self.tls = ReloadingServerContext(sec) if sec.tls else None
        self.local: LocalUsers | None = LocalUsers(sec) if sec.sasl and sec.users else None
        if sec.sasl and access is None and self.local is None:
            raise ConfigError(
                "read.kafka_security: SASL is checked by the cluster (logins are relayed to a broker, "
                "ACLs asked of it), so it needs bootstrap_servers, or (standalone) users and allow rules"
            )
        self._reloader: asyncio.Task[None] | None = None

    @classmethod
    def from_fetcher(cls, fetcher: RemoteFetcher) -> EndpointSecurity:
        sec = fetcher.read_config.kafka_security
        access = None
        if sec.sasl and fetcher.broker is not None and not sec.users:
            login = BrokerLogin.from_client_config(fetcher.broker.client_config)
            access = BrokerAccess.from_client(fetcher.broker.bootstrap_servers, login)
        return cls(sec, access)

    @property
    def ssl_context(self) -> ssl.SSLContext | None:
        return self.tls.context if self.tls is not None else None

    def guard(self, peer: str, address: str = "") -> ConnectionGuard | None:
        """A new connection's SASL state (None without SASL); ``address``: the client's host, the
        key of its failed-login count."""
        if not self.settings.sasl:
            return None
        mechanisms = tuple(self.settings.sasl_enabled_mechanisms)
        return ConnectionGuard(
            self.access,
            mechanisms,
            self.cache,
            peer,
            self.limits,
            self.local,
            self.settings.connections_max_reauth_ms,
            self.logins,
            address or peer,
        )

    def start(self) -> None:
        """Watch the certificate files (call on the listener's event loop)."""
        interval = self.settings.ssl_reload_interval_ms / 1000
        if self.tls is not None and interval > 0:
            self._reloader = asyncio.get_running_loop().create_task(self._watch(self.tls, interval))

    async def _watch(self, tls: ReloadingServerContext, interval: float) -> None:
        while True:
            await asyncio.sleep(interval)
            tls.maybe_reload()

    async def stop(self) -> None:
        if self.local is not None:
            self.local.close()
        if self._reloader is not None:
            self._reloader.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._reloader
