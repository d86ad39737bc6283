"""Batch headers, walking rules, record and control-record decoding, golden bytes."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pytest

from rlm.errors import CorruptRecordError, CrcMismatchError, LogFormatError
from rlm.log import (
    BatchHeader,
    Compression,
    ControlRecord,
    ControlRecordType,
    Record,
    TimestampType,
    decode_records,
    encode_batch,
    encode_control_batch,
    iter_batches,
)
from rlm.log.encode import encode_empty_batch, encode_varint
from rlm.log.records import decode_control_records, iter_records, read_batch_bytes
from tests.log_records._data import BASE_TS, legacy_log, mixed_log

# The marker example of kafka-log-format.md §2.5, checked there against aiokafka's parser.
GOLDEN_COMMIT = bytes.fromhex(
    "000000000000002a0000004200000000"
    "02fc84b034003000000000"
    "0000018bcfe568000000018bcfe56800"
    "00000000000003e80000ffffffff00000001"
    "2000000008000000010c00000000000500"
)


def test_varint_examples() -> None:
    for value, encoded in [(-1, "01"), (0, "00"), (1, "02"), (63, "7e"), (64, "8001"), (-65, "8101")]:
        out = bytearray()
        encode_varint(value, out)
        assert out.hex() == encoded


def test_control_batch_is_kafkas_78_byte_marker() -> None:
    batch = encode_control_batch(
        offset=42,
        producer_id=1000,
        producer_epoch=0,
        control_type=ControlRecordType.COMMIT,
        coordinator_epoch=5,
        timestamp=1700000000000,
    )
    assert batch == GOLDEN_COMMIT
    (h,) = iter_batches(batch)
    assert (h.is_control, h.is_transactional, h.size, h.records_count, h.base_sequence) == (
        True,
        True,
        78,
        1,
        -1,
    )
    assert decode_records(batch) == []
    assert decode_control_records(batch) == [ControlRecord(42, 1700000000000, ControlRecordType.COMMIT, 0, 5)]


def test_batch_header_layout_and_properties() -> None:
    records = [(b"k", b"v", [("h", b"x")], BASE_TS + 10), (None, None, [], BASE_TS)]
    batch = encode_batch(
        records,
        base_offset=500,
        partition_leader_epoch=7,
        compression=Compression.GZIP,
        producer_id=9,
        producer_epoch=2,
        base_sequence=2147483647,
        is_transactional=True,
    )
    fields = struct.unpack_from(">qiibIhiqqqhii", batch)
    assert fields[:4] == (500, len(batch) - 12, 7, 2)
    assert fields[5:] == (0x11, 1, BASE_TS + 10, BASE_TS + 10, 9, 2, 2147483647, 2)
    (h,) = iter_batches(batch)
    assert h == BatchHeader(
        0, 500, len(batch) - 12, 7, 2, fields[4], 0x11, 1, BASE_TS + 10, BASE_TS + 10, 9, 2, 2147483647, 2
    )
    assert (h.size, h.last_offset, h.next_offset, h.compression) == (len(batch), 501, 502, Compression.GZIP)
    assert (h.timestamp_type, h.is_transactional, h.is_control, h.has_delete_horizon) == (
        TimestampType.CREATE_TIME,
        True,
        False,
        False,
    )
    assert h.last_sequence == 0  # wraps past INT32_MAX
    assert decode_records(batch) == [
        Record(500, BASE_TS + 10, TimestampType.CREATE_TIME, b"k", b"v", (("h", b"x"),)),
        Record(501, BASE_TS, TimestampType.CREATE_TIME, None, None, ()),
    ]


def test_empty_batch_as_compaction_leaves_it() -> None:
    batch = encode_empty_batch(
        base_offset=10,
        last_offset_delta=4,
        max_timestamp=BASE_TS,
        producer_id=3,
        producer_epoch=1,
        base_sequence=20,
        is_transactional=True,
    )
    assert len(batch) == 61
    (h,) = iter_batches(batch)
    assert (h.batch_length, h.records_count, h.base_timestamp, h.last_offset, h.max_timestamp) == (
        49,
        0,
        -1,
        14,
        BASE_TS,
    )
    assert decode_records(batch) == []


def test_delete_horizon_and_log_append_time() -> None:
    batch = bytearray(
        encode_batch(
            [(b"k", b"v", [], 5)],
            base_offset=0,
            timestamp_type=TimestampType.LOG_APPEND_TIME,
            log_append_time=99,
        )
    )
    (h,) = iter_batches(bytes(batch))
    assert (h.timestamp_type, h.max_timestamp, h.delete_horizon_ms) == (TimestampType.LOG_APPEND_TIME, 99, -1)
    assert decode_records(bytes(batch))[0].timestamp == 99
    struct.pack_into(">h", batch, 21, 0x48)
    (h,) = iter_batches(bytes(batch), verify_crc=False)
    assert h.has_delete_horizon and h.delete_horizon_ms == 5


def test_mixed_file_all_codecs_transactions_and_gaps(tmp_path: Path) -> None:
    data, expected = mixed_log()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    for source in (
        data,
        bytearray(data),
        memoryview(data),
        path,
        str(path),
        io.BytesIO(data),
        path.open("rb"),
    ):
        got = [r for _, r in iter_records(source)]
        assert [r for r in got if isinstance(r, Record)] == expected
        controls = [r for r in got if isinstance(r, ControlRecord)]
        assert controls == [ControlRecord(205, BASE_TS, ControlRecordType.ABORT, 0, 3)]
    headers = list(iter_batches(path))
    assert [h.compression for h in headers[:5]] == list(Compression)
    assert sum(h.size for h in headers) == len(data)
    for h in headers:
        entry = read_batch_bytes(path, h)
        assert len(entry) == h.size
        assert decode_records(entry, position=h.position) == [
            r for r in expected if h.base_offset <= r.offset <= h.last_offset
        ]


def test_legacy_entries_in_iteration() -> None:
    data, expected = legacy_log()
    assert [r for _, r in iter_records(data)] == expected
    headers = list(iter_batches(data))
    assert all(h.magic in (0, 1) and h.producer_id == -1 and h.partition_leader_epoch == -1 for h in headers)
    # three plain v0 messages, then a gzip wrapper whose header spans its three inner offsets
    assert [(h.base_offset, h.last_offset, h.records_count) for h in headers[2:4]] == [
        (1002, 1002, 1),
        (1003, 1005, 3),
    ]
    assert (
        headers[3].compression == Compression.GZIP and headers[3].timestamp_type == TimestampType.NO_TIMESTAMP
    )


def test_walk_stops_like_java_at_short_or_partial_tail() -> None:
    data, _ = mixed_log()
    full = list(iter_batches(data))
    last = full[-1]
    assert list(iter_batches(data[: last.position + 17])) == full[:-1]  # <= 17 bytes left: stop
    assert list(iter_batches(data[: last.end_position - 1])) == full[:-1]  # entry runs past the end
    assert (
        list(iter_batches(data, start_position=full[2].position, end_position=full[4].position)) == full[2:4]
    )


def test_zero_tail_is_corrupt_with_position() -> None:
    data, _ = mixed_log()
    with pytest.raises(CorruptRecordError) as e:
        list(iter_batches(data + bytes(100), path="/x/00000000000000000000.log"))
    assert e.value.position == len(data) and e.value.path == "/x/00000000000000000000.log"
    assert str(e.value).startswith(f"/x/00000000000000000000.log: {len(data)}: ")


def test_crc_mismatch_names_path_and_position(tmp_path: Path) -> None:
    data, _ = mixed_log()
    second = list(iter_batches(data))[1]
    broken = bytearray(data)
    broken[second.position + 70] ^= 0x01
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(bytes(broken))
    with pytest.raises(CrcMismatchError) as e:
        list(iter_batches(path))
    assert e.value.position == second.position and e.value.path == str(path)
    assert len(list(iter_batches(path, verify_crc=False))) == len(list(iter_batches(data)))


@pytest.mark.parametrize(
    "mutate, reason",
    [
        (lambda b: struct.pack_into(">h", b, 21, 5), "unknown compression codec 5"),
        (lambda b: struct.pack_into(">i", b, 57, 3), "premature EOF"),  # count 3, data for 2
        (lambda b: struct.pack_into(">i", b, 57, 1), "still remaining"),
        (lambda b: struct.pack_into(">i", b, 57, -1), "invalid record count"),
        (lambda b: b.__setitem__(16, 3), "magic 3"),
        (lambda b: struct.pack_into(">i", b, 8, 30), "smaller than the minimum 61"),
        (lambda b: b.__setitem__(61, 0x7E), "invalid record size"),
    ],
)
def test_structural_errors_are_typed(mutate, reason: str) -> None:  # type: ignore[no-untyped-def]
    batch = bytearray(encode_batch([(b"k", b"v", [], 1), (b"k2", b"v2", [], 2)], base_offset=0))
    mutate(batch)
    with pytest.raises(LogFormatError, match=reason):
        decode_records(bytes(batch), verify_crc=False)


def test_unknown_control_type_and_newer_versions_are_kept() -> None:
    from rlm.log.encode import _encode_record, assemble_batch

    raw = bytearray()
    _encode_record(raw, 0, 0, struct.pack(">hh", 1, 42), b"\x00\x07anything", [])  # unknown type, key v1
    _encode_record(raw, 1, 0, struct.pack(">hhxx", 0, 1), struct.pack(">hi", 3, 9) + b"extra", [])
    batch = assemble_batch(
        base_offset=100,
        partition_leader_epoch=0,
        attributes=0x30,
        last_offset_delta=1,
        base_timestamp=BASE_TS,
        max_timestamp=BASE_TS,
        producer_id=1,
        producer_epoch=0,
        base_sequence=-1,
        count=2,
        payload=bytes(raw),
    )
    assert decode_control_records(batch) == [
        ControlRecord(100, BASE_TS, 42, 1, None),
        ControlRecord(101, BASE_TS, ControlRecordType.COMMIT, 0, 9),
    ]
    assert read_arrow_rows(batch) == 0


def read_arrow_rows(batch: bytes) -> int:
    from rlm.log import read_arrow

    return int(read_arrow(batch, topic="t", partition=0).num_rows)
