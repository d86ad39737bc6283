"""A batch that lost records is rebuilt as ``MemoryRecords.buildRetainedRecordsInto`` builds it:
checked against the project's own batch encoder (an independent writer of the same format)."""

from __future__ import annotations

import pytest

from rlm.compaction import CompactionInput, CompactionSettings, NewerKeys, compact_to_batches
from rlm.log import Compression, TimestampType, decode_records, iter_batches
from rlm.log.encode import encode_batch

NOW = 1_800_000_000_000
HEADERS = [("trace", b"\x00\xff"), ("empty", None)]


Rec = tuple[bytes, bytes | None, list[tuple[str, bytes | None]], int]


def records(n: int, *, tombstone_at: int | None = None) -> list[Rec]:
    return [(b"k%d" % i, None if i == tombstone_at else b"value-%d" % i, HEADERS if i % 2 else [],
             NOW - 5000 + 7 * i) for i in range(n)]


def drop(batch: bytes, *keys: bytes, settings: CompactionSettings | None = None) -> bytes:
    out, _ = compact_to_batches(CompactionInput([batch], newer_keys=NewerKeys.from_keys(list(keys))),
                                settings, now_ms=NOW)
    assert len(out) == 1
    return out[0]


@pytest.mark.parametrize("codec", [Compression.NONE, Compression.ZSTD, Compression.LZ4, Compression.GZIP])
def test_retained_records_are_the_batch_the_encoder_writes(codec: Compression) -> None:
    recs = records(5)
    batch = encode_batch(recs, base_offset=100, compression=codec, producer_id=3, producer_epoch=1,
                         base_sequence=40, partition_leader_epoch=6)
    got = drop(batch, b"k0", b"k2")
    want = encode_batch([recs[1], recs[3], recs[4]], base_offset=100, compression=codec, producer_id=3,
                        producer_epoch=1, base_sequence=40, partition_leader_epoch=6, offset_deltas=[1, 3, 4])
    if codec == Compression.NONE:
        assert got == want
    assert decode_records(got) == decode_records(want)
    h = next(iter_batches(got))
    assert (h.base_offset, h.last_offset, h.base_timestamp, h.records_count) == (100, 104, recs[1][3], 3)


def test_the_last_offset_stays_when_the_last_record_goes() -> None:
    recs = records(4)
    batch = encode_batch(recs, base_offset=10, producer_id=3, producer_epoch=0, base_sequence=0)
    h = next(iter_batches(drop(batch, b"k3")))
    assert (h.last_offset, h.records_count, h.max_timestamp) == (13, 3, recs[2][3])  # producer sequence kept


def test_log_append_time_records_take_the_append_time() -> None:
    recs = records(4)
    append = NOW - 100
    batch = encode_batch(recs, base_offset=0, timestamp_type=TimestampType.LOG_APPEND_TIME,
                         log_append_time=append)
    got = drop(batch, b"k1")
    want = encode_batch([(k, v, hd, append) for k, v, hd, _ in (recs[0], recs[2], recs[3])], base_offset=0,
                        timestamp_type=TimestampType.LOG_APPEND_TIME, log_append_time=append,
                        offset_deltas=[0, 2, 3])
    assert got == want


def test_a_tombstone_gets_the_delete_horizon_and_keeps_its_timestamp() -> None:
    recs = records(3, tombstone_at=1)
    batch = encode_batch(recs, base_offset=0)
    got = drop(batch, b"k0", settings=CompactionSettings(delete_retention_ms=60_000))
    h = next(iter_batches(got))
    assert h.has_delete_horizon and h.base_timestamp == NOW + 60_000
    assert [(r.offset, r.timestamp, r.value) for r in decode_records(got)] == [
        (1, recs[1][3], None), (2, recs[2][3], b"value-2")]
