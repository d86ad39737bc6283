"""The cluster's topic ACLs, read with the sidecar's own login, for principals without a broker login.

An HTTP bearer token maps to a principal (:class:`~fetcher.cluster_auth.acl.BearerTokens`) that
never logs in to the broker, so the broker cannot be asked *as* it (what
:class:`~fetcher.cluster_auth.AuthzCache` does for SASL logins). Instead the sidecar asks, as
itself (``kafka_client``: it needs DESCRIBE on the CLUSTER resource), for every topic ACL binding
(DescribeAcls) and every topic (Metadata), and evaluates the bindings as StandardAuthorizer does
(:func:`fetcher.cluster_auth.acl.acl_topic_ops`). Both
answers are cached for ``authz_cache_ms``, so an ACL revoked on the broker takes effect within
that time, as for SASL principals. There is still no second ACL list: the broker's is read live.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from kio.schema.describe_acls.v3 import request as acl_req
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req
from kio.static.primitive import i8

from fetcher.cluster_auth.acl import RESOURCE_TOPIC, AclBinding, acl_topic_ops
from fetcher.cluster_auth.broker_access import BrokerAccess, BrokerSession
from fetcher.cluster_auth.wire import make
from rlm.errors import DependencyUnavailableError

_ANY = i8(1)  # ResourceType / PatternType / AclOperation / AclPermissionType ANY


class BrokerAcls:
    """Topic ACL bindings and topic names of the cluster, each refreshed after ``ttl_s``."""

    def __init__(self, access: BrokerAccess, ttl_s: float) -> None:
        self.access = access
        self.ttl_s = ttl_s
        self._session: BrokerSession | None = None
        self._snapshot: tuple[float, list[AclBinding], list[str]] | None = None
        self._lock = asyncio.Lock()
        self.broker_queries = 0

    async def topic_ops(self, principal: str, host: str) -> dict[str, int]:
        """topic -> READ/DESCRIBE bits for each topic the principal may DESCRIBE."""
        bindings, names = await self._current()
        return acl_topic_ops(bindings, principal, host, names)

    async def _current(self) -> tuple[list[AclBinding], list[str]]:
        async with self._lock:
            snap = self._snapshot
            if snap is not None and time.monotonic() < snap[0]:
                return snap[1], snap[2]
            session = await self._own_session()
            try:
                bindings, names = await self._ask(session)
            except (ConnectionError, TimeoutError, OSError):
                session.close()
                self._session = None
                raise
            self._snapshot = (time.monotonic() + self.ttl_s, bindings, names)
            return bindings, names

    async def _own_session(self) -> BrokerSession:
        if self._session is not None and self._session.conn.reusable(3600):
            return self._session
        if self._session is not None:
            self._session.close()
        conn, broker = await self.access.connect()
        try:
            await self.access.login.authenticate(lambda req: conn.call(req, self.access.timeout_s), broker)
        except BaseException:
            conn.close()
            raise
        self._session = BrokerSession(conn, broker, self.access)
        return self._session

    async def _ask(self, session: BrokerSession) -> tuple[list[AclBinding], list[str]]:
        self.broker_queries += 1
        acls: Any = await session.call(
            make(
                acl_req.DescribeAclsRequest,
                resource_type_filter=i8(RESOURCE_TOPIC),
                resource_name_filter=None,
                pattern_type_filter=_ANY,
                principal_filter=None,
                host_filter=None,
                operation=_ANY,
                permission_type=_ANY,
            )
        )
        if acls.error_code != ErrorCode.none:
            # fail closed: without the ACLs nothing can be allowed (e.g. no DESCRIBE on CLUSTER)
            raise DependencyUnavailableError(
                f"broker {session.broker} refused DescribeAcls to the sidecar's login: "
                f"{acls.error_code.name} (it needs DESCRIBE on the CLUSTER resource)"
            )
        bindings = [
            AclBinding(
                int(r.resource_type),
                str(r.resource_name),
                int(r.pattern_type),
                str(a.principal),
                str(a.host),
                int(a.operation),
                int(a.permission_type),
            )
            for r in acls.resources
            for a in r.acls
        ]
        md: Any = await session.call(
            make(
                md_req.MetadataRequest,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=False,
            )
        )
        names = [str(t.name) for t in md.topics if t.error_code == ErrorCode.none and t.name is not None]
        return bindings, names

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
