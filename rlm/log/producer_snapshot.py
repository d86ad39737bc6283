"""Kafka's producer-state snapshot file, ``<offset>.snapshot`` (``ProducerStateManager``).

Layout (schema version 1, the only one): ``version int16 = 1 · crc uint32 · count int32 ·
count * entry``, CRC-32C over everything after the CRC. Entry (46 bytes): ``producerId int64
· epoch int16 · lastSequence int32 · lastOffset int64 · offsetDelta int32 · timestamp int64 ·
coordinatorEpoch int32 · currentTxnFirstOffset int64``. The file name offset is exclusive: the
state after every record below it. RLM copies the snapshot at a segment's next offset to
remote storage so a follower can rebuild producer state without the local log.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import google_crc32c

from rlm.errors import SnapshotFormatError
from rlm.log._fileio import read_bytes

VERSION = 1
HEADER_SIZE = 10
ENTRY_SIZE = 46
_HEADER = struct.Struct(">hIi")
_ENTRY = struct.Struct(">qhiqiqiq")


@dataclass(frozen=True, slots=True, order=True)
class ProducerSnapshotEntry:
    """A producer's state as of the snapshot offset; fields describe its last data batch.

    ``last_sequence``/``last_offset`` are -1 and ``offset_delta`` 0 when no batch of the
    current epoch is retained. ``current_txn_first_offset`` is -1 when no transaction is open.
    """

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp: int
    coordinator_epoch: int
    current_txn_first_offset: int

    @property
    def first_sequence(self) -> int:
        return -1 if self.last_sequence < 0 else self.last_sequence - self.offset_delta


def java_hashmap_order(producer_ids: Iterable[int]) -> list[int]:
    """The iteration order of a ``java.util.HashMap<Long, _>`` filled with these keys in this order.

    Kafka writes snapshot entries by iterating such a map. The order carries no meaning for
    readers, but reproducing it makes our snapshots byte-identical to the broker's (barring
    tree bins, which need 8+ colliding ids in a bucket). The table starts at 16 buckets and
    doubles when it holds more than 3/4 of its size; a key's bucket is its spread
    ``Long.hashCode`` masked by the table size; a bucket keeps insertion order.
    """
    keys = list(producer_ids)
    cap = 16
    while len(keys) > cap * 3 // 4:
        cap *= 2

    def bucket(k: int) -> int:
        v = k & 0xFFFFFFFFFFFFFFFF
        h = (v ^ (v >> 32)) & 0xFFFFFFFF
        return (h ^ (h >> 16)) & (cap - 1)

    return sorted(keys, key=bucket)


def encode_snapshot(entries: Iterable[ProducerSnapshotEntry]) -> bytes:
    """Snapshot bytes as ``ProducerStateManager.writeSnapshot`` writes them (CRC filled in).

    ``entries`` in the order the producers were first seen; they are written in Java
    ``HashMap`` order (see :func:`java_hashmap_order`), as the broker does.
    """
    by_pid = {e.producer_id: e for e in entries}
    rows = [by_pid[p] for p in java_hashmap_order(by_pid)]
    body = bytearray(struct.pack(">i", len(rows)))
    for e in rows:
        body += _ENTRY.pack(e.producer_id, e.producer_epoch, e.last_sequence, e.last_offset, e.offset_delta,
                            e.timestamp, e.coordinator_epoch, e.current_txn_first_offset)
    crc = google_crc32c.value(bytes(body))
    return struct.pack(">hI", VERSION, crc) + bytes(body)


def parse_snapshot(data: bytes, *, path: str | Path | None = None) -> list[ProducerSnapshotEntry]:
    """Parse snapshot bytes; :class:`SnapshotFormatError` (with byte position) if not valid."""
    where = str(path) if path is not None else None
    if len(data) < HEADER_SIZE:
        raise SnapshotFormatError(f"file too short for the header ({len(data)} < {HEADER_SIZE} bytes)",
                                  path=where, position=len(data))
    version, crc, count = _HEADER.unpack_from(data, 0)
    if version != VERSION:
        raise SnapshotFormatError(f"unknown snapshot version {version}", path=where, position=0)
    computed = google_crc32c.value(data[6:])
    if crc != computed:
        raise SnapshotFormatError(f"CRC mismatch: stored {crc:#010x}, computed {computed:#010x}",
                                  path=where, position=2)
    if count < 0:
        raise SnapshotFormatError(f"negative entry count {count}", path=where, position=6)
    expected = HEADER_SIZE + count * ENTRY_SIZE
    if len(data) != expected:
        raise SnapshotFormatError(f"{count} entries need {expected} bytes, file has {len(data)}",
                                  path=where, position=min(len(data), expected))
    out = []
    for i in range(count):
        pos = HEADER_SIZE + i * ENTRY_SIZE
        e = ProducerSnapshotEntry(*_ENTRY.unpack_from(data, pos))
        if e.producer_id < 0:
            raise SnapshotFormatError(f"negative producer id {e.producer_id}", path=where, position=pos)
        out.append(e)
    return out


def read_snapshot(path: str | Path) -> list[ProducerSnapshotEntry]:
    """Read a ``.snapshot`` file read-only."""
    return parse_snapshot(read_bytes(path), path=path)
