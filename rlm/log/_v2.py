"""Pure-Python parser for the records inside one magic-2 batch (``DefaultRecord.readFrom``).

This is the per-record slow path behind :func:`rlm.log.records.decode_records`; its checks
mirror Java's so that a batch Kafka rejects is rejected here with a typed error, and one Kafka
accepts decodes to the same values. Varints follow ``ByteUtils.readVarint``/``readVarlong``:
at most 5 (10) bytes, excess high bits silently dropped.
"""

from __future__ import annotations

from rlm.errors import CorruptRecordError
from rlm.log.model import BatchHeader, Record, TimestampType

_MASK32 = 0xFFFFFFFF
_MASK64 = 0xFFFFFFFFFFFFFFFF


class _Bad(Exception):
    """Internal: a structural problem at a byte position of the payload."""

    def __init__(self, reason: str, pos: int) -> None:
        super().__init__(reason)
        self.reason = reason
        self.pos = pos


def _varint(buf: memoryview, pos: int, end: int, long: bool) -> tuple[int, int]:
    """Zig-zag varint (``long``: varlong) at ``pos``; returns (value, next position)."""
    raw = 0
    shift = 0
    limit = 63 if long else 28
    while True:
        if pos >= end:
            raise _Bad("varint runs past the end of the record", pos)
        b = buf[pos]
        pos += 1
        raw |= (b & 0x7F) << shift
        if not b & 0x80:
            break
        shift += 7
        if shift > limit:
            raise _Bad("varint is too long", pos)
    raw &= _MASK64 if long else _MASK32
    value = (raw >> 1) ^ -(raw & 1)
    return value, pos


def _bytes(buf: memoryview, pos: int, end: int) -> tuple[bytes | None, int]:
    size, pos = _varint(buf, pos, end, False)
    if size < 0:
        return None, pos
    if pos + size > end:
        raise _Bad(f"field of {size} bytes runs past the end of the record", pos)
    return bytes(buf[pos : pos + size]), pos + size


def parse_records(
    payload: memoryview,
    header: BatchHeader,
    *,
    path: str | None,
    payload_position: int | None,
    log_append_time: int | None,
) -> list[Record]:
    """Decode ``header.records_count`` records from ``payload`` (the uncompressed records region).

    ``payload_position`` is the payload's byte position in the file for an uncompressed batch, so
    errors name the exact byte; for a decompressed payload errors name the batch position.
    """
    try:
        return _parse(payload, header, log_append_time)
    except _Bad as e:
        if payload_position is None:
            raise CorruptRecordError(
                f"{e.reason} (decompressed byte {e.pos})", path=path, position=header.position
            ) from None
        raise CorruptRecordError(e.reason, path=path, position=payload_position + e.pos) from None


def _parse(buf: memoryview, header: BatchHeader, log_append_time: int | None) -> list[Record]:
    end = len(buf)
    count = header.records_count
    base_offset, base_ts = header.base_offset, header.base_timestamp
    ts_type = TimestampType.LOG_APPEND_TIME if log_append_time is not None else TimestampType.CREATE_TIME
    if count > end:  # every record takes at least one byte: refuse absurd counts before looping
        raise _Bad(f"record count {count} cannot fit in {end} bytes", 0)
    out: list[Record] = []
    pos = 0
    for _ in range(count):
        if pos >= end:
            raise _Bad("incorrect declared batch size, premature EOF reached", pos)
        body, pos = _varint(buf, pos, end, False)
        start = pos
        if body < 0 or pos + body > end:
            raise _Bad(f"invalid record size {body}, {end - pos} bytes remain", pos)
        rend = pos + body
        if body < 1:
            raise _Bad("record body is empty", pos)
        pos += 1  # attributes: unused
        ts_delta, pos = _varint(buf, pos, rend, True)
        offset_delta, pos = _varint(buf, pos, rend, False)
        key, pos = _bytes(buf, pos, rend)
        value, pos = _bytes(buf, pos, rend)
        n_headers, pos = _varint(buf, pos, rend, False)
        if n_headers < 0 or n_headers > rend - pos:
            raise _Bad(f"invalid number of record headers {n_headers}", pos)
        headers: list[tuple[str, bytes | None]] = []
        for _h in range(n_headers):
            klen, pos = _varint(buf, pos, rend, False)
            if klen < 0 or pos + klen > rend:
                raise _Bad(f"invalid header key size {klen}", pos)
            hkey = bytes(buf[pos : pos + klen]).decode("utf-8", errors="replace")
            pos += klen
            hval, pos = _bytes(buf, pos, rend)
            headers.append((hkey, hval))
        if pos != rend:
            raise _Bad(f"invalid record size: expected to read {body} bytes, read {pos - start}", pos)
        ts = log_append_time if log_append_time is not None else _wrap64(base_ts + ts_delta)
        out.append(Record(base_offset + offset_delta, ts, ts_type, key, value, tuple(headers)))
    if count and pos != end:  # Java checks only after reading the last declared record
        raise _Bad("incorrect declared batch size, records still remaining", pos)
    return out


def _wrap64(v: int) -> int:
    """Java long arithmetic: wrap to a signed 64-bit value."""
    v &= _MASK64
    return v - (1 << 64) if v >> 63 else v
