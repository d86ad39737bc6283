"""Shared test data for rlm.log record batch tests: a mixed ``.log`` image and its expected records."""

from __future__ import annotations

from rlm.log import Compression, ControlRecordType, Record, TimestampType
from rlm.log.encode import encode_batch, encode_control_batch, encode_empty_batch, encode_legacy_message_set

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
