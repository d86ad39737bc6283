"""What a principal may do, asked of the broker as that principal and cached: the topics' and a
group's KIP-430 authorized operations (Metadata v12, DescribeGroups v5), for both read faces."""

from __future__ import annotations

import time
from typing import Any

from kio.schema.describe_groups.v5 import request as dg_req
from kio.schema.errors import ErrorCode
from kio.schema.metadata.v12 import request as md_req

from fetcher.cluster_auth.acl import DESCRIBE, READ
from fetcher.cluster_auth.broker_access import BrokerSession
from fetcher.cluster_auth.wire import make
from fetcher.log_once import first_in_window


class AuthzCache:
    """Per-principal topic operations and per-(principal, group) READ, each for ``ttl_s``."""

    def __init__(self, ttl_s: float) -> None:
        self.ttl_s = ttl_s
        self._topics: dict[str, tuple[float, dict[str, int]]] = {}
        self._groups: dict[tuple[str, str], tuple[float, int]] = {}
        self.broker_queries = 0
        self._denials: dict[tuple[Any, ...], float] = {}

    def first_denial(self, key: tuple[Any, ...], every_s: float = 60.0) -> bool:
        """Whether this denial was not logged in the last ``every_s`` (bounded memory; the rule
        the HTTP API's denials follow too: :func:`fetcher.log_once.first_in_window`)."""
        return first_in_window(self._denials, key, every_s)

    async def topic_ops(self, principal: str, session: BrokerSession) -> dict[str, int]:
        """topic name -> authorized-operations bitfield, for every topic it may DESCRIBE."""
        now = time.monotonic()
        hit = self._topics.get(principal)
        if hit is not None and now < hit[0]:
            return hit[1]
        self.broker_queries += 1
        resp = await session.call(
            make(
                md_req.MetadataRequest,
                topics=None,
                allow_auto_topic_creation=False,
                include_topic_authorized_operations=True,
            )
        )
        ops = {
            str(t.name): int(t.topic_authorized_operations)
            for t in resp.topics
            if t.error_code == ErrorCode.none and t.name is not None
        }
        self._topics[principal] = (time.monotonic() + self.ttl_s, ops)
        return ops

    async def group_ops(self, principal: str, group: str, session: BrokerSession) -> int:
        """The group's authorized-operations bitfield for the principal (0: none at all)."""
        now = time.monotonic()
        hit = self._groups.get((principal, group))
        if hit is not None and now < hit[0]:
            return hit[1]
        self.broker_queries += 1
        resp = await session.call(
            make(dg_req.DescribeGroupsRequest, groups=(group,), include_authorized_operations=True)
        )
        g = resp.groups[0] if resp.groups else None
        if g is None or g.error_code == ErrorCode.group_authorization_failed:
            ops = 0
        elif g.error_code == ErrorCode.none:
            ops = int(g.authorized_operations)
            ops = 0 if ops == -(2**31) else ops
        else:  # not the coordinator: DESCRIBE was granted, READ unknown (fetcher.kafka.authz)
            ops = DESCRIBE | READ
        self._groups[(principal, group)] = (time.monotonic() + self.ttl_s, ops)
        return ops

    async def group_read(self, principal: str, group: str, session: BrokerSession) -> bool:
        return bool(await self.group_ops(principal, group, session) & READ)
