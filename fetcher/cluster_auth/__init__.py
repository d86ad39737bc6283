"""What both read faces share about the cluster's security: broker logins, principals, ACLs, limits.

The Kafka endpoint and the HTTP API both check credentials against the cluster itself and ask its
brokers what a principal may do: :mod:`.broker_login` (how the sidecar reaches and logs in to a
broker), :mod:`.broker_access` (connections that relay a login, sessions authenticated as a
principal), :mod:`.principal` (the user a SASL message names), :mod:`.authz_cache` (what a
principal may do, asked as it), :mod:`.broker_acls` (the cluster's ACL bindings, for principals
without a login), :mod:`.acl` (bearer tokens, allow rules, evaluating bindings),
:mod:`.login_limits` (failed-login limits) and :mod:`.wire` (requests to brokers, answers).

This module is the faces' public surface; its names load on first use (PEP 562), so the HTTP API
without the ``kafka`` extra (kio) still imports :class:`LoginLimiter` and the ACL rules. Nothing
here imports a face (an import contract).
"""

from typing import TYPE_CHECKING

from rlm import lazy_names

if TYPE_CHECKING:
    from fetcher.cluster_auth.acl import (
        DESCRIBE,
        READ,
        RESOURCE_TOPIC,
        AclBinding,
        AllowRules,
        BearerTokens,
        acl_topic_ops,
        token_hash,
    )
    from fetcher.cluster_auth.authz_cache import AuthzCache
    from fetcher.cluster_auth.broker_access import BrokerAccess, BrokerConn, BrokerSession, host_port
    from fetcher.cluster_auth.broker_acls import BrokerAcls
    from fetcher.cluster_auth.broker_login import BrokerLogin, LoginRefusedError
    from fetcher.cluster_auth.login_limits import LoginLimiter
    from fetcher.cluster_auth.principal import principal_of

_HOMES = {
    **dict.fromkeys(("DESCRIBE", "READ", "RESOURCE_TOPIC", "AclBinding", "AllowRules", "BearerTokens",
                     "acl_topic_ops", "token_hash"), "fetcher.cluster_auth.acl"),
    "AuthzCache": "fetcher.cluster_auth.authz_cache",
    **dict.fromkeys(("BrokerAccess", "BrokerConn", "BrokerSession", "host_port"),
                    "fetcher.cluster_auth.broker_access"),
    "BrokerAcls": "fetcher.cluster_auth.broker_acls",
    "BrokerLogin": "fetcher.cluster_auth.broker_login",
    "LoginRefusedError": "fetcher.cluster_auth.broker_login",
    "LoginLimiter": "fetcher.cluster_auth.login_limits",
    "principal_of": "fetcher.cluster_auth.principal",
}


__getattr__ = lazy_names.loader(__name__, _HOMES, globals())


__all__ = [
    "DESCRIBE",
    "READ",
    "RESOURCE_TOPIC",
    "AclBinding",
    "AllowRules",
    "AuthzCache",
    "BearerTokens",
    "BrokerAccess",
    "BrokerAcls",
    "BrokerConn",
    "BrokerLogin",
    "BrokerSession",
    "LoginLimiter",
    "LoginRefusedError",
    "acl_topic_ops",
    "host_port",
    "principal_of",
    "token_hash",
]
