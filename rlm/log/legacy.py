"""Legacy message sets, magic 0 and 1 (Kafka < 0.11), read as Java's ``AbstractLegacyRecordBatch`` does.

Kafka 4 writes only magic 2, but segments written long ago (and copied to remote storage) can
still hold these entries. An entry is ``offset int64 · size int32 · message``; the message is
``crc uint32 (CRC-32 of the rest) · magic · attributes · [timestamp int64, v1] · key · value``.
A compressed entry is a *wrapper* whose value is a compressed stream of inner entries: v0 inner
offsets are absolute, v1 inner offsets are relative to the wrapper (whose offset is the last
inner one), and a v1 wrapper with LOG_APPEND_TIME imposes its timestamp on every inner record.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence

from rlm.errors import CorruptRecordError, CrcMismatchError
from rlm.log import codecs
from rlm.log.model import (
    ATTR_COMPRESSION_MASK,
    ATTR_TIMESTAMP_TYPE,
    LOG_OVERHEAD,
    MIN_ENTRY_SIZE,
    BatchHeader,
    Compression,
    Record,
    TimestampType,
)

_MIN_MESSAGE = {0: 14, 1: 22}
_INNER = tuple[int, memoryview]  # (offset as stored in the inner entry, message bytes)


class _Message:
    """Fields of one legacy message (the part after ``offset · size``)."""

    __slots__ = ("attributes", "crc", "key", "magic", "timestamp", "value")
    attributes: int
    crc: int
    key: bytes | None
    magic: int
    timestamp: int
    value: bytes | None

    def __init__(self, msg: memoryview, *, path: str | None, position: int, verify_crc: bool) -> None:
        if len(msg) < MIN_ENTRY_SIZE:
            raise CorruptRecordError(
                f"legacy message of {len(msg)} bytes is shorter than 14", path=path, position=position
            )
        self.crc, self.magic, self.attributes = struct.unpack_from(">IBB", msg, 0)
        if self.magic not in _MIN_MESSAGE:
            raise CorruptRecordError(f"invalid legacy magic {self.magic}", path=path, position=position)
        if len(msg) < _MIN_MESSAGE[self.magic]:
            raise CorruptRecordError(
                f"magic {self.magic} message of {len(msg)} bytes is too short", path=path, position=position
            )
        if verify_crc:
            actual = zlib.crc32(msg[4:])
            if actual != self.crc:
                raise CrcMismatchError(
                    f"message crc {self.crc:#010x} does not match content ({actual:#010x})",
                    path=path,
                    position=position,
                )
        pos = 6
        self.timestamp = -1
        if self.magic == 1:
            (self.timestamp,) = struct.unpack_from(">q", msg, pos)
            pos += 8
        self.key, pos = _delimited(msg, pos, path=path, position=position)
        self.value, pos = _delimited(msg, pos, path=path, position=position)

    @property
    def codec(self) -> int:
        return self.attributes & ATTR_COMPRESSION_MASK

    @property
    def timestamp_type(self) -> TimestampType:
        if self.magic == 0:
            return TimestampType.NO_TIMESTAMP
        return (
            TimestampType.LOG_APPEND_TIME
            if self.attributes & ATTR_TIMESTAMP_TYPE
            else TimestampType.CREATE_TIME
        )


def _delimited(msg: memoryview, pos: int, *, path: str | None, position: int) -> tuple[bytes | None, int]:
    if pos + 4 > len(msg):
        raise CorruptRecordError("legacy message truncated in a length field", path=path, position=position)
    (size,) = struct.unpack_from(">i", msg, pos)
    pos += 4
    if size < 0:
        return None, pos
    if pos + size > len(msg):
        raise CorruptRecordError(
            f"legacy key/value of {size} bytes runs past the message", path=path, position=position
        )
    return bytes(msg[pos : pos + size]), pos + size


def _inner_entries(
    wrapper: _Message, wrapper_offset: int, *, path: str | None, position: int
) -> list[tuple[int, _Message]]:
    """Decompress a wrapper and return ``(absolute offset, message)`` for each inner entry."""
    if wrapper.value is None:
        raise CorruptRecordError("compressed legacy wrapper with null value", path=path, position=position)
    if wrapper.codec == Compression.ZSTD or wrapper.codec > Compression.ZSTD:
        raise CorruptRecordError(
            f"invalid legacy wrapper codec {wrapper.codec}", path=path, position=position
        )
    data = memoryview(
        codecs.decompress(wrapper.codec, wrapper.value, magic=wrapper.magic, path=path, position=position)
    )
    inner: list[tuple[int, _Message]] = []
    pos = 0
    while pos + LOG_OVERHEAD <= len(data):  # DataLogInputStream: a partial tail ends the set silently
        offset, size = struct.unpack_from(">qi", data, pos)
        if size < MIN_ENTRY_SIZE:
            raise CorruptRecordError(
                f"inner legacy entry size {size} < 14 (inner byte {pos})", path=path, position=position
            )
        if pos + LOG_OVERHEAD + size > len(data):
            break
        msg = _Message(
            data[pos + LOG_OVERHEAD : pos + LOG_OVERHEAD + size],
            path=path,
            position=position,
            verify_crc=True,
        )
        if msg.magic != wrapper.magic:
            raise CorruptRecordError(
                f"inner magic {msg.magic} does not match wrapper magic {wrapper.magic}",
                path=path,
                position=position,
            )
        if msg.codec != Compression.NONE:
            raise CorruptRecordError(
                "inner legacy messages must not be compressed", path=path, position=position
            )
        inner.append((offset, msg))
        pos += LOG_OVERHEAD + size
    if not inner:
        raise CorruptRecordError(
            "compressed legacy message set with no inner records", path=path, position=position
        )
    if wrapper.magic == 1:
        if wrapper_offset == 0:  # some librdkafka versions sent wrapper offset 0: inner offsets are final
            base = 0
        else:
            last_inner = inner[-1][0]
            if wrapper_offset < last_inner:
                raise CorruptRecordError(
                    f"wrapper offset {wrapper_offset} < last inner offset {last_inner}",
                    path=path,
                    position=position,
                )
            base = wrapper_offset - last_inner
        inner = [(base + off, m) for off, m in inner]
    return inner


def _parse_entry(
    entry: memoryview, *, path: str | None, position: int, verify_crc: bool
) -> tuple[int, _Message, list[tuple[int, _Message]] | None]:
    offset, size = struct.unpack_from(">qi", entry, 0)
    msg = _Message(
        entry[LOG_OVERHEAD : LOG_OVERHEAD + size], path=path, position=position, verify_crc=verify_crc
    )
    if msg.codec == Compression.NONE:
        return offset, msg, None
    return offset, msg, _inner_entries(msg, offset, path=path, position=position)


def legacy_header(entry: memoryview, *, path: str | None, position: int, verify_crc: bool) -> BatchHeader:
    """Header of a legacy entry (``entry`` = its whole bytes, log overhead included)."""
    offset, msg, inner = _parse_entry(entry, path=path, position=position, verify_crc=verify_crc)
    first, last, count = (offset, offset, 1) if inner is None else (inner[0][0], inner[-1][0], len(inner))
    return BatchHeader(
        position=position,
        base_offset=first,
        batch_length=len(entry) - LOG_OVERHEAD,
        partition_leader_epoch=-1,
        magic=msg.magic,
        crc=msg.crc,
        attributes=msg.attributes,
        last_offset_delta=last - first,
        base_timestamp=msg.timestamp,
        max_timestamp=msg.timestamp,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        records_count=count,
    )


def legacy_records(
    entry: memoryview, *, path: str | None, position: int, verify_crc: bool = True
) -> list[Record]:
    """Records of one legacy entry, with absolute offsets and Java's timestamp rules."""
    offset, msg, inner = _parse_entry(entry, path=path, position=position, verify_crc=verify_crc)
    if inner is None:
        return [Record(offset, msg.timestamp, msg.timestamp_type, msg.key, msg.value)]
    out = []
    for off, m in inner:
        if m.magic == 1 and msg.timestamp_type == TimestampType.LOG_APPEND_TIME:
            ts, tst = msg.timestamp, TimestampType.LOG_APPEND_TIME
        elif m.magic == 1:
            ts, tst = m.timestamp, TimestampType.CREATE_TIME
        else:
            ts, tst = -1, TimestampType.NO_TIMESTAMP
        out.append(Record(off, ts, tst, m.key, m.value))
    return out


# ---- writing (for tests of the reader) --------------------------------------------------------------
def _message(magic: int, attributes: int, timestamp: int, key: bytes | None, value: bytes | None) -> bytes:
    body = bytearray(struct.pack(">BB", magic, attributes))
    if magic == 1:
        body += struct.pack(">q", timestamp)
    for part in (key, value):
        body += struct.pack(">i", -1) if part is None else struct.pack(">i", len(part)) + part
    return struct.pack(">I", zlib.crc32(body)) + bytes(body)


def _entry(offset: int, message: bytes) -> bytes:
    return struct.pack(">qi", offset, len(message)) + message


def encode_legacy_message_set(
    records: Sequence[Record | tuple[bytes | None, bytes | None, int]],
    *,
    magic: int,
    base_offset: int,
    compression: Compression = Compression.NONE,
    timestamp_type: TimestampType = TimestampType.CREATE_TIME,
    log_append_time: int | None = None,
) -> bytes:
    """Write records as a magic 0/1 message set, as old producers and brokers did (for tests).

    ``records`` are ``(key, value, timestamp)`` tuples or :class:`Record` objects (offset and
    headers ignored). Uncompressed: one entry per record at ``base_offset + i``. Compressed: one
    wrapper entry at the last offset holding inner entries (absolute offsets for v0, relative
    0..n-1 for v1).
    """
    items = [(r.key, r.value, r.timestamp) if isinstance(r, Record) else r for r in records]
    if magic not in (0, 1):
        raise ValueError("legacy magic must be 0 or 1")
    if compression == Compression.ZSTD:
        raise ValueError("zstd needs magic 2")
    if not items:
        raise ValueError("a legacy message set needs at least one record")
    log_append = magic == 1 and timestamp_type == TimestampType.LOG_APPEND_TIME
    tattr = ATTR_TIMESTAMP_TYPE if log_append else 0
    if log_append and log_append_time is None:
        raise ValueError("LOG_APPEND_TIME needs log_append_time")

    def ts_of(t: int) -> int:
        return (log_append_time if log_append and log_append_time is not None else t) if magic == 1 else -1

    if compression == Compression.NONE:
        return b"".join(
            _entry(base_offset + i, _message(magic, tattr, ts_of(t), k, v))
            for i, (k, v, t) in enumerate(items)
        )
    inner = b"".join(
        _entry(base_offset + i if magic == 0 else i, _message(magic, 0, t if magic == 1 else -1, k, v))
        for i, (k, v, t) in enumerate(items)
    )
    wrapper_ts = ts_of(max(t for _, _, t in items))
    payload = codecs.compress(compression, inner, magic=magic)
    wrapper = _message(magic, int(compression) | tattr, wrapper_ts, None, payload)
    return _entry(base_offset + len(items) - 1, wrapper)
