"""Build magic-2 record batches byte-for-byte as a Kafka broker stores them.

Layout, varints and CRC-32C follow ``DefaultRecordBatch``/``DefaultRecord``; the header fields a
broker sets on append (base offset, partition leader epoch, LOG_APPEND_TIME max timestamp) are
parameters here, so the output can go straight into a ``.log`` file. Used by the partition
writer, tests and benchmarks.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Sequence

import google_crc32c

from rlm.log import codecs
from rlm.log.legacy import encode_legacy_message_set
from rlm.log.model import (
    ATTR_CONTROL,
    ATTR_TIMESTAMP_TYPE,
    ATTR_TRANSACTIONAL,
    LOG_OVERHEAD,
    RECORD_BATCH_OVERHEAD,
    Compression,
    ControlRecordType,
    Record,
    TimestampType,
)

__all__ = [
    "assemble_batch",
    "encode_batch",
    "encode_control_batch",
    "encode_empty_batch",
    "encode_legacy_message_set",
    "encode_varint",
]

_HEADER = struct.Struct(">qiibIhiqqqhii")
HeaderPairs = Iterable[tuple[str | bytes, bytes | None]]
RecordInput = Record | tuple[bytes | None, bytes | None, HeaderPairs | None, int | None]


def encode_varint(value: int, out: bytearray) -> None:
    """Append the zig-zag LEB128 encoding of a signed 64-bit ``value`` to ``out``."""
    zz = ((value << 1) ^ (value >> 63)) & 0xFFFFFFFFFFFFFFFF
    while zz >= 0x80:
        out.append((zz & 0x7F) | 0x80)
        zz >>= 7
    out.append(zz)


def _encode_bytes(data: bytes | None, out: bytearray) -> None:
    if data is None:
        out.append(0x01)  # varint(-1)
    else:
        encode_varint(len(data), out)
        out += data


def _encode_record(
    out: bytearray,
    offset_delta: int,
    ts_delta: int,
    key: bytes | None,
    value: bytes | None,
    headers: Sequence[tuple[bytes, bytes | None]],
) -> None:
    body = bytearray(b"\x00")  # attributes: unused
    encode_varint(ts_delta, body)
    encode_varint(offset_delta, body)
    _encode_bytes(key, body)
    _encode_bytes(value, body)
    encode_varint(len(headers), body)
    for hkey, hval in headers:
        encode_varint(len(hkey), body)
        body += hkey
        _encode_bytes(hval, body)
    encode_varint(len(body), out)
    out += body


def _normalise(
    record: RecordInput,
) -> tuple[bytes | None, bytes | None, list[tuple[bytes, bytes | None]], int]:
    headers: HeaderPairs | None
    ts: int | None
    if isinstance(record, Record):
        key, value, headers, ts = record.key, record.value, record.headers, record.timestamp
    else:
        key, value, headers, ts = record
    pairs = [
        (k.encode() if isinstance(k, str) else bytes(k), None if v is None else bytes(v))
        for k, v in (headers or ())
    ]
    return (
        None if key is None else bytes(key),
        None if value is None else bytes(value),
        pairs,
        -1 if ts is None else ts,
    )


def assemble_batch(
    *,
    base_offset: int,
    partition_leader_epoch: int,
    attributes: int,
    last_offset_delta: int,
    base_timestamp: int,
    max_timestamp: int,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    count: int,
    payload: bytes,
) -> bytes:
    """A v2 batch around an already encoded (and compressed) records ``payload``, CRC computed.

    Also for callers that re-frame records they did not build here: remote compaction keeps a batch's
    base and last offset, producer fields and attributes (plus the delete-horizon bit) and writes
    only the retained records, as ``MemoryRecords.filterTo`` does.
    """
    batch = bytearray(RECORD_BATCH_OVERHEAD + len(payload))
    _HEADER.pack_into(
        batch,
        0,
        base_offset,
        RECORD_BATCH_OVERHEAD - LOG_OVERHEAD + len(payload),
        partition_leader_epoch,
        2,
        0,
        attributes,
        last_offset_delta,
        base_timestamp,
        max_timestamp,
        producer_id,
        producer_epoch,
        base_sequence,
        count,
    )
    batch[RECORD_BATCH_OVERHEAD:] = payload
    struct.pack_into(">I", batch, 17, google_crc32c.value(bytes(batch[21:])))
    return bytes(batch)


def encode_batch(
    records: Sequence[RecordInput],
    *,
    base_offset: int,
    partition_leader_epoch: int = 0,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    is_transactional: bool = False,
    offset_deltas: Sequence[int] | None = None,
) -> bytes:
    """One v2 data batch holding ``records`` as stored in a ``.log`` file.

    ``records`` are :class:`Record` objects or ``(key, value, headers, timestamp)`` tuples (header
    keys ``str`` or UTF-8 ``bytes``; a ``None`` timestamp means -1). Record offsets are
    ``base_offset + offset_deltas[i]`` (default ``i``; ``Record.offset`` is ignored); gaps model
    compacted batches. The batch's base timestamp is the first record's, as the producer sets it;
    with LOG_APPEND_TIME the max timestamp is ``log_append_time`` and the per-record deltas stay
    as given, exactly as a broker stamps an incoming batch.
    """
    if not records:
        raise ValueError("a data batch needs at least one record (use encode_empty_batch)")
    items = [_normalise(r) for r in records]
    deltas = list(range(len(items))) if offset_deltas is None else list(offset_deltas)
    if len(deltas) != len(items):
        raise ValueError("offset_deltas must have one entry per record")
    if any(b <= a for a, b in itertools.pairwise(deltas)) or deltas[0] < 0:
        raise ValueError("offset_deltas must be non-negative and strictly increasing")
    base_ts = items[0][3]
    raw = bytearray()
    for (key, value, headers, ts), delta in zip(items, deltas, strict=True):
        _encode_record(raw, delta, ts - base_ts, key, value, headers)
    attributes = int(compression)
    if is_transactional:
        attributes |= ATTR_TRANSACTIONAL
    if timestamp_type == TimestampType.LOG_APPEND_TIME:
        if log_append_time is None:
            raise ValueError("LOG_APPEND_TIME needs log_append_time")
        attributes |= ATTR_TIMESTAMP_TYPE
        max_ts = log_append_time
    elif timestamp_type == TimestampType.CREATE_TIME:
        max_ts = max(item[3] for item in items)
    else:
        raise ValueError("magic 2 batches are CREATE_TIME or LOG_APPEND_TIME")
    payload = codecs.compress(compression, bytes(raw)) if compression != Compression.NONE else bytes(raw)
    return assemble_batch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=deltas[-1],
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=len(items),
        payload=payload,
    )


def encode_control_batch(
    *,
    offset: int,
    producer_id: int,
    producer_epoch: int,
    control_type: ControlRecordType,
    coordinator_epoch: int,
    timestamp: int,
    partition_leader_epoch: int = 0,
) -> bytes:
    """The 78-byte COMMIT/ABORT marker of ``MemoryRecords.writeEndTransactionalMarker``."""
    if control_type not in (ControlRecordType.COMMIT, ControlRecordType.ABORT):
        raise ValueError("only COMMIT and ABORT markers are written to partition logs")
    raw = bytearray()
    key = struct.pack(">hh", 0, int(control_type))
    value = struct.pack(">hi", 0, coordinator_epoch)
    _encode_record(raw, 0, 0, key, value, [])
    return assemble_batch(
        base_offset=offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=ATTR_TRANSACTIONAL | ATTR_CONTROL,
        last_offset_delta=0,
        base_timestamp=timestamp,
        max_timestamp=timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=-1,
        count=1,
        payload=bytes(raw),
    )


def encode_empty_batch(
    *,
    base_offset: int,
    last_offset_delta: int,
    max_timestamp: int,
    partition_leader_epoch: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    is_transactional: bool = False,
    is_control: bool = False,
) -> bytes:
    """The 61-byte empty header compaction leaves (``DefaultRecordBatch.writeEmptyHeader``)."""
    attributes = ATTR_TIMESTAMP_TYPE if timestamp_type == TimestampType.LOG_APPEND_TIME else 0
    attributes |= (ATTR_TRANSACTIONAL if is_transactional else 0) | (ATTR_CONTROL if is_control else 0)
    return assemble_batch(
        base_offset=base_offset,
        partition_leader_epoch=partition_leader_epoch,
        attributes=attributes,
        last_offset_delta=last_offset_delta,
        base_timestamp=-1,
        max_timestamp=max_timestamp,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        count=0,
        payload=b"",
    )
