"""Shared test data for rlm.log record batch tests: a mixed ``.log`` image and its expected records."""

from __future__ import annotations

import random
import struct
from collections.abc import Callable

from rlm.log import Compression, ControlRecordType, Record, TimestampType
from rlm.log.encode import (
    assemble_batch,
    encode_batch,
    encode_control_batch,
    encode_empty_batch,
    encode_legacy_message_set,
)
from rlm.log.model import RECORD_BATCH_OVERHEAD

BASE_TS = 1_700_000_000_000


def sample_records(
    n: int, *, seed: int = 0, ts: int = BASE_TS
) -> list[tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]]:
    """Records with null keys/values, empty values, headers (null and non-ASCII keys), varied timestamps."""
    out = []
    for j in range(n):
        i = j + seed
        key = None if i % 7 == 3 else b"key-%d" % i
        value = None if i % 11 == 5 else (b"" if i % 13 == 1 else b"value-%d-" % i + bytes(range(i % 50)))
        headers: list[tuple[str, bytes | None]] = []
        if i % 3 == 0:
            headers = [("trace", b"t%d" % i), ("none", None)]
        if i % 17 == 2:
            headers.append(("clé-ü", b"\xff\x00"))
        out.append((key, value, headers, ts + (i * 37) % 1000 - 300))
    return out


def mixed_log() -> tuple[bytes, list[Record]]:
    """A .log image holding every codec, a transaction with markers, an empty batch, LOG_APPEND_TIME
    and compacted offset gaps, plus the data records a reader must return (control records excluded)."""
    data = bytearray()
    expected: list[Record] = []
    offset = 0

    def add(records: list, **kw: object) -> None:
        nonlocal offset
        deltas = kw.pop("offset_deltas", None)
        batch = encode_batch(records, base_offset=offset, offset_deltas=deltas, **kw)
        data.extend(batch)
        lat = kw.get("log_append_time")
        for i, (k, v, h, t) in enumerate(records):
            off = offset + (deltas[i] if deltas else i)
            expected.append(
                Record(
                    off,
                    lat if lat is not None else t,
                    TimestampType.LOG_APPEND_TIME if lat is not None else TimestampType.CREATE_TIME,
                    k,
                    v,
                    tuple(h),
                )
            )
        offset += (deltas[-1] if deltas else len(records) - 1) + 1

    for c in Compression:
        add(sample_records(40, seed=offset), compression=c)
    add(
        sample_records(5, seed=offset),
        producer_id=77,
        producer_epoch=1,
        base_sequence=0,
        is_transactional=True,
    )
    data.extend(
        encode_control_batch(
            offset=offset,
            producer_id=77,
            producer_epoch=1,
            control_type=ControlRecordType.ABORT,
            coordinator_epoch=3,
            timestamp=BASE_TS,
        )
    )
    offset += 1
    data.extend(encode_empty_batch(base_offset=offset, last_offset_delta=4, max_timestamp=BASE_TS))
    offset += 5
    add(
        sample_records(6, seed=offset),
        compression=Compression.LZ4,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=BASE_TS + 5000,
    )
    add(sample_records(4, seed=offset), offset_deltas=[0, 2, 3, 9], compression=Compression.ZSTD)
    return bytes(data), expected


def legacy_log() -> tuple[bytes, list[Record]]:
    """Magic 0/1 message sets, plain and compressed, and what Java's reader returns for them."""
    data = bytearray()
    expected: list[Record] = []
    offset = 1000
    recs = [(b"a", b"1", BASE_TS + 5), (None, b"2", BASE_TS + 1), (b"c", None, BASE_TS + 9)]
    for magic in (0, 1):
        for codec in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4):
            data.extend(encode_legacy_message_set(recs, magic=magic, base_offset=offset, compression=codec))
            for i, (k, v, t) in enumerate(recs):
                tst = TimestampType.CREATE_TIME if magic else TimestampType.NO_TIMESTAMP
                expected.append(Record(offset + i, t if magic else -1, tst, k, v))
            offset += len(recs)
    data.extend(
        encode_legacy_message_set(
            recs,
            magic=1,
            base_offset=offset,
            compression=Compression.GZIP,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=BASE_TS,
        )
    )
    for i, (k, v, _t) in enumerate(recs):
        expected.append(Record(offset + i, BASE_TS, TimestampType.LOG_APPEND_TIME, k, v))
    return bytes(data), expected


def recompress(batch: bytes, codec: int, compress: Callable[[bytes], bytes]) -> bytes:
    """``batch`` (uncompressed, v2) re-framed with ``codec`` as ``compress`` frames its records
    (how another client or library would have written it)."""
    (base_offset, _length, epoch, _magic, _crc, attrs, last_delta, base_ts, max_ts) = struct.unpack_from(
        ">qiibIhiqq", batch, 0
    )
    pid, pepoch, seq, count = struct.unpack_from(">qhii", batch, 43)
    return assemble_batch(
        base_offset=base_offset,
        partition_leader_epoch=epoch,
        attributes=(attrs & ~0x07) | codec,
        last_offset_delta=last_delta,
        base_timestamp=base_ts,
        max_timestamp=max_ts,
        producer_id=pid,
        producer_epoch=pepoch,
        base_sequence=seq,
        count=count,
        payload=compress(batch[RECORD_BATCH_OVERHEAD:]),
    )


def varied_records(n: int, seed: int, value_size: int = 0) -> list:  # type: ignore[type-arg]
    """:func:`sample_records`; with ``value_size``, values alternately random (incompressible:
    stored blocks, long literals) and one repeated byte (runs, overlapping copies)."""
    rnd = random.Random(seed)
    out = sample_records(n, seed=seed)
    if value_size:
        out = [
            (k, rnd.randbytes(value_size) if i % 2 else bytes([i % 7]) * value_size, h, t)
            for i, (k, _v, h, t) in enumerate(out)
        ]
    return out


def mixed_segment(codec: int, framing: Callable[[bytes], bytes], *, batches: int = 12,
                  value_size: int = 0) -> bytes:
    """``batches`` batches of :func:`varied_records`, two of every three re-framed with ``codec`` by
    ``framing``, the others left uncompressed."""
    parts = []
    offset = 0
    for b in range(batches):
        records = varied_records(20 + b, seed=b, value_size=value_size)
        plain = encode_batch(records, base_offset=offset)
        parts.append(recompress(plain, codec, framing) if b % 3 else plain)
        offset += len(records)
    return b"".join(parts)


def patch_payload(data: bytes, batch: int, at: int, patch: Callable[[bytes], bytes]) -> tuple[bytes, int]:
    """``data`` with the 4 bytes at ``at`` of batch ``batch``'s compressed payload (from its end if
    ``at`` < 0) replaced by ``patch(old)``; and that batch's position."""
    pos = 0
    for _ in range(batch):
        pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    end = pos + 12 + struct.unpack_from(">i", data, pos + 8)[0]
    start = pos + RECORD_BATCH_OVERHEAD + at if at >= 0 else end + at
    bad = bytearray(data)
    bad[start : start + 4] = patch(bytes(bad[start : start + 4]))
    return bytes(bad), pos
