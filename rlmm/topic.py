"""Topic-backed RemoteLogMetadataManager: Kafka's ``__remote_log_metadata`` topic, byte compatible.

What a Kafka broker running ``TopicBasedRemoteLogMetadataManager`` writes, we read, and the
other way round: the same topic (created the same way, :mod:`rlmm.topic_admin`), the same
partitioner (:mod:`rlmm.partitioner`), the same record bytes (:mod:`rlmm.serde`, version 0
only, key null), an idempotent ``acks=all`` producer.

Consistency model (as Kafka's): the topic is the source of truth and this instance's cache is
only ever changed by its consumer thread (:mod:`rlmm.topic_consumer`). A write is validated
against the cache, produced, and returns only once the consumer has applied the record at the
produced offset (read-your-writes), else :class:`MetadataTimeoutError`. Writes to one metadata
partition are serialized so validation always sees this instance's previous writes. If another
writer (e.g. a broker) raced us and the cache dropped our event as invalid, the write raises
:class:`InvalidStateTransitionError`, where Kafka would silently lose it.

Unavailable cluster: writes fail with retriable :class:`MetadataTimeoutError` /
:class:`MetadataUnavailableError`; the consumer keeps retrying and catches up later. Reads are
served from memory; a partition whose metadata has not been read up to the end yet waits up
to ``remote.log.metadata.consume.wait.ms`` and then raises :class:`MetadataUnavailableError`
naming the metadata partitions and how far each got (Kafka raises its retriable
``ReplicaNotAvailableException`` at once).

Readers load only what they read: :meth:`follow` consumes just the metadata partitions the given
user partitions map to, :meth:`follow_all` every one; either way all of them are assigned to the
one consumer at once and each is read up to the end offset captured before its fetches begin.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Set
from typing import Any

import structlog

from rlmm.api import (
    InvalidStateTransitionError,
    MetadataTimeoutError,
    MetadataUnavailableError,
    RemoteLogMetadataError,
    RemoteLogMetadataManager,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)
from rlmm.cache import RemoteLogMetadataCache
from rlmm.partitioner import RemoteLogMetadataTopicPartitioner
from rlmm.serde import RemoteLogMetadata, serialize
from rlmm.topic_config import CONSUME_WAIT_MS, TopicRlmmConfig
from rlmm.topic_consumer import ConsumerStats, MetadataConsumer
from rlmm.topic_producer import MetadataPublisher
from rlmm.topic_snapshots import TopicSnapshotStore

log = structlog.get_logger(__name__)

__all__ = ["TopicBasedRemoteLogMetadataManager"]


class TopicBasedRemoteLogMetadataManager(RemoteLogMetadataManager):
    """Kafka's topic-based metadata manager, in Python. Thread-safe."""

    def __init__(self, config: Mapping[str, Any] | None = None) -> None:
        self._cfg: TopicRlmmConfig | None = None
        self._lock = threading.RLock()
        self._cache = RemoteLogMetadataCache()
        self._managed: set[TopicIdPartition] = set()
        self._read_mps: set[int] = set()  # metadata partitions loaded for reads (follow, follow_all)
        self._leaders: set[TopicIdPartition] = set()
        self._catch_up: set[TopicIdPartition] = set()  # new leaders: re-read to the end before use
        self._write_locks: dict[int, threading.Lock] = {}
        self._closed = False
        self._consumer: MetadataConsumer | None = None
        self._publisher: MetadataPublisher | None = None
        self._partitioner: RemoteLogMetadataTopicPartitioner | None = None
        if config is not None:
            self.configure(config)

    # ---- lifecycle ---------------------------------------------------------------------------
    def configure(self, config: Mapping[str, Any]) -> None:
        """Parses Kafka-named settings, creates/verifies the topic, starts the consumer (the producer
        starts when writing does: :meth:`on_partition_leadership_changes` with leaders, or a write)."""
        if self._cfg is not None:
            raise RemoteLogMetadataError("TopicBasedRemoteLogMetadataManager is already configured")
        cfg = TopicRlmmConfig.from_mapping(config)
        consumer = MetadataConsumer(cfg, self._cache, self._lock, None)
        try:
            # The consumer's own Metadata request answers the usual case (the topic is there, with
            # the configured partition count): a cold reader then opens one client, not also an
            # admin client. Anything else (absent, another count, no answer yet) is created,
            # refused or retried as before, with an admin client.
            if consumer.topic_partitions() != cfg.num_partitions:
                from rlmm.topic_admin import ensure_metadata_topic  # the admin client's module too

                ensure_metadata_topic(cfg)
            cfg.log_dir.mkdir(parents=True, exist_ok=True)
            consumer.use_snapshots(TopicSnapshotStore(cfg.snapshot_dir))
        except BaseException:
            consumer.close()
            raise
        self._partitioner = RemoteLogMetadataTopicPartitioner(cfg.num_partitions)
        self._write_locks = {mp: threading.Lock() for mp in range(cfg.num_partitions)}
        self._publisher = MetadataPublisher(cfg)  # its producer starts when writing does
        self._consumer = consumer
        self._cfg = cfg
        self._consumer.start()
        log.info("rlmm_topic_started", topic=cfg.topic_name, partitions=cfg.num_partitions,
                 bootstrap=cfg.bootstrap_servers, broker_id=cfg.broker_id, log_dir=str(cfg.log_dir))

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
        if self._consumer is not None:
            self._consumer.close()
        if self._publisher is not None:
            self._publisher.close()
        log.info("rlmm_topic_closed")

    def __enter__(self) -> TopicBasedRemoteLogMetadataManager:
        return self

    @property
    def config(self) -> TopicRlmmConfig:
        return self._started()[0]

    @property
    def stats(self) -> ConsumerStats:
        """Consumer counters (records consumed/applied/rejected, snapshots loaded/written)."""
        return self._started()[1].stats

    def applied_offsets(self) -> dict[int, int]:
        """Last applied offset per assigned metadata partition (-1: none yet)."""
        return self._started()[1].applied_offsets()

    def metadata_partition(self, tp: TopicIdPartition) -> int:
        return self._started()[2].metadata_partition(tp)

    def _started(self) -> tuple[TopicRlmmConfig, MetadataConsumer, RemoteLogMetadataTopicPartitioner,
                                MetadataPublisher]:
        if self._closed:
            raise RemoteLogMetadataError("the metadata manager is closed")
        if (self._cfg is None or self._consumer is None or self._partitioner is None
                or self._publisher is None):
            raise RemoteLogMetadataError("the metadata manager is not configured: call configure() first")
        if self._consumer.failure is not None:
            raise RemoteLogMetadataError(f"the metadata consumer stopped: {self._consumer.failure!r}")
        return self._cfg, self._consumer, self._partitioner, self._publisher

    # ---- partition management ----------------------------------------------------------------
    def on_partition_leadership_changes(self, leaders: Set[TopicIdPartition],
                                        followers: Set[TopicIdPartition]) -> None:
        _, consumer, partitioner, publisher = self._started()
        if leaders:
            publisher.start()  # a leader writes: its producer is ready (or refused) before it does
        with self._lock:
            self._managed |= set(leaders) | set(followers)
            # A follower's metadata may lag what the previous leader wrote last; a new leader first
            # catches up to the metadata partition's current end, so it resumes copying exactly
            # after the old leader's last segment (Kafka waits for the same before copying).
            self._catch_up |= set(leaders) - self._leaders
            self._leaders = (self._leaders | set(leaders)) - set(followers)
            wanted = self._wanted_locked(partitioner)
        consumer.set_wanted(wanted)

    def _wanted_locked(self, partitioner: RemoteLogMetadataTopicPartitioner) -> set[int]:
        """The metadata partitions to consume: those of managed partitions and those loaded for reads."""
        return {partitioner.metadata_partition(tp) for tp in self._managed} | self._read_mps

    def follow(self, partitions: Set[TopicIdPartition]) -> None:
        """Load, for reading, only the metadata partitions ``partitions`` map to (Kafka's
        partitioner): a cold read of one partition consumes one of the topic's 50 partitions, not
        all of them. Returns once each has been read up to the end offset it had when assigned."""
        _, _, partitioner, _ = self._started()
        needed = {partitioner.metadata_partition(tp) for tp in partitions}
        shown = sorted(partitions, key=lambda tp: (tp.topic, tp.partition))
        what = ", ".join(f"{tp.topic}-{tp.partition}" for tp in shown[:5])
        what += " ..." if len(shown) > 5 else ""
        self._load_for_reads(needed, f"the metadata of {what}")

    def follow_all(self) -> None:
        """Consume every metadata partition, all at once, and allow reads of any user partition
        (a read tier serving any partition, or a command listing every topic)."""
        cfg = self._started()[0]
        self._load_for_reads(set(range(cfg.num_partitions)), "every metadata partition")

    def _load_for_reads(self, needed: set[int], what: str) -> None:
        cfg, consumer, partitioner, _ = self._started()
        with self._lock:
            self._read_mps |= needed
            wanted = self._wanted_locked(partitioner)
        consumer.set_wanted(wanted)
        self._await_loaded(needed, time.monotonic() + cfg.consume_wait_ms / 1000, what)

    def _await_loaded(self, needed: set[int], deadline: float, what: str) -> None:
        """Waits until ``needed`` are loaded; else a :class:`MetadataUnavailableError` that says
        what was waited for, how far each partition got and which setting to change."""
        cfg, consumer, _, _ = self._started()
        if consumer.await_ready(needed, deadline):
            return
        self._started()  # a stopped consumer says so instead
        progress = consumer.progress(needed)
        late = {mp: p for mp, p in progress.items() if not p.ready}
        detail = "; ".join(p.describe(mp) for mp, p in sorted(late.items())[:10])
        more = f" (and {len(late) - 10} more)" if len(late) > 10 else ""
        hint = (f"if they are still loading, raise {CONSUME_WAIT_MS} (in rlm.yaml "
                "metadata_request_timeout_ms, which it defaults to)")
        if all(p.end is None for p in late.values()):
            hint = (f"the cluster at {cfg.bootstrap_servers} has not said where they end: check that it "
                    f"is reachable and that {cfg.topic_name}'s partitions have leaders; {hint}")
        raise MetadataUnavailableError(
            f"{what} was not loaded within {cfg.consume_wait_ms} ms ({CONSUME_WAIT_MS}): "
            f"{len(late)} of {len(needed)} {cfg.topic_name} partitions not read to their end offset "
            f"(partition: offset reached/end offset) {detail}{more}; {hint}")

    def known_partitions(self) -> set[TopicIdPartition]:
        self._started()
        return self._cache.partitions()

    def on_stopped_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        _, consumer, partitioner, _ = self._started()
        with self._lock:
            self._managed -= set(partitions)
            self._leaders -= set(partitions)
            self._catch_up -= set(partitions)
            wanted = self._wanted_locked(partitioner)
        consumer.set_wanted(wanted)

    def _managed_partition(self, tp: TopicIdPartition, *, for_write: bool) -> int:
        cfg, consumer, partitioner, _ = self._started()
        mp = partitioner.metadata_partition(tp)
        with self._lock:
            managed = tp in self._managed or (mp in self._read_mps and not for_write)
        if not managed:
            what = "written" if for_write else "read"
            raise RemoteLogMetadataError(
                f"{tp} is not managed by this metadata manager and cannot be {what}: "
                "call on_partition_leadership_changes (or, to read, follow) first")
        deadline = time.monotonic() + cfg.consume_wait_ms / 1000
        with self._lock:
            needs_catch_up = tp in self._catch_up
            self._catch_up.discard(tp)
        if needs_catch_up:
            consumer.require_catch_up(mp)
        self._await_loaded({mp}, deadline, f"the metadata of {tp.topic}-{tp.partition}")
        return mp

    # ---- writes ------------------------------------------------------------------------------
    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        self._write(md, md.topic_id_partition)

    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        self._write(update, update.topic_id_partition)

    def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        self._write(md, md.topic_id_partition)

    def _write(self, md: RemoteLogMetadata, tp: TopicIdPartition) -> None:
        cfg, consumer, _, publisher = self._started()
        mp = self._managed_partition(tp, for_write=True)
        deadline = time.monotonic() + cfg.consume_wait_ms / 1000
        with self._write_locks[mp]:
            self._cache.validate(md)
            offset = publisher.publish(mp, serialize(md), deadline)
            if not consumer.await_applied(mp, offset, deadline):
                self._started()
                raise MetadataTimeoutError(
                    f"{cfg.topic_name}-{mp}@{offset} was written but not read back within "
                    f"{cfg.consume_wait_ms} ms (remote.log.metadata.consume.wait.ms)")
            if consumer.was_rejected(mp, offset):
                raise InvalidStateTransitionError(
                    f"{cfg.topic_name}-{mp}@{offset}: the event was written but another writer changed the "
                    f"segment or partition first, so it was dropped as an invalid transition: {md}")

    # ---- reads -------------------------------------------------------------------------------
    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        self._managed_partition(tp, for_write=False)
        return self._cache.remote_log_segment_metadata(tp, leader_epoch, offset)

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        self._managed_partition(tp, for_write=False)
        return self._cache.highest_offset_for_epoch(tp, leader_epoch)

    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        self._managed_partition(tp, for_write=False)
        return self._cache.list_remote_log_segments(tp, leader_epoch)

    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        self._managed_partition(tp, for_write=False)
        return self._cache.remote_partition_delete_state(tp)

    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        self._managed_partition(tp, for_write=False)
        return self._cache.remote_log_size(tp, leader_epoch)
