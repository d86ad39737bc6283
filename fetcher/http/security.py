"""Authentication and per-topic authorization of the HTTP API by the cluster, like the Kafka endpoint.

``read.http_security`` with a SASL protocol turns this on: every request but ``/health`` needs
``Authorization: Basic`` (over TLS: ``SASL_SSL``). The credentials are checked by logging in to a
broker as that user (the first of ``sasl_enabled_mechanisms``, PLAIN or SCRAM), with no user
database of the sidecar's own; the authenticated broker connection is then the principal's
session, on which the broker is asked what the principal may DESCRIBE and READ (KIP-430, the
same :class:`~fetcher.cluster_auth.AuthzCache` as the Kafka endpoint). A verified login is reused
for ``authz_cache_ms`` (keyed by a keyed hash of user and password held in memory only), so a
changed password or a revoked ACL takes effect within that time.

``bearer_tokens`` (by SHA-256) map ``Authorization: Bearer`` tokens to principals, over HTTPS
(``SSL``) or beside Basic: with a broker their topics follow its ACLs for that principal
(:mod:`fetcher.cluster_auth.broker_acls`); without one, or with ``allow`` rules, those rules
(:class:`fetcher.http.topic_auth.LocalTokenAuth`).

Answers: no or wrong credentials -> 401, a topic the principal may not READ -> 403, both as JSON
without detail that would help an attacker; the topic listing shows only topics the principal
may DESCRIBE. Each denial is logged once per minute with principal, topic and reason (never the
credentials).
"""

from __future__ import annotations

import threading

from starlette.types import ASGIApp

from fetcher.cluster_auth import AllowRules, BearerTokens, LoginLimiter
from fetcher.core import RemoteFetcher
from fetcher.http.topic_auth import LocalTokenAuth, TopicGate
from fetcher.tls import ReloadingServerContext
from rlm.config import ListenerSecurity
from rlm.errors import ConfigError


def secure_app(
    app: ASGIApp, sec: ListenerSecurity, fetcher: RemoteFetcher, limits: LoginLimiter | None = None
) -> tuple[ReloadingServerContext | None, ASGIApp, TopicGate | None, threading.Event]:
    """(TLS context, app wrapped in broker authentication, the middleware, stop-event of the
    certificate watch) for ``read.http_security``; ``limits`` counts failed logins (default: the
    ``login_failures_*`` keys of ``sec``)."""
    limits = limits if limits is not None else LoginLimiter.from_security(sec)
    tls = ReloadingServerContext(sec, "http api") if sec.tls else None
    stop = tls.watch(sec.ssl_reload_interval_ms / 1000) if tls is not None else threading.Event()
    tokens = BearerTokens.load(((t.sha256, t.principal) for t in sec.bearer_tokens), sec.bearer_tokens_file)
    if not sec.sasl and not tokens:
        return tls, app, None, stop
    if sec.sasl and fetcher.broker is None:
        raise ConfigError("read.http_security: SASL is checked by the cluster, so it needs bootstrap_servers")
    if not sec.sasl and (fetcher.broker is None or sec.allow):
        # standalone: bearer tokens and the allow rules, no broker asked
        rules = AllowRules((r.principal, r.topics, r.groups) for r in sec.allow)
        local = LocalTokenAuth(app, tokens, rules, fetcher.topics, limits)
        return tls, local, local, stop
    assert fetcher.broker is not None
    # needs the kafka extra (the relay to the broker): imported only here
    from fetcher.cluster_auth import BrokerAccess, BrokerLogin
    from fetcher.http.broker_auth import HttpBrokerAuth

    login = BrokerLogin.from_client_config(fetcher.broker.client_config)
    access = BrokerAccess.from_client(fetcher.broker.bootstrap_servers, login)
    auth = HttpBrokerAuth(app, sec, access, tokens, limits)
    return tls, auth, auth, stop
