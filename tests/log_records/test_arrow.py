"""read_arrow and iter_arrow_batches: schema, equality with the record decoder, jit vs pure paths."""

from __future__ import annotations

import io
import struct
from pathlib import Path

import pyarrow as pa
import pytest

from rlm.errors import CompressionError, CorruptRecordError, CrcMismatchError
from rlm.log import (
    KAFKA_SCHEMA,
    Compression,
    Record,
    encode_batch,
    iter_arrow_batches,
    iter_batches,
    read_arrow,
)
from rlm.log._arrow_build import records_batch
from tests.log_records._data import legacy_log, mixed_log, sample_records


def _expected(records: list[Record], topic: str = "t", partition: int = 3) -> pa.Table:
    return pa.Table.from_batches([records_batch(topic, partition, records)], schema=KAFKA_SCHEMA)


def test_schema_is_sparks_kafka_source() -> None:
    assert KAFKA_SCHEMA.names == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        "headers",
    ]
    assert [str(t) for t in KAFKA_SCHEMA.types] == [
        "binary",
        "binary",
        "string",
        "int32",
        "int64",
        "timestamp[ms]",
        "int32",
        "list<item: struct<key: string, value: binary>>",
    ]


@pytest.mark.parametrize("pure", [False, True], ids=["jit", "pure"])
def test_mixed_file_matches_record_decoder(pure: bool, tmp_path: Path) -> None:
    data, expected = mixed_log()
    path = tmp_path / "00000000000000000000.log"
    path.write_bytes(data)
    table = read_arrow(path, topic="t", partition=3, pure_python=pure)
    table.validate(full=True)
    assert table.schema == KAFKA_SCHEMA
    assert table.equals(_expected(expected))  # control records are not rows; aborted records are


def test_compiled_and_pure_paths_are_identical() -> None:
    data, _ = mixed_log()
    legacy, _ = legacy_log()
    for source in (data, legacy + data):
        for lo, hi in [(None, None), (3, 150), (205, 230)]:
            jit = read_arrow(
                source, topic="x", partition=0, start_offset=lo, end_offset=hi, pure_python=False
            )
            pure = read_arrow(
                source, topic="x", partition=0, start_offset=lo, end_offset=hi, pure_python=True
            )
            assert jit.equals(pure)
            assert jit.num_rows > 0


def test_legacy_and_v2_in_one_file_keep_file_order() -> None:
    legacy, lrecs = legacy_log()
    data, recs = mixed_log()
    table = read_arrow(legacy + data, topic="t", partition=3)
    assert table.equals(_expected(lrecs + recs))


def test_offset_range_and_streaming_chunks() -> None:
    data, expected = mixed_log()
    table = read_arrow(data, topic="t", partition=3, start_offset=50, end_offset=213)
    assert table.equals(_expected([r for r in expected if 50 <= r.offset < 213]))
    chunks = list(iter_arrow_batches(io.BytesIO(data), topic="t", partition=3, max_batch_rows=45))
    assert all(c.num_rows <= 45 for c in chunks) and len(chunks) > 4
    assert pa.Table.from_batches(chunks).equals(_expected(expected))


def test_log_append_time_and_nulls() -> None:
    batch = encode_batch(
        [(None, None, [("h", None)], 5), (b"", b"", [], 6)],
        base_offset=10,
        timestamp_type=1,
        log_append_time=1234,
    )  # type: ignore[arg-type]
    rows = read_arrow(batch, topic="t", partition=0).to_pylist()
    assert [(r["key"], r["value"], r["timestampType"], r["headers"]) for r in rows] == [
        (None, None, 1, [{"key": "h", "value": None}]),
        (b"", b"", 1, []),
    ]
    assert {r["timestamp"].timestamp() for r in rows} == {1.234}


def test_invalid_utf8_header_key_is_replaced_like_java() -> None:
    batch = bytearray(encode_batch([(b"k", b"v", [("ab", b"x")], 1)], base_offset=0))
    at = bytes(batch).index(b"ab")
    batch[at : at + 2] = b"\xff\xfe"
    table = read_arrow(bytes(batch), topic="t", partition=0, verify_crc=False)
    table.validate(full=True)
    assert table.column("headers").to_pylist() == [[{"key": "\ufffd\ufffd", "value": b"x"}]]


def test_empty_and_tail_only_sources(tmp_path: Path) -> None:
    empty = tmp_path / "empty.log"
    empty.write_bytes(b"")
    assert read_arrow(empty, topic="t", partition=0).num_rows == 0
    assert read_arrow(b"\x00" * 10, topic="t", partition=0).schema == KAFKA_SCHEMA


def test_many_batches_and_large_values_cross_group_boundaries() -> None:
    parts = [
        encode_batch(
            [(b"k%d" % i, bytes([i % 251]) * 70_000, [], i)],
            base_offset=i,
            compression=Compression.ZSTD if i % 2 else Compression.NONE,
        )
        for i in range(40)
    ]
    table = read_arrow(b"".join(parts), topic="t", partition=0)
    assert table.column("offset").to_pylist() == list(range(40))
    assert [len(v) for v in table.column("value").to_pylist()] == [70_000] * 40


def test_errors_are_typed_and_positioned() -> None:
    data, _ = mixed_log()
    headers = list(iter_batches(data))
    flipped = bytearray(data)
    flipped[headers[3].position + 80] ^= 0x10
    with pytest.raises(CrcMismatchError) as e:
        read_arrow(bytes(flipped), topic="t", partition=0, path="p.log")
    assert (e.value.path, e.value.position) == ("p.log", headers[3].position)
    with pytest.raises(CorruptRecordError) as e:
        read_arrow(data + b"\x00" * 30, topic="t", partition=0)
    assert e.value.position == len(data)
    # uncompressed batch, record length varint made too large: error at the exact record byte
    bad = bytearray(encode_batch(sample_records(3), base_offset=0))
    bad[61:63] = b"\xfe\x7f"  # 8191 bytes
    with pytest.raises(CorruptRecordError, match="invalid record size") as e:
        read_arrow(bytes(bad), topic="t", partition=0, verify_crc=False)
    assert e.value.position == 63
    gz = bytearray(encode_batch(sample_records(3), base_offset=0, compression=Compression.GZIP))
    gz[70:80] = b"\x00" * 10
    with pytest.raises(CompressionError):
        read_arrow(bytes(gz), topic="t", partition=0, verify_crc=False)
    count = bytearray(encode_batch(sample_records(3), base_offset=0, compression=Compression.ZSTD))
    struct.pack_into(">i", count, 57, 4)
    with pytest.raises(CorruptRecordError, match="premature EOF"):
        read_arrow(bytes(count), topic="t", partition=0, verify_crc=False)
