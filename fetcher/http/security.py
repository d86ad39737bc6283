"""Authentication and per-topic authorization of the HTTP API by the cluster, like the Kafka endpoint.

``read.http_security`` with a SASL protocol turns this on: every request but ``/health`` needs
``Authorization: Basic`` (over TLS: ``SASL_SSL``). The credentials are checked by logging in to a
broker as that user (the first of ``sasl_enabled_mechanisms``, PLAIN or SCRAM), with no user
database of the sidecar's own; the authenticated broker connection is then the principal's
session, on which the broker is asked what the principal may DESCRIBE and READ (KIP-430, the
same :class:`~fetcher.kafka.authz.AuthzCache` as the Kafka endpoint). A verified login is reused
for ``authz_cache_ms`` (keyed by a keyed hash of user and password held in memory only), so a
changed password or a revoked ACL takes effect within that time.

Answers: no or wrong credentials -> 401, a topic the principal may not READ -> 403, both as JSON
without detail that would help an attacker; the topic listing shows only topics the principal
may DESCRIBE. Each denial is logged once per minute with principal, topic and reason (never the
credentials).
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING

from starlette.types import ASGIApp

from fetcher.core import RemoteFetcher
from fetcher.tls import ReloadingServerContext
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError

if TYPE_CHECKING:
    from fetcher.http.broker_auth import HttpBrokerAuth


def secure_app(
    app: ASGIApp, sec: ListenerSecurity, fetcher: RemoteFetcher
) -> tuple[ReloadingServerContext | None, ASGIApp, HttpBrokerAuth | None, threading.Event]:
    """(TLS context, app wrapped in broker authentication, the middleware, stop-event of the
    certificate watch) for ``read.http_security``."""
    tls = ReloadingServerContext(sec, "http api") if sec.tls else None
    stop = tls.watch(sec.ssl_reload_interval_ms / 1000) if tls is not None else threading.Event()
    if not sec.sasl:
        return tls, app, None, stop
    if fetcher.broker is None:
        raise ConfigError("read.http_security: SASL is checked by the cluster, so it needs bootstrap_servers")
    # needs the kafka extra (the relay to the broker): imported only here
    from fetcher.http.broker_auth import HttpBrokerAuth
    from fetcher.kafka.broker_login import BrokerLogin
    from fetcher.kafka.sasl import BrokerAccess

    login = BrokerLogin.from_client_config(fetcher.broker.client_config)
    auth = HttpBrokerAuth(app, sec, BrokerAccess.from_client(fetcher.broker.bootstrap_servers, login))
    return tls, auth, auth, stop
