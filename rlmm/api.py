"""The RemoteLogMetadataManager contract (Kafka's ``RemoteLogMetadataManager``, KIP-405).

Implementations: :mod:`rlmm.topic` (Kafka's ``__remote_log_metadata`` topic, byte compatible
with brokers) and :mod:`rlmm.file` (embedded, one machine, no Kafka). Both keep their state in
:class:`rlmm.cache.RemoteLogMetadataCache`, which carries Kafka's exact lookup semantics.

Differences from the Java interface, on purpose: writes are synchronous (they return once the
event is durable *and* visible to this instance's reads, or raise a typed error) instead of
returning futures, and invalid state transitions are rejected *before* anything is written —
Kafka's topic-based manager writes them and lets every reader drop them.

The value types and errors are defined once in :mod:`rlm.types` and :mod:`rlm.errors`; they are
re-exported here so plugin authors need one import.
"""

from __future__ import annotations

import abc
from collections.abc import Iterator, Mapping, Set
from types import TracebackType
from typing import Any

from rlm.errors import (
    ConfigError,
    InvalidStateTransitionError,
    MetadataDecodeError,
    MetadataTimeoutError,
    MetadataUnavailableError,
    RemoteLogMetadataError,
    RemoteLogSegmentNotFoundError,
)
from rlm.types import (
    KafkaUuid,
    RemoteLogSegmentId,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    RemotePartitionDeleteState,
    TopicIdPartition,
)

__all__ = [
    "ConfigError",
    "InvalidStateTransitionError",
    "KafkaUuid",
    "MetadataDecodeError",
    "MetadataTimeoutError",
    "MetadataUnavailableError",
    "RemoteLogMetadataError",
    "RemoteLogMetadataManager",
    "RemoteLogSegmentId",
    "RemoteLogSegmentMetadata",
    "RemoteLogSegmentMetadataUpdate",
    "RemoteLogSegmentNotFoundError",
    "RemoteLogSegmentState",
    "RemotePartitionDeleteMetadata",
    "RemotePartitionDeleteState",
    "TopicIdPartition",
]


class RemoteLogMetadataManager(abc.ABC):
    """Strongly consistent store of what is in remote storage, per user partition.

    All methods are safe to call from several threads. Read methods never block on I/O.
    """

    @abc.abstractmethod
    def configure(self, config: Mapping[str, Any]) -> None:
        """Applies configuration and starts the manager (Kafka's ``rlmm.config.*`` keys, stripped).

        ``broker.id`` is always passed (as Kafka does): accept it. Raises
        :class:`~rlm.errors.ConfigError` for unknown or invalid keys.
        """

    @abc.abstractmethod
    def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        """Records that a segment copy has started.

        ``md.state`` must be COPY_SEGMENT_STARTED, else :class:`InvalidStateTransitionError`;
        re-adding a segment that is still COPY_SEGMENT_STARTED is allowed (Kafka's idempotent
        retry), re-adding one in any later state is an invalid transition. Returns when the event
        is durable and visible to this instance's reads; :class:`MetadataTimeoutError` if that
        could not be confirmed in time (the write may or may not have happened).
        """

    @abc.abstractmethod
    def update_remote_log_segment_metadata(self, update: RemoteLogSegmentMetadataUpdate) -> None:
        """Moves a known segment to ``update.state`` (any state but COPY_SEGMENT_STARTED).

        Unknown segment: :class:`RemoteLogSegmentNotFoundError`. A transition Kafka's state
        machine forbids (or state COPY_SEGMENT_STARTED): :class:`InvalidStateTransitionError`, and
        nothing changes. Moving to the current state again is valid (retries). Durability and
        visibility as for :meth:`add_remote_log_segment_metadata`.
        """

    @abc.abstractmethod
    def remote_log_segment_metadata(self, tp: TopicIdPartition, leader_epoch: int,
                                    offset: int) -> RemoteLogSegmentMetadata | None:
        """The COPY_SEGMENT_FINISHED segment holding ``offset`` under ``leader_epoch``, if any.

        Kafka's ``RemoteLogLeaderEpochState`` semantics: floor lookup by the epoch's start offset
        within each segment, then ``None`` if ``offset`` lies past that epoch's end in the segment.
        """

    @abc.abstractmethod
    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        """Highest offset copied under ``leader_epoch`` (segments that reached COPY_SEGMENT_FINISHED;
        like Kafka it does not go down when those segments are later deleted)."""

    @abc.abstractmethod
    def list_remote_log_segments(self, tp: TopicIdPartition,
                                 leader_epoch: int | None = None) -> Iterator[RemoteLogSegmentMetadata]:
        """Segments in every state but DELETE_SEGMENT_FINISHED, by ascending start offset.

        With ``leader_epoch``: only segments whose leader epochs contain it, as Kafka lists them
        (the epoch's current offset mapping plus its unreferenced segments).
        """

    @abc.abstractmethod
    def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        """Records a partition deletion state (MARKED -> STARTED -> FINISHED).

        Invalid transitions raise :class:`InvalidStateTransitionError` and change nothing.
        DELETE_PARTITION_FINISHED forgets the partition's segments.
        """

    @abc.abstractmethod
    def remote_partition_delete_state(self, tp: TopicIdPartition) -> RemotePartitionDeleteState | None:
        """The partition's deletion state, or ``None`` if deletion was never requested."""

    @abc.abstractmethod
    def on_partition_leadership_changes(self, leaders: Set[TopicIdPartition],
                                        followers: Set[TopicIdPartition]) -> None:
        """Registers the user partitions this broker leads or follows; their metadata is loaded.

        Must be called before a partition is written or read (as with Kafka's manager).
        """

    @abc.abstractmethod
    def on_stopped_partitions(self, partitions: Set[TopicIdPartition]) -> None:
        """This broker no longer manages ``partitions``."""

    @abc.abstractmethod
    def remote_log_size(self, tp: TopicIdPartition, leader_epoch: int) -> int:
        """Sum of ``segment_size_in_bytes`` of :meth:`list_remote_log_segments` for the epoch."""

    def known_partitions(self) -> set[TopicIdPartition]:
        """User partitions this instance holds metadata for (the read side lists topics with it).

        The default knows none; implementations backed by :class:`rlmm.cache.RemoteLogMetadataCache`
        return the partitions they loaded.
        """
        return set()

    def follow_all(self) -> None:  # noqa: B027 - optional hook
        """Load the metadata of every user partition, not only registered ones (a read tier that
        serves any partition). The default does nothing: a store that always holds everything."""

    def follow(self, partitions: Set[TopicIdPartition]) -> None:
        """Load, for reading, the metadata of ``partitions`` only (a cold read of a few
        partitions need not load every one). The default loads everything (:meth:`follow_all`);
        the topic store loads just the metadata partitions they map to."""
        self.follow_all()

    @abc.abstractmethod
    def close(self) -> None:
        """Releases resources; idempotent. Later calls raise :class:`RemoteLogMetadataError`."""

    def __enter__(self) -> RemoteLogMetadataManager:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()
