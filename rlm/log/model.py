"""Value types for Kafka record batches (``.log`` entries of any magic).

They live apart from the decoders so that ``records``, ``legacy``, ``encode`` and ``arrow`` can
all import them without cycles. ``rlm.log.records`` re-exports every name here; code outside the
package should import from there (or from ``rlm.log``).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

#: Bytes before the magic byte of any entry: offset int64, size int32, epoch/crc int32.
HEADER_SIZE_UP_TO_MAGIC = 17
#: offset int64 + size int32, the "log overhead" every entry starts with.
LOG_OVERHEAD = 12
#: Size of a v2 batch header (a batch with no records is exactly this long).
RECORD_BATCH_OVERHEAD = 61
#: Java's ``LegacyRecord.RECORD_OVERHEAD_V0``: the smallest legal ``size`` of any entry.
MIN_ENTRY_SIZE = 14

ATTR_COMPRESSION_MASK = 0x07
ATTR_TIMESTAMP_TYPE = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20
ATTR_DELETE_HORIZON = 0x40


class Compression(enum.IntEnum):
    """Codec ids of attribute bits 0-2 (same numbers in every magic)."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4


class TimestampType(enum.IntEnum):
    """Kafka's ``TimestampType`` ids; -1 is what magic-0 data (no timestamps) reports."""

    NO_TIMESTAMP = -1
    CREATE_TIME = 0
    LOG_APPEND_TIME = 1


class ControlRecordType(enum.IntEnum):
    """Type field of a control record key. Unknown values are kept as plain ``int``."""

    ABORT = 0
    COMMIT = 1
    LEADER_CHANGE = 2
    SNAPSHOT_HEADER = 3
    SNAPSHOT_FOOTER = 4
    KRAFT_VERSION = 5
    KRAFT_VOTERS = 6

    @classmethod
    def parse(cls, value: int) -> ControlRecordType | int:
        """The enum member for ``value``, or ``value`` itself when Kafka does not know it either."""
        try:
            return cls(value)
        except ValueError:
            return value


@dataclass(frozen=True, slots=True)
class BatchHeader:
    """One entry of a ``.log`` file, of any magic, as read from its header alone.

    For a legacy (magic 0/1) entry ``base_offset``/``last_offset`` are the first and last absolute
    inner offsets (a compressed wrapper is decompressed to learn the first), ``max_timestamp`` is the
    message timestamp (-1 for magic 0), ``base_timestamp`` equals it, producer fields are -1 and
    ``partition_leader_epoch`` is -1, as Java's ``LegacyFileChannelRecordBatch`` reports them.
    """

    position: int
    base_offset: int
    batch_length: int
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def size(self) -> int:
        """Bytes the entry takes in its file (log overhead included)."""
        return self.batch_length + LOG_OVERHEAD

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    @property
    def next_offset(self) -> int:
        return self.last_offset + 1

    @property
    def end_position(self) -> int:
        """Byte position just after this entry (= the next entry's position)."""
        return self.position + self.size

    @property
    def compression(self) -> Compression:
        return Compression(self.attributes & ATTR_COMPRESSION_MASK)

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & ATTR_TIMESTAMP_TYPE
            else TimestampType.CREATE_TIME
        )

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_TRANSACTIONAL)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_CONTROL)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & ATTR_DELETE_HORIZON)

    @property
    def delete_horizon_ms(self) -> int:
        """The delete horizon set by the log cleaner (KIP-534), or -1 when there is none."""
        return self.base_timestamp if self.has_delete_horizon else -1

    @property
    def last_sequence(self) -> int:
        """Sequence of the last record (wrapping past INT32_MAX to 0), or -1 when none."""
        if self.base_sequence < 0:
            return -1
        return (self.base_sequence + self.last_offset_delta) & 0x7FFFFFFF


@dataclass(frozen=True, slots=True)
class Record:
    """One data record with absolute offset and effective timestamp (LOG_APPEND_TIME applied)."""

    offset: int
    timestamp: int
    timestamp_type: TimestampType
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """One record of a control batch. ``coordinator_epoch`` is set only for COMMIT/ABORT markers."""

    offset: int
    timestamp: int
    type: ControlRecordType | int
    version: int
    coordinator_epoch: int | None
