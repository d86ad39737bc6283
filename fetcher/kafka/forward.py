"""Merged mode: Fetches at or above the broker's local log start go to the partition's leader.

With ``bootstrap_servers`` configured, one bootstrap address gives the whole log: offsets below
the broker's local log start come from the remote tier, the rest (and the live tail) from the
leader, whose partition data (records, high watermark, LSO, aborted transactions) is passed
through as is. The endpoint talks to brokers with the same kio codec: Metadata to find leaders,
Fetch (topic names, no fetch session) to forward, each at the highest version the broker and the
forwarder both know (ApiVersions on every new connection, :mod:`fetcher.kafka.broker_versions`:
Kafka 2.8 to 4.x answer different ranges). Broker connections are pooled,
one request in flight each, so a long-polling tail fetch never delays another client's. Each new
connection logs in with the ``kafka_client`` security settings (:mod:`fetcher.cluster_auth.broker_login`).
"""

from __future__ import annotations

import asyncio
import datetime
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import structlog
from kio.schema.errors import ErrorCode

from fetcher.cluster_auth import BrokerConn, BrokerLogin, host_port
from fetcher.kafka import broker_versions as bv
from fetcher.kafka.codec import make, nested

log = structlog.get_logger(__name__)

_LEADER_TTL_S = 30.0
_LOCAL_START_TTL_S = 2.0
_MAX_IDLE_S = 540.0  # Kafka clients' connections.max.idle.ms: under the broker's 600 s

#: builds a request from kio's class of the version chosen for the connection
Build = Callable[[type[Any]], Any]


@dataclass(slots=True)
class Forwarded:
    """One partition's answer from its leader."""

    error: ErrorCode
    high_watermark: int
    last_stable_offset: int
    log_start: int
    records: bytes
    aborted: tuple[tuple[int, int], ...] | None


class BrokerForwarder:
    """Leaders, local log starts and forwarded fetches (used from the event loop only)."""

    def __init__(
        self,
        bootstrap_servers: str,
        timeout_s: float = 30.0,
        login: BrokerLogin | None = None,
        max_idle_s: float = _MAX_IDLE_S,
    ) -> None:
        self.bootstrap = [host_port(b) for b in bootstrap_servers.split(",") if b.strip()]
        self.timeout_s = timeout_s
        self.max_idle_s = max_idle_s
        self.login = login or BrokerLogin()
        self._idle: dict[tuple[str, int], list[BrokerConn]] = {}
        self._leaders: dict[tuple[str, int], tuple[float, tuple[str, int]]] = {}
        self._local_start: dict[tuple[str, int], tuple[float, int]] = {}

    async def _conn(self, addr: tuple[str, int]) -> tuple[BrokerConn, bool]:
        """A connection to ``addr`` and whether it came from the pool (checked before reuse)."""
        idle = self._idle.get(addr)
        while idle:
            pooled = idle.pop()
            if pooled.reusable(self.max_idle_s):
                return pooled, True
            pooled.close()
        return await self._connect(addr), False

    async def _connect(self, addr: tuple[str, int]) -> BrokerConn:
        tls = self.login.tls
        r, w = await asyncio.wait_for(
            asyncio.open_connection(*addr, ssl=tls, server_hostname=addr[0] if tls is not None else None),
            self.timeout_s,
        )
        conn = BrokerConn(r, w)
        broker = f"{addr[0]}:{addr[1]}"
        try:  # what the broker answers, then the login every other Kafka connection of the sidecar uses
            conn.versions = bv.ranges_of(await conn.call(bv.api_versions_request(), self.timeout_s), broker)
            await self.login.authenticate(lambda req: conn.call(req, self.timeout_s), broker)
        except BaseException:
            conn.close()
            raise
        return conn

    async def _call(self, addr: tuple[str, int], api_key: int, build: Build, timeout_s: float) -> Any:
        """One request on a pooled or new connection, at the highest version of ``api_key`` the
        broker and the forwarder both know. Every request sent here is a read (Metadata,
        ListOffsets, Fetch, OffsetForLeaderEpoch), so one that failed on a pooled connection the
        broker closed meanwhile is sent again on a new one."""
        while True:
            conn, pooled = await self._conn(addr)
            try:
                req = build(bv.request_class(conn.versions, api_key, f"{addr[0]}:{addr[1]}"))
                resp = await conn.call(req, timeout_s)
            except bv.BrokerVersionError:
                self._idle.setdefault(addr, []).append(conn)  # nothing was sent: still usable
                raise
            except (ConnectionError, asyncio.IncompleteReadError) as e:
                conn.close()
                if not pooled:
                    raise
                log.info("kafka_broker_connection_stale", broker=f"{addr[0]}:{addr[1]}", error=str(e))
                continue
            except BaseException:
                conn.close()
                raise
            conn.idle_since = time.monotonic()
            self._idle.setdefault(addr, []).append(conn)
            return resp

    async def leader(self, topic: str, partition: int) -> tuple[str, int]:
        hit = self._leaders.get((topic, partition))
        if hit is not None and time.monotonic() - hit[0] < _LEADER_TTL_S:
            return hit[1]

        def build(cls: type[Any]) -> Any:
            return make(
                cls,
                topics=(make(nested(cls, "MetadataRequestTopic"), topic_id=None, name=topic),),
                allow_auto_topic_creation=False,
                include_cluster_authorized_operations=False,
                include_topic_authorized_operations=False,
            )

        last: Exception | None = None
        for addr in self.bootstrap:
            try:
                md = await self._call(addr, bv.METADATA, build, self.timeout_s)
                break
            except (OSError, TimeoutError, asyncio.IncompleteReadError) as e:
                last = e
        else:
            raise ConnectionError(f"no bootstrap broker of {self.bootstrap} answered Metadata: {last}")
        brokers = {b.node_id: (b.host, int(b.port)) for b in md.brokers}
        now = time.monotonic()
        for t in md.topics:
            for p in t.partitions:
                if p.leader_id in brokers:
                    self._leaders[(t.name, p.partition_index)] = (now, brokers[p.leader_id])
        hit = self._leaders.get((topic, partition))
        if hit is None:
            raise ConnectionError(f"{topic}-{partition}: no leader in the broker's Metadata")
        return hit[1]

    async def local_log_start(self, topic: str, partition: int) -> int:
        """The broker's log start offset (below it only the remote tier has records); cached
        for a moment, refreshed from every forwarded fetch."""
        hit = self._local_start.get((topic, partition))
        if hit is not None and time.monotonic() - hit[0] < _LOCAL_START_TTL_S:
            return hit[1]
        addr = await self.leader(topic, partition)

        def build(cls: type[Any]) -> Any:
            part = make(
                nested(cls, "ListOffsetsPartition"), partition_index=partition, current_leader_epoch=-1,
                timestamp=-2,
            )
            return make(
                cls,
                replica_id=-1,
                isolation_level=0,
                topics=(make(nested(cls, "ListOffsetsTopic"), name=topic, partitions=(part,)),),
            )

        resp = await self._call(addr, bv.LIST_OFFSETS, build, self.timeout_s)
        p = resp.topics[0].partitions[0]
        if p.error_code is not ErrorCode.none:
            self._leaders.pop((topic, partition), None)
            raise ConnectionError(f"broker ListOffsets for {topic}-{partition}: {p.error_code.name}")
        self._local_start[(topic, partition)] = (time.monotonic(), int(p.offset))
        return int(p.offset)

    def forget_local_start(self, topic: str, partition: int) -> None:
        """Ask the broker again at the next routing (its local log start has moved)."""
        self._local_start.pop((topic, partition), None)

    async def fetch(
        self, topic: str, partition: int, offset: int, max_bytes: int, isolation: int, max_wait_ms: int
    ) -> Forwarded:
        """One partition's Fetch at its leader; a leader change is retried once."""

        def build(cls: type[Any]) -> Any:
            part = make(
                nested(cls, "FetchPartition"),
                partition=partition,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=max_bytes,
            )
            return make(
                cls,
                replica_id=-1,
                max_wait=datetime.timedelta(milliseconds=max_wait_ms),
                min_bytes=1,
                max_bytes=max_bytes,
                isolation_level=isolation,
                session_id=0,
                session_epoch=-1,
                topics=(make(nested(cls, "FetchTopic"), topic=topic, partitions=(part,)),),
                forgotten_topics_data=(),
                rack_id="",
            )

        for attempt in (0, 1):
            addr = await self.leader(topic, partition)
            resp = await self._call(addr, bv.FETCH, build, self.timeout_s + max_wait_ms / 1000)
            p = resp.responses[0].partitions[0]
            if (
                p.error_code in (ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition)
                and attempt == 0
            ):
                self._leaders.pop((topic, partition), None)
                continue
            if p.error_code is ErrorCode.none:
                self._local_start[(topic, partition)] = (time.monotonic(), int(p.log_start_offset))
            aborted = (
                None
                if p.aborted_transactions is None
                else tuple((int(a.producer_id), int(a.first_offset)) for a in p.aborted_transactions)
            )
            return Forwarded(
                p.error_code,
                int(p.high_watermark),
                int(p.last_stable_offset),
                int(p.log_start_offset),
                bytes(p.records or b""),
                aborted,
            )
        raise AssertionError("unreachable")

    async def end_offset_for_epoch(self, topic: str, partition: int, leader_epoch: int) -> tuple[int, int]:
        """The leader's OffsetForLeaderEpoch answer ``(epoch, end offset)``, unfenced (the client's
        current epoch is the endpoint's, not the broker's); a leader change is retried once."""

        def build(cls: type[Any]) -> Any:
            part = make(nested(cls, "OffsetForLeaderPartition"), partition=partition,
                        current_leader_epoch=-1, leader_epoch=leader_epoch)
            return make(cls, replica_id=-1,
                        topics=(make(nested(cls, "OffsetForLeaderTopic"), topic=topic, partitions=(part,)),))

        for attempt in (0, 1):
            addr = await self.leader(topic, partition)
            resp = await self._call(addr, bv.OFFSET_FOR_LEADER_EPOCH, build, self.timeout_s)
            p = resp.topics[0].partitions[0]
            if p.error_code is ErrorCode.none:
                return int(p.leader_epoch), int(p.end_offset)
            self._leaders.pop((topic, partition), None)
            if attempt == 1 or p.error_code not in (
                    ErrorCode.not_leader_or_follower, ErrorCode.unknown_topic_or_partition):
                raise ConnectionError(
                    f"broker OffsetForLeaderEpoch for {topic}-{partition}: {p.error_code.name}")
        raise AssertionError("unreachable")

    def close(self) -> None:
        for conns in self._idle.values():
            for c in conns:
                c.close()
        self._idle.clear()
