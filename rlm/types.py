"""Value types shared by the storage plugins, the metadata managers, the daemon and the fetcher.

These mirror Apache Kafka's ``org.apache.kafka.server.log.remote.storage`` classes (KIP-405)
under Python names. They are frozen, slotted and picklable so they can cross thread pools,
processes and Spark executors. Defined once here; ``rsm_plugins`` and ``rlmm`` re-export them.
"""

from __future__ import annotations

import base64
import enum
import os
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path

from rlm.errors import InvalidNameError


@dataclass(frozen=True, slots=True, order=True)
class KafkaUuid:
    """Kafka's ``Uuid``: 128 bits shown as URL-safe base64 without padding (22 characters)."""

    raw: bytes

    def __post_init__(self) -> None:
        if len(self.raw) != 16:
            raise ValueError(f"a Kafka Uuid has 16 bytes, got {len(self.raw)}")

    @classmethod
    def random(cls) -> KafkaUuid:
        """A fresh id, never ZERO/ONE (reserved) and never one whose text starts with '-'."""
        while True:
            raw = os.urandom(16)
            u = cls(raw)
            if raw not in (bytes(16), bytes(15) + b"\x01") and not u.text.startswith("-"):
                return u

    @classmethod
    def from_text(cls, text: str) -> KafkaUuid:
        if len(text) != 22:
            raise ValueError(f"invalid Kafka Uuid text {text!r}: expected 22 base64url characters")
        try:
            raw = base64.urlsafe_b64decode(text + "==")
        except (ValueError, TypeError) as e:
            raise ValueError(f"invalid Kafka Uuid text {text!r}") from e
        return cls(raw)

    @classmethod
    def from_bits(cls, msb: int, lsb: int) -> KafkaUuid:
        return cls((msb & (2**64 - 1)).to_bytes(8, "big") + (lsb & (2**64 - 1)).to_bytes(8, "big"))

    @property
    def text(self) -> str:
        return base64.urlsafe_b64encode(self.raw).rstrip(b"=").decode()

    @property
    def most_significant_bits(self) -> int:
        return int.from_bytes(self.raw[:8], "big", signed=True)

    @property
    def least_significant_bits(self) -> int:
        return int.from_bytes(self.raw[8:], "big", signed=True)

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"KafkaUuid({self.text!r})"


ZERO_UUID = KafkaUuid(bytes(16))


_TOPIC_NAME = re.compile(r"[a-zA-Z0-9._-]{1,249}")


def check_topic_name(topic: str) -> str:
    """``topic`` unchanged if Kafka allows it (``Topic.validate``: ``[a-zA-Z0-9._-]``, at most 249
    characters, not ``.`` or ``..``), else :class:`~rlm.errors.InvalidNameError`.

    Called wherever a topic name becomes part of a file path or object key, because names read
    from storage or metadata records are not trusted to have passed Kafka's own check.
    """
    if not isinstance(topic, str) or not _TOPIC_NAME.fullmatch(topic) or topic in (".", ".."):
        raise InvalidNameError(f"illegal topic name {topic!r}: Kafka allows 1-249 of [a-zA-Z0-9._-]")
    return topic


@dataclass(frozen=True, slots=True, order=True)
class TopicPartition:
    topic: str
    partition: int

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True, order=True)
class TopicIdPartition:
    """A partition named by topic id as well as name, as Kafka's ``TopicIdPartition``."""

    topic_id: KafkaUuid
    topic: str
    partition: int

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self.topic, self.partition)

    def __str__(self) -> str:
        return f"{self.topic_id.text}:{self.topic}-{self.partition}"


@dataclass(frozen=True, slots=True, order=True)
class RemoteLogSegmentId:
    """One copy attempt of one segment: every attempt, retries included, gets a fresh id."""

    topic_id_partition: TopicIdPartition
    id: KafkaUuid

    @classmethod
    def generate_new(cls, tp: TopicIdPartition) -> RemoteLogSegmentId:
        return cls(tp, KafkaUuid.random())

    def __str__(self) -> str:
        return f"RemoteLogSegmentId{{topicIdPartition={self.topic_id_partition}, id={self.id.text}}}"


class RemoteLogSegmentState(enum.IntEnum):
    """Segment states with Kafka's wire ids."""

    COPY_SEGMENT_STARTED = 0
    COPY_SEGMENT_FINISHED = 1
    DELETE_SEGMENT_STARTED = 2
    DELETE_SEGMENT_FINISHED = 3

    @staticmethod
    def is_valid_transition(src: RemoteLogSegmentState | None, target: RemoteLogSegmentState) -> bool:
        """Kafka's ``RemoteLogSegmentState.isValidTransition``: same state is valid (idempotent retry)."""
        if src is None:
            return target is RemoteLogSegmentState.COPY_SEGMENT_STARTED
        if src is target:
            return True
        return target in _SEGMENT_NEXT[src]


_SEGMENT_NEXT: dict[RemoteLogSegmentState, frozenset[RemoteLogSegmentState]] = {
    RemoteLogSegmentState.COPY_SEGMENT_STARTED: frozenset(
        {RemoteLogSegmentState.COPY_SEGMENT_FINISHED, RemoteLogSegmentState.DELETE_SEGMENT_STARTED}
    ),
    RemoteLogSegmentState.COPY_SEGMENT_FINISHED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_STARTED}),
    RemoteLogSegmentState.DELETE_SEGMENT_STARTED: frozenset({RemoteLogSegmentState.DELETE_SEGMENT_FINISHED}),
    RemoteLogSegmentState.DELETE_SEGMENT_FINISHED: frozenset(),
}


class RemotePartitionDeleteState(enum.IntEnum):
    DELETE_PARTITION_MARKED = 0
    DELETE_PARTITION_STARTED = 1
    DELETE_PARTITION_FINISHED = 2

    @staticmethod
    def is_valid_transition(
        src: RemotePartitionDeleteState | None, target: RemotePartitionDeleteState
    ) -> bool:
        if src is None:
            return target is RemotePartitionDeleteState.DELETE_PARTITION_MARKED
        if src is target:
            return True
        return int(target) == int(src) + 1


class IndexType(enum.Enum):
    """Auxiliary files stored with a segment (Kafka's ``RemoteStorageManager.IndexType``)."""

    OFFSET = "OFFSET"
    TIMESTAMP = "TIMESTAMP"
    PRODUCER_SNAPSHOT = "PRODUCER_SNAPSHOT"
    TRANSACTION = "TRANSACTION"
    LEADER_EPOCH = "LEADER_EPOCH"


def _epochs_tuple(epochs: Mapping[int, int] | Iterable[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    items = epochs.items() if isinstance(epochs, Mapping) else epochs
    return tuple(sorted((int(e), int(o)) for e, o in items))


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadata:
    """What is known about one copied (or being copied) segment; Kafka's class of the same name.

    ``segment_leader_epochs`` holds (epoch, first offset of that epoch in the segment) pairs in
    ascending epoch order; ``start_offset``/``end_offset`` are both inclusive.
    """

    remote_log_segment_id: RemoteLogSegmentId
    start_offset: int
    end_offset: int
    max_timestamp_ms: int
    broker_id: int
    event_timestamp_ms: int
    segment_size_in_bytes: int
    segment_leader_epochs: tuple[tuple[int, int], ...]
    state: RemoteLogSegmentState = RemoteLogSegmentState.COPY_SEGMENT_STARTED
    custom_metadata: bytes | None = None
    txn_index_empty: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "segment_leader_epochs", _epochs_tuple(self.segment_leader_epochs))
        if self.start_offset < 0:
            raise ValueError(f"start_offset must be >= 0, got {self.start_offset}")
        if self.end_offset < self.start_offset:
            raise ValueError(f"end_offset {self.end_offset} < start_offset {self.start_offset}")
        if not self.segment_leader_epochs:
            raise ValueError("segment_leader_epochs must not be empty")

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition

    @property
    def leader_epochs(self) -> dict[int, int]:
        return dict(self.segment_leader_epochs)

    def create_with_updates(self, update: RemoteLogSegmentMetadataUpdate) -> RemoteLogSegmentMetadata:
        """Apply an update: state, broker, event time and custom metadata come from ``update``.

        As Kafka's ``createWithUpdates``, an update without custom metadata clears it; writers
        carry the segment's custom metadata forward in every update they make.
        """
        if update.remote_log_segment_id != self.remote_log_segment_id:
            raise ValueError("update is for another segment")
        return replace(
            self,
            state=update.state,
            broker_id=update.broker_id,
            event_timestamp_ms=update.event_timestamp_ms,
            custom_metadata=update.custom_metadata,
        )


@dataclass(frozen=True, slots=True)
class RemoteLogSegmentMetadataUpdate:
    remote_log_segment_id: RemoteLogSegmentId
    event_timestamp_ms: int
    state: RemoteLogSegmentState
    broker_id: int
    custom_metadata: bytes | None = None

    @property
    def topic_id_partition(self) -> TopicIdPartition:
        return self.remote_log_segment_id.topic_id_partition


@dataclass(frozen=True, slots=True)
class RemotePartitionDeleteMetadata:
    topic_id_partition: TopicIdPartition
    state: RemotePartitionDeleteState
    event_timestamp_ms: int
    broker_id: int


@dataclass(frozen=True, slots=True)
class LogSegmentData:
    """The local files of one segment handed to ``copy_log_segment_data``.

    ``leader_epoch_index`` is the content of a leader-epoch checkpoint file restricted to the
    segment (bytes, as Kafka passes a ByteBuffer). ``transaction_index`` is ``None`` when the
    segment has no (or an empty) ``.txnindex``.
    """

    log_segment: Path
    offset_index: Path
    time_index: Path
    transaction_index: Path | None
    producer_snapshot_index: Path
    leader_epoch_index: bytes = field(default=b"")
