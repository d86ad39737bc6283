"""Our batches parsed by kafka-python and aiokafka (Cython), and theirs parsed by us."""

from __future__ import annotations

import struct

import pytest
from aiokafka.record import _crecords as aio_c
from aiokafka.record import default_records as aio_py
from aiokafka.record import legacy_records as aio_legacy
from kafka.record.default_records import DefaultRecordBatch as KpBatch
from kafka.record.default_records import DefaultRecordBatchBuilder as KpBuilder

from rlm.log import Compression, Record, TimestampType, decode_records, encode_batch
from rlm.log.records import decode_control_records
from tests.log_records._data import BASE_TS, sample_records

# kafka-python ships no lz4/snappy library here; aiokafka's codecs go through cramjam (all codecs).
KP_CODECS = [Compression.NONE, Compression.GZIP, Compression.ZSTD]
AIO_BATCH = [aio_c.DefaultRecordBatch, aio_py.DefaultRecordBatch]


def _theirs(batch_obj) -> list[Record]:  # type: ignore[no-untyped-def]
    out = []
    for r in batch_obj:
        headers = tuple((k, None if v is None else bytes(v)) for k, v in r.headers)
        out.append(Record(r.offset, r.timestamp, TimestampType(r.timestamp_type), r.key, r.value, headers))
    return out


@pytest.mark.parametrize("codec", list(Compression))
def test_aiokafka_parses_our_batches(codec: Compression) -> None:
    batch = encode_batch(
        sample_records(60),
        base_offset=1234,
        partition_leader_epoch=3,
        compression=codec,
        producer_id=5,
        producer_epoch=1,
        base_sequence=10,
        is_transactional=True,
    )
    ours = decode_records(batch)
    for cls in AIO_BATCH:
        parsed = cls(batch)
        assert parsed.validate_crc()
        assert (parsed.base_offset, parsed.producer_id, parsed.producer_epoch, parsed.base_sequence) == (
            1234,
            5,
            1,
            10,
        )
        assert parsed.is_transactional and parsed.compression_type == int(codec)
        assert _theirs(parsed) == ours


@pytest.mark.parametrize("codec", KP_CODECS)
def test_kafka_python_parses_our_batches(codec: Compression) -> None:
    batch = encode_batch(
        sample_records(60),
        base_offset=77,
        compression=codec,
        timestamp_type=TimestampType.LOG_APPEND_TIME,
        log_append_time=BASE_TS + 9,
    )
    parsed = KpBatch(batch)
    assert parsed.validate_crc() and parsed.base_offset == 77
    assert _theirs(parsed) == decode_records(batch)
    assert all(r.timestamp == BASE_TS + 9 for r in decode_records(batch))


def test_aiokafka_parses_our_control_batch() -> None:
    from rlm.log import ControlRecordType, encode_control_batch

    batch = encode_control_batch(
        offset=9,
        producer_id=4,
        producer_epoch=2,
        control_type=ControlRecordType.ABORT,
        coordinator_epoch=8,
        timestamp=BASE_TS,
    )
    parsed = aio_c.DefaultRecordBatch(batch)
    assert parsed.is_control_batch and parsed.validate_crc()
    (rec,) = list(parsed)
    assert rec.key == struct.pack(">hh", 0, 0) and rec.value == struct.pack(">hi", 0, 8)
    assert decode_control_records(batch)[0].coordinator_epoch == 8


def _built_by(builder_cls, codec: Compression, records) -> bytes:  # type: ignore[no-untyped-def]
    builder = builder_cls(
        magic=2,
        compression_type=int(codec),
        is_transactional=False,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    for i, (k, v, h, t) in enumerate(records):
        builder.append(i, timestamp=t, key=k, value=v, headers=h)
    return bytes(builder.build())


@pytest.mark.parametrize("codec", list(Compression))
def test_we_parse_aiokafka_built_batches(codec: Compression) -> None:
    records = sample_records(50)
    batch = bytearray(_built_by(aio_c.DefaultRecordBatchBuilder, codec, records))
    struct.pack_into(">q", batch, 0, 4000)  # the broker assigns the base offset (outside the CRC)
    got = decode_records(bytes(batch))
    assert got == [
        Record(4000 + i, t, TimestampType.CREATE_TIME, k, v, tuple(h))
        for i, (k, v, h, t) in enumerate(records)
    ]
    if codec == Compression.NONE:  # identical record bytes
        assert bytes(batch[61:]) == encode_batch(records, base_offset=4000)[61:]


@pytest.mark.parametrize("codec", KP_CODECS)
def test_we_parse_kafka_python_built_batches(codec: Compression) -> None:
    records = sample_records(50)
    batch = _built_by(KpBuilder, codec, records)
    assert [r.value for r in decode_records(batch)] == [v for _, v, _, _ in records]
    if codec == Compression.NONE:  # same layout byte for byte, apart from the epoch field the client sets
        ours = bytearray(encode_batch(records, base_offset=0))
        assert bytes(batch[:12]) + bytes(batch[16:]) == bytes(ours[:12]) + bytes(ours[16:])


@pytest.mark.parametrize(
    "magic, codec",
    [
        (m, c)
        for m in (0, 1)
        for c in (Compression.NONE, Compression.GZIP, Compression.SNAPPY, Compression.LZ4)
        if (m, c) != (0, Compression.LZ4)  # aiokafka refuses lz4 with magic 0
    ],
)
def test_we_parse_aiokafka_legacy_message_sets(magic: int, codec: Compression) -> None:
    builder = aio_legacy.LegacyRecordBatchBuilder(magic, int(codec), 1 << 20)
    records = [(b"k%d" % i, None if i == 2 else b"v%d" % i, BASE_TS + i) for i in range(5)]
    for i, (k, v, t) in enumerate(records):
        builder.append(i, timestamp=t, key=k, value=v)
    data = bytearray(builder.build())
    if codec != Compression.NONE:  # a broker stamps the wrapper with the last offset
        struct.pack_into(">q", data, 0, 104)
    else:
        pos = 0
        for i in range(5):
            struct.pack_into(">q", data, pos, 100 + i)
            pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    from rlm.log.records import iter_records

    got = [r for _, r in iter_records(bytes(data))]
    # v0 inner offsets are absolute, so they stay as the client wrote them; v1 ones are relative
    base = 0 if magic == 0 and codec != Compression.NONE else 100
    assert [(r.offset, r.key, r.value) for r in got] == [
        (base + i, k, v) for i, (k, v, _) in enumerate(records)
    ]
    assert [r.timestamp for r in got] == ([t for _, _, t in records] if magic else [-1] * 5)
