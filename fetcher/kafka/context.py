"""What every handler shares: settings, the read core, the catalog of tiered topics, offsets, groups.

The read core is blocking (remote GETs on its reader pool), so handlers reach it through
:meth:`EndpointContext.call`, which runs it on a small executor and keeps the event loop free
for other connections.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from fetcher.cluster_auth import BrokerLogin
from fetcher.core import RemoteFetcher
from fetcher.kafka.consumer_groups import ConsumerGroupCoordinator
from fetcher.kafka.fetch_sessions import FetchSessionCache
from fetcher.kafka.forward import BrokerForwarder
from fetcher.kafka.groups import GroupCoordinator, coordinator_index
from fetcher.kafka.offset_store import OffsetRetention, OffsetStore
from fetcher.kafka.prefetch import Prefetcher
from rlm.config import ReadConfig
from rlm.errors import ConfigError
from rlm.types import TopicIdPartition

T = TypeVar("T")

_CATALOG_TTL_S = 1.0


@dataclass(frozen=True, slots=True)
class ListenerSettings:
    """Where the endpoint listens, what it advertises, and its limits."""

    host: str = "127.0.0.1"
    port: int = 9466
    advertised_host: str | None = None
    node_id: int = 0
    max_connections: int = 256
    max_request_bytes: int = 100 * 1024 * 1024
    max_in_flight: int = 8
    idle_timeout_ms: int = 600_000
    #: limits before login (docs/security.md, "Limits before login"): the largest request, the time
    #: to log in, connections per client address and not logged in, request bytes held at once
    sasl_max_receive_size: int = 524_288
    login_timeout_ms: int = 10_000
    max_connections_per_ip: int = 128
    max_unauthenticated_connections: int = 128
    #: new connections per second per client address (KIP-612's per-IP quota; 0: no limit)
    connection_creation_rate_per_ip: float = 50.0
    queued_max_request_bytes: int = 128 * 1024 * 1024
    cluster_id: str = "rlm-remote-tier"
    #: caps on what a client may ask for in one Fetch (the broker's fetch.max.bytes; a partition
    #: limit so one request cannot make the reader GET a whole segment)
    fetch_max_bytes: int = 57_671_680
    max_partition_fetch_bytes: int = 16 * 1024 * 1024
    #: incremental fetch sessions kept, and the idle time after which one may be evicted (Kafka's
    #: max.incremental.fetch.session.cache.slots, min.incremental.fetch.session.eviction.ms)
    fetch_session_slots: int = 1000
    fetch_session_eviction_ms: int = 120_000
    #: Fetch reads through the chunk cache with read-ahead (consumers read forward)
    sequential_reads: bool = True
    #: "auto" (uvloop when importable), "asyncio" or "uvloop"
    event_loop: str = "auto"
    merged: bool | None = (
        None  # forward reads at/above the broker's local log start; None: when one is configured
    )
    group_initial_rebalance_delay_ms: int = 3000
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5_000
    #: group and offset bounds (docs/kafka-endpoint.md, "Consumer groups"): members and pending
    #: member ids per group, offsets' retention and how often it is checked, a commit's metadata
    group_max_size: int = 1000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    #: every endpoint process behind one address ("host:port", in the same order everywhere);
    #: empty: this one coordinates every group
    peers: tuple[str, ...] = ()

    @classmethod
    def from_read_config(
        cls, rc: ReadConfig, host: str | None = None, port: int | None = None
    ) -> ListenerSettings:
        return cls(
            host=host or rc.kafka_host,
            port=rc.kafka_port if port is None else port,
            advertised_host=rc.kafka_advertised_host,
            node_id=rc.kafka_node_id,
            max_connections=rc.kafka_max_connections,
            max_request_bytes=rc.kafka_max_request_bytes,
            max_in_flight=rc.kafka_max_in_flight,
            idle_timeout_ms=rc.kafka_idle_timeout_ms,
            sasl_max_receive_size=rc.kafka_sasl_max_receive_size,
            login_timeout_ms=rc.kafka_login_timeout_ms,
            max_connections_per_ip=rc.kafka_max_connections_per_ip,
            max_unauthenticated_connections=rc.kafka_max_unauthenticated_connections,
            connection_creation_rate_per_ip=rc.kafka_connection_creation_rate_per_ip,
            queued_max_request_bytes=rc.kafka_queued_max_request_bytes,
            fetch_max_bytes=rc.kafka_fetch_max_bytes,
            max_partition_fetch_bytes=rc.kafka_max_partition_fetch_bytes,
            fetch_session_slots=rc.kafka_fetch_session_cache_slots,
            fetch_session_eviction_ms=rc.kafka_fetch_session_eviction_ms,
            sequential_reads=rc.kafka_sequential_reads,
            event_loop=rc.kafka_event_loop,
            merged=None if rc.kafka_merged else False,
            group_initial_rebalance_delay_ms=rc.kafka_group_initial_rebalance_delay_ms,
            consumer_session_timeout_ms=rc.kafka_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=rc.kafka_consumer_heartbeat_interval_ms,
            group_max_size=rc.kafka_group_max_size,
            offsets_retention_ms=rc.kafka_offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=rc.kafka_offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=rc.kafka_offset_metadata_max_bytes,
            peers=tuple(rc.kafka_peers),
        )


@dataclass(frozen=True, slots=True)
class TopicEntry:
    name: str
    topic_id: uuid.UUID
    partitions: tuple[TopicIdPartition, ...]


class Catalog:
    """Tiered topics by name and by id, refreshed at most once a second."""

    def __init__(self, fetcher: RemoteFetcher) -> None:
        self._fetcher = fetcher
        self._at = -1.0
        self.by_name: dict[str, TopicEntry] = {}
        self.by_id: dict[uuid.UUID, TopicEntry] = {}
        #: bumped when the set of topics changes (regex subscriptions are cached per version)
        self.version = 0

    def refresh(self) -> Catalog:
        """Blocking (reads metadata): call it through :meth:`EndpointContext.call`."""
        now = time.monotonic()
        if now - self._at < _CATALOG_TTL_S:
            return self
        by_name: dict[str, TopicEntry] = {}
        for name, tps in self._fetcher.topics().items():
            if tps:
                by_name[name] = TopicEntry(name, uuid.UUID(bytes=tps[0].topic_id.raw), tuple(tps))
        if by_name.keys() != self.by_name.keys():
            self.version += 1
        self.by_name = by_name
        self.by_id = {e.topic_id: e for e in by_name.values()}
        self._at = now
        return self


class EndpointContext:
    """Shared state of one listener."""

    def __init__(self, fetcher: RemoteFetcher, settings: ListenerSettings, state_dir: Path) -> None:
        self.fetcher = fetcher
        self.settings = settings
        self.catalog = Catalog(fetcher)
        self.offsets = OffsetStore(state_dir / "committed-offsets.log",
                                   legacy=state_dir / "committed-offsets.json")
        self.consumer_groups = ConsumerGroupCoordinator(
            settings.consumer_session_timeout_ms, settings.consumer_heartbeat_interval_ms,
            max_size=settings.group_max_size, has_offsets=self.offsets.has_group)
        self.groups = GroupCoordinator(
            settings.group_initial_rebalance_delay_ms, also_tick=self.consumer_groups.tick,
            max_size=settings.group_max_size, has_offsets=self.offsets.has_group,
            housekeeping=OffsetRetention(
                self.offsets, settings.offsets_retention_ms, settings.offsets_retention_check_interval_ms,
                (lambda g: self.groups.live_since(g), self.consumer_groups.live_since), self.call))
        self.fetch_sessions = FetchSessionCache(
            settings.fetch_session_slots, settings.fetch_session_eviction_ms / 1000)
        self.advertised_port = settings.port
        merged = settings.merged if settings.merged is not None else fetcher.broker is not None
        if merged and fetcher.broker is None:
            raise ConfigError("merged mode needs bootstrap_servers (the broker to forward the live tail to)")
        self.forwarder = (
            BrokerForwarder(
                fetcher.broker.bootstrap_servers,
                login=BrokerLogin.from_client_config(fetcher.broker.client_config),
            )
            if merged and fetcher.broker
            else None
        )
        self._executor = ThreadPoolExecutor(
            max_workers=max(2, fetcher.read_config.reader_threads), thread_name_prefix="kafka-endpoint"
        )
        # partition reads of one Fetch and read-ahead run here, never on the executor above that
        # waits for them (no pool waits on itself)
        self.reads = ThreadPoolExecutor(
            max_workers=max(2, fetcher.read_config.reader_threads), thread_name_prefix="kafka-endpoint-read"
        )
        self.prefetch = Prefetcher(fetcher, self.reads, max(fetcher.read_config.chunk_cache_bytes, 16 << 20))

    @property
    def advertised_host(self) -> str:
        host = self.settings.advertised_host or self.settings.host
        return "127.0.0.1" if host in ("0.0.0.0", "", "::") else host

    async def call(self, fn: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def topics(self) -> Catalog:
        return await self.call(self.catalog.refresh)

    def coordinator_for(self, group_id: str) -> tuple[int, str, int]:
        """(node id, host, port) of the endpoint process that coordinates ``group_id``."""
        peers = self.settings.peers
        if not peers:
            return self.settings.node_id, self.advertised_host, self.advertised_port
        index = coordinator_index(group_id, len(peers))
        host, _, port = peers[index].rpartition(":")
        return index, host, int(port)

    def owns_group(self, group_id: str) -> bool:
        """Is this process the group's coordinator? (Others answer NOT_COORDINATOR, as brokers do.)"""
        return not self.settings.peers or coordinator_index(
            group_id, len(self.settings.peers)) == self.settings.node_id

    def close(self) -> None:
        self.groups.close()
        self.offsets.close()
        if self.forwarder is not None:
            self.forwarder.close()
        self._executor.shutdown(wait=False, cancel_futures=True)
        self.reads.shutdown(wait=False, cancel_futures=True)
